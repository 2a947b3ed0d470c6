"""What an LLM adapter answers of the wrong shape, and an adapter that fails
(raises, returns instead of yielding, yields what is not a delta, fails to
close), ends in a declared state, and what is stored loads: a fresh engine on
the same SQLite file continues the context (see ``test_llm_answers.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from canonical import ALR, IDLE, PF, PLR, PUM, SLR, TF, assert_recorded

from turnfsm import Failed, State
from turnfsm.adapters.llm import LLMRequest, LLMResponse, TextDelta
from turnfsm.errors import PermanentLLMError, TransientLLMError
from turnfsm.testing import ScriptedLLM

from .answers_kit import RUNS, Adapter, answer, assert_events_serialise, engine_on

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _clear() -> None:
    RUNS.clear()


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
