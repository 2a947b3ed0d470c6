"""L2: persistence. The :class:`Store` interface and its backends.

:func:`open_store` opens a store from a URL: ``memory://``,
``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``, ``files:///dir``,
``postgresql://user@host/db`` (:class:`PostgresStore`, it needs
``turnfsm[postgres]``).

The three stores kept outside the process (:class:`SQLiteStore`,
:class:`FilesStore`, :class:`PostgresStore`) are imported when first named or
opened, not with this package: an engine on a :class:`MemoryStore` never
loads ``sqlite3``, ``asyncio``'s thread pools or the files store's modules.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from ._base import (
    ChildSummaries,
    Commit,
    CommitsWithoutWaiting,
    ContextStore,
    ContextSummary,
    Lease,
    Leases,
    LeasesInCommits,
    MessagePages,
    StepLog,
    Store,
    WorkDoorbell,
    WorkQueue,
)
from ._memory import MemoryStore
from ._url import open_store

if TYPE_CHECKING:
    from ._files import FilesStore
    from ._outline import ContextOutline, ContextOutlines, outline_of
    from ._sqlite import SQLiteStore

__all__ = [
    "ChildSummaries",
    "Commit",
    "CommitsWithoutWaiting",
    "ContextOutline",
    "ContextOutlines",
    "ContextStore",
    "ContextSummary",
    "FilesStore",
    "Lease",
    "Leases",
    "LeasesInCommits",
    "MemoryStore",
    "MessagePages",
    "SQLiteStore",
    "StepLog",
    "Store",
    "WorkDoorbell",
    "WorkQueue",
    "open_store",
    "outline_of",
]


_LAZY = {
    "ContextOutline": "._outline",
    "ContextOutlines": "._outline",
    "FilesStore": "._files",
    "PostgresStore": "._postgres",
    "SQLiteStore": "._sqlite",
    "outline_of": "._outline",
}
"""The stores, and the outline the stores kept outside the process read,
imported when first asked for, and their module."""


__getattr__ = lazy_names(__name__, _LAZY)
