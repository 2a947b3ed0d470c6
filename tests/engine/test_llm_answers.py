"""Whatever an LLM adapter answers ends in a declared state, and what is stored loads.

Each case goes through the public API: the trace the store recorded, the
typed failure (``Turn.error`` and the ``Failed`` event), an audit that tells
the truth about who decided each tool call, and then a fresh engine on the
same SQLite file that loads the context and continues it (retry, approve, a
new message).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from canonical import ALR, ATA, EXT, IDLE, PF, PLR, PUM, SLR, TF, assert_recorded

from turnfsm import (
    ApprovalStatus,
    ContentDelta,
    Engine,
    Failed,
    State,
    ToolCallRequest,
    Turn,
    records,
    tool,
)
from turnfsm.adapters.llm import LLMRequest, LLMResponse, TextDelta, ThinkingDelta, ToolCallData
from turnfsm.errors import PermanentLLMError, ToolCallNotPending, TransientLLMError
from turnfsm.events import EVENT_ADAPTER, ToolCallsRequested
from turnfsm.model import MAX_JSON_DEPTH, ChatContext
from turnfsm.storage import SQLiteStore
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

pytestmark = pytest.mark.anyio

RUNS: list[tuple[str, Any]] = []


@tool
def lookup(city: str) -> str:
    """Look a city up (runs without asking)."""
    RUNS.append(("lookup", city))
    return f"found {city}"


@tool(approval="required")
def book(city: str) -> str:
    """Book a trip (a human approves each call)."""
    RUNS.append(("book", city))
    return f"booked {city}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    RUNS.clear()


def engine_on(path: Path, llm: Any, prefix: str = "a-") -> Engine:
    return Engine(
        llm=llm,
        tools=[lookup, book],
        store=SQLiteStore(path),
        clock=FakeClock(),
        ids=SequentialIds(prefix),
    )


def calls_of(ctx: ChatContext) -> list[ToolCallRequest]:
    return [c for n in ctx.history() for c in n.message.tool_calls or ()]


def results_of(ctx: ChatContext) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for n in ctx.history():
        r = n.message.tool_result
        if r is not None:
            out.setdefault(r.request_id, []).append(r)
    return out


def assert_every_call_answered_once(ctx: ChatContext) -> None:
    results = results_of(ctx)
    ids = [c.id for c in calls_of(ctx)]
    assert len(ids) == len(set(ids)), ids
    assert sorted(results) == sorted(ids)
    assert all(len(v) == 1 for v in results.values()), results


def assert_chat_pairs_ids(request: LLMRequest) -> None:
    """Every tool message answers a call id the request's assistant messages carry."""
    asked = [c["id"] for m in request.messages for c in m.get("tool_calls") or ()]
    answered = [m["tool_call_id"] for m in request.messages if m["role"] == "tool"]
    assert len(asked) == len(set(asked))
    assert sorted(asked) == sorted(answered)


def assert_events_serialise(events: list[Any]) -> None:
    for e in events:
        EVENT_ADAPTER.dump_json(e)


def answer(*calls: tuple[Any, Any, Any], text: str = "") -> LLMResponse:
    return LLMResponse(
        text=text,
        tool_calls=tuple(ToolCallData(i, n, a) for i, n, a in calls),
        finish_reason="tool_calls",
    )


# ------------------------------------------------------------------ tool call ids


