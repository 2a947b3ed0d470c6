"""The partial reads of the contract (docs/storage.md): a store that reads a
context's outline (``ContextOutlines``) or a page of a branch
(``MessagePages``) without loading the context answers exactly what the
loaded context says.

A backend's test class that has them takes :class:`PartialReadsContract` as
a base beside ``StoreContract`` (whose ``store`` fixture it uses): SQLite,
files and PostgreSQL do; the memory store reads whole contexts only.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from turnfsm.errors import ContextNotFound
from turnfsm.model import (
    ApprovalStatus,
    Branch,
    ChatContext,
    MessageNode,
    MessageType,
    Role,
    ToolCallRequest,
    ToolCallResult,
)
from turnfsm.storage import ContextOutlines, MessagePages, Store, outline_of

from .contract import T0, empty_context, make_commit, msg, rich_context

__all__ = ["PartialReadsContract", "long_tool_batch"]


def long_tool_batch(cid: str, calls: int, answered: int, *, lead: int = 3) -> ChatContext:
    """A context whose active branch is ``lead`` turns of chat, then one
    assistant message asking for ``calls`` tools (the even ones approved,
    the odd ones waiting for a decision) and the results of the first
    ``answered``: its newest messages are tool results only, more of them
    than a store reads at first."""
    nodes: list[MessageNode] = []
    for i in range(lead):
        nodes.append(msg(f"u{i}", Role.USER, f"question {i}"))
        nodes.append(msg(f"a{i}", Role.ASSISTANT, f"answer {i}"))
    batch = [
        ToolCallRequest(
            id=f"call-{i}",
            tool_name="lookup",
            arguments={"i": i},
            approval_status=ApprovalStatus.APPROVED if i % 2 == 0 else ApprovalStatus.PENDING,
        )
        for i in range(calls)
    ]
    nodes.append(msg("ask", Role.ASSISTANT, tool_calls=batch, message_type=MessageType.TOOL_CALL))
    for i in range(answered):
        result = ToolCallResult(request_id=f"call-{i}", result={"i": i})
        nodes.append(
            msg(f"r{i}", Role.TOOL, tool_result=result, message_type=MessageType.TOOL_RESULT)
        )
    ids = [n.id for n in nodes]
    return ChatContext(
        id=cid,
        message_pool={n.id: n for n in nodes},
        branches={
            "main": Branch(name="main", message_ids=ids),
            "side": Branch(name="side", message_ids=ids[:2], forked_from="main"),
        },
        current_state="AwaitingToolApproval",
        created_at=T0,
        updated_at=T0 + timedelta(seconds=5),
        version=3,
    )


class PartialReadsContract:
    """Outline and page reads against the loaded context."""

    async def test_the_outline_is_the_loaded_context_without_its_messages(
        self, store: Store
    ) -> None:
        assert isinstance(store, ContextOutlines)
        contexts = [
            rich_context("rich"),
            empty_context("empty"),
            long_tool_batch("short", calls=3, answered=1),
            long_tool_batch("long", calls=60, answered=41),  # 41 results after the ask
            long_tool_batch("done", calls=4, answered=4),
            long_tool_batch("all-results", calls=30, answered=30, lead=0),
        ]
        for ctx in contexts:
            await store.create(ctx)
        for ctx in contexts:
            got = await store.outline(ctx.id)
            assert got == outline_of(await store.load(ctx.id)), ctx.id
            assert got.context.message_pool == {}
            assert all(b.message_ids == [] for b in got.context.branches.values())
            assert got.lengths == {n: len(b.message_ids) for n, b in ctx.branches.items()}
            assert got.pending_tool_calls == ctx.pending_tool_calls()
        # what each says, by hand: the odd calls still without a result wait
        short, long = await store.outline("short"), await store.outline("long")
        assert [c.id for c in short.pending_tool_calls] == ["call-1"]
        assert [c.id for c in long.pending_tool_calls] == [f"call-{i}" for i in range(41, 60, 2)]
        assert (await store.outline("done")).pending_tool_calls == []
        assert (await store.outline("rich")).context.active_branch_name == "alt"

    async def test_the_outline_follows_commits(self, store: Store) -> None:
        assert isinstance(store, ContextOutlines)
        await store.create(long_tool_batch("c", calls=2, answered=0))
        assert [c.id for c in (await store.outline("c")).pending_tool_calls] == ["call-1"]
        result = ToolCallResult(request_id="call-1", result="ok")
        appended = [
            ("main", msg("r1", Role.TOOL, tool_result=result)),
            ("side", msg("s1", Role.USER, "on the side")),
        ]
        await store.commit(make_commit("c", 3, state="ExecutingTools", appended=appended))
        got = await store.outline("c")
        assert got.context.version == 4
        assert got.context.current_state == "ExecutingTools"
        assert got.lengths == {"main": 8, "side": 3}
        assert got.pending_tool_calls == []
        assert got == outline_of(await store.load("c"))

    async def test_the_outline_of_an_unknown_context(self, store: Store) -> None:
        assert isinstance(store, ContextOutlines)
        with pytest.raises(ContextNotFound):
            await store.outline("missing")

    async def test_a_page_is_a_slice_of_the_branch(self, store: Store) -> None:
        assert isinstance(store, MessagePages)
        ctx = long_tool_batch("c", calls=5, answered=5, lead=4)  # main: 14, side: 2
        await store.create(ctx)
        loaded = await store.load("c")
        for branch in (None, "main", "side"):
            name = branch or loaded.active_branch_name
            ids = loaded.branches[name].message_ids
            for offset in (0, 1, 7, len(ids) - 1, len(ids), len(ids) + 3):
                for limit in (None, 0, 1, 5, 100):
                    end = None if limit is None else offset + limit
                    want = [loaded.message_pool[i] for i in ids[offset:end]]
                    got = await store.message_page("c", branch, offset, limit)
                    assert got == (name, want), (branch, offset, limit)
        assert await store.message_page("c", "nope", 0, 10) is None
        with pytest.raises(ContextNotFound):
            await store.message_page("missing", None, 0, 10)
