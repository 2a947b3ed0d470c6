"""A context's sub-contexts as the store's summaries list them: its
children, its whole tree, and the deletion of a context with its finished
descendants (refused while one is not finished). No child is loaded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import SubContextError
from ...storage import ChildSummaries, ContextSummary, Store
from .._turn import ChildInfo

__all__ = ["ContextTree", "children_of", "context_tree", "delete_tree"]


def _info(summary: ContextSummary) -> ChildInfo:
    return ChildInfo(summary.id, summary.state, summary.title, summary.archived)


async def children_of(store: Store, context_id: str) -> list[ChildInfo]:
    """The direct children of ``context_id`` in ``store``, oldest first, from
    their summaries (the store's ``list_children``, else ``list_contexts``):
    no child is loaded."""
    if isinstance(store, ChildSummaries):
        found = await store.list_children(context_id)
    else:
        found = [s for s in await store.list_contexts() if s.parent_id == context_id]
    return [_info(s) for s in found]


@dataclass(frozen=True, slots=True)
class ContextTree:
    """A context and its descendants, as :func:`context_tree` reads them."""

    info: ChildInfo
    children: tuple[ContextTree, ...] = ()

    def to_json(self) -> dict[str, Any]:
        i = self.info
        return {
            "id": i.context_id,
            "state": i.state,
            "title": i.title,
            "finished": i.finished,
            "children": [c.to_json() for c in self.children],
        }


def _index(
    summaries: Sequence[ContextSummary],
) -> tuple[dict[str, ContextSummary], dict[str, list[str]]]:
    """The summaries by id, and each context's children's ids, oldest first."""
    by_id = {s.id: s for s in summaries}
    kids: dict[str, list[str]] = {}
    for s in summaries:
        if s.parent_id is not None:
            kids.setdefault(s.parent_id, []).append(s.id)
    return by_id, kids


async def context_tree(store: Store, context_id: str) -> ContextTree:
    """``context_id`` and every descendant, children oldest first, from one
    ``list_contexts`` (the summaries): no context of the tree is loaded, unless
    ``context_id`` has no summary (then its load says why:
    :class:`ContextNotFound`, or the damage)."""
    summaries = await store.list_contexts()
    by_id, kids = _index(summaries)
    root = by_id.get(context_id)
    if root is None:
        ctx = await store.load(context_id)
        root_info = ChildInfo(ctx.id, ctx.current_state, ctx.config.title, ctx.config.archived)
    else:
        root_info = _info(root)

    def build(info: ChildInfo, seen: frozenset[str]) -> ContextTree:
        below = [k for k in kids.get(info.context_id, ()) if k not in seen]  # no cycles
        return ContextTree(info, tuple(build(_info(by_id[k]), seen | {k}) for k in below))

    return build(root_info, frozenset({context_id}))


async def delete_tree(store: Store, context_id: str, busy: Sequence[str] = ()) -> list[str]:
    """Delete a context and its finished (archived) descendants; returns the ids
    deleted, the context last.

    Refused (:class:`SubContextError`, nothing deleted) while the context has a
    descendant that is not finished: its work would be lost with it.
    """
    await store.load(context_id)  # ContextNotFound first
    summaries = await store.list_contexts()
    by_id, kids = _index(summaries)
    order: list[str] = []
    todo = [context_id]
    while todo:
        cid = todo.pop()
        order.append(cid)
        todo.extend(kids.get(cid, ()))
    for cid in order[1:]:  # from the summaries: no descendant is loaded
        summary = by_id[cid]
        if not summary.archived:
            raise SubContextError(
                context_id,
                f"it has a sub-context that is not finished ({cid!r}, in {summary.state}): "
                "finish it first",
            )
    for cid in order:
        if cid in busy:
            raise SubContextError(cid, "a call is running on it")
    deleted = list(reversed(order))  # descendants first: no child outlives its parent
    for cid in deleted:
        await store.delete(cid)
    return deleted
