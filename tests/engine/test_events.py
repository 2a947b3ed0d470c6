"""Events (docs/events.md): kinds and order, gap-free ``seq``, deltas, slow subscribers."""

from __future__ import annotations

import functools
from typing import Any, Literal

import anyio
import anyio.lowlevel
import kit
import pytest
import structlog.testing

from turnfsm import (
    ContentDelta,
    Engine,
    Event,
    Failed,
    InvalidInput,
    MemoryStore,
    RetryPolicy,
    StateChanged,
    StoreError,
    Subscription,
    ToolApprovalRequested,
    TurnCompleted,
    ask_user,
    tool,
)
from turnfsm.events import (
    EVENT_ADAPTER,
    EventsMissed,
    MessageCompleted,
    ToolCallsRequested,
    ToolResult,
    event_bytes,
)
from turnfsm.testing import ScriptedLLM

pytestmark = pytest.mark.anyio


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "temp_c": 15}


@tool(approval="required")
def book(city: str) -> str:
    """Book a trip."""
    return f"booked {city}"


STREAMED_TOOL_TURN = [
    {
        "chunks": ["Let me ", "check."],
        "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}}],
    },
    {"chunks": ["It is ", "15 C", "."]},
]


make_engine = functools.partial(kit.make_engine, tools=[get_weather, book])


async def drain(sub: Subscription, *, until: type | None = TurnCompleted) -> list[Event]:
    """Read events until one of type ``until`` (or until nothing more comes)."""
    got: list[Event] = []
    with anyio.fail_after(2):
        async for ev in sub:
            got.append(ev)
            if until is not None and isinstance(ev, until):
                break
    return got


def same_json(events: list[Event]) -> None:
    """``event_bytes`` (each kind's own adapter, remembered) gives the bytes of
    the union's adapter, for every event, the first time and again."""
    for ev in events:
        assert event_bytes(ev) == EVENT_ADAPTER.dump_json(ev), ev.kind
        assert event_bytes(ev) == EVENT_ADAPTER.dump_json(ev), ev.kind


def covered_seqs(events: list[Event]) -> list[int]:
    """The seqs a subscriber saw, with each EventsMissed standing for what it covers."""
    out: list[int] = []
    for ev in events:
        if isinstance(ev, EventsMissed):
            out.extend(range(ev.first_seq, ev.first_seq + ev.count))
        else:
            out.append(ev.seq)
    return out


