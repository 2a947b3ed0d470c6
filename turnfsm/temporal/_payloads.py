"""Payloads too large for Temporal, kept in the store's database (a claim check).

Temporal refuses a payload over its blob limit (2 MB by default; it warns
from 512 KB), and a context's load, an LLM request, a commit or a tool result
can pass it. :class:`StoredPayloadCodec` is a ``temporalio`` payload codec
that moves every payload over :data:`THRESHOLD` bytes out of Temporal into a
table of the store's own database, :data:`TABLE`, keyed by the SHA-256 of
the payload's bytes (written once; the same bytes again refresh its time
only), and leaves in its place a small reference payload (encoding
:data:`ENCODING`). It brings the bytes back when a reference is decoded.

Codecs run outside the workflow sandbox (the SDK applies them to what it
sends to and receives from the server), so the workflow's code and its
decisions are those without the codec: a history records references where
it would have held the payloads, nothing else.

Where the bytes go, by store:

- a SQLite store: the table in the same file, written by the store's writer
  thread (in its next group, durable before the reference leaves), read on
  its reader thread;
- a PostgreSQL store: the table under the store's schema, through the
  store's pool (created under an advisory lock when missing);
- any other store: in memory, for one process: a files store's by its
  folder, any other's by the store object.

The store's own tables and rows are untouched. See docs/temporal.md
("Contexts of any size").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sqlite3
import sys
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import (
    DataConverter,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
)

from ..storage import Store
from ..storage._sqlite import SQLiteStore

__all__ = [
    "ENCODING",
    "TABLE",
    "THRESHOLD",
    "PayloadNotFound",
    "PayloadTable",
    "Pruned",
    "StoredPayloadCodec",
    "data_converter_for",
    "payload_table",
    "prune_payloads",
    "with_payloads",
]

THRESHOLD = 256 * 1024
"""Bytes (of the encoded payload) above which a payload is moved to the store:
well under Temporal's warning (512 KB) and limit (2 MB)."""

ENCODING = b"binary/turnfsm-stored-payload"
"""The encoding of a reference payload. A process without turnfsm's codec
fails on it with the SDK's ``Unknown payload encoding
binary/turnfsm-stored-payload``, never reading it as a value."""

TABLE = "turnfsm_temporal_payloads"

_KEY = re.compile(rb'"sha256":"([0-9a-f]{64})"')
"""A reference's key, as its data spells it (how :func:`prune_payloads`
finds the references in a history)."""


class PayloadNotFound(RuntimeError):
    """A reference payload whose bytes the store does not hold (or holds
    damaged): the process that wrote it used another store, or the row was
    pruned while a history still referred to it."""


class PayloadTable(Protocol):
    """Where the moved bytes are kept: by key (a SHA-256, in hex)."""

    where: str

    async def put(self, blobs: Mapping[str, bytes], now: datetime) -> None:
        """Keep ``blobs`` durably; a key already kept gets ``now`` as its time."""

    async def get(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The bytes of those of ``keys`` kept (a missing table: none)."""

    async def written_before(self, cutoff: datetime) -> list[str]:
        """The keys last written before ``cutoff``."""

    async def delete(self, keys: Sequence[str], cutoff: datetime) -> int:
        """Delete those of ``keys`` still last written before ``cutoff``: how many."""


# ------------------------------------------------------------------ the tables


class MemoryPayloads:
    """The table in memory: one process, kept as long as its store object."""

    def __init__(self, where: str = "memory") -> None:
        self.where = where
        self.rows: dict[str, tuple[datetime, bytes]] = {}

    async def put(self, blobs: Mapping[str, bytes], now: datetime) -> None:
        for key, data in blobs.items():
            kept = self.rows.get(key)
            self.rows[key] = (now, kept[1] if kept is not None else data)

    async def get(self, keys: Sequence[str]) -> dict[str, bytes]:
        return {k: self.rows[k][1] for k in keys if k in self.rows}

    async def written_before(self, cutoff: datetime) -> list[str]:
        return [k for k, (at, _) in self.rows.items() if at < cutoff]

    async def delete(self, keys: Sequence[str], cutoff: datetime) -> int:
        gone = [k for k in keys if k in self.rows and self.rows[k][0] < cutoff]
        for k in gone:
            del self.rows[k]
        return len(gone)


def _stamp(at: datetime) -> str:
    """A time as SQLite keeps it: fixed-width UTC text, in order as text."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_SQLITE_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} "
    "(sha256 TEXT PRIMARY KEY, written_at TEXT NOT NULL, data BLOB NOT NULL)"
)
_SQLITE_PUT = (
    f"INSERT INTO {TABLE} (sha256, written_at, data) VALUES (?, ?, ?) "
    "ON CONFLICT (sha256) DO UPDATE SET written_at = excluded.written_at"
)