async def test_duplicate_ids_in_one_answer_are_renamed_and_each_call_decided_alone(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    llm = ScriptedLLM(
        [
            {
                "tool_calls": [
                    {"id": "d1", "name": "lookup", "arguments": {"city": "Oslo"}},
                    {"id": "d1", "name": "book", "arguments": {"city": "Rome"}},
                ]
            }
        ]
    )
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "look up Oslo, book Rome")
            events = sub.drain()
        assert turn.state == State.AWAITING_TOOL_APPROVAL
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PLR, ATA])
        assert [c.id for c in turn.pending_tool_calls] == ["d1-2"]
        ctx = await engine.get_context(cid)
        first, second = calls_of(ctx)
        assert (first.id, first.provider_id, first.tool_name) == ("d1", None, "lookup")
        assert (first.approval_status, first.decided_by) == (ApprovalStatus.APPROVED, "policy")
        assert (second.id, second.provider_id, second.tool_name) == ("d1-2", "d1", "book")
        # the call that needs approval is not recorded as approved by policy
        assert (second.approval_status, second.decided_by) == (ApprovalStatus.PENDING, None)
        note = ctx.history()[-1].message.metadata.extra["conversions"]
        assert note == ["tool_calls[1].id: the id 'd1' was already used; the call is 'd1-2'"]
        (requested,) = [e for e in events if isinstance(e, ToolCallsRequested)]
        assert [c.id for c in requested.calls] == ["d1", "d1-2"]
        # a kept id leaves the stored JSON as it was
        assert "provider_id" not in records.to_json(first).decode()
        assert '"provider_id":"d1"' in records.to_json(second).decode()
        assert RUNS == []

    llm2 = ScriptedLLM([{"text": "done"}])
    async with engine_on(db, llm2, "b-") as engine:
        with pytest.raises(ToolCallNotPending):
            await engine.approve(cid, "d1")
        turn = await engine.approve(cid, "d1-2")
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PLR, ATA, EXT, ALR, PLR, IDLE])
        assert sorted(RUNS) == [("book", "Rome"), ("lookup", "Oslo")]
        ctx = await engine.get_context(cid)
        assert_every_call_answered_once(ctx)
        assert calls_of(ctx)[1].decided_by == "human"
        assert_chat_pairs_ids(llm2.requests[0])


async def test_an_id_reused_from_history_is_renamed_so_approve_is_not_ambiguous(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    llm = ScriptedLLM(
        [
            {"tool_calls": [{"id": "call_0", "name": "lookup", "arguments": {"city": "Oslo"}}]},
            {"text": "Oslo found"},
            {"tool_calls": [{"id": "call_0", "name": "book", "arguments": {"city": "Rome"}}]},
        ]
    )
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "look up Oslo")
        assert turn.state == State.IDLE
        turn = await engine.send(cid, "book Rome")
        assert turn.state == State.AWAITING_TOOL_APPROVAL
        assert [c.id for c in turn.pending_tool_calls] == ["call_0-2"]
        assert turn.pending_tool_calls[0].provider_id == "call_0"
        # the old call_0 is answered; the new one is addressed by its own id
        with pytest.raises(ToolCallNotPending):
            await engine.approve(cid, "call_0")

    llm2 = ScriptedLLM(
        [
            {"text": "booked"},
            {"tool_calls": [{"id": "call_0", "name": "lookup", "arguments": {"city": "Bern"}}]},
            {"text": "Bern found"},
        ]
    )
    async with engine_on(db, llm2, "b-") as engine:
        turn = await engine.approve(cid, "call_0-2")
        assert turn.state == State.IDLE
        turn = await engine.send(cid, "and Bern")
        assert turn.state == State.IDLE
        ctx = await engine.get_context(cid)
        assert [c.id for c in calls_of(ctx)] == ["call_0", "call_0-2", "call_0-3"]
        assert [c.provider_id for c in calls_of(ctx)] == [None, "call_0", "call_0"]
        assert_every_call_answered_once(ctx)
        assert_chat_pairs_ids(llm2.requests[-1])
        assert RUNS == [("lookup", "Oslo"), ("book", "Rome"), ("lookup", "Bern")]


async def test_missing_and_empty_ids_get_ids_that_are_free(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    llm = ScriptedLLM(
        [
            answer(
                (None, "lookup", {"city": "Oslo"}),
                ("", "lookup", {"city": "Rome"}),
                ("call_1", "lookup", {"city": "Bern"}),
            ),
            {"text": "found three"},
        ]
    )
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "three cities")
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PLR, EXT, ALR, PLR, IDLE])
    async with engine_on(db, ScriptedLLM([{"text": "hi"}]), "b-") as engine:
        ctx = await engine.get_context(cid)
        calls = calls_of(ctx)
        assert [c.id for c in calls] == ["call_1", "call_2", "call_1-2"]
        assert [c.provider_id for c in calls] == ["", "", "call_1"]
        assert_every_call_answered_once(ctx)
        assert sorted(RUNS) == [("lookup", "Bern"), ("lookup", "Oslo"), ("lookup", "Rome")]
        assert (await engine.send(cid, "thanks")).state == State.IDLE


