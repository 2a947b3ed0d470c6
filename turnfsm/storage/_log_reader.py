"""The reader thread of a SQLite store's event log
(:class:`~turnfsm.storage._eventlog.SQLiteEventLog`), in a module of its own
as the store's thread machinery brings the store's SQL with it: a server on
another store does not import them."""

from __future__ import annotations

from ._sqlite import SQLiteStore
from ._sqlite_threads import SQLiteThreads

__all__ = ["LogReader"]


class LogReader(SQLiteThreads):
    """The reader thread and connection of a store's event log: the store's
    machinery (:class:`~turnfsm.storage._sqlite_threads.SQLiteThreads`),
    reads only, on a connection made as the store makes its own."""

    def __init__(self, store: SQLiteStore) -> None:
        self.path = store.path
        self.synchronous = store.synchronous
        self.busy_timeout = store.busy_timeout
        self._damage = None
        self._closed = False
        self._writeq = None
        self._readq = None
        self._conn = None
        self._rconn = store._connect()