def _no_table(exc: sqlite3.OperationalError) -> bool:
    return "no such table" in str(exc)


class SQLitePayloads:
    """The table in a SQLite store's file, through the store's own threads: a
    write is one of the writer's next group (durable at the store's
    ``synchronous`` before it is acknowledged), a read runs on its reader
    (which, in WAL mode, sees every committed write, another process's too)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.where = str(store.path)
        self._made = False

    async def put(self, blobs: Mapping[str, bytes], now: datetime) -> None:
        rows = [(k, _stamp(now), v) for k, v in blobs.items()]
        made = self._made

        def write(conn: sqlite3.Connection) -> None:
            if not made:
                conn.execute(_SQLITE_TABLE)
            conn.executemany(_SQLITE_PUT, rows)

        await self.store._submit(write, reader=False, durable=True)
        self._made = True

    async def _read(self, sql: str, args: Sequence[object]) -> list[tuple[Any, ...]]:
        def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            try:
                return conn.execute(sql, tuple(args)).fetchall()
            except sqlite3.OperationalError as exc:
                if _no_table(exc):
                    return []
                raise

        return await self.store._submit(read, reader=True, durable=True)

    async def get(self, keys: Sequence[str]) -> dict[str, bytes]:
        marks = ",".join("?" * len(keys))
        rows = await self._read(f"SELECT sha256, data FROM {TABLE} WHERE sha256 IN ({marks})", keys)
        return {str(k): bytes(v) for k, v in rows}

    async def written_before(self, cutoff: datetime) -> list[str]:
        rows = await self._read(
            f"SELECT sha256 FROM {TABLE} WHERE written_at < ?", (_stamp(cutoff),)
        )
        return [str(r[0]) for r in rows]

    async def delete(self, keys: Sequence[str], cutoff: datetime) -> int:
        args = [(k, _stamp(cutoff)) for k in keys]

        def write(conn: sqlite3.Connection) -> int:
            before = conn.total_changes
            try:
                conn.executemany(f"DELETE FROM {TABLE} WHERE sha256 = ? AND written_at < ?", args)
            except sqlite3.OperationalError as exc:
                if _no_table(exc):
                    return 0
                raise
            return conn.total_changes - before

        return await self.store._submit(write, reader=False, durable=True)


_PG_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} "
    "(sha256 TEXT PRIMARY KEY, written_at TIMESTAMPTZ NOT NULL, data BYTEA NOT NULL)"
)
_PG_PUT = (
    f"INSERT INTO {TABLE} (sha256, written_at, data) VALUES (%s, %s, %s) "
    "ON CONFLICT (sha256) DO UPDATE SET written_at = excluded.written_at"
)
_PG_LOCK_KEY = 0x7475726E706179  # "turnpay": the advisory lock the table is made under


class PostgresPayloads:
    """The table under a PostgreSQL store's schema, through the store's pool
    (psycopg's async connections: nothing blocks the event loop)."""

    def __init__(self, store: Any) -> None:
        from ..storage._pg_schema import redact

        self.store = store
        self.where = redact(store.url)
        self._made = False

    async def _make(self) -> None:
        async def make(conn: Any) -> None:
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_LOCK_KEY,))
            await conn.execute(_PG_TABLE)

        await self.store._run(make, transaction=True)
        self._made = True

    async def put(self, blobs: Mapping[str, bytes], now: datetime) -> None:
        if not self._made:
            await self._make()
        rows = [(k, now, v) for k, v in blobs.items()]

        async def write(conn: Any) -> None:
            async with conn.cursor() as cur:
                await cur.executemany(_PG_PUT, rows)

        await self.store._run(write, transaction=True)

    async def _read(self, sql: str, args: Sequence[object]) -> list[tuple[Any, ...]]:
        from ..storage._pg_schema import psycopg

        async def read(conn: Any) -> list[tuple[Any, ...]]:
            try:
                cur = await conn.execute(sql, tuple(args))
            except psycopg.errors.UndefinedTable:
                return []
            return list(await cur.fetchall())

        found: list[tuple[Any, ...]] = await self.store._run(read)
        return found

    async def get(self, keys: Sequence[str]) -> dict[str, bytes]:
        rows = await self._read(
            f"SELECT sha256, data FROM {TABLE} WHERE sha256 = ANY(%s)", (list(keys),)
        )
        return {str(k): bytes(v) for k, v in rows}

    async def written_before(self, cutoff: datetime) -> list[str]:
        rows = await self._read(f"SELECT sha256 FROM {TABLE} WHERE written_at < %s", (cutoff,))
        return [str(r[0]) for r in rows]

    async def delete(self, keys: Sequence[str], cutoff: datetime) -> int:
        rows = await self._read(
            f"DELETE FROM {TABLE} WHERE sha256 = ANY(%s) AND written_at < %s RETURNING 1",
            (list(keys), cutoff),
        )
        return len(rows)