# ------------------------------------------------------------------ malformed answers

BAD_ANSWERS: dict[str, tuple[LLMResponse, str]] = {
    "usage_field_wrong": (LLMResponse(text="hi", usage={"prompt_tokens": "many"}), "usage."),
    "usage_not_a_dict": (LLMResponse(text="hi", usage=[1, 2]), "usage is a list"),  # type: ignore[arg-type]
    "finish_reason_int": (LLMResponse(text="hi", finish_reason=123), "finish_reason is a int"),  # type: ignore[arg-type]
    "tool_name_none": (answer(("c1", None, {})), "tool_calls[0].name is a None"),
    "text_not_str": (LLMResponse(text=b"hi"), "text is a bytes"),  # type: ignore[arg-type]
    "text_none": (LLMResponse(text=None), "text is a None"),  # type: ignore[arg-type]
    "thinking_int": (LLMResponse(text="hi", thinking=5), "thinking is a int"),  # type: ignore[arg-type]
    "model_int": (LLMResponse(text="hi", model=7), "model is a int"),  # type: ignore[arg-type]
    "tool_calls_str": (LLMResponse(tool_calls="abc"), "tool_calls is a str"),  # type: ignore[arg-type]
    "tool_call_dict": (
        LLMResponse(tool_calls=({"id": "c1", "name": "lookup"},)),  # type: ignore[arg-type]
        "tool_calls[0] is a dict",
    ),
    "tool_call_id_int": (answer((5, "lookup", {})), "tool_calls[0].id is a int"),
    "usage_nan_key": (
        LLMResponse(text="hi", usage={("a",): 1}),  # type: ignore[dict-item]
        "is not a string",
    ),
}


async def continue_after_failure(db: Path, cid: str, before: list[str]) -> None:
    """A fresh engine loads the failed context, retries it, and the retry is kept."""
    llm = ScriptedLLM([{"text": "fixed"}, {"text": "again"}])
    async with engine_on(db, llm, "b-") as engine:
        ctx = await engine.get_context(cid)
        assert ctx.current_state == PF
        assert [n.message.role for n in ctx.history()] == ["user"]  # no failed attempt stored
        turn = await engine.retry(cid)
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [*before, ALR, PLR, IDLE])
        assert turn.messages[-1].text == "fixed"
        assert (await engine.send(cid, "more")).state == State.IDLE


@pytest.mark.parametrize("case", list(BAD_ANSWERS))
async def test_an_answer_of_the_wrong_shape_is_a_permanent_failure(
    tmp_path: Path, case: str
) -> None:
    response, needle = BAD_ANSWERS[case]
    db = tmp_path / "c.db"
    async with engine_on(db, ScriptedLLM([response])) as engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "hi")
            events = sub.drain()
        assert turn.state == State.PERMANENT_FAILURE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PF])
        assert turn.error is not None
        assert turn.error.startswith("invalid_answer: ")
        assert needle in turn.error
        (failed,) = [e for e in events if isinstance(e, Failed)]
        assert failed.error == turn.error
        assert failed.state == PF
        assert_events_serialise(events)
    await continue_after_failure(db, cid, [IDLE, PUM, ALR, PF])


