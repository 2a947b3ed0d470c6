"""Who owns a context: bearer tokens name tenants, a table names each context's tenant.

A context's tenant is kept by the server, not in the context: in a table
``server_context_tenants`` beside the store's own, in the same database (the
SQLite file or the PostgreSQL schema; the engine's tables are untouched), or
in memory for any other store. A context made by the engine itself (a
sub-task's child) has no row and belongs to its parent's tenant.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from pathlib import Path

from ..errors import InvalidInput
from ..storage._eventlog import EventLog

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
    """context id -> tenant, in the tables beside the store (see
    :func:`turnfsm.storage._eventlog.open_event_log`): the store's SQLite file,
    its PostgreSQL database, or memory for any other store."""

    def __init__(self, event_log: EventLog) -> None:
        self.log = event_log

    async def set(self, context_id: str, tenant: str) -> None:
        await self.log.set_tenant(context_id, tenant)

    async def get(self, context_id: str) -> str | None:
        return await self.log.tenant(context_id)

    async def all(self) -> dict[str, str]:
        return await self.log.tenants()

    async def events_after(
        self, context_id: str, after: int, upto: int | None = None
    ) -> list[tuple[int, str, str]]:
        """The kept events of a context after seq ``after`` (to ``upto``), in seq order."""
        return await self.log.after(context_id, after, upto)

    async def forget(self, context_ids: list[str]) -> None:
        """Delete the contexts' tenant rows and their event log."""
        await self.log.forget(context_ids)