_MEMORY: weakref.WeakKeyDictionary[Store, MemoryPayloads] = weakref.WeakKeyDictionary()
_FOLDERS: dict[str, MemoryPayloads] = {}
"""A files store's, by its folder: two store objects on one folder in one
process (a worker's and a client's) share it, as they share the files."""


def payload_table(store: Store) -> PayloadTable:
    """The table of moved payloads beside ``store`` (made on its first write)."""
    if isinstance(store, SQLiteStore):
        return SQLitePayloads(store)
    # a PostgresStore's module is imported before one is made: a worker on
    # another store does not import it (and the PostgreSQL driver) to ask
    postgres = sys.modules.get("turnfsm.storage._postgres")
    if postgres is not None and isinstance(store, postgres.PostgresStore):
        return PostgresPayloads(store)
    from ..storage._files import FilesStore

    if isinstance(store, FilesStore):
        folder = str(store.root.resolve())
        found = _FOLDERS.get(folder)
        if found is None:
            found = _FOLDERS[folder] = MemoryPayloads(f"{folder} (in this process's memory)")
        return found
    table = _MEMORY.get(store)
    if table is None:
        table = _MEMORY[store] = MemoryPayloads(f"{type(store).__name__} (this process)")
    return table


# ------------------------------------------------------------------- the codec


def _reference(key: str, size: int) -> Payload:
    data = json.dumps({"sha256": key, "size": size, "table": TABLE}, separators=(",", ":"))
    return Payload(metadata={"encoding": ENCODING, "sha256": key.encode()}, data=data.encode())


class StoredPayloadCodec(PayloadCodec):
    """Moves each payload over ``threshold`` bytes to ``table`` and leaves a
    reference to it; brings referenced payloads back. ``threshold=None``:
    moves nothing (references met are still decoded). ``table=None``: a
    codec that can decode nothing it meets (a replay without a store), and
    says so."""

    def __init__(self, table: PayloadTable | None, threshold: int | None = THRESHOLD) -> None:
        if threshold is not None and threshold < 0:
            raise ValueError(f"threshold must be >= 0 bytes or None, not {threshold!r}")
        self.table = table
        self.threshold = threshold

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        limit = self.threshold
        if limit is None:
            return list(payloads)
        out: list[Payload] = []
        moved: dict[str, bytes] = {}
        for payload in payloads:
            if payload.ByteSize() <= limit:
                out.append(payload)
                continue
            data = payload.SerializeToString(deterministic=True)
            key = hashlib.sha256(data).hexdigest()
            moved[key] = data
            out.append(_reference(key, len(data)))
        if moved:
            if self.table is None:
                raise PayloadNotFound("a payload over the threshold, and no store to move it to")
            await self.table.put(moved, datetime.now(UTC))
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        refs = [i for i, p in enumerate(payloads) if p.metadata.get("encoding") == ENCODING]
        if not refs:
            return list(payloads)
        keys = [payloads[i].metadata["sha256"].decode() for i in refs]
        if self.table is None:
            raise PayloadNotFound(
                f"a payload kept in the store (sha256 {keys[0]}, table {TABLE}), and no "
                "store to read it from: give the store (replayer(store=...))"
            )
        found = await self.table.get(sorted(set(keys)))
        out = list(payloads)
        for i, key in zip(refs, keys, strict=True):
            data = found.get(key)
            if data is None:
                raise PayloadNotFound(
                    f"a payload kept in the store (sha256 {key}) is not in the {TABLE} table "
                    f"of {self.table.where}: every TemporalEngine, TemporalWorker and "
                    "replayer of a task queue must use the store that wrote it (or it was "
                    "pruned while a history still referred to it)"
                )
            if hashlib.sha256(data).hexdigest() != key:
                raise PayloadNotFound(
                    f"the payload sha256 {key} in the {TABLE} table of {self.table.where} "
                    "does not match its hash: the row is damaged"
                )
            payload = Payload()
            payload.ParseFromString(data)
            out[i] = payload
        return out