class Adapter:
    """An adapter whose ``stream`` is given by the test."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.calls = 0

    def stream(self, request: LLMRequest) -> Any:
        self.calls += 1
        return self._stream(request)


class Boom(Exception):
    pass


async def raises_at_once(request: LLMRequest) -> AsyncIterator[Any]:
    raise Boom("no socket")
    yield  # pragma: no cover


async def raises_after_text(request: LLMRequest) -> AsyncIterator[Any]:
    yield TextDelta("Hel")
    yield TextDelta("lo")
    raise KeyError("choices")


def raises_when_called(request: LLMRequest) -> Any:
    raise TypeError("stream() missing 1 required positional argument")


async def returns_instead_of_yielding(request: LLMRequest) -> Any:
    return LLMResponse(text="hi")


def returns_a_list(request: LLMRequest) -> Any:
    return [LLMResponse(text="hi")]


def returns_a_sync_generator(request: LLMRequest) -> Iterator[Any]:
    yield LLMResponse(text="hi")


async def yields_a_dict(request: LLMRequest) -> AsyncIterator[Any]:
    yield {"text": "hi"}


async def yields_text_then_a_str(request: LLMRequest) -> AsyncIterator[Any]:
    yield TextDelta("Hel")
    yield "lo"


async def yields_bad_delta(request: LLMRequest) -> AsyncIterator[Any]:
    yield TextDelta(5)  # type: ignore[arg-type]


async def yields_no_response(request: LLMRequest) -> AsyncIterator[Any]:
    yield TextDelta("Hel")


async def yields_none(request: LLMRequest) -> AsyncIterator[Any]:
    yield None


ADAPTER_FAILURES: dict[str, tuple[Any, list[str], str, str]] = {
    # stream, trace, error, partial text reported
    "raises": (
        raises_at_once,
        [IDLE, PUM, ALR, PF],
        "adapter_error: the LLM adapter raised Boom: no socket",
        "",
    ),
    "raises_mid_stream": (
        raises_after_text,
        [IDLE, PUM, ALR, SLR, PF],
        "adapter_error: the LLM adapter raised KeyError: 'choices'",
        "Hello",
    ),
    "raises_when_called": (
        raises_when_called,
        [IDLE, PUM, ALR, PF],
        "adapter_error: the LLM adapter raised TypeError: stream() missing",
        "",
    ),
    "coroutine": (returns_instead_of_yielding, [IDLE, PUM, ALR, PF], "returned a coroutine", ""),
    "list": (returns_a_list, [IDLE, PUM, ALR, PF], "returned a list, not an async iterator", ""),
    "sync_generator": (
        returns_a_sync_generator,
        [IDLE, PUM, ALR, PF],
        "returned a generator, not an async iterator",
        "",
    ),
    "unknown_chunk": (yields_a_dict, [IDLE, PUM, ALR, PF], "yielded a dict", ""),
    "unknown_chunk_mid_stream": (
        yields_text_then_a_str,
        [IDLE, PUM, ALR, SLR, PF],
        "yielded a str",
        "Hel",
    ),
    "none_chunk": (yields_none, [IDLE, PUM, ALR, PF], "yielded a NoneType", ""),
    "delta_text_int": (yields_bad_delta, [IDLE, PUM, ALR, PF], "TextDelta's text is a int", ""),
    "no_response": (
        yields_no_response,
        [IDLE, PUM, ALR, SLR, PF],
        "the stream ended without a response",
        "Hel",
    ),
}


@pytest.mark.parametrize("case", list(ADAPTER_FAILURES))
async def test_whatever_an_adapter_does_wrong_is_a_failed_call(tmp_path: Path, case: str) -> None:
    stream, trace, needle, partial = ADAPTER_FAILURES[case]
    db = tmp_path / "c.db"
    adapter = Adapter(stream)
    async with engine_on(db, adapter) as engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "hi")
            events = sub.drain()
        assert turn.state == State.PERMANENT_FAILURE
        await assert_recorded(engine, cid, trace)
        assert turn.error is not None
        assert needle in turn.error
        kind = "adapter_error" if "raise" in case else "invalid_answer"
        assert turn.error.startswith(f"{kind}: ")
        (failed,) = [e for e in events if isinstance(e, Failed)]
        assert failed.error == turn.error
        assert failed.partial_text == partial
        assert adapter.calls == 1  # a bug is not retried
        ctx = await engine.get_context(cid)
        assert [n.message.role for n in ctx.history()] == ["user"]  # partial text not stored
        # resume has nothing to repeat: the context rests
        again = await engine.resume(cid)
        assert again.states == ()
        assert adapter.calls == 1
    await continue_after_failure(db, cid, trace)


class PlainIterator:
    """An async iterator that is not a generator: no ``aclose``."""

    def __init__(self, chunks: list[Any]) -> None:
        self._chunks = iter(chunks)

    def __aiter__(self) -> PlainIterator:
        return self

    async def __anext__(self) -> Any:
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None


async def test_an_async_iterator_without_aclose_is_a_good_adapter(tmp_path: Path) -> None:
    adapter = Adapter(lambda r: PlainIterator([TextDelta("Hi"), LLMResponse(text="Hi")]))
    async with engine_on(tmp_path / "c.db", adapter) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "hi")
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, SLR, PLR, IDLE])
        assert turn.messages[-1].text == "Hi"


class Interrupt(BaseException):
    """Stands for KeyboardInterrupt / SystemExit: not the adapter's failure to report."""