async def test_streamed_tool_turn_events() -> None:
    engine, _, clock = make_engine(STREAMED_TOOL_TURN)
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "Weather in Oslo?")
            events = await drain(sub)
        kinds = [ev.kind for ev in events]
        assert kinds == [
            "StateChanged",  # -> ProcessingUserMessage
            "StateChanged",  # -> AwaitingLLMResponse
            "StateChanged",  # -> StreamingLLMResponse
            "ContentDelta",
            "ContentDelta",
            "StateChanged",  # -> ProcessingLLMResponse
            "MessageCompleted",
            "ToolCallsRequested",
            "StateChanged",  # -> ExecutingTools
            "ToolResult",
            "StateChanged",  # -> AwaitingLLMResponse
            "StateChanged",  # -> StreamingLLMResponse
            "ContentDelta",
            "ContentDelta",
            "ContentDelta",
            "StateChanged",  # -> ProcessingLLMResponse
            "MessageCompleted",
            "StateChanged",  # -> Idle
            "TurnCompleted",
        ]
        # seq: gap-free and increasing from 1; one context, one clock
        assert [ev.seq for ev in events] == list(range(1, len(events) + 1))
        assert all(ev.context_id == cid for ev in events)
        assert all(ev.timestamp == clock.time() for ev in events)

        # StateChanged: the turn's states, chained from Idle, with declared triggers
        changes = [ev for ev in events if isinstance(ev, StateChanged)]
        assert [c.to_state for c in changes] == list(turn.states)
        assert [c.from_state for c in changes] == ["Idle", *turn.states[:-1]]
        steps = await engine.steps(cid)
        assert [c.trigger for c in changes] == [s.trigger for s in steps]

        # ContentDelta: index counts within one message, from 0; ids are the stored ones
        ctx = await engine.get_context(cid)
        history = ctx.history()
        first_answer, second_answer = history[1], history[3]
        deltas = [ev for ev in events if isinstance(ev, ContentDelta)]
        by_message: dict[str, list[ContentDelta]] = {}
        for d in deltas:
            by_message.setdefault(d.message_id, []).append(d)
        assert list(by_message) == [first_answer.id, second_answer.id]
        for mid, ds in by_message.items():
            assert [d.index for d in ds] == list(range(len(ds)))
            assert all(d.attempt == 1 and d.channel == "text" for d in ds)
            assert "".join(d.delta for d in ds) == ctx.message_pool[mid].message.text
        assert [d.delta for d in by_message[second_answer.id]] == ["It is ", "15 C", "."]

        completed = [ev for ev in events if isinstance(ev, MessageCompleted)]
        assert [c.message_id for c in completed] == [first_answer.id, second_answer.id]
        assert completed[1].message.text == "It is 15 C."
        (requested,) = [ev for ev in events if isinstance(ev, ToolCallsRequested)]
        assert requested.message_id == first_answer.id
        assert [c.id for c in requested.calls] == ["call_1"]
        (result,) = [ev for ev in events if isinstance(ev, ToolResult)]
        assert (result.call_id, result.tool_name, result.success) == ("call_1", "get_weather", True)
        assert result.result == {"city": "Oslo", "temp_c": 15}
        assert result.message_id == history[2].id
        end = events[-1]
        assert isinstance(end, TurnCompleted)
        assert (end.stop_reason, end.state) == ("completed", "Idle")


async def test_events_serialise() -> None:
    engine, _, _ = make_engine(STREAMED_TOOL_TURN)
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            await engine.send(cid, "Weather?")
            events = await drain(sub)
        for ev in events:
            data = EVENT_ADAPTER.dump_python(ev, mode="json")
            assert data["kind"] == ev.kind
            assert EVENT_ADAPTER.validate_python(data) == ev
        same_json(events)


async def test_approval_events() -> None:
    engine, _, _ = make_engine(
        [
            {"tool_calls": [{"id": "c1", "name": "book", "arguments": {"city": "Rome"}}]},
            {"text": "booked"},
        ]
    )
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            await engine.send(cid, "book")
            first = await drain(sub, until=ToolApprovalRequested)
            end_of_first = await drain(sub)
            await engine.approve(cid, "c1")
            second = await drain(sub)
        assert [ev.kind for ev in first][-3:] == [
            "ToolCallsRequested",
            "StateChanged",
            "ToolApprovalRequested",
        ]
        assert first[-2].to_state == "AwaitingToolApproval"  # type: ignore[union-attr]
        approval = first[-1]
        assert isinstance(approval, ToolApprovalRequested)
        assert [c.id for c in approval.calls] == ["c1"]
        # the call that stopped for approval ends its turn with a TurnCompleted
        assert [ev.kind for ev in end_of_first] == ["TurnCompleted"]
        assert end_of_first[0].stop_reason == "awaiting_approval"  # type: ignore[union-attr]
        assert second[0].kind == "StateChanged"
        assert second[0].to_state == "ExecutingTools"  # type: ignore[union-attr]
        assert second[-1].stop_reason == "completed"  # type: ignore[union-attr]
        seqs = [ev.seq for ev in first + end_of_first + second]
        assert seqs == list(range(1, len(seqs) + 1))
        same_json(first + end_of_first + second)


