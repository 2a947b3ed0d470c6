"""Who owns a context: bearer tokens name tenants, a table names each context's tenant.

A context's tenant is kept by the server, not in the context: in a table
``server_context_tenants`` of the same SQLite file as the store (another
connection, its own table; the engine's tables are untouched), or in memory
for a store that is not a SQLite file. A context made by the engine itself
(a sub-task's child) has no row and belongs to its parent's tenant.
"""

from __future__ import annotations

import hmac
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path

import anyio.to_thread

from ..errors import InvalidInput

__all__ = ["DEFAULT_TENANT", "TOKENS_ENV", "TenantTable", "load_tokens", "parse_tokens"]

DEFAULT_TENANT = "default"
"""The one tenant of a server run without tokens (on the loopback, or ``--insecure``)."""
TOKENS_ENV = "TURNFSM_SERVER_TOKENS"
"""The environment variable that holds tokens when no ``--tokens`` file is given:
entries ``token tenant`` separated by newlines or ``;``."""


def parse_tokens(text: str, where: str) -> dict[str, str]:
    """``token tenant`` entries (one a line, or separated by ``;``; ``#`` starts a
    comment) as token -> tenant. A malformed entry or a repeated token is an
    :class:`InvalidInput` naming ``where`` and the entry's number."""
    out: dict[str, str] = {}
    entries = [e for line in text.splitlines() for e in line.split(";")]
    for n, raw in enumerate(entries, 1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        parts = entry.split()
        if len(parts) != 2:
            raise InvalidInput(f"{where}, entry {n}", "must be 'token tenant' (two words)")
        token, tenant = parts
        if token in out:
            raise InvalidInput(f"{where}, entry {n}", "this token is given twice")
        out[token] = tenant
    return out


def load_tokens(path: str | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Tokens from ``path`` (``--tokens FILE``), else from :data:`TOKENS_ENV`, else none."""
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput("--tokens", f"cannot read {path}: {exc}") from None
        return parse_tokens(text, path)
    value = (os.environ if env is None else env).get(TOKENS_ENV)
    return parse_tokens(value, TOKENS_ENV) if value else {}


def tenant_of_token(tokens: Mapping[str, str], given: str) -> str | None:
    """The tenant of a bearer token; every token is compared in constant time."""
    found: str | None = None
    for token, tenant in tokens.items():
        if hmac.compare_digest(token.encode(), given.encode()):
            found = tenant
    return found


class TenantTable:
    """context id -> tenant, in the store's SQLite file (``path``) or in memory (``None``)."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._memory: dict[str, str] = {}
        if path is not None:
            db = self._connect()
            try:
                with db:
                    db.execute(
                        "CREATE TABLE IF NOT EXISTS server_context_tenants "
                        "(context_id TEXT PRIMARY KEY, tenant TEXT NOT NULL)"
                    )
                    db.execute(
                        "CREATE TABLE IF NOT EXISTS server_events (context_id TEXT NOT NULL, "
                        "seq INTEGER NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL, "
                        "PRIMARY KEY (context_id, seq))"
                    )
            finally:
                db.close()
        self._events: dict[str, dict[int, tuple[str, str]]] = {}

    def _connect(self) -> sqlite3.Connection:
        assert self._path is not None
        return sqlite3.connect(self._path, timeout=30)

    def _run_sql(self, sql: str, args: tuple[str, ...]) -> list[tuple[str, str]]:
        db = self._connect()
        try:
            with db:
                rows = db.execute(sql, args).fetchall()
        finally:
            db.close()
        return [(str(a), str(b)) for a, b in rows]

    async def set(self, context_id: str, tenant: str) -> None:
        if self._path is None:
            self._memory[context_id] = tenant
            return
        await anyio.to_thread.run_sync(
            self._run_sql,
            "INSERT OR REPLACE INTO server_context_tenants VALUES (?, ?) RETURNING context_id, "
            "tenant",
            (context_id, tenant),
        )

    async def get(self, context_id: str) -> str | None:
        if self._path is None:
            return self._memory.get(context_id)
        rows = await anyio.to_thread.run_sync(
            self._run_sql,
            "SELECT context_id, tenant FROM server_context_tenants WHERE context_id = ?",
            (context_id,),
        )
        return rows[0][1] if rows else None

    async def all(self) -> dict[str, str]:
        if self._path is None:
            return dict(self._memory)
        rows = await anyio.to_thread.run_sync(
            self._run_sql, "SELECT context_id, tenant FROM server_context_tenants", ()
        )
        return dict(rows)

    # ------------------------------------------------------------------ the event log

    def _add(self, rows: list[tuple[str, int, str, str]]) -> None:
        db = self._connect()
        try:
            with db:
                db.executemany("INSERT OR IGNORE INTO server_events VALUES (?, ?, ?, ?)", rows)
        finally:
            db.close()

    async def add_events(self, context_id: str, events: list[tuple[int, str, str]]) -> None:
        """Keep a context's durable events: (seq, kind, JSON data) each."""
        if self._path is None:
            log = self._events.setdefault(context_id, {})
            for seq, kind, data in events:
                log[seq] = (kind, data)
            return
        rows = [(context_id, seq, kind, data) for seq, kind, data in events]
        await anyio.to_thread.run_sync(self._add, rows)

    def _after(self, context_id: str, after: int) -> list[tuple[int, str, str]]:
        db = self._connect()
        try:
            rows = db.execute(
                "SELECT seq, kind, data FROM server_events WHERE context_id = ? AND seq > ? "
                "ORDER BY seq",
                (context_id, after),
            ).fetchall()
        finally:
            db.close()
        return [(int(a), str(b), str(c)) for a, b, c in rows]

    async def events_after(self, context_id: str, after: int) -> list[tuple[int, str, str]]:
        """The kept events of a context after seq ``after``, in seq order."""
        if self._path is None:
            log = self._events.get(context_id, {})
            return [(seq, *log[seq]) for seq in sorted(log) if seq > after]
        return await anyio.to_thread.run_sync(self._after, context_id, after)

    async def forget(self, context_ids: list[str]) -> None:
        for cid in context_ids:
            self._events.pop(cid, None)
            if self._path is None:
                self._memory.pop(cid, None)
            else:
                await anyio.to_thread.run_sync(
                    self._run_sql,
                    "DELETE FROM server_events WHERE context_id = ? RETURNING context_id, kind",
                    (cid,),
                )
                await anyio.to_thread.run_sync(
                    self._run_sql,
                    "DELETE FROM server_context_tenants WHERE context_id = ? "
                    "RETURNING context_id, tenant",
                    (cid,),
                )