async def test_a_base_exception_propagates_and_the_context_resumes(tmp_path: Path) -> None:
    db = tmp_path / "c.db"

    async def interrupted(request: LLMRequest) -> AsyncIterator[Any]:
        raise Interrupt
        yield  # pragma: no cover

    async with engine_on(db, Adapter(interrupted)) as engine:
        cid = await engine.create_context()
        with pytest.raises(Interrupt):
            await engine.send(cid, "hi")
        assert (await engine.get_context(cid)).current_state == ALR
    async with engine_on(db, ScriptedLLM([{"text": "back"}]), "b-") as engine:
        turn = await engine.resume(cid)
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PLR, IDLE])


async def test_an_llm_error_with_unusable_fields_still_takes_its_edge(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    errors = [
        TransientLLMError("slow\ud800down", retry_after=float("nan"), partial_text="x\udfff"),
        TransientLLMError("again", retry_after="soon"),  # type: ignore[arg-type]
    ]

    async def failing(request: LLMRequest) -> AsyncIterator[Any]:
        raise errors[request.attempt - 1]
        yield  # pragma: no cover

    async def then_ok(request: LLMRequest) -> AsyncIterator[Any]:
        if request.attempt <= len(errors):
            async for c in failing(request):
                yield c  # pragma: no cover
        yield LLMResponse(text="ok")

    async with engine_on(db, Adapter(then_ok)) as engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "hi")
            events = sub.drain()
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, TF, ALR, TF, ALR, PLR, IDLE])
        assert_events_serialise(events)
        retrying = [e for e in events if type(e).__name__ == "Retrying"]
        assert [e.error for e in retrying] == ["slow\ufffddown", "again"]
        assert retrying[0].partial_text == "x\ufffd"
    async with engine_on(db, ScriptedLLM([{"text": "more"}]), "b-") as engine:
        assert (await engine.send(cid, "more")).state == State.IDLE


async def test_a_permanent_llm_error_keeps_its_message_cleaned(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    llm = ScriptedLLM(lambda r: (_ for _ in ()).throw(PermanentLLMError("bad \ud800 key")))
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "hi")
        assert turn.state == State.PERMANENT_FAILURE
        assert turn.error == "bad \ufffd key"
    await continue_after_failure(db, cid, [IDLE, PUM, ALR, PF])


# ------------------------------------------------------------------ text and arguments


async def test_lone_surrogates_from_the_model_are_replaced_and_noted(tmp_path: Path) -> None:
    db = tmp_path / "c.db"

    async def stream(request: LLMRequest) -> AsyncIterator[Any]:
        if request.iteration > 1:
            yield LLMResponse(text="done")
            return
        yield ThinkingDelta("hm\ud800")
        yield TextDelta("He\ud83d")
        yield TextDelta("llo")
        yield LLMResponse(
            text="He\ud83dllo",
            tool_calls=(
                ToolCallData("c\udc01", "look\udfffup", {}),
                ToolCallData("c2", "lookup", {"city": "Os\ud800lo"}),
                ToolCallData("c3", "lookup", '{"city": "R\udc00'),
                ToolCallData("c4", "nope", {"n": float("nan")}),
            ),
            model="m\ud800",
            finish_reason="tool_calls",
        )

    async with engine_on(db, Adapter(stream)) as engine:
        cid = await engine.create_context()
        async with engine.subscribe(cid) as sub:
            turn = await engine.send(cid, "hi")
            events = sub.drain()
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, SLR, PLR, EXT, ALR, PLR, IDLE])
        assert_events_serialise(events)
        deltas = [e.delta for e in events if isinstance(e, ContentDelta)]
        assert deltas == ["hm\ufffd", "He\ufffd", "llo"]
        assert RUNS == [("lookup", "Os\ufffdlo")]

    async with engine_on(db, ScriptedLLM([{"text": "ok"}]), "b-") as engine:
        ctx = await engine.get_context(cid)
        msg = ctx.history()[1].message
        assert msg.text == "He\ufffdllo"
        assert msg.thinking == "hm\ufffd"
        assert msg.metadata.model == "m\ufffd"
        c1, c2, c3, c4 = msg.tool_calls or []
        assert (c1.id, c1.tool_name, c1.provider_id) == ("c\ufffd", "look\ufffdup", None)
        assert c2.arguments == {"city": "Os\ufffdlo"}
        assert c4.arguments == {"n": "NaN"}
        assert c3.raw_arguments == '{"city": "R\ufffd'
        notes = msg.metadata.extra["conversions"]
        assert "text: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert "thinking: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert "model: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert "tool_calls[0].id: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert "tool_calls[0].name: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert "tool_calls[1].arguments.city: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert any(n.startswith("tool_calls[3].arguments.n: NaN") for n in notes)
        assert "tool_calls[2].arguments: 1 lone surrogate(s) replaced by U+FFFD" in notes
        assert_every_call_answered_once(ctx)
        results = results_of(ctx)
        assert "unknown tool" in results["c\ufffd"][0].result["error"]
        assert results["c2"][0].success is True
        assert "not a JSON object" in results["c3"][0].result["error"]
        assert (await engine.send(cid, "more")).state == State.IDLE


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