async def test_retry_and_failure_events() -> None:
    engine, _, _ = make_engine(
        [
            {"llm_error": {"status": 429, "retry_after": 0.5}},
            {"chunks": ["par", "tial", "!"], "fail_after": 2, "error": {"kind": "connection"}},
            {"llm_error": {"status": 503}},
        ],
        retry=RetryPolicy(max_attempts=3),
    )
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "Hi")
            events = await drain(sub)
        assert turn.state == "PermanentFailure"
        retrying = [ev for ev in events if ev.kind == "Retrying"]
        first_retry = retrying[0]
        assert (first_retry.attempt, first_retry.delay) == (1, 0.5)  # type: ignore[union-attr]
        assert "429" in retrying[0].error  # type: ignore[union-attr]
        assert len(retrying) == 2
        assert retrying[1].partial_text == "partial"  # type: ignore[union-attr]
        deltas = [ev for ev in events if isinstance(ev, ContentDelta)]
        assert [(d.attempt, d.index, d.delta) for d in deltas] == [(2, 0, "par"), (2, 1, "tial")]
        failed = [ev for ev in events if isinstance(ev, Failed)]
        assert len(failed) == 1
        assert failed[0].state == "PermanentFailure"
        assert "503" in failed[0].error
        assert events[-1].kind == "TurnCompleted"
        assert events[-1].stop_reason == "failed"  # type: ignore[union-attr]
        same_json(
            [*events, EventsMissed(context_id=cid, seq=9, timestamp=1.0, count=2, first_seq=8)]
        )
        assert [ev.seq for ev in events] == list(range(1, len(events) + 1))
        ctx = await engine.get_context(cid)
        assert all("partial" not in n.message.text for n in ctx.message_pool.values())


async def test_seq_continues_across_turns_and_late_subscribers() -> None:
    engine, _, _ = make_engine([{"text": "one"}, {"text": "two"}])
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "first")  # 6 events nobody hears
        async with engine.subscribe(cid) as sub:
            await engine.send(cid, "second")
            events = await drain(sub)
        assert [ev.seq for ev in events] == list(range(7, 13))


async def test_events_nobody_hears_take_the_seqs_a_subscriber_sees() -> None:
    # a tool turn, a rest on an approval and a question, a denial with a
    # question still open, its answer: the seqs each reserves without a
    # subscriber are the events a subscriber gets, one for one
    script = [
        STREAMED_TOOL_TURN[0],
        {"text": "ok"},
        {
            "tool_calls": [
                {"id": "b1", "name": "book", "arguments": {"city": "Rome"}},
                {"id": "b2", "name": "book", "arguments": {"city": "Oslo"}},
                {"id": "q1", "name": "ask_user", "arguments": {"question": "When?"}},
            ]
        },
        {"text": "done"},
    ]

    async def turns(engine: Engine, cid: str) -> None:
        await engine.send(cid, "weather")
        await engine.send(cid, "book")
        await engine.deny(cid, "b1", "no")
        await engine.approve(cid, "b2")
        await engine.answer(cid, "q1", "today")

    quiet, _, _ = make_engine(script, tools=[get_weather, book, ask_user])
    async with quiet:
        cid = await quiet.create_context()
        await turns(quiet, cid)
        stored = (await quiet.get_context(cid)).event_seq
    heard, _, _ = make_engine(script, tools=[get_weather, book, ask_user])
    events: list[Event] = []
    async with heard:
        cid = await heard.create_context()
        with heard.tap(events.append):
            await turns(heard, cid)
        assert (await heard.get_context(cid)).event_seq == stored
    kinds = [ev.kind for ev in events]
    for kind in ("ToolResult", "ToolCallsRequested", "ToolApprovalRequested", "QuestionAsked"):
        assert kind in kinds
    assert [ev.seq for ev in events] == list(range(1, stored + 1))


async def test_two_subscribers_see_the_same_events() -> None:
    engine, _, _ = make_engine([{"chunks": ["a", "b"]}])
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as one, engine.subscribe(cid) as two:
            await engine.send(cid, "Hi")
            assert await drain(one) == await drain(two)


