"""The PostgreSQL store's partial reads: a context's outline
(``ContextOutlines``) and a page of a branch (``MessagePages``), each one
statement (one snapshot, one round trip) whose cost does not grow with the
conversation: the context's row, its branch rows with each one's last
position (one step down the positions' primary key), and the rows of the page
or of a short tail of the active branch."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ContextNotFound
from ..model import ChatContext, MessageNode
from ._outline import TAIL, ContextOutline, outline_of, pending_of_tail
from ._sql import BRANCH_LENGTH, Places, branch_of, check_outline, context_of, message_of, page_of

__all__ = ["PartialReads"]

_OUTLINE = (
    "SELECT c.seq, c.schema_version, c.id, c.parent_id, c.config, c.active_branch, c.state, "
    "c.created_at, c.updated_at, c.version, c.event_seq, c.progress, "
    "br.name, br.schema_version, br.body, br.last, t.mid, t.id, t.schema_version, t.body "
    "FROM contexts AS c "
    "LEFT JOIN LATERAL (SELECT array_agg(b.name ORDER BY b.seq) AS name, "
    "array_agg(b.schema_version ORDER BY b.seq) AS schema_version, "
    "array_agg(b.body ORDER BY b.seq) AS body, "
    f"array_agg({BRANCH_LENGTH} ORDER BY b.seq) AS last "
    "FROM branches AS b WHERE b.ctx = c.seq) AS br ON true "
    "LEFT JOIN LATERAL (SELECT array_agg(p.message_id ORDER BY p.pos) AS mid, "
    "array_agg(m.id ORDER BY p.pos) AS id, "
    "array_agg(m.schema_version ORDER BY p.pos) AS schema_version, "
    "array_agg(m.body ORDER BY p.pos) AS body FROM (SELECT ctx, pos, message_id "
    "FROM branch_messages WHERE ctx = c.seq AND branch = c.active_branch "
    f"ORDER BY pos DESC LIMIT {TAIL}) AS p "
    "LEFT JOIN messages AS m ON m.ctx = p.ctx AND m.id = p.message_id) AS t ON true "
    "WHERE c.id = %s"
)
"""A context's outline: its row, its branches with their last positions, and
the newest messages of its active branch (as :data:`PAGE` reads them)."""

_PAGE = (
    "SELECT c.active_branch, "
    "EXISTS (SELECT 1 FROM branches WHERE ctx = c.seq "
    "AND name = COALESCE(%(branch)s, c.active_branch)), "
    "p.mid, p.id, p.schema_version, p.body FROM contexts AS c "
    "LEFT JOIN LATERAL (SELECT array_agg(q.message_id ORDER BY q.pos) AS mid, "
    "array_agg(m.id ORDER BY q.pos) AS id, "
    "array_agg(m.schema_version ORDER BY q.pos) AS schema_version, "
    "array_agg(m.body ORDER BY q.pos) AS body FROM (SELECT ctx, pos, message_id "
    "FROM branch_messages WHERE ctx = c.seq AND branch = COALESCE(%(branch)s, c.active_branch) "
    "AND pos >= %(offset)s ORDER BY pos LIMIT %(limit)s) AS q "
    "LEFT JOIN messages AS m ON m.ctx = q.ctx AND m.id = q.message_id) AS p ON true "
    "WHERE c.id = %(id)s"
)
"""A page of a branch (the active one when ``branch`` is NULL): the active
branch's name, whether the branch exists, and the page's messages."""


class PartialReads:
    """``outline`` and ``message_page`` of :class:`PostgresStore`."""

    _places: Places

    if TYPE_CHECKING:  # the store's own

        async def _run(self, fn: Any, *, transaction: bool = False) -> Any: ...

        async def load(self, context_id: str) -> ChatContext: ...

    async def outline(self, context_id: str) -> ContextOutline:
        """The context without its messages (``ContextOutlines``), in one
        statement; loaded whole in the rare case that the newest
        :data:`TAIL` messages of its active branch are all tool results."""

        async def read(conn: Any) -> Any:
            cur = await conn.execute(_OUTLINE, (context_id,), binary=True)
            return await cur.fetchone()

        found = await self._run(read)
        if found is None:
            raise ContextNotFound(context_id)
        places = self._places
        ctx = context_of(places, found[:12], check_columns=False)
        names, versions, bodies, lasts = found[12:16]
        lengths: dict[str, int] = {}
        for name, version, body, last in zip(
            names or (), versions or (), bodies or (), lasts or (), strict=True
        ):
            ctx.branches[name] = branch_of(places, context_id, name, version, body, [])
            lengths[name] = 0 if last is None else last + 1
        check_outline(places, ctx)
        length = lengths[ctx.active_branch_name]
        rows = _rows(found[16:20])
        tail = _page(places, context_id, ctx.active_branch_name, length - len(rows), rows)
        pending = pending_of_tail(tail, whole=len(tail) >= length)
        if pending is None:
            return outline_of(await self.load(context_id))
        return ContextOutline(ctx, lengths, pending)

    async def message_page(
        self, context_id: str, branch: str | None, offset: int, limit: int | None
    ) -> tuple[str, list[MessageNode]] | None:
        """A page of a branch (``MessagePages``): the page's rows only, in one
        statement."""
        params = {"branch": branch, "limit": limit, "offset": offset, "id": context_id}

        async def read(conn: Any) -> Any:
            cur = await conn.execute(_PAGE, params, binary=True)
            return await cur.fetchone()

        found = await self._run(read)
        if found is None:
            raise ContextNotFound(context_id)
        active, known = found[:2]
        if not known:
            return None
        name = active if branch is None else branch
        return name, _page(self._places, context_id, name, offset, _rows(found[2:6]))


def _rows(columns: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows of a page from its parallel arrays (NULL: no rows)."""
    return list(zip(*(c or () for c in columns), strict=True))


def _page(
    places: Places, context_id: str, name: str, offset: int, rows: Sequence[Sequence[Any]]
) -> list[MessageNode]:
    return page_of(places, context_id, name, offset, rows, functools.partial(message_of, places))
