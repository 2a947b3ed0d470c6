"""Refused calls: each raises its typed error and changes nothing that is stored.

"An event with no row for the current state raises `IllegalTransition` and
changes nothing" (docs/architecture.md, "The table"). After every refusal the
stored context is compared with the one before: same version, same state, same
messages (in fact: equal).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import kit
import pytest

from turnfsm import (
    ApprovalStatus,
    ChatContext,
    ContextBusy,
    ContextNotFound,
    Engine,
    IllegalTransition,
    InvalidInput,
    RetryPolicy,
    State,
    ToolCallError,
    TurnFSMError,
    tool,
)
from turnfsm.adapters.llm import LLMRequest
from turnfsm.errors import ToolCallNotPending, UnknownToolCall
from turnfsm.records import TextPart
from turnfsm.testing import ScriptedLLM

pytestmark = pytest.mark.anyio

RUNS: list[str] = []


@tool(approval="required")
def book(city: str) -> str:
    """Book a trip."""
    RUNS.append(city)
    return f"booked {city}"


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    RUNS.append(city)
    return f"found {city}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    RUNS.clear()


make_engine = functools.partial(kit.make_engine, tools=[book, lookup])


def summary(ctx: ChatContext) -> tuple[int, str, int, int]:
    return (
        ctx.version,
        ctx.current_state,
        len(ctx.active_branch.message_ids),
        len(ctx.message_pool),
    )


async def assert_refused(
    engine: Engine,
    cid: str,
    action: Callable[[], Awaitable[Any]],
    error: type[BaseException],
) -> BaseException:
    before = await engine.get_context(cid)
    steps_before = await engine.steps(cid)
    with pytest.raises(error) as info:
        await action()
    after = await engine.get_context(cid)
    assert summary(after) == summary(before)
    assert after == before
    assert await engine.steps(cid) == steps_before
    return info.value


BOOK_ANSWERS = [
    {
        "tool_calls": [
            {"id": "c1", "name": "book", "arguments": {"city": "Oslo"}},
            {"id": "c2", "name": "book", "arguments": {"city": "Rome"}},
        ]
    },
    {"text": "booked both"},
]


async def at_approval() -> tuple[Engine, str]:
    engine, _, _ = make_engine(BOOK_ANSWERS)
    cid = await engine.create_context()
    turn = await engine.send(cid, "book two")
    assert turn.state == State.AWAITING_TOOL_APPROVAL
    return engine, cid


async def at_permanent_failure() -> tuple[Engine, str]:
    engine, _, _ = make_engine([{"llm_error": {"status": 400}}, {"text": "ok"}])
    cid = await engine.create_context()
    turn = await engine.send(cid, "Hi")
    assert turn.state == State.PERMANENT_FAILURE
    return engine, cid


# --------------------------------------------------------------------------- unknown context


@pytest.mark.parametrize(
    "op",
    [
        lambda e, c: e.send(c, "hi"),
        lambda e, c: e.approve(c, "c1"),
        lambda e, c: e.deny(c, "c1", "no"),
        lambda e, c: e.retry(c),
        lambda e, c: e.reset(c),
        lambda e, c: e.cancel(c),
        lambda e, c: e.fork(c, "alt", 0),
        lambda e, c: e.switch_branch(c, "main"),
        lambda e, c: e.get_context(c),
        lambda e, c: e.trace(c),
        lambda e, c: e.resume(c),
    ],
    ids=[
        "send",
        "approve",
        "deny",
        "retry",
        "reset",
        "cancel",
        "fork",
        "switch",
        "get_context",
        "trace",
        "resume",
    ],
)
async def test_unknown_context(op: Callable[[Engine, str], Awaitable[Any]]) -> None:
    engine, llm, _ = make_engine([{"text": "hi"}])
    async with engine:
        other = await engine.create_context()
        before = await engine.get_context(other)
        with pytest.raises(ContextNotFound) as info:
            await op(engine, "no-such-context")
        assert info.value.context_id == "no-such-context"
        assert isinstance(info.value, KeyError)
        assert "no-such-context" in str(info.value)
        assert await engine.store.list_ids() == [other]
        assert await engine.get_context(other) == before
        assert llm.requests == []
        # the engine is still usable: the busy mark was released
        turn = await engine.send(other, "hi")
        assert turn.state == State.IDLE


# --------------------------------------------------------------------------- tool call ids


async def test_unknown_call_id_at_approval() -> None:
    engine, cid = await at_approval()
    async with engine:
        err = await assert_refused(
            engine, cid, lambda: engine.approve(cid, "nope"), UnknownToolCall
        )
        assert isinstance(err, ToolCallError)
        assert err.call_id == "nope"  # type: ignore[attr-defined]
        await assert_refused(engine, cid, lambda: engine.deny(cid, "nope", "x"), UnknownToolCall)
        # one good id and one unknown: nothing is decided
        await assert_refused(
            engine, cid, lambda: engine.approve(cid, ["c1", "nope"]), UnknownToolCall
        )
        ctx = await engine.get_context(cid)
        assert [c.id for c in ctx.pending_tool_calls()] == ["c1", "c2"]
        assert RUNS == []


async def test_approving_twice() -> None:
    engine, cid = await at_approval()
    async with engine:
        turn = await engine.approve(cid, "c1")
        assert turn.state == State.AWAITING_TOOL_APPROVAL
        assert turn.states == ()
        err = await assert_refused(
            engine, cid, lambda: engine.approve(cid, "c1"), ToolCallNotPending
        )
        assert err.status.startswith(str(ApprovalStatus.APPROVED))  # type: ignore[attr-defined]
        await assert_refused(
            engine, cid, lambda: engine.deny(cid, "c1", "changed my mind"), ToolCallNotPending
        )
        assert RUNS == []
        # the remaining decision still works
        done = await engine.approve(cid, "c2")
        assert done.state == State.IDLE
        assert sorted(RUNS) == ["Oslo", "Rome"]  # run concurrently, in worker threads
        # a decided and answered call cannot be decided again
        await assert_refused(engine, cid, lambda: engine.approve(cid, "c2"), ToolCallNotPending)


async def test_approve_when_idle() -> None:
    engine, _, _ = make_engine(
        [
            {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"city": "a"}}]},
            {"text": "ok"},
        ]
    )
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "look")
        assert (await engine.get_context(cid)).current_state == "Idle"
        await assert_refused(engine, cid, lambda: engine.approve(cid, "c1"), ToolCallNotPending)
        await assert_refused(engine, cid, lambda: engine.approve(cid, "zzz"), UnknownToolCall)
        await assert_refused(engine, cid, lambda: engine.deny(cid, "c1"), ToolCallNotPending)


async def test_approve_with_no_ids() -> None:
    engine, cid = await at_approval()
    async with engine:
        err = await assert_refused(engine, cid, lambda: engine.approve(cid, []), InvalidInput)
        assert err.where == "call_ids"  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- busy


async def test_send_while_busy() -> None:
    entered = anyio.Event()
    release = anyio.Event()

    async def handler(request: LLMRequest) -> dict[str, Any]:
        entered.set()
        await release.wait()
        return {"text": "slow answer"}

    engine, llm, _ = make_engine(handler)
    async with engine:
        cid = await engine.create_context()
        results: list[Any] = []

        async def first() -> None:
            results.append(await engine.send(cid, "first"))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(first)
                await entered.wait()
                refused: list[BaseException] = []

                async def second() -> None:
                    for action in (
                        lambda: engine.send(cid, "second"),
                        lambda: engine.approve(cid, "c1"),
                        lambda: engine.retry(cid),
                        lambda: engine.reset(cid),
                        lambda: engine.fork(cid, "alt", 0),
                        lambda: engine.switch_branch(cid, "main"),
                        lambda: engine.unload(cid),
                    ):
                        refused.append(await assert_refused(engine, cid, action, ContextBusy))

                tg.start_soon(second)
                await anyio.wait_all_tasks_blocked()
                assert len(refused) == 7
                err = refused[0]
                assert err.state == "AwaitingLLMResponse"  # type: ignore[attr-defined]
                release.set()
        (turn,) = results
        assert turn.text == "slow answer"
        assert len(llm.requests) == 1
        assert await engine.trace(cid) == [
            "Idle",
            "ProcessingUserMessage",
            "AwaitingLLMResponse",
            "ProcessingLLMResponse",
            "Idle",
        ]
        ctx = await engine.get_context(cid)
        assert [n.message.text for n in ctx.history()] == ["first", "slow answer"]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("content", "role", "where"),
    [
        ("hi", "system", "role"),
        ("hi", "assistant", "role"),
        ("hi", "tool", "role"),
        ("", "user", "content"),
        ([], "user", "content"),
        (["not a part"], "user", "content[0]"),
        ([TextPart(text="ok"), {"type": "text", "text": "dict"}], "user", "content[1]"),
    ],
)
async def test_invalid_send(content: Any, role: str, where: str) -> None:
    engine, llm, _ = make_engine([{"text": "hi"}])
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "warm up")
        err = await assert_refused(
            engine, cid, lambda: engine.send(cid, content, role), InvalidInput
        )
        assert err.where == where  # type: ignore[attr-defined]
        assert isinstance(err, ValueError)
        assert len(llm.requests) == 1


async def test_invalid_send_at_approval_does_not_supersede() -> None:
    engine, cid = await at_approval()
    async with engine:
        await assert_refused(engine, cid, lambda: engine.send(cid, ""), InvalidInput)
        await assert_refused(engine, cid, lambda: engine.send(cid, "x", "robot"), InvalidInput)
        ctx = await engine.get_context(cid)
        assert [c.id for c in ctx.pending_tool_calls()] == ["c1", "c2"]


def test_invalid_engine_configuration() -> None:
    with pytest.raises(InvalidInput):
        Engine(max_iterations=0)
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


def test_invalid_scripted_answers() -> None:
    with pytest.raises(InvalidInput):
        ScriptedLLM([{"text": "a", "chunks": ["b"]}])
    with pytest.raises(InvalidInput):
        ScriptedLLM([{"cancel_after": 1, "text": "x"}])
    with pytest.raises(InvalidInput):
        ScriptedLLM([{}])


# --------------------------------------------------------------------------- illegal events


async def test_illegal_events_in_idle() -> None:
    engine, _, _ = make_engine([{"text": "hi"}])
    async with engine:
        cid = await engine.create_context()
        for action, trigger in (
            (lambda: engine.retry(cid), "retry"),
            (lambda: engine.reset(cid), "reset"),
            (lambda: engine.cancel(cid), "cancel"),
        ):
            err = await assert_refused(engine, cid, action, IllegalTransition)
            assert err.state == "Idle"  # type: ignore[attr-defined]
            assert err.trigger == trigger  # type: ignore[attr-defined]
            assert "nothing was changed" in str(err)
        # after a turn, too
        await engine.send(cid, "hi")
        await assert_refused(engine, cid, lambda: engine.retry(cid), IllegalTransition)


async def test_illegal_events_at_approval() -> None:
    engine, cid = await at_approval()
    async with engine:
        for action in (lambda: engine.retry(cid), lambda: engine.reset(cid)):
            err = await assert_refused(engine, cid, action, IllegalTransition)
            assert err.state == "AwaitingToolApproval"  # type: ignore[attr-defined]
        assert RUNS == []


async def test_illegal_events_at_permanent_failure() -> None:
    engine, cid = await at_permanent_failure()
    async with engine:
        err = await assert_refused(engine, cid, lambda: engine.cancel(cid), IllegalTransition)
        assert err.state == "PermanentFailure"  # type: ignore[attr-defined]
        await assert_refused(engine, cid, lambda: engine.approve(cid, "c1"), UnknownToolCall)
        # still recoverable
        turn = await engine.retry(cid)
        assert turn.state == State.IDLE


async def test_every_refusal_is_a_turnfsm_error() -> None:
    engine, cid = await at_approval()
    async with engine:
        for action in (
            lambda: engine.approve(cid, "nope"),
            lambda: engine.retry(cid),
            lambda: engine.send(cid, ""),
            lambda: engine.get_context("nope"),
        ):
            with pytest.raises(TurnFSMError):
                await action()


async def test_a_failed_switch_leaves_the_loaded_context_as_stored() -> None:
    """A store error on switch_branch: the next call sees the branch the store has."""
    from turnfsm import MemoryStore, StoreError

    class FailingStore(MemoryStore):
        failing = False

        async def commit(self, commit: Any) -> None:
            if self.failing:
                raise StoreError("disk full")
            await super().commit(commit)

    store = FailingStore()
    engine = Engine(llm=ScriptedLLM([{"text": "hello"}]), store=store)
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "hi")
        await engine.fork(cid, "alt", at=0)
        store.failing = True
        with pytest.raises(StoreError):
            await engine.switch_branch(cid, "main")
        store.failing = False
        assert (await engine.get_context(cid)).active_branch_name == "alt"
