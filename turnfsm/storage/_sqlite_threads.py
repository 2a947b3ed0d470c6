"""The SQLite store's threads: how its calls reach the database.

sqlite3 blocks, so the store runs its calls in two threads of its own, each
with its own connection, fed by a queue (one hand-off per call): the writer
takes every write and applies the writes waiting together as one group, one
transaction and one sync (group commit, across contexts); the reader runs
the reads. :class:`SQLiteThreads` is that machinery, the base of
:class:`~turnfsm.storage.SQLiteStore`, which says what each call does.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from ..errors import StoreError
from ._sqlite_rows import Rows

__all__ = ["SQLiteThreads"]

R = TypeVar("R")


class SQLiteThreads:
    """The writer and reader threads of a SQLite store, and what fails how."""

    path: Path
    synchronous: str
    busy_timeout: float
    _damage: str | None
    """Set when SQLite reports the file damaged: no write is tried after that."""
    _closed: bool
    _writeq: _Worker | None
    _readq: _Worker | None
    _conn: sqlite3.Connection | None
    """The writer's connection (every write goes through it)."""
    _rconn: sqlite3.Connection | None
    """The reader's connection."""
    _gathered: Rows | None = None
    """While the writer applies a group: the rows its commits insert, written
    with one statement per table before the ``COMMIT``
    (:mod:`~turnfsm.storage._sqlite_rows`)."""

    # ------------------------------------------------------------------ plumbing
    #
    # Two threads, each with its own connection, each fed by a queue (a
    # ``queue.SimpleQueue``; the waiting task's asyncio future is resolved with
    # ``loop.call_soon_threadsafe``, one call per loop and batch), started on first
    # use:
    #
    # * the writer (``_conn``) takes every write. The writes waiting in its queue
    #   when it looks are applied as one group: one ``BEGIN IMMEDIATE``, the writes
    #   in order, one ``COMMIT``, so one sync for all of them. No waiter hears of its
    #   write before that ``COMMIT`` has returned: an acknowledged write was synced
    #   (at the store's ``synchronous``). Each write keeps its own checks, and one
    #   that fails fails alone: refused before it changed a row (a version conflict,
    #   a lost lease: the checks come first), it is simply left out; failed after
    #   (an unknown branch, an SQLite error), the group's transaction is rolled
    #   back and the other writes are applied again without it, in a new one.
    #   (``total_changes`` tells the two apart. This costs less than a
    #   ``SAVEPOINT`` per write: every statement hands the GIL back and forth
    #   between the writer and the event loop.) The rows the group's commits
    #   insert are gathered and written together before the ``COMMIT``
    #   (:mod:`~turnfsm.storage._sqlite_rows`); should that fail, the group is
    #   rolled back and applied again with each commit writing its own rows.
    # * the reader (``_rconn``) runs the reads, one at a time; in WAL mode it sees
    #   every committed write and never blocks the writer.

    def _worker(self, reader: bool) -> _Worker:
        worker = self._readq if reader else self._writeq
        if worker is None:
            if self._closed:
                raise StoreError(f"{self.path}: the store is closed")
            worker = _Worker(self, reader)
            if reader:
                self._readq = worker
            else:
                self._writeq = worker
        return worker

    async def _run(self, fn: Callable[[sqlite3.Connection], R], *, write: bool = False) -> R:
        """Run ``fn`` on the reader thread (``write``: as one write of the writer's
        next group, with the store's ``synchronous``)."""
        return await self._submit(fn, reader=not write, durable=True)

    async def _submit(
        self,
        fn: Callable[[sqlite3.Connection], R],
        *,
        reader: bool,
        durable: bool,
        gathers: bool = False,
    ) -> R:
        """``fn`` on the reader or the writer thread; ``gathers``: a commit,
        whose inserted rows go to the group's :attr:`_gathered` (any other
        write has the rows gathered before it written first)."""
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")
        worker = self._worker(reader)
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # another async library (trio): wait in a thread
            loop = None
        if loop is None:
            done = threading.Event()
            op = _Op(fn, durable, None, done, gathers)
            worker.put(op)
            await anyio.to_thread.run_sync(done.wait)
            if op.error is not None:
                raise op.error
            return op.result  # type: ignore[no-any-return]
        fut = loop.create_future()
        worker.put(_Op(fn, durable, loop, fut, gathers))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            # like anyio.to_thread.run_sync: a cancelled caller still waits for the
            # outcome (a write may be applied; the caller must not go on as if
            # not), then is cancelled
            while not fut.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait((fut,))
            raise

    def _call(self, fn: Callable[[sqlite3.Connection], R], write: bool = False) -> R:
        """Run ``fn`` on the writer's connection in this thread (``write``: as its
        own transaction). For tests and measurements of an idle store."""
        conn = self._conn
        if conn is None:
            raise StoreError(f"{self.path}: the store is closed")
        if write:
            self._writable()
        try:
            if not write:
                return fn(conn)
            conn.execute("BEGIN IMMEDIATE")
            result = fn(conn)
            conn.execute("COMMIT")
            return result
        except BaseException as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            err = self._translate(exc)
            if err is exc:
                raise
            raise err from exc

    def _writable(self) -> None:
        if self._damage is not None:
            raise StoreError(
                f"{self.path}: the database is damaged ({self._damage}); this store no longer "
                "writes to it. Nothing was stored; restore the file from a backup"
            )

    def _translate(self, exc: BaseException) -> BaseException:
        """The error a caller sees for ``exc`` (SQLite's errors as StoreError)."""
        if isinstance(exc, sqlite3.DatabaseError) and (
            getattr(exc, "sqlite_errorname", None) in ("SQLITE_CORRUPT", "SQLITE_NOTADB")
            or "malformed" in str(exc)
        ):
            self._damage = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            err: BaseException = StoreError(
                f"{self.path}: {exc} (another writer held the lock for longer than "
                f"busy_timeout={self.busy_timeout:g}s); nothing was stored"
            )
        elif isinstance(exc, sqlite3.Error):
            err = StoreError(f"{self.path}: {exc}")
        else:
            return exc
        err.__cause__ = exc
        return err

    def _read_batch(self, ops: list[_Op]) -> None:
        """The reader thread: each read on its own."""
        conn = self._rconn
        for op in ops:
            if conn is None:
                op.error = StoreError(f"{self.path}: the store is closed")
                continue
            try:
                op.result = op.fn(conn)
            except BaseException as exc:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                op.error = self._translate(exc)

    def _write_batch(self, ops: list[_Op]) -> None:
        """The writer thread: the writes waiting together, as groups (one
        transaction and one sync each; normally one group)."""
        conn = self._conn
        todo = []
        for op in ops:
            if conn is None:
                op.error = StoreError(f"{self.path}: the store is closed")
            elif self._damage is not None:
                try:
                    self._writable()
                except StoreError as exc:
                    op.error = exc
            else:
                todo.append(op)
        gather = True
        while todo and conn is not None:
            todo, gather = self._group(conn, todo, gather)

    def _group(
        self, conn: sqlite3.Connection, ops: list[_Op], gather: bool = True
    ) -> tuple[list[_Op], bool]:
        """Apply ``ops`` in one transaction (``gather``: with the rows of its
        commits gathered); each op ends with its result or its error, except
        those returned: their work was lost with a transaction that SQLite
        rolled back (a failed op took it down, or the gathered rows could not
        be written), to be applied again (and whether to gather then)."""
        mode = self.synchronous
        if mode in ("FULL", "EXTRA") and not any(op.durable for op in ops):
            mode = "NORMAL"  # leases only: see the lease section
        try:
            if mode != self.synchronous:
                conn.execute(f"PRAGMA synchronous = {mode}")
            # a group of one inserts its rows as it goes: nothing to gather
            self._gathered = Rows() if gather and len(ops) > 1 else None
            try:
                self._group_tx(conn, ops)
            finally:
                self._gathered = None
                if mode != self.synchronous:
                    conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        except _Redo as redo:
            return redo.ops, redo.gather
        except BaseException as exc:  # BEGIN or COMMIT failed: nothing of the group stored
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            err = self._translate(exc)
            for op in ops:
                if op.error is None:
                    op.result = None
                    op.error = err
        return [], gather

    def _group_tx(self, conn: sqlite3.Connection, ops: list[_Op]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        gathered = self._gathered
        if len(ops) == 1:
            op = ops[0]
            try:
                op.result = op.fn(conn)
                if gathered:
                    gathered.write(conn)
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                op.error = self._translate(exc)
                return
            conn.execute("COMMIT")
            return
        done: list[_Op] = []
        for i, op in enumerate(ops):
            if gathered and not op.gathers:
                self._write_gathered(conn, gathered, done, ops[i:])
            before = conn.total_changes
            try:
                op.result = op.fn(conn)
            except BaseException as exc:
                op.error = self._translate(exc)
                if self._damage is not None:  # nothing more is written to it
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    for o in (*done, *ops[i + 1 :]):
                        o.result = None
                        o.error = StoreError(
                            f"{self.path}: the database is damaged ({self._damage}); "
                            "nothing was stored"
                        )
                    return
                if conn.in_transaction and conn.total_changes == before:
                    continue  # refused before it changed a row: it fails alone
                # it changed rows before it failed (or SQLite ended the transaction):
                # the group is undone, and the others are applied again without it
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                for o in done:
                    o.result = None
                raise _Redo(done + ops[i + 1 :]) from None
            done.append(op)
        if gathered:
            self._write_gathered(conn, gathered, done, [])
        conn.execute("COMMIT")

    def _write_gathered(
        self, conn: sqlite3.Connection, gathered: Rows, done: list[_Op], rest: list[_Op]
    ) -> None:
        """Write the rows the ``done`` commits gathered. Should that fail, the
        group is rolled back: on a damaged file every op fails, otherwise the
        ops are applied again, each commit writing its own rows (so that a
        commit whose rows fail fails alone)."""
        try:
            gathered.write(conn)
        except BaseException as exc:
            err = self._translate(exc)
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for o in done:
                o.result = None
            if self._damage is not None:
                for o in (*done, *rest):
                    o.error = err
                raise _Redo([], gather=False) from None
            raise _Redo(done + rest, gather=False) from None

    async def _stop(self) -> None:
        """Stop both threads once they have run what is queued (each closes its
        connection), and close a connection whose thread never started."""
        for worker in (self._writeq, self._readq):
            if worker is None:
                continue
            with anyio.CancelScope(shield=True):
                try:
                    loop = asyncio.get_running_loop()
                except RuntimeError:  # another async library: wait in a thread
                    done = threading.Event()
                    worker.put(_Op(_stop_marker, False, None, done))
                    await anyio.to_thread.run_sync(done.wait)
                else:
                    fut = loop.create_future()
                    worker.put(_Op(_stop_marker, False, loop, fut))
                    await fut
            worker.thread.join()
        self._writeq = self._readq = None
        for name in ("_rconn", "_conn"):
            conn = getattr(self, name)
            setattr(self, name, None)
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    await anyio.to_thread.run_sync(conn.close)

    # ------------------------------------------------------------------ lease writes
    #
    # A lease write is one write of the writer's next group: one
    # per heartbeat, and one at a call's start and end unless the call's first
    # and last commits take and release the lease themselves (``take_lease``,
    # ``release_lease``: statements of the commit's own write). A group of lease
    # writes only is committed at ``synchronous=NORMAL`` whatever the store's
    # setting: a lease only matters among live processes, and a power cut ends
    # them all; the next commit's sync at FULL makes the lease rows before it
    # durable too (a group with a commit in it is synced at the store's setting).

    async def _lease_write(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """``fn`` as a write of the writer's next group; a group of lease writes
        only is committed at ``synchronous=NORMAL`` (see above)."""
        return await self._submit(fn, reader=False, durable=False)


class _Redo(Exception):
    """A group's transaction was lost: these ops are to be applied again
    (``gather``: with their rows gathered)."""

    def __init__(self, ops: list[_Op], gather: bool = True) -> None:
        super().__init__()
        self.ops = ops
        self.gather = gather


def _stop_marker(conn: sqlite3.Connection) -> None:
    """The op that stops a worker thread (after the ops queued before it)."""


class _Op:
    """One store call handed to a worker thread, and its outcome."""

    __slots__ = ("durable", "error", "fn", "gathers", "loop", "result", "waiter")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], Any],
        durable: bool,
        loop: asyncio.AbstractEventLoop | None,
        waiter: asyncio.Future[Any] | threading.Event,
        gathers: bool = False,
    ) -> None:
        self.fn = fn
        self.gathers = gathers
        self.durable = durable
        self.loop = loop
        self.waiter = waiter
        self.result: Any = None
        self.error: BaseException | None = None