async def test_closed_subscription_gets_nothing_and_engine_goes_on() -> None:
    engine, _, _ = make_engine([{"text": "one"}, {"text": "two"}])
    async with engine:
        cid = await engine.create_context()
        sub = engine.subscribe(cid)
        await sub.aclose()
        await engine.send(cid, "first")
        assert [ev async for ev in sub] == []
        turn = await engine.send(cid, "second")
        assert turn.text == "two"


async def test_engine_close_ends_subscriptions() -> None:
    engine, _, _ = make_engine([{"text": "one"}])
    cid = await engine.create_context()
    sub = engine.subscribe(cid)
    await engine.send(cid, "first")
    await engine.aclose()
    with anyio.fail_after(2):
        events = [ev async for ev in sub]
    assert events[-1].kind == "TurnCompleted"
    await sub.aclose()


# --------------------------------------------------------------------------- taps


async def test_a_tap_sees_every_contexts_events_as_they_go_out() -> None:
    engine, _, _ = make_engine([*STREAMED_TOOL_TURN, {"text": "two"}, {"text": "three"}])
    tapped: list[Event] = []
    async with engine:
        one, two = await engine.create_context(), await engine.create_context()
        async with engine.subscribe(one) as sub:
            with engine.tap(tapped.append):
                await engine.send(one, "Weather?")
                subscribed = await drain(sub)
                await engine.send(two, "Hi")
            await engine.send(two, "after the tap")  # the tap is closed: not seen
    assert [ev for ev in tapped if ev.context_id == one] == subscribed
    mine = [ev for ev in tapped if ev.context_id == two]
    assert [ev.seq for ev in mine] == list(range(1, len(mine) + 1))
    assert mine[-1].kind == "TurnCompleted"
    assert {ev.context_id for ev in tapped} == {one, two}


async def test_a_failing_tap_is_logged_and_nobody_else_loses_an_event() -> None:
    # the engine's own logger: here the application's structlog, captured
    engine, _, _ = make_engine([{"chunks": ["a", "b"]}], logger=structlog.get_logger())
    calls: list[int] = []

    def broken(ev: Event) -> None:
        calls.append(ev.seq)
        raise RuntimeError("tap broke")

    async with engine:
        cid = await engine.create_context()
        with structlog.testing.capture_logs() as logs, engine.tap(broken):
            async with engine.subscribe(cid) as sub:
                turn = await engine.send(cid, "Hi")
                got = await drain(sub)
    assert turn.text == "ab"
    assert calls == [ev.seq for ev in got]
    failed = [entry for entry in logs if entry["event"] == "event_tap_failed"]
    assert [entry["seq"] for entry in failed] == calls
    assert failed[0]["context_id"] == cid


async def test_a_tap_that_returns_true_lets_a_waiting_task_run_before_the_turn_goes_on() -> None:
    engine, _, _ = make_engine([{"text": "one"}, {"text": "two"}])
    seen: list[str] = []
    first_step = anyio.Event()
    observed: list[list[str]] = []

    def tap(ev: Event) -> bool:
        seen.append(ev.kind)
        if ev.kind == "StateChanged" and not first_step.is_set():
            first_step.set()
            return True  # a task waits for this event
        return False

    async def waiter() -> None:
        await first_step.wait()
        observed.append(list(seen))

    async with engine:
        cid = await engine.create_context()
        with engine.tap(tap):
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.lowlevel.checkpoint()  # the waiter is waiting
                await engine.send(cid, "first")
    # the waiter ran at the first step, before the rest of the turn went out
    assert observed == [["StateChanged"]]
    assert seen[-1] == "TurnCompleted"


async def test_a_tap_must_be_callable() -> None:
    engine, _, _ = make_engine([])
    async with engine:
        with pytest.raises(InvalidInput, match="fn"):
            engine.tap("not a function")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- slow subscribers


