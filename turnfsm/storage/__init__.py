"""L2: persistence. The :class:`Store` interface and its backends.

:func:`open_store` opens a store from a URL: ``memory://``,
``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``, ``files:///dir``,
``postgresql://user@host/db`` (:class:`PostgresStore`, imported on first use:
it needs ``turnfsm[postgres]``).
"""

from ._base import (
    Commit,
    CommitsWithoutWaiting,
    ContextStore,
    ContextSummary,
    Lease,
    Leases,
    LeasesInCommits,
    StepLog,
    Store,
    WorkDoorbell,
    WorkQueue,
)
from ._files import FilesStore
from ._memory import MemoryStore
from ._sqlite import SQLiteStore
from ._url import open_store

__all__ = [
    "Commit",
    "CommitsWithoutWaiting",
    "ContextStore",
    "ContextSummary",
    "FilesStore",
    "Lease",
    "Leases",
    "LeasesInCommits",
    "MemoryStore",
    "SQLiteStore",
    "StepLog",
    "Store",
    "WorkDoorbell",
    "WorkQueue",
    "open_store",
]


def __getattr__(name: str) -> object:
    # PostgresStore needs psycopg (an extra): imported when first asked for
    if name == "PostgresStore":
        from ._postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