def _settle(ops: list[_Op]) -> None:
    """On the waiters' event loop: hand each op's outcome to its future."""
    for op in ops:
        fut = op.waiter
        assert isinstance(fut, asyncio.Future)
        if fut.done():  # its waiter was cancelled by force; nobody listens
            continue
        if op.error is not None:
            fut.set_exception(op.error)
        else:
            fut.set_result(op.result)


def _resolve(ops: list[_Op]) -> None:
    """From a worker thread: wake every waiter, one hand-off per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Op]] = {}
    for op in ops:
        if op.loop is None:
            waiter = op.waiter
            assert isinstance(waiter, threading.Event)
            waiter.set()
        else:
            by_loop.setdefault(op.loop, []).append(op)
    for loop, group in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(_settle, group)


class _Worker:
    """A thread that runs a store's calls from a queue: the writer (the writes
    waiting together as one group) or the reader (one read at a time). It holds
    the store weakly between batches and ends when the store is gone or stops it."""

    IDLE_CHECK = 5.0
    """Seconds between looks at whether the store still exists, when idle."""

    def __init__(self, store: SQLiteThreads, reader: bool) -> None:
        self.reader = reader
        self.queue: queue.SimpleQueue[_Op] = queue.SimpleQueue()
        self.put = self.queue.put
        self.thread = threading.Thread(
            target=self._main,
            args=(weakref.ref(store),),
            name=f"turnfsm-sqlite-{'reader' if reader else 'writer'}",
            daemon=True,
        )
        self.thread.start()

    def _main(self, ref: weakref.ref[SQLiteThreads]) -> None:
        q = self.queue
        while True:
            try:
                ops = [q.get(timeout=self.IDLE_CHECK)]
            except queue.Empty:
                if ref() is None:
                    return
                continue
            while True:
                try:
                    ops.append(q.get_nowait())
                except queue.Empty:
                    break
            store = ref()
            stop = next((i for i, op in enumerate(ops) if op.fn is _stop_marker), None)
            work = ops if stop is None else ops[:stop]
            try:
                if store is None:
                    raise StoreError("the store is gone")
                if work:
                    (store._read_batch if self.reader else store._write_batch)(work)
            except BaseException as exc:  # never leave a waiter hanging
                for op in work:
                    if op.error is None:
                        op.result = None
                        op.error = StoreError(
                            f"the SQLite store's {'reader' if self.reader else 'writer'} "
                            f"thread failed: {type(exc).__name__}: {exc}"
                        )
                        op.error.__cause__ = exc
            if stop is None:
                _resolve(work)
                del store, ops, work
                continue
            if store is not None:
                name = "_rconn" if self.reader else "_conn"
                conn = getattr(store, name)
                setattr(store, name, None)
                if conn is not None:
                    with contextlib.suppress(sqlite3.Error):
                        conn.close()
            path = store.path if store is not None else "the store"
            for op in ops[stop + 1 :]:
                op.error = StoreError(f"{path}: the store is closed")
            _resolve(ops)
            return