async def test_slow_subscriber_does_not_block_the_engine() -> None:
    engine, _, _ = make_engine(STREAMED_TOOL_TURN, subscriber_buffer=2)
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as slow, engine.subscribe(cid):
            with anyio.fail_after(2):
                turn = await engine.send(cid, "Weather?")
            assert turn.state == "Idle"
            got = [await slow.__anext__(), await slow.__anext__()]
        assert [ev.seq for ev in got] == [1, 2]


async def test_slow_subscriber_is_told_what_it_missed_on_the_next_event() -> None:
    engine, _, _ = make_engine([{"text": "one"}, {"text": "two"}], subscriber_buffer=2)
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as slow:
            await engine.send(cid, "first")  # 6 events; the buffer holds 2
            seen = [await slow.__anext__(), await slow.__anext__()]
            await engine.send(cid, "second")  # room again: the note comes first
            seen += [await slow.__anext__(), await slow.__anext__()]
        assert [ev.kind for ev in seen] == [
            "StateChanged",
            "StateChanged",
            "EventsMissed",
            "StateChanged",
        ]
        missed = seen[2]
        assert isinstance(missed, EventsMissed)
        assert (missed.first_seq, missed.count) == (3, 4)
        assert seen[3].seq == 7
        assert covered_seqs(seen) == list(range(1, 8))


async def test_slow_subscriber_gets_events_missed_after_the_turn() -> None:
    engine, _, _ = make_engine(STREAMED_TOOL_TURN, subscriber_buffer=2)
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as slow:
            turn = await engine.send(cid, "Weather?")  # never read during the turn
            assert turn.state == "Idle"
            seen: list[Event] = []
            with anyio.fail_after(0.5):
                for _ in range(3):
                    seen.append(await slow.__anext__())
        total = 19  # events of this turn (see test_streamed_tool_turn_events)
        assert [ev.seq for ev in seen[:2]] == [1, 2]
        missed = seen[2]
        assert isinstance(missed, EventsMissed)
        assert (missed.first_seq, missed.count) == (3, total - 2)
        assert covered_seqs(seen) == list(range(1, total + 1))


# --------------------------------------------------------------------------- seq across reloads


async def test_seq_is_not_reused_after_reload() -> None:
    engine, _, _ = make_engine([{"text": "one"}, {"text": "two"}])
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            await engine.send(cid, "first")
            first = await drain(sub)
            await engine.unload(cid)  # the next call loads it from the store
            await engine.send(cid, "second")
            second = await drain(sub)
        seqs = [ev.seq for ev in first + second]
        assert seqs == list(range(1, len(seqs) + 1))


# --------------------------------------------------------------------------- durability order


class FailOnToolResults(MemoryStore):
    """A store that cannot write the commit carrying tool results."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = True

    async def commit(self, commit: Any) -> None:
        if self.failing and any(n.message.tool_result is not None for _, n in commit.appended):
            raise StoreError("disk full")
        await super().commit(commit)


async def test_store_error_propagates_and_context_stays_committed() -> None:
    store = FailOnToolResults()
    engine, _, _ = make_engine(
        [
            {"tool_calls": [{"id": "c1", "name": "get_weather", "arguments": {"city": "a"}}]},
            {"text": "done"},
        ],
        store=store,
    )
    async with engine:
        cid = await engine.create_context()
        with pytest.raises(StoreError):
            await engine.send(cid, "go")
        ctx = await engine.get_context(cid)
        assert ctx.current_state == "ExecutingTools"
        assert ctx.progress.started_call_ids == ("c1",)
        assert all(n.message.tool_result is None for n in ctx.message_pool.values())


async def test_tool_result_event_only_after_its_message_is_durable() -> None:
    store = FailOnToolResults()
    engine, _, _ = make_engine(
        [{"tool_calls": [{"id": "c1", "name": "get_weather", "arguments": {"city": "a"}}]}],
        store=store,
    )
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            with pytest.raises(StoreError):
                await engine.send(cid, "go")
            events: list[Event] = []
            with anyio.move_on_after(0.2):
                async for ev in sub:
                    events.append(ev)
        stored = (await engine.get_context(cid)).message_pool
        announced = [ev.message_id for ev in events if isinstance(ev, ToolResult)]
        assert all(mid in stored for mid in announced), announced


class FailOnAnswer(MemoryStore):
    """A store that cannot write the commit carrying the assistant's answer."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = True

    async def commit(self, commit: Any) -> None:
        if self.failing and any(n.message.role == "assistant" for _, n in commit.appended):
            raise StoreError("disk full")
        await super().commit(commit)


