"""A tool call's arguments as the model streams them: ``ToolCallArgumentsDelta``
on ``engine.subscribe``, from the OpenAI adapter reading the loopback server's
Chat Completions stream (each call's arguments in several pieces, two calls
interleaved)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import kit
import pytest
from canonical import WEATHER_CALLS, get_weather
from openai_loopback import LoopbackServer, Reply
from openai_samples import text_stream, tool_call_stream

from turnfsm import Engine, State
from turnfsm.events import Event, ToolCallArgumentsDelta, ToolCallsRequested
from turnfsm.model import LLMResponse, ToolCallData, ToolCallDelta

if TYPE_CHECKING:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter


pytestmark = pytest.mark.anyio

CALLS = [
    ("call_oslo", "get_weather", {"city": "Oslo, Norway"}),
    ("call_rome", "get_weather", {"city": "Rome, Italy"}),
]


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    WEATHER_CALLS.clear()


@pytest.fixture
async def llm(loopback: LoopbackServer) -> AsyncIterator[OpenAIChatAdapter]:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter

    async with OpenAIChatAdapter(base_url=loopback.url, api_key="sk-loop", timeout=10) as adapter:
        yield adapter


async def _turn(engine: Engine, text: str) -> list[Event]:
    cid = await engine.create_context()
    events: list[Event] = []
    async with engine.subscribe(cid) as sub:
        with anyio.fail_after(30):
            await engine.send(cid, text)
            events.extend(sub.drain())
    return events


async def test_arguments_stream_piece_by_piece(
    loopback: LoopbackServer, llm: OpenAIChatAdapter
) -> None:
    loopback.script(
        Reply(events=tool_call_stream(CALLS, text=["Let me look."], piece=5)),
        Reply(events=text_stream(["Sunny in both."])),
    )
    async with kit.make_engine(llm=llm, tools=[get_weather]).engine as engine:
        events = await _turn(engine, "Weather in Oslo and Rome?")
    pieces = [ev for ev in events if isinstance(ev, ToolCallArgumentsDelta)]
    requested = next(ev for ev in events if isinstance(ev, ToolCallsRequested))
    for index, (call_id, name, args) in enumerate(CALLS):
        mine = [p for p in pieces if p.call_index == index]
        assert len(mine) > 2  # the naming piece, then the arguments in pieces
        assert {(p.call_id, p.tool_name) for p in mine} == {(call_id, name)}
        joined = "".join(p.delta for p in mine)
        assert json.loads(joined) == args == requested.calls[index].arguments
        assert all(p.message_id == requested.message_id and p.attempt == 1 for p in mine)
    # every event has its seq, with no gap: the pieces take theirs in order
    assert [ev.seq for ev in events] == list(range(events[0].seq, events[0].seq + len(events)))
    first, last = events.index(pieces[0]), events.index(pieces[-1])
    assert events[first - 1].kind == "ContentDelta"  # the text came first
    assert events[last + 1].kind == "StateChanged"  # the stream ended after
    assert len(WEATHER_CALLS) == 2


class _Pieces:
    """An adapter that streams one call whose first piece names it only later."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks
        self.calls = 0

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        self.calls += 1
        if self.calls > 1:
            yield LLMResponse(text="done")
            return
        for chunk in self.chunks:
            yield chunk


async def test_id_and_name_are_repeated_once_known() -> None:
    llm = _Pieces(
        [
            ToolCallDelta(index=0, arguments='{"ci'),
            ToolCallDelta(index=0, id="c1", name="get_weather", arguments='ty": '),
            ToolCallDelta(index=0, arguments='"Oslo"}'),
            LLMResponse(
                tool_calls=(ToolCallData(id="c1", name="get_weather", arguments={"city": "Oslo"}),)
            ),
        ]
    )
    async with kit.make_engine(llm=llm, tools=[get_weather]).engine as engine:
        events = await _turn(engine, "Weather?")
    pieces = [ev for ev in events if isinstance(ev, ToolCallArgumentsDelta)]
    assert [(p.call_id, p.tool_name, p.delta) for p in pieces] == [
        (None, None, '{"ci'),
        ("c1", "get_weather", 'ty": '),
        ("c1", "get_weather", '"Oslo"}'),
    ]


@pytest.mark.parametrize(
    ("chunk", "what"),
    [
        (ToolCallDelta(index="0"), "index is '0'"),  # type: ignore[arg-type]
        (ToolCallDelta(index=-1), "index is -1"),
        (ToolCallDelta(index=0, id=5), "id is a int"),  # type: ignore[arg-type]
        (ToolCallDelta(index=0, arguments=None), "arguments is a NoneType"),  # type: ignore[arg-type]
    ],
)
async def test_a_malformed_piece_is_an_invalid_answer(chunk: ToolCallDelta, what: str) -> None:
    llm = _Pieces([chunk, LLMResponse(text="never")])
    async with kit.make_engine(llm=llm, tools=[get_weather]).engine as engine:
        cid = await engine.create_context()
        with anyio.fail_after(30):
            turn = await engine.send(cid, "Weather?")
        ctx = await engine.get_context(cid)
    assert turn.state is State.PERMANENT_FAILURE
    assert "invalid_answer" in (ctx.progress.last_error or "")
    assert f"a ToolCallDelta's {what}" in (ctx.progress.last_error or "")