class NoJSON:
    def __repr__(self) -> str:
        return "<NoJSON>"


BAD_ARGUMENTS: dict[str, tuple[Any, str]] = {
    "too_deep": (nested(MAX_JSON_DEPTH + 6), f"nested deeper than {MAX_JSON_DEPTH} levels"),
    "no_json_form": ({"city": NoJSON()}, "$.city: a NoJSON is not a JSON value"),
    "key_not_a_string": ({("a", "b"): 1}, "is not a string"),
    "a_list": ([1, 2], "not a JSON object"),
    "none": (None, "not a JSON object"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
async def test_arguments_that_cannot_be_stored_get_an_error_result(
    tmp_path: Path, case: str
) -> None:
    arguments, needle = BAD_ARGUMENTS[case]
    db = tmp_path / "c.db"
    llm = ScriptedLLM([answer(("c1", "book", arguments)), {"text": "I will fix it"}])
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "book")
        # nothing to ask a human: the call cannot run, and the model is told why
        assert turn.state == State.IDLE
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PLR, EXT, ALR, PLR, IDLE])
        tool_msg = next(m for m in llm.requests[1].messages if m["role"] == "tool")
        assert needle in tool_msg["content"]
        assert "invalid arguments for tool 'book'" in tool_msg["content"]
    async with engine_on(db, ScriptedLLM([{"text": "ok"}]), "b-") as engine:
        ctx = await engine.get_context(cid)
        (call,) = calls_of(ctx)
        assert call.arguments == {}
        assert call.raw_arguments is not None
        assert len(call.raw_arguments) < 9000
        # the audit says the system let it through, not the tool's approval policy
        assert (call.approval_status, call.decided_by) == (ApprovalStatus.APPROVED, "system")
        assert RUNS == []
        (result,) = results_of(ctx)["c1"]
        assert result.success is False
        assert needle in json.dumps(result.result)
        assert ctx.history()[1].message.metadata.extra["conversions"]
        assert (await engine.send(cid, "again")).state == State.IDLE


async def test_arguments_over_the_size_limit_are_cut_and_answered(tmp_path: Path) -> None:
    from turnfsm.model import MAX_JSON_BYTES

    db = tmp_path / "c.db"
    big = {"city": "x" * (MAX_JSON_BYTES + 10)}
    llm = ScriptedLLM([answer(("c1", "lookup", big)), {"text": "too long, sorry"}])
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
        assert turn.state == State.IDLE
    async with engine_on(db, ScriptedLLM([]), "b-") as engine:
        ctx = await engine.get_context(cid)
        (call,) = calls_of(ctx)
        assert call.raw_arguments is not None
        assert len(call.raw_arguments) < 9000
        assert "characters in all]" in call.raw_arguments
        assert call.arguments_error is not None
        assert "over the limit" in call.arguments_error
        (result,) = results_of(ctx)["c1"]
        assert "over the limit" in result.result["error"]
        assert RUNS == []