async def test_seq_is_not_reused_after_a_failed_commit_mid_stream() -> None:
    store = FailOnAnswer()
    engine, _, _ = make_engine(
        [{"chunks": ["a", "b"]}, {"text": "after resume"}],
        store=store,
    )
    async with engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            with pytest.raises(StoreError):
                await engine.send(cid, "go")
            assert (await engine.get_context(cid)).current_state == "StreamingLLMResponse"
            store.failing = False
            turn = await engine.resume(cid)
            assert turn.state == "Idle"
            events = await drain(sub)
        assert [ev.kind for ev in events][3:5] == ["ContentDelta", "ContentDelta"]
        seqs = [ev.seq for ev in events]
        assert seqs == list(range(1, len(seqs) + 1)), seqs


# --------------------------------------------------------------------------- keeping up


async def test_subscriber_on_the_same_loop_gets_every_delta_of_instant_streams() -> None:
    """A subscriber task that reads as events come receives all of them, even
    when the model answers at once (docs/events.md: ``EventsMissed`` is only for
    a subscriber that really falls behind)."""
    turns, chunks = 50, 100
    llm = ScriptedLLM([{"chunks": ["abcd"] * chunks} for _ in range(turns)])
    async with Engine(llm=llm) as engine:
        cid = await engine.create_context()
        deltas = 0
        missed: list[EventsMissed] = []
        completed = 0
        async with engine.subscribe(cid) as events, anyio.create_task_group() as tg:

            async def read() -> None:
                nonlocal deltas, completed
                async for ev in events:
                    if isinstance(ev, ContentDelta):
                        deltas += 1
                    elif isinstance(ev, EventsMissed):
                        missed.append(ev)
                    elif isinstance(ev, TurnCompleted):
                        completed += 1
                        if completed == turns:
                            break
                done.set()

            done = anyio.Event()
            tg.start_soon(read)
            await anyio.lowlevel.checkpoint()  # the reader waits before the first turn
            with anyio.fail_after(20):
                for i in range(turns):
                    turn = await engine.send(cid, f"turn {i}")
                    assert turn.state == "Idle"
            with anyio.move_on_after(2):
                await done.wait()
            tg.cancel_scope.cancel()
    assert missed == []
    assert deltas == turns * chunks


def test_a_streamed_delta_is_built_with_every_field_the_class_builds() -> None:
    from dataclasses import fields

    from turnfsm.engine._call_llm import _content_delta

    channels: tuple[Literal["text", "thinking"], ...] = ("text", "thinking")
    for channel in channels:
        made = _content_delta("c", 7, 1.5, "m", "abcd", 3, 2, channel)
        expected = ContentDelta(
            context_id="c",
            seq=7,
            timestamp=1.5,
            message_id="m",
            delta="abcd",
            index=3,
            attempt=2,
            channel=channel,
        )
        assert type(made) is ContentDelta
        # every slot is set (a field left out would raise AttributeError here)
        assert [getattr(made, f.name) for f in fields(ContentDelta)] == [
            getattr(expected, f.name) for f in fields(ContentDelta)
        ]
        assert made == expected and event_bytes(made) == event_bytes(expected)