class _Chained(PayloadCodec, WithSerializationContext):
    """The user's codec, then ours: ours is the last to encode (it moves what
    the user's made, compressed or encrypted) and the first to decode."""

    def __init__(self, theirs: PayloadCodec, ours: StoredPayloadCodec) -> None:
        self.theirs = theirs
        self.ours = ours

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.ours.encode(await self.theirs.encode(payloads))

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.theirs.decode(await self.ours.decode(payloads))

    def with_context(self, context: SerializationContext) -> _Chained:
        theirs = self.theirs
        if isinstance(theirs, WithSerializationContext):
            again = theirs.with_context(context)
            if again is not theirs:
                return _Chained(again, self.ours)
        return self


def _users(codec: PayloadCodec | None) -> PayloadCodec | None:
    """``codec`` without ours (a client already given ours gets it replaced)."""
    if isinstance(codec, StoredPayloadCodec):
        return None
    if isinstance(codec, _Chained):
        return codec.theirs
    return codec


def _ours(codec: PayloadCodec | None) -> StoredPayloadCodec | None:
    if isinstance(codec, StoredPayloadCodec):
        return codec
    if isinstance(codec, _Chained):
        return codec.ours
    return None


def data_converter_for(
    converter: DataConverter, table: PayloadTable | None, threshold: int | None = THRESHOLD
) -> DataConverter:
    """``converter`` with ours after its own codec (if any), for ``table``."""
    ours = StoredPayloadCodec(table, threshold)
    theirs = _users(converter.payload_codec)
    codec: PayloadCodec = ours if theirs is None else _Chained(theirs, ours)
    return dataclasses.replace(converter, payload_codec=codec)


def with_payloads(client: Client, store: Store, threshold: int | None = THRESHOLD) -> Client:
    """A client like ``client`` (the same connection, namespace, interceptors
    and plugins), whose data converter moves payloads over ``threshold`` bytes
    to ``store``'s table: ours after the client's own codec, if it has one."""
    config = client.config()
    config["data_converter"] = data_converter_for(
        config["data_converter"], payload_table(store), threshold
    )
    made = Client(**config)
    if _ours(made.data_converter.payload_codec) is None:
        raise RuntimeError(
            "a plugin of the Temporal client replaced its payload codec: turnfsm's "
            "(payloads over the threshold kept in the store) would be lost; chain it "
            "in the plugin instead (turnfsm.temporal.StoredPayloadCodec)"
        )
    return made


# ------------------------------------------------------------------ pruning


@dataclass(frozen=True)
class Pruned:
    """What :func:`prune_payloads` did."""

    deleted: int
    """Rows deleted."""
    kept: int
    """Rows old enough, kept because a history still refers to them."""
    histories: int
    """Workflow histories read."""


async def _keys_in_histories(clients: Iterable[Client]) -> tuple[set[str], int]:
    keys: set[str] = set()
    read = 0
    for client in clients:
        async for execution in client.list_workflows():
            handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
            history = await handle.fetch_history()
            for event in history.events:
                keys.update(k.decode() for k in _KEY.findall(event.SerializeToString()))
            read += 1
    return keys, read


async def prune_payloads(
    store: Store, clients: Client | Iterable[Client], *, older_than: timedelta
) -> Pruned:
    """Delete the moved payloads no workflow history refers to any more.

    A row goes when it was last written more than ``older_than`` ago and no
    history of the namespaces of ``clients`` (every workflow Temporal still
    keeps, running or closed within the namespace's retention) holds its
    reference. ``older_than`` covers the payloads handed to Temporal but not
    in a history yet (an Update in flight, an activity's result on its way);
    an hour is plenty, a day costs only disk. Give a client of every
    namespace whose workers use this store. Nothing deletes rows otherwise.
    """
    if older_than < timedelta(0):
        raise ValueError(f"older_than must be >= 0, not {older_than!r}")
    table = payload_table(store)
    cutoff = datetime.now(UTC) - older_than
    old = await table.written_before(cutoff)
    if not old:
        return Pruned(deleted=0, kept=0, histories=0)
    if isinstance(clients, Client):
        clients = [clients]
    referred, read = await _keys_in_histories(clients)
    doomed = [k for k in old if k not in referred]
    deleted = await table.delete(doomed, cutoff) if doomed else 0
    return Pruned(deleted=deleted, kept=len(old) - len(doomed), histories=read)