async def test_a_long_argument_text_is_cut(tmp_path: Path) -> None:
    llm = ScriptedLLM([answer(("c1", "lookup", "{" + "y" * 50_000)), {"text": "oops"}])
    async with engine_on(tmp_path / "c.db", llm) as engine:
        cid = await engine.create_context()
        turn: Turn = await engine.send(cid, "go")
        assert turn.state == State.IDLE
        ctx = await engine.get_context(cid)
        (call,) = calls_of(ctx)
        assert call.raw_arguments is not None
        assert call.raw_arguments.startswith("{yyy")
        assert call.raw_arguments.endswith("[cut: 50001 characters in all]")
        assert call.arguments_error is None


async def test_ids_stay_unique_when_a_new_name_is_itself_taken(tmp_path: Path) -> None:
    llm = ScriptedLLM(
        [
            answer(
                ("d1", "lookup", {"city": "A"}),
                ("d1", "lookup", {"city": "B"}),
                ("d1-2", "book", {"city": "C"}),
                ("d1", "book", {"city": "D"}),
            ),
            {"text": "done"},
        ]
    )
    db = tmp_path / "c.db"
    async with engine_on(db, llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
        assert turn.state == State.AWAITING_TOOL_APPROVAL
        assert [c.id for c in turn.pending_tool_calls] == ["d1-2-2", "d1-3"]
        assert [c.provider_id for c in turn.pending_tool_calls] == ["d1-2", "d1"]
    async with engine_on(db, llm, "b-") as engine:
        turn = await engine.deny(cid, "d1-3", "not D")
        assert turn.state == State.AWAITING_TOOL_APPROVAL
        turn = await engine.approve(cid, "d1-2-2")
        assert turn.state == State.IDLE
        ctx = await engine.get_context(cid)
        assert [c.id for c in calls_of(ctx)] == ["d1", "d1-2", "d1-2-2", "d1-3"]
        assert [(c.approval_status, c.decided_by) for c in calls_of(ctx)] == [
            (ApprovalStatus.APPROVED, "policy"),
            (ApprovalStatus.APPROVED, "policy"),
            (ApprovalStatus.APPROVED, "human"),
            (ApprovalStatus.DENIED, "human"),
        ]
        assert_every_call_answered_once(ctx)
        assert sorted(RUNS) == [("book", "C"), ("lookup", "A"), ("lookup", "B")]
        assert "denied: not D" in results_of(ctx)["d1-3"][0].result["error"]
        assert_chat_pairs_ids(llm.requests[-1])


async def test_usage_is_cleaned_and_noted(tmp_path: Path) -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "x\ud800": 1.5}
    usage["ratio"] = float("inf")
    db = tmp_path / "c.db"
    async with engine_on(db, ScriptedLLM([LLMResponse(text="hi", usage=usage)])) as engine:
        cid = await engine.create_context()
        assert (await engine.send(cid, "hi")).state == State.IDLE
    async with engine_on(db, ScriptedLLM([]), "b-") as engine:
        msg = (await engine.get_context(cid)).history()[-1].message
        assert msg.metadata.usage is not None
        assert msg.metadata.usage.total_tokens == 5
        extra = records.to_python(msg.metadata.usage, mode="python")
        assert extra["x\ufffd"] == 1.5
        assert extra["ratio"] == "Infinity"
        notes = msg.metadata.extra["conversions"]
        assert any(n.startswith("usage: a key's lone surrogate") for n in notes)
        assert any(n.startswith("usage.ratio: Infinity") for n in notes)


class CloseFails(PlainIterator):
    async def aclose(self) -> None:
        raise RuntimeError("connection already closed")


async def test_an_adapter_whose_close_raises_fails_the_call(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    adapter = Adapter(lambda r: CloseFails([LLMResponse(text="Hi")]))
    async with engine_on(db, adapter) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "hi")
        assert turn.state == State.PERMANENT_FAILURE
        assert turn.error == (
            "adapter_error: the LLM adapter raised RuntimeError: connection already closed"
        )
        await assert_recorded(engine, cid, [IDLE, PUM, ALR, PF])
    await continue_after_failure(db, cid, [IDLE, PUM, ALR, PF])
