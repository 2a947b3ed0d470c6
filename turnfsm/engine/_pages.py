"""A page of a branch's messages (``Engine.message_page``): from the loaded
copy when the context is loaded and at rest, else from the store; a store that
is a :class:`~turnfsm.storage.MessagePages` reads the page alone."""

from __future__ import annotations

from typing import Any

from ..errors import BranchError
from ..model import MessageNode, detached
from ..storage import MessagePages, Store
from ._inputs import check_count, check_id


async def message_page(
    d: Any, store: Store, context_id: str, branch: str | None, offset: int, limit: int | None
) -> tuple[str, list[MessageNode]]:
    check_id("context_id", context_id)
    if branch is not None:
        check_id("branch", branch)
    check_count("offset", offset, minimum=0)
    check_count("limit", limit, minimum=0, optional=True)
    rt = d.loaded.get(context_id)
    if rt is not None and context_id not in d.busy:
        ctx = rt.ctx
    elif isinstance(store, MessagePages):
        page = await store.message_page(context_id, branch, offset, limit)
        if page is None:
            raise BranchError(f"context {context_id!r} has no branch {branch!r}")
        return page
    else:
        ctx = await store.load(context_id)
    name = branch if branch is not None else ctx.active_branch_name
    found = ctx.branches.get(name)
    if found is None:
        raise BranchError(f"context {context_id!r} has no branch {name!r}")
    end = None if limit is None else offset + limit
    pool = ctx.message_pool
    return name, [detached(pool[mid]) for mid in found.message_ids[offset:end]]
