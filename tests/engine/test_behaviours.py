"""Engine behaviours of docs/architecture.md ("The table"), through the public API.

Retries, the iteration limit, cancellation, supersession, denial and approval
policies, tool failures as results, branches, the request the LLM gets, and the
JSON round trip of a stored context.
"""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any

import anyio
import kit
import pytest
import tenacity
from canonical import ALR, ATA, EXT, IDLE, PF, PLR, PUM, SLR, TF, trace_of

import turnfsm.model
from turnfsm import (
    ApprovalStatus,
    ChatContext,
    Engine,
    InvalidInput,
    RetryPolicy,
    Role,
    State,
    StopReason,
    Tool,
    Turn,
    records,
    tool,
)
from turnfsm.adapters.llm import LLMRequest
from turnfsm.engine import _scope
from turnfsm.engine._scope import call_scope
from turnfsm.errors import BranchError
from turnfsm.records import FilePart, ImagePart, TextPart
from turnfsm.storage import Lease, MemoryStore
from turnfsm.testing import FakeClock, ScriptedLLM

pytestmark = pytest.mark.anyio


# --------------------------------------------------------------------------- helpers


make_engine = kit.make_engine


def call(cid: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": arguments}


def results_by_call(ctx: ChatContext) -> dict[str, list[Any]]:
    """Tool call id -> the tool results for it on the active branch."""
    out: dict[str, list[Any]] = {}
    for node in ctx.history():
        msg = node.message
        for c in msg.tool_calls or ():
            out.setdefault(c.id, [])
        if msg.tool_result is not None:
            out.setdefault(msg.tool_result.request_id, []).append(msg.tool_result)
    return out


def assert_every_call_answered_once(ctx: ChatContext) -> None:
    counts = {cid: len(results) for cid, results in results_by_call(ctx).items()}
    assert counts and all(n == 1 for n in counts.values()), counts
    # every result answers a call asked before it
    asked: set[str] = set()
    for node in ctx.history():
        msg = node.message
        asked.update(c.id for c in msg.tool_calls or ())
        if msg.tool_result is not None:
            assert msg.tool_result.request_id in asked


def result_of(ctx: ChatContext, call_id: str) -> Any:
    (result,) = results_by_call(ctx)[call_id]
    return result


def calls_of(ctx: ChatContext) -> dict[str, Any]:
    return {c.id: c for n in ctx.history() for c in n.message.tool_calls or ()}


class Recorder:
    """Tools whose runs are counted."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, Any]]] = []

    def make(self, name: str, approval: Any = "auto", **kwargs: Any) -> Tool:
        runs = self.runs

        def fn(city: str = "") -> dict[str, Any]:
            runs.append((name, {"city": city}))
            return {"tool": name, "city": city, "ok": True}

        fn.__doc__ = f"The {name} tool."
        return tool(fn, name=name, approval=approval, **kwargs)

    def names(self) -> list[str]:
        return [n for n, _ in self.runs]


# --------------------------------------------------------------------------- retries


async def test_three_transient_failures_give_up() -> None:
    engine, llm, clock = make_engine(
        [{"llm_error": {"status": 503}}] * 3, retry=RetryPolicy(max_attempts=3)
    )
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        expected = [IDLE, PUM, ALR, TF, ALR, TF, ALR, TF, PF]
        assert trace_of(turn) == expected
        assert await engine.trace(cid) == expected
        assert turn.state == State.PERMANENT_FAILURE
        assert turn.stop_reason == StopReason.FAILED
        assert turn.error is not None and "503" in turn.error
        assert [r.attempt for r in llm.requests] == [1, 2, 3]
        assert len(clock.sleeps) == 2  # two backoffs, none after the last attempt
        ctx = await engine.get_context(cid)
        assert [n.message.role for n in ctx.history()] == [Role.USER]
        steps = await engine.steps(cid)
        assert [s.trigger for s in steps][-1] == "give_up"
        assert [s.trigger for s in steps].count("retry") == 2


async def test_max_attempts_one_gives_up_at_once() -> None:
    engine, llm, clock = make_engine(
        [{"llm_error": {"kind": "timeout"}}], retry=RetryPolicy(max_attempts=1)
    )
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        assert trace_of(turn) == [IDLE, PUM, ALR, TF, PF]
        assert len(llm.requests) == 1
        assert clock.sleeps == []


async def test_retry_after_is_honoured() -> None:
    engine, _, clock = make_engine(
        [{"llm_error": {"status": 429, "retry_after": 0.5}}, {"text": "ok"}],
        retry=RetryPolicy(max_attempts=3, wait=tenacity.wait_fixed(7)),
    )
    async with engine:
        cid = await engine.create_context()
        start = clock.time()
        turn = await engine.send(cid, "Hi")
        assert turn.text == "ok"
        assert clock.sleeps == [0.5]
        assert clock.time() == pytest.approx(start + 0.5)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (RetryPolicy(wait=tenacity.wait_fixed(3), max_retry_after=60.0), [60.0]),
        (RetryPolicy(wait=tenacity.wait_fixed(3), respect_retry_after=False), [3.0]),
    ],
    ids=["capped", "ignored"],
)
async def test_retry_after_cap_and_opt_out(policy: RetryPolicy, expected: list[float]) -> None:
    engine, _, clock = make_engine(
        [{"llm_error": {"status": 429, "retry_after": 1000}}, {"text": "ok"}], retry=policy
    )
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        assert turn.text == "ok"
        assert clock.sleeps == expected


async def test_wait_strategy_used_without_retry_after() -> None:
    engine, _, clock = make_engine(
        [{"llm_error": {"status": 500}}, {"llm_error": {"status": 500}}, {"text": "ok"}],
        retry=RetryPolicy(max_attempts=3, wait=tenacity.wait_fixed(2)),
    )
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        assert turn.text == "ok"
        assert clock.sleeps == [2, 2]


TRANSIENT = [
    {"status": 500},
    {"status": 502},
    {"status": 503},
    {"status": 408},
    {"status": 409},
    {"status": 429},
    {"kind": "timeout"},
    {"kind": "connection"},
]
PERMANENT = [{"status": s} for s in (400, 401, 403, 404, 422)]


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda e: str(e.get("status") or e["kind"]))
async def test_transient_errors_are_retried(error: dict[str, Any]) -> None:
    engine, llm, clock = make_engine([{"llm_error": error}, {"text": "recovered"}])
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        assert trace_of(turn) == [IDLE, PUM, ALR, TF, ALR, PLR, IDLE]
        assert turn.text == "recovered"
        assert len(llm.requests) == 2
        assert len(clock.sleeps) == 1


@pytest.mark.parametrize("error", PERMANENT, ids=lambda e: str(e["status"]))
async def test_permanent_errors_are_not_retried(error: dict[str, Any]) -> None:
    engine, llm, clock = make_engine([{"llm_error": error}, {"text": "never used"}])
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        assert trace_of(turn) == [IDLE, PUM, ALR, PF]
        assert turn.stop_reason == StopReason.FAILED
        assert turn.error is not None and str(error["status"]) in turn.error
        assert len(llm.requests) == 1
        assert llm.remaining == 1
        assert clock.sleeps == []


async def test_broken_stream_is_transient_and_leaves_no_message() -> None:
    engine, _, _ = make_engine(
        [
            {"chunks": ["par", "tial", "x"], "fail_after": 2, "error": {"status": 503}},
            {"chunks": ["who", "le"]},
        ]
    )
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        assert trace_of(turn) == [IDLE, PUM, ALR, SLR, TF, ALR, SLR, PLR, IDLE]
        ctx = await engine.get_context(cid)
        assert [n.message.text for n in ctx.history()] == ["Hi", "whole"]
        assert ctx.history()[-1].message.metadata.attempt == 2
        assert all("partial" not in n.message.text for n in ctx.message_pool.values())


async def test_retry_from_permanent_failure_runs_the_call_again() -> None:
    engine, llm, _ = make_engine([{"llm_error": {"status": 400}}, {"text": "second try"}])
    async with engine:
        cid = await engine.create_context(system_prompt="sys")
        failed = await engine.send(cid, "Hi")
        assert failed.state == State.PERMANENT_FAILURE
        turn = await engine.retry(cid)
        assert list(turn.states) == [ALR, PLR, IDLE]
        assert await engine.trace(cid) == [IDLE, PUM, ALR, PF, ALR, PLR, IDLE]
        assert turn.text == "second try"
        assert turn.stop_reason == StopReason.COMPLETED
        assert len(llm.requests) == 2
        assert llm.requests[1].messages == llm.requests[0].messages
        ctx = await engine.get_context(cid)
        assert [n.message.text for n in ctx.history()] == ["Hi", "second try"]


async def test_retry_after_give_up_gets_fresh_attempts() -> None:
    engine, llm, _ = make_engine(
        [{"llm_error": {"status": 503}}] * 2 + [{"llm_error": {"status": 503}}, {"text": "ok"}],
        retry=RetryPolicy(max_attempts=2, wait=tenacity.wait_fixed(1)),
    )
    async with engine:
        cid = await engine.create_context()
        failed = await engine.send(cid, "Hi")
        assert trace_of(failed) == [IDLE, PUM, ALR, TF, ALR, TF, PF]
        turn = await engine.retry(cid)
        assert list(turn.states) == [ALR, TF, ALR, PLR, IDLE]
        assert [r.attempt for r in llm.requests] == [1, 2, 1, 2]


async def test_reset_from_permanent_failure_goes_idle() -> None:
    engine, _, _ = make_engine([{"llm_error": {"status": 401}}, {"text": "fresh"}])
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "Hi")
        turn = await engine.reset(cid)
        assert list(turn.states) == [IDLE]
        assert turn.state == State.IDLE
        assert turn.stop_reason == StopReason.RESET
        assert (await engine.trace(cid))[-2:] == [PF, IDLE]
        again = await engine.send(cid, "Hello?")
        assert again.text == "fresh"
        assert (await engine.get_context(cid)).current_state == IDLE


async def test_new_send_from_permanent_failure_works() -> None:
    engine, llm, _ = make_engine([{"llm_error": {"status": 404}}, {"text": "found it"}])
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "first")
        turn = await engine.send(cid, "second")
        assert list(turn.states) == [PUM, ALR, PLR, IDLE]
        assert await engine.trace(cid) == [IDLE, PUM, ALR, PF, PUM, ALR, PLR, IDLE]
        assert turn.text == "found it"
        user_texts = [m["content"] for m in llm.requests[1].messages if m["role"] == "user"]
        assert user_texts == ["first", "second"]


async def test_enhancer_failure_is_permanent_and_retry_runs_it_again() -> None:
    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("no prompt today")
            return request

    flaky = Flaky()
    engine, llm, _ = make_engine([{"text": "ok"}], enhancers=[flaky])
    async with engine:
        cid = await engine.create_context()
        failed = await engine.send(cid, "Hi")
        assert trace_of(failed) == [IDLE, PUM, PF]
        assert failed.error is not None and "no prompt today" in failed.error
        assert llm.requests == []
        turn = await engine.retry(cid)
        assert list(turn.states) == [ALR, PLR, IDLE]
        assert turn.text == "ok"


# --------------------------------------------------------------------------- iteration limit


async def test_max_iterations_closes_the_last_calls() -> None:
    rec = Recorder()
    lookup = rec.make("lookup")
    asked: list[int] = []

    def always_tools(request: LLMRequest) -> dict[str, Any]:
        asked.append(request.iteration)
        n = len(asked)
        return {
            "tool_calls": [call(f"call_{n}a", "lookup", city=f"c{n}"), call(f"call_{n}b", "lookup")]
        }

    engine, _, _ = make_engine(always_tools, tools=[lookup], max_iterations=2)
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "loop forever")
        assert turn.state == State.IDLE
        assert turn.stop_reason == StopReason.MAX_ITERATIONS
        assert trace_of(turn) == [IDLE, PUM, ALR, PLR, EXT, ALR, PLR, IDLE]
        assert asked == [1, 2]  # exactly max_iterations LLM calls
        assert rec.names() == ["lookup", "lookup"]  # only the first batch ran
        ctx = await engine.get_context(cid)
        assert_every_call_answered_once(ctx)
        for cid_ in ("call_2a", "call_2b"):
            res = result_of(ctx, cid_)
            assert res.success is False
            assert res.result["status"] == "max_iterations"
            assert "not executed" in res.result["error"]
        for cid_ in ("call_1a", "call_1b"):
            assert result_of(ctx, cid_).success is True
        calls = calls_of(ctx)
        assert calls["call_2a"].approval_status == ApprovalStatus.DENIED
        # the results, then the notice saying why the turn stopped (an assistant
        # message after tool results: the next request is valid for a provider)
        *_, first, second, notice = ctx.history()
        assert [first.message.role, second.message.role] == [Role.TOOL, Role.TOOL]
        assert notice.message.role == Role.ASSISTANT
        assert notice.message.notice == "max_iterations"


async def test_max_iterations_one() -> None:
    rec = Recorder()
    engine, llm, _ = make_engine(
        [{"tool_calls": [call("c1", "lookup")]}, {"text": "next turn"}],
        tools=[rec.make("lookup")],
        max_iterations=1,
    )
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        assert turn.stop_reason == StopReason.MAX_ITERATIONS
        assert trace_of(turn) == [IDLE, PUM, ALR, PLR, IDLE]
        assert rec.runs == []
        # the limit is per user message: the next message gets a fresh budget
        again = await engine.send(cid, "again")
        assert again.text == "next turn"
        assert llm.requests[1].iteration == 1


# --------------------------------------------------------------------------- cancellation


async def test_cancel_mid_stream_keeps_partial_text() -> None:
    engine, _, _ = make_engine(
        [{"chunks": ["Hel", "lo ", "wor", "ld"], "cancel_after": 2}, {"text": "after"}]
    )
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
        assert turn.state == State.IDLE
        assert turn.stop_reason == StopReason.CANCELLED
        assert trace_of(turn) == [IDLE, PUM, ALR, SLR, IDLE]
        assert await engine.trace(cid) == [IDLE, PUM, ALR, SLR, IDLE]
        ctx = await engine.get_context(cid)
        last = ctx.history()[-1].message
        assert last.role == Role.ASSISTANT
        assert last.text == "Hello "
        assert last.metadata.cancelled is True
        assert turn.messages[-1].metadata.cancelled is True
        # the conversation goes on
        again = await engine.send(cid, "go on")
        assert again.text == "after"


async def test_cancel_at_approval_closes_open_calls() -> None:
    rec = Recorder()
    engine, _, _ = make_engine(
        [
            {
                "tool_calls": [
                    call("c1", "book", city="Paris"),
                    call("c2", "book", city="Rome"),
                ]
            }
        ],
        tools=[rec.make("book", approval="required")],
    )
    async with engine:
        cid = await engine.create_context()
        first = await engine.send(cid, "book two")
        assert first.state == State.AWAITING_TOOL_APPROVAL
        turn = await engine.cancel(cid)
        assert turn.state == State.IDLE
        assert turn.stop_reason == StopReason.CANCELLED
        assert list(turn.states) == [IDLE]
        assert rec.runs == []
        ctx = await engine.get_context(cid)
        assert_every_call_answered_once(ctx)
        for c in ("c1", "c2"):
            res = result_of(ctx, c)
            assert res.success is False
            assert res.result["status"] == "cancelled"
            assert calls_of(ctx)[c].approval_status == ApprovalStatus.DENIED
        assert await engine.trace(cid) == [IDLE, PUM, ALR, PLR, ATA, IDLE]


async def test_cancel_at_approval_after_partial_approval() -> None:
    rec = Recorder()
    engine, _, _ = make_engine(
        [{"tool_calls": [call("c1", "book"), call("c2", "book")]}],
        tools=[rec.make("book", approval="required")],
    )
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "book two")
        partial = await engine.approve(cid, "c1")
        assert partial.state == State.AWAITING_TOOL_APPROVAL
        assert partial.states == ()
        assert [c.id for c in partial.pending_tool_calls] == ["c2"]
        await engine.cancel(cid)
        assert rec.runs == []  # the approved call never ran
        ctx = await engine.get_context(cid)
        assert_every_call_answered_once(ctx)
        assert result_of(ctx, "c1").result["status"] == "cancelled"
        assert result_of(ctx, "c2").result["status"] == "cancelled"


async def test_cancel_from_another_task_while_llm_blocks() -> None:
    entered = anyio.Event()
    never = anyio.Event()
    saw_cancel: list[bool] = []

    async def handler(request: LLMRequest) -> dict[str, Any]:
        entered.set()
        try:
            await never.wait()
        except anyio.get_cancelled_exc_class():
            saw_cancel.append(True)
            raise
        return {"text": "too late"}  # pragma: no cover

    engine, _, _ = make_engine(handler)
    async with engine:
        cid = await engine.create_context()
        turn, sent = await kit.cancel_while_running(engine, cid, "Hi", entered)
        assert turn.stop_reason == StopReason.CANCELLED
        assert turn.state == State.IDLE
        assert list(turn.states) == [PUM, ALR, IDLE]
        assert sent == [turn]
        assert saw_cancel == [True]
        assert await engine.trace(cid) == [IDLE, PUM, ALR, IDLE]
        ctx = await engine.get_context(cid)
        assert [n.message.role for n in ctx.history()] == [Role.USER]


async def test_a_later_call_is_cancelled_as_the_first_was() -> None:
    """The calls after the first make asyncio's scope class directly (the
    first asks anyio which library runs): the cancel reaches them all the same."""
    entered = anyio.Event()
    never = anyio.Event()
    answers = iter([{"text": "first"}])

    async def handler(request: LLMRequest) -> dict[str, Any]:
        for answer in answers:
            return answer
        entered.set()
        await never.wait()
        return {"text": "too late"}  # pragma: no cover

    engine, _, _ = make_engine(handler)
    async with engine:
        cid = await engine.create_context()
        assert (await engine.send(cid, "Hi")).stop_reason == StopReason.COMPLETED
        scope = call_scope()
        assert isinstance(scope, anyio.CancelScope) and not scope.cancel_called
        assert _scope._known is not None and type(scope) is _scope._known[1]
        turn, sent = await kit.cancel_while_running(engine, cid, "Again", entered)
        assert turn.stop_reason == StopReason.CANCELLED and sent == [turn]
        assert await engine.trace(cid) == [IDLE, PUM, ALR, PLR, IDLE, PUM, ALR, IDLE]


async def test_a_call_nobody_waits_for_makes_no_end_to_wait_on() -> None:
    seen: list[tuple[bool, object]] = []
    engine: Any = None
    cid = ""

    async def handler(request: LLMRequest) -> dict[str, Any]:
        rt = engine._d.loaded.get(cid)
        seen.append((rt.running, rt.done))
        return {"text": "hi"}

    engine, _, _ = make_engine(handler)
    async with engine:
        cid = await engine.create_context()
        assert (await engine.send(cid, "Hi")).text == "hi"
        assert seen == [(True, None)]  # running, and no end made for a cancel
        rt = engine._d.loaded.get(cid)
        assert not rt.running and rt.done is None


async def test_a_cancel_while_the_call_gives_up_its_lease_gets_the_turn() -> None:
    """A cancel that comes after the call's ``Turn`` was made, while it gives
    its lease up, waits for the call to leave and returns that turn."""
    releasing = anyio.Event()
    go_on = anyio.Event()

    class SlowRelease(MemoryStore):
        leases_in_commits = False  # the call gives its lease up after its last commit

        async def release_lease(self, lease: Lease) -> None:
            releasing.set()
            await go_on.wait()
            await super().release_lease(lease)

    engine, _, _ = make_engine([{"text": "hi"}], store=SlowRelease())
    async with engine:
        cid = await engine.create_context()
        sent: list[Turn] = []

        async def run() -> None:
            sent.append(await engine.send(cid, "Hi"))

        async def cancel() -> None:
            await releasing.wait()
            go_on.set()  # the cancel below runs before the release goes on
            sent.append(await engine.cancel(cid))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                tg.start_soon(cancel)
        by_send = next(t for t in sent if t.text == "hi")
        assert sent.count(by_send) == 2  # the cancel returned the call's own turn
        assert by_send.stop_reason == StopReason.COMPLETED
        assert await engine.trace(cid) == [IDLE, PUM, ALR, PLR, IDLE]


async def test_cancel_during_backoff() -> None:
    class GatedClock(FakeClock):
        def __init__(self) -> None:
            super().__init__()
            self.sleeping = anyio.Event()

        async def sleep(self, seconds: float) -> None:
            self.sleeps.append(seconds)
            self.sleeping.set()
            await anyio.sleep_forever()

    clock = GatedClock()
    engine, llm, _ = make_engine([{"llm_error": {"status": 503}}, {"text": "never"}], clock=clock)
    async with engine:
        cid = await engine.create_context()
        turn, _sent = await kit.cancel_while_running(engine, cid, "Hi", clock.sleeping)
        assert turn.stop_reason == StopReason.CANCELLED
        assert await engine.trace(cid) == [IDLE, PUM, ALR, TF, IDLE]
        assert len(llm.requests) == 1
        assert (await engine.get_context(cid)).progress.retry_at is None


async def test_cancel_while_tools_run() -> None:
    started = anyio.Event()
    outcome: list[str] = []

    @tool(timeout=None)
    async def slow_job(label: str) -> str:
        """A job that takes forever."""
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            outcome.append(f"{label} cancelled")
            raise
        return "unreachable"  # pragma: no cover

    engine, llm, _ = make_engine(
        [
            {"tool_calls": [call("c1", "slow_job", label="x"), call("c2", "weather", city="y")]},
            {"text": "never asked"},
        ],
        tools=[slow_job, weather],
    )
    async with engine:
        cid = await engine.create_context()
        turn, sent = await kit.cancel_while_running(engine, cid, "start the job", started)
        assert sent == [turn]
        assert turn.stop_reason == StopReason.CANCELLED
        assert await engine.trace(cid) == [IDLE, PUM, ALR, PLR, EXT, IDLE]
        assert outcome == ["x cancelled"]
        assert len(llm.requests) == 1
        ctx = await engine.get_context(cid)
        assert_every_call_answered_once(ctx)
        res = result_of(ctx, "c1")
        assert res.success is False
        assert res.result["status"] == "cancelled"
        assert "outcome is unknown" in res.result["error"]  # it had started
        assert ctx.progress.started_call_ids == ()


async def test_two_contexts_run_concurrently() -> None:
    gates = {"one": anyio.Event(), "two": anyio.Event()}
    entered: list[str] = []

    async def handler(request: LLMRequest) -> dict[str, Any]:
        text = request.messages[-1]["content"]
        entered.append(text)
        if len(entered) == 2:  # both are in flight at once
            gates["one"].set()
            gates["two"].set()
        await gates[text].wait()
        return {"text": f"answer to {text}"}

    engine, _, _ = make_engine(handler)
    async with engine:
        a = await engine.create_context()
        b = await engine.create_context()
        turns: dict[str, Turn] = {}

        async def run(cid: str, text: str) -> None:
            turns[text] = await engine.send(cid, text)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, a, "one")
                tg.start_soon(run, b, "two")
        assert turns["one"].text == "answer to one"
        assert turns["two"].text == "answer to two"
        assert [n.message.text for n in (await engine.get_context(a)).history()] == [
            "one",
            "answer to one",
        ]


async def test_get_context_returns_a_copy() -> None:
    engine, _, _ = make_engine([{"text": "one"}])
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "first")
        copy = await engine.get_context(cid)
        copy.active_branch.message_ids.clear()
        copy.current_state = "PermanentFailure"
        copy.message_pool.clear()
        again = await engine.get_context(cid)
        assert again.current_state == IDLE
        assert len(again.history()) == 2


async def test_thinking_deltas_and_stored_thinking() -> None:
    engine, _, _ = make_engine(
        [{"chunks": ["4", "2"], "thinking": "six times seven", "usage": {"total_tokens": 9}}]
    )
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            await engine.send(cid, "6*7?")
            events = []
            with anyio.fail_after(2):
                async for ev in sub:
                    events.append(ev)
                    if ev.kind == "TurnCompleted":
                        break
        deltas = [(e.channel, e.index, e.delta) for e in events if e.kind == "ContentDelta"]
        assert deltas == [("thinking", 0, "six times seven"), ("text", 1, "4"), ("text", 2, "2")]
        msg = (await engine.get_context(cid)).history()[-1].message
        assert (msg.text, msg.thinking) == ("42", "six times seven")
        assert msg.metadata.usage is not None and msg.metadata.usage.total_tokens == 9


async def test_request_cancel_when_nothing_runs_is_a_no_op() -> None:
    engine, _, _ = make_engine([{"text": "hi"}])
    async with engine:
        cid = await engine.create_context()
        engine.request_cancel(cid)
        turn = await engine.send(cid, "Hi")
        assert turn.stop_reason == StopReason.COMPLETED


# --------------------------------------------------------------------------- supersede, deny


async def test_send_at_approval_supersedes_pending_calls() -> None:
    rec = Recorder()
    engine, llm, _ = make_engine(
        [
            {"tool_calls": [call("c1", "book", city="Oslo"), call("c2", "book", city="Bergen")]},
            {"text": "OK, forgotten."},
        ],
        tools=[rec.make("book", approval="required")],
    )
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "book two")
        turn = await engine.send(cid, "never mind")
        assert list(turn.states) == [PUM, ALR, PLR, IDLE]
        assert await engine.trace(cid) == [IDLE, PUM, ALR, PLR, ATA, PUM, ALR, PLR, IDLE]
        assert turn.text == "OK, forgotten."
        assert rec.runs == []
        ctx = await engine.get_context(cid)
        assert_every_call_answered_once(ctx)
        for c in ("c1", "c2"):
            res = result_of(ctx, c)
            assert res.success is False
            assert res.result["status"] == "superseded"
            assert calls_of(ctx)[c].decided_by == "system"
        roles = [n.message.role for n in ctx.history()]
        assert roles == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL, Role.USER, Role.ASSISTANT]
        # the superseded results are closed before the new message, in call order
        assert [m.get("tool_call_id") for m in llm.requests[1].messages if m["role"] == "tool"] == [
            "c1",
            "c2",
        ]
        assert llm.requests[1].messages[-1] == {"role": "user", "content": "never mind"}


async def test_deny_with_reason() -> None:
    rec = Recorder()
    engine, llm, _ = make_engine(
        [{"tool_calls": [call("c1", "delete_file", city="x")]}, {"text": "Understood."}],
        tools=[rec.make("delete_file", approval="required")],
    )
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "delete it")
        turn = await engine.deny(cid, "c1", "not now")
        assert list(turn.states) == [EXT, ALR, PLR, IDLE]
        assert turn.text == "Understood."
        assert rec.runs == []
        ctx = await engine.get_context(cid)
        res = result_of(ctx, "c1")
        assert res.success is False
        assert "not now" in res.result["error"]
        c = calls_of(ctx)["c1"]
        assert (c.approval_status, c.decided_by, c.reason) == (
            ApprovalStatus.DENIED,
            "human",
            "not now",
        )
        tool_msg = next(m for m in llm.requests[1].messages if m["role"] == "tool")
        assert tool_msg["tool_call_id"] == "c1"
        assert "not now" in tool_msg["content"]


async def test_policy_deny_tool_is_never_run() -> None:
    rec = Recorder()
    engine, _, _ = make_engine(
        [{"tool_calls": [call("c1", "rm_rf")]}, {"text": "I may not."}],
        tools=[rec.make("rm_rf", approval="deny")],
    )
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "wipe it")
        assert trace_of(turn) == [IDLE, PUM, ALR, PLR, EXT, ALR, PLR, IDLE]
        assert rec.runs == []
        ctx = await engine.get_context(cid)
        res = result_of(ctx, "c1")
        assert res.success is False
        assert "denied" in res.result["error"]
        assert calls_of(ctx)["c1"].decided_by == "policy"


async def test_callable_policy_decides_per_call() -> None:
    rec = Recorder()
    seen: list[str] = []

    def only_london(c: Any) -> str:
        seen.append(c.id)
        return "auto" if c.arguments.get("city") == "London" else "required"

    engine, _, _ = make_engine(
        [
            {"tool_calls": [call("c1", "weather", city="London")]},
            {"text": "London done"},
            {"tool_calls": [call("c2", "weather", city="Paris")]},
        ],
        tools=[rec.make("weather", approval=only_london)],
    )
    async with engine:
        cid = await engine.create_context()
        first = await engine.send(cid, "London?")
        assert trace_of(first) == [IDLE, PUM, ALR, PLR, EXT, ALR, PLR, IDLE]
        second = await engine.send(cid, "Paris?")
        assert list(second.states) == [PUM, ALR, PLR, ATA]
        assert [c.id for c in second.pending_tool_calls] == ["c2"]
        assert seen == ["c1", "c2"]
        assert rec.runs == [("weather", {"city": "London"})]


async def test_parallel_calls_with_mixed_approval() -> None:
    rec = Recorder()
    engine, llm, _ = make_engine(
        [
            {
                "tool_calls": [
                    call("c_auto", "lookup", city="a"),
                    call("c_req", "send_mail", city="b"),
                    call("c_deny", "drop_db", city="c"),
                ]
            },
            {"text": "done"},
        ],
        tools=[
            rec.make("lookup"),
            rec.make("send_mail", approval="required"),
            rec.make("drop_db", approval="deny"),
        ],
    )
    async with engine:
        cid = await engine.create_context()
        first = await engine.send(cid, "do three things")
        assert first.state == State.AWAITING_TOOL_APPROVAL
        assert [c.id for c in first.pending_tool_calls] == ["c_req"]
        assert rec.runs == []  # nothing runs while a decision is missing
        ctx = await engine.get_context(cid)
        status = {c.id: c.approval_status for c in calls_of(ctx).values()}
        assert status == {
            "c_auto": ApprovalStatus.APPROVED,
            "c_req": ApprovalStatus.PENDING,
            "c_deny": ApprovalStatus.DENIED,
        }
        second = await engine.approve(cid, "c_req")
        assert list(second.states) == [EXT, ALR, PLR, IDLE]
        assert sorted(rec.names()) == ["lookup", "send_mail"]
        ctx = await engine.get_context(cid)
        assert_every_call_answered_once(ctx)
        order = [n.message.tool_result.request_id for n in ctx.history() if n.message.tool_result]
        assert order == ["c_auto", "c_req", "c_deny"]
        assert [result_of(ctx, c).success for c in order] == [True, True, False]
        sent = [m["tool_call_id"] for m in llm.requests[1].messages if m["role"] == "tool"]
        assert sent == ["c_auto", "c_req", "c_deny"]


# --------------------------------------------------------------------------- tool failures


@tool
def boom() -> str:
    """Always fails."""
    raise ValueError("kaboom")


@tool
def weather(city: str) -> str:
    """Weather for a city."""
    return f"sunny in {city}"


@tool(timeout=0.05)
async def hang() -> str:
    """Never returns."""
    await anyio.sleep_forever()
    return "unreachable"  # pragma: no cover


TOOL_FAILURES = {
    "raises": ({"id": "c1", "name": "boom", "arguments": {}}, "kaboom"),
    "invalid_arguments": (
        {"id": "c1", "name": "weather", "arguments": {"town": "Oslo"}},
        "invalid arguments",
    ),
    "arguments_not_json": (
        {"id": "c1", "name": "weather", "arguments": "{not json"},
        "not a JSON object",
    ),
    "unknown_tool": ({"id": "c1", "name": "no_such_tool", "arguments": {}}, "unknown tool"),
    "timeout": ({"id": "c1", "name": "hang", "arguments": {}}, "timed out"),
}


@pytest.mark.parametrize("case", list(TOOL_FAILURES))
async def test_tool_failures_are_results(case: str) -> None:
    spec, needle = TOOL_FAILURES[case]
    engine, llm, _ = make_engine(
        [{"tool_calls": [spec]}, {"text": "sorry about that"}], tools=[boom, weather, hang]
    )
    async with engine:
        cid = await engine.create_context()
        with anyio.fail_after(5):
            turn = await engine.send(cid, "try it")
        assert trace_of(turn) == [IDLE, PUM, ALR, PLR, EXT, ALR, PLR, IDLE]
        assert turn.state == State.IDLE
        assert turn.stop_reason == StopReason.COMPLETED
        ctx = await engine.get_context(cid)
        assert_every_call_answered_once(ctx)
        res = result_of(ctx, "c1")
        assert res.success is False
        assert needle in res.result["error"]
        tool_msg = next(m for m in llm.requests[1].messages if m["role"] == "tool")
        assert needle in tool_msg["content"]


async def test_failing_and_succeeding_calls_in_one_batch() -> None:
    engine, _, _ = make_engine(
        [
            {
                "tool_calls": [
                    call("c1", "weather", city="Oslo"),
                    call("c2", "boom"),
                    call("c3", "no_such_tool"),
                ]
            },
            {"text": "partly"},
        ],
        tools=[boom, weather],
    )
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "go")
        ctx = await engine.get_context(cid)
        assert_every_call_answered_once(ctx)
        assert [result_of(ctx, c).success for c in ("c1", "c2", "c3")] == [True, False, False]
        assert result_of(ctx, "c1").result == "sunny in Oslo"


# --------------------------------------------------------------------------- branches


async def test_fork_switch_and_branch_history() -> None:
    engine, llm, _ = make_engine([{"text": "A1"}, {"text": "A2"}, {"text": "B2"}, {"text": "A3"}])
    async with engine:
        cid = await engine.create_context(system_prompt="sys")
        await engine.send(cid, "Q1")
        await engine.send(cid, "Q2")
        main_ids = (await engine.get_context(cid)).active_branch.message_ids

        turn = await engine.fork(cid, "alt", 1)
        assert turn.stop_reason == StopReason.BRANCH
        assert turn.states == ()
        ctx = await engine.get_context(cid)
        assert ctx.active_branch_name == "alt"
        assert ctx.active_branch.message_ids == main_ids[:2]
        assert ctx.active_branch.parent_message_id == main_ids[1]
        assert ctx.active_branch.forked_from == "main"

        await engine.send(cid, "Q2 (alt)")
        ctx = await engine.get_context(cid)
        assert [n.message.text for n in ctx.history()] == ["Q1", "A1", "Q2 (alt)", "B2"]
        assert [n.message.text for n in ctx.history("main")] == ["Q1", "A1", "Q2", "A2"]
        # the LLM saw the alt branch only
        assert [m["content"] for m in llm.requests[2].messages] == ["sys", "Q1", "A1", "Q2 (alt)"]

        await engine.switch_branch(cid, "main")
        ctx = await engine.get_context(cid)
        assert ctx.active_branch_name == "main"
        assert ctx.active_branch.message_ids == main_ids
        await engine.send(cid, "Q3")
        assert [m["content"] for m in llm.requests[3].messages] == [
            "sys",
            "Q1",
            "A1",
            "Q2",
            "A2",
            "Q3",
        ]
        ctx = await engine.get_context(cid)
        assert len(ctx.history("alt")) == 4
        assert records.from_json(ChatContext, records.to_json(ctx).decode()) == ctx


async def test_fork_at_minus_one_is_an_empty_branch() -> None:
    engine, llm, _ = make_engine([{"text": "A1"}, {"text": "fresh"}])
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "Q1")
        await engine.fork(cid, "empty", -1)
        ctx = await engine.get_context(cid)
        assert ctx.history() == []
        await engine.send(cid, "hello")
        assert llm.requests[1].messages == [{"role": "user", "content": "hello"}]


async def test_fork_inside_unanswered_tool_batch_is_refused() -> None:
    engine, _, _ = make_engine(
        [
            {"tool_calls": [call("c1", "weather", city="a"), call("c2", "weather", city="b")]},
            {"text": "both sunny"},
        ],
        tools=[weather],
    )
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "weather twice")
        # history: 0 user, 1 assistant(c1, c2), 2 tool(c1), 3 tool(c2), 4 assistant
        before = await engine.get_context(cid)
        for at in (1, 2):
            with pytest.raises(BranchError):
                await engine.fork(cid, f"bad{at}", at)
            assert await engine.get_context(cid) == before
        await engine.fork(cid, "ok", 3)
        ctx = await engine.get_context(cid)
        assert len(ctx.history()) == 4
        assert_every_call_answered_once(ctx)


async def test_branch_changes_refused_at_approval() -> None:
    rec = Recorder()
    engine, _, _ = make_engine(
        [{"tool_calls": [call("c1", "book")]}], tools=[rec.make("book", approval="required")]
    )
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "book")
        before = await engine.get_context(cid)
        with pytest.raises(BranchError):
            await engine.fork(cid, "alt", 0)
        with pytest.raises(BranchError):
            await engine.switch_branch(cid, "main")
        assert await engine.get_context(cid) == before


@pytest.mark.parametrize(
    ("op", "args", "error"),
    [
        ("fork", ("main", 0), BranchError),  # existing name
        ("fork", ("alt", 5), BranchError),  # out of range
        ("fork", ("alt", -2), BranchError),
        ("fork", ("", 0), InvalidInput),  # not a branch name: an argument error
        ("switch_branch", ("nope",), BranchError),
    ],
)
async def test_bad_branch_operations(
    op: str, args: tuple[Any, ...], error: type[Exception]
) -> None:
    engine, _, _ = make_engine([{"text": "A1"}])
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "Q1")
        before = await engine.get_context(cid)
        with pytest.raises(error):
            await getattr(engine, op)(cid, *args)
        after = await engine.get_context(cid)
        assert after == before
        assert after.version == before.version


# --------------------------------------------------------------------------- the request


async def test_request_is_the_from_scratch_build_of_stored_history() -> None:
    engine_box: list[Engine] = []
    checked: list[int] = []
    answers = iter(
        [
            {"tool_calls": [call("c1", "weather", city="Oslo")]},
            {"chunks": ["sunny ", "in Oslo"]},
            {"tool_calls": [call("c2", "boom"), call("c3", "weather", city="Rome")]},
            {"text": "done"},
        ]
    )

    async def handler(request: LLMRequest) -> Any:
        engine = engine_box[0]
        ctx = await engine.get_context(request.context_id)
        expected = [
            {"role": "system", "content": "You are terse."},
            *turnfsm.model.to_chat_messages(n.message for n in ctx.history()),
        ]
        assert request.messages == expected
        assert request.tools == [boom.definition(), weather.definition()]
        assert [t["function"]["name"] for t in request.tools] == ["boom", "weather"]
        assert request.model == "gpt-test"
        assert request.parameters == {"temperature": 0.2}
        checked.append(len(request.messages))
        return next(answers)

    engine, _, _ = make_engine(handler, tools=[boom, weather])
    engine_box.append(engine)
    async with engine:
        cid = await engine.create_context(
            system_prompt="You are terse.", model="gpt-test", parameters={"temperature": 0.2}
        )
        await engine.send(cid, "Weather?")
        await engine.send(cid, "More", role="frontend_operator")
        assert checked == [2, 4, 6, 9]
        ctx = await engine.get_context(cid)
        assert ctx.history()[4].message.role == Role.FRONTEND_OPERATOR


async def test_enhancer_shapes_the_request_but_not_history() -> None:
    class Note:
        def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
            request.messages = [*request.messages, {"role": "system", "content": "be brief"}]
            return request

    engine, llm, _ = make_engine(
        [{"tool_calls": [call("c1", "weather", city="Oslo")]}, {"text": "sunny"}],
        tools=[weather],
        enhancers=[Note()],
    )
    async with engine:
        cid = await engine.create_context(system_prompt="sys")
        await engine.send(cid, "Weather?")
        ctx = await engine.get_context(cid)
        assert all("be brief" not in n.message.text for n in ctx.message_pool.values())
        for request in llm.requests:
            assert [m["content"] for m in request.messages].count("be brief") == 1
            base = turnfsm.model.to_chat_messages(
                n.message for n in ctx.history()[: len(request.messages) - 2]
            )
            assert request.messages == [
                {"role": "system", "content": "sys"},
                *base,
                {"role": "system", "content": "be brief"},
            ]


async def test_tool_history_trimmer_leaves_history_intact() -> None:
    engine, llm, _ = make_engine(
        [
            {"tool_calls": [call("c1", "weather", city="a")]},
            {"tool_calls": [call("c2", "weather", city="b")]},
            {"text": "done"},
        ],
        tools=[weather],
        tool_history_rounds=1,
    )
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "two rounds")
        last = llm.requests[-1].messages
        results = {m["tool_call_id"]: m["content"] for m in last if m["role"] == "tool"}
        assert results["c1"] == "[omitted: result of an earlier weather call]"
        assert not results["c2"].startswith("[omitted")
        assert llm.requests[-1].metadata["tool_history"]["name_only"] == 1
        ctx = await engine.get_context(cid)
        assert len(ctx.history()) == 6
        assert_every_call_answered_once(ctx)


async def test_enhancer_appending_in_place_does_not_leak_into_later_requests() -> None:
    class Reminder:
        def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
            request.messages.append({"role": "system", "content": "be brief"})
            return request

    engine, llm, _ = make_engine(
        [{"tool_calls": [call("c1", "weather", city="Oslo")]}, {"text": "sunny"}],
        tools=[weather],
        enhancers=[Reminder()],
    )
    async with engine:
        cid = await engine.create_context()  # no system prompt
        await engine.send(cid, "Weather?")
        ctx = await engine.get_context(cid)
        second = llm.requests[1].messages
        assert second == [
            *turnfsm.model.to_chat_messages(n.message for n in ctx.history()[:3]),
            {"role": "system", "content": "be brief"},
        ]


# --------------------------------------------------------------------------- what a turn says


async def test_turn_messages_match_stored_messages() -> None:
    engine, _, _ = make_engine(
        [{"tool_calls": [call("c1", "weather", city="Oslo")]}, {"text": "sunny"}],
        tools=[weather],
    )
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Weather?")
        ctx = await engine.get_context(cid)
        stored = [ctx.message_pool[mid].message for mid in turn.message_ids]
        assert list(turn.messages) == stored


async def test_turn_reports_added_messages() -> None:
    engine, _, _ = make_engine([{"text": "one"}, {"text": "two"}])
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "first")
        turn = await engine.send(cid, "second")
        ctx = await engine.get_context(cid)
        assert list(turn.message_ids) == ctx.active_branch.message_ids[2:]
        assert [m.text for m in turn.messages] == ["second", "two"]


# --------------------------------------------------------------------------- JSON round trip


async def test_tool_results_are_stored_as_json_data() -> None:
    import datetime as dt

    @tool
    def when() -> dict[str, Any]:
        """When and where."""
        return {"at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "pair": (1, 2)}

    engine, llm, _ = make_engine(
        [{"tool_calls": [call("c1", "when")]}, {"text": "ok"}], tools=[when]
    )
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "when?")
        ctx = await engine.get_context(cid)
        restored = records.from_json(ChatContext, records.to_json(ctx).decode())
        assert restored == ctx
        # what the LLM was sent is what a reloaded context would send again
        rebuilt = turnfsm.model.to_chat_messages(n.message for n in restored.history()[:3])
        assert llm.requests[1].messages == rebuilt


async def test_context_json_round_trip_after_tools() -> None:
    rec = Recorder()
    engine, _, _ = make_engine(
        [
            {
                "tool_calls": [
                    call("c1", "lookup", city="Oslo"),
                    call("c2", "book", city="Rome"),
                    call("c3", "drop_db"),
                ],
                "thinking": "let me see",
                "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
            },
            {"chunks": ["All ", "done."], "thinking": "summary"},
            {"tool_calls": [call("c4", "book", city="Nice")]},
            {"tool_calls": [call("c5", "missing_tool")]},
            {"text": "ok"},
        ],
        tools=[
            rec.make("lookup"),
            rec.make("book", approval="required"),
            rec.make("drop_db", approval="deny"),
        ],
    )
    async with engine:
        cid = await engine.create_context(system_prompt="sys", user_prompt="be kind")
        await engine.send(cid, "do it")
        await engine.approve(cid, "c2")
        data = base64.b64encode(b"\x00\x01binary").decode()
        await engine.send(
            cid,
            [
                TextPart(text="look at this"),
                ImagePart(url="https://example.com/cat.png", detail="low"),
                FilePart(name="a.bin", data=data),
            ],
        )
        await engine.deny(cid, "c4", "no")
        ctx = await engine.get_context(cid)
        assert ctx.current_state == IDLE
        assert_every_call_answered_once(ctx)
        kinds = Counter(n.message.role for n in ctx.history())
        assert kinds[Role.TOOL] == 5
        restored = records.from_json(ChatContext, records.to_json(ctx).decode())
        assert restored == ctx
        assert records.to_python(restored, mode="python") == records.to_python(ctx, mode="python")
        first_answer = ctx.history()[1].message
        assert first_answer.thinking == "let me see"
        assert first_answer.metadata.usage is not None
        assert first_answer.metadata.usage.total_tokens == 15


async def test_least_recently_used_contexts_are_unloaded_and_load_again() -> None:
    llm = ScriptedLLM(lambda request: {"text": f"{len(request.messages)} messages"})
    async with Engine(llm=llm, max_loaded=2) as engine:
        a, b, c = [await engine.create_context() for _ in range(3)]
        await engine.send(a, "one")
        await engine.send(b, "one")
        await engine.send(a, "two")  # a is now the most recently used
        await engine.send(c, "one")
        assert engine.loaded_contexts == [a, c]
        turn = await engine.send(b, "two")  # b loads again, with its history
        assert turn.text == "3 messages"
        assert engine.loaded_contexts == [c, b]
        assert (await engine.trace(b))[-1] == "Idle"


async def test_the_loaded_contexts_messages_are_bounded_too() -> None:
    """``max_loaded_messages``: the cache holds no more messages than that in
    all (a loaded context's memory grows with its messages), whatever the
    number of contexts; the most recently used stays, however long."""
    llm = ScriptedLLM(lambda request: {"text": f"{len(request.messages)} messages"})
    async with Engine(llm=llm, max_loaded_messages=10) as engine:
        assert engine.max_loaded_messages == 10
        a, b, c = [await engine.create_context() for _ in range(3)]
        for cid in (a, b, c):
            await engine.send(cid, "one")  # 2 messages each
        assert engine.loaded_contexts == [a, b, c]
        await engine.send(a, "two")
        await engine.send(a, "three")  # a: 6 messages, b and c 2 each: 10
        assert engine.loaded_contexts == [b, c, a]
        await engine.send(b, "two")  # 12: c, the least recently used, goes
        assert engine.loaded_contexts == [a, b]
        for i in range(4):
            await engine.send(c, f"again {i}")  # c alone: 10 messages, then more
        assert engine.loaded_contexts == [c]  # the most recent stays, however long
        turn = await engine.send(b, "three")  # b loads again, with its history
        assert turn.text == "5 messages"
        assert engine.loaded_contexts == [b]
        assert engine._d.loaded.messages == 6
