"""A typed answer through OpenAI's own mechanism, over loopback through the real
``openai`` SDK: Chat Completions' ``response_format`` and the Responses API's
``text.format``, streamed and not, as the server receives them; the answer
comes back as the JSON text, and a refusal stays a refusal.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from openai_loopback import DONE, LoopbackServer, Reply
from openai_samples import (
    ResponsesStream,
    assert_matches_the_reference,
    chunk,
    completion,
    text_stream,
)
from pydantic import BaseModel, Field

from turnfsm.adapters.llm._output import strict_schema
from turnfsm.model import LLMChunk, LLMRequest, LLMResponse, OutputSpec, TextDelta

if TYPE_CHECKING:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter, OpenAIResponsesAdapter


pytestmark = pytest.mark.anyio

KEY = "sk-loopback"
ANSWER = '{"city": "Paris", "temp": 14, "note": null}'
PIECES = ['{"city": "Pa', 'ris", "temp"', ": 14, ", '"note": null}']


class Weather(BaseModel):
    city: str = Field(description="the city")
    temp: int
    note: str | None = None


class Sized(BaseModel):
    size: int = 5  # optional, and null does not stand for its absence


SCHEMA = Weather.model_json_schema()
STRICT_SCHEMA = strict_schema(SCHEMA)
SPEC = OutputSpec("weather", SCHEMA, "d1g3st")


def request(output: OutputSpec | None = SPEC, **parameters: Any) -> LLMRequest:
    return LLMRequest(
        "ctx",
        "gpt-4o-mini",
        [{"role": "user", "content": "Weather in Paris?"}],
        parameters=parameters,
        output=output,
    )


async def run(llm: OpenAIChatAdapter | OpenAIResponsesAdapter, req: LLMRequest) -> list[LLMChunk]:
    async with llm:
        return [c async for c in llm.stream(req)]


def chat(server: LoopbackServer, *, stream: bool = True) -> OpenAIChatAdapter:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter

    return OpenAIChatAdapter(base_url=server.url, api_key=KEY, timeout=10.0, stream=stream)


def responses(server: LoopbackServer, *, stream: bool = True) -> OpenAIResponsesAdapter:
    from turnfsm.adapters.llm.openai import OpenAIResponsesAdapter

    return OpenAIResponsesAdapter(base_url=server.url, api_key=KEY, timeout=10.0, stream=stream)


def chat_format(schema: dict[str, Any], strict: bool) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": "weather", "schema": schema, "strict": strict},
    }


def final(chunks: list[LLMChunk]) -> LLMResponse:
    last = chunks[-1]
    assert isinstance(last, LLMResponse)
    return last


def test_the_adapters_say_they_send_the_schema_natively() -> None:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter, OpenAIResponsesAdapter

    assert OpenAIChatAdapter.native_output is True
    assert OpenAIResponsesAdapter.native_output is True


# ---------------------------------------------------------------------- Chat Completions


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_chat_sends_response_format_with_the_strict_schema(
    loopback: LoopbackServer, stream: bool
) -> None:
    from openai.types.chat import completion_create_params

    reply = Reply(events=text_stream(PIECES)) if stream else Reply(json=completion(ANSWER))
    loopback.script(reply)
    req = request()
    chunks = await run(chat(loopback, stream=stream), req)
    [got] = loopback.requests
    assert got.body["response_format"] == chat_format(STRICT_SCHEMA, True)
    assert got.body["response_format"]["json_schema"]["schema"]["required"] == [
        "city",
        "temp",
        "note",
    ]
    assert ("stream" in got.body) is stream
    # the body is one the API reference knows
    params = (
        completion_create_params.CompletionCreateParamsStreaming
        if stream
        else completion_create_params.CompletionCreateParamsNonStreaming
    )
    assert_matches_the_reference(got.body, params)
    answer = final(chunks)
    assert answer.text == ANSWER and isinstance(answer.text, str)
    assert json.loads(answer.text) == {"city": "Paris", "temp": 14, "note": None}
    deltas = [c for c in chunks[:-1] if isinstance(c, TextDelta)]
    assert deltas == ([TextDelta(p) for p in PIECES] if stream else [])
    assert req.metadata["native_output"] == {"name": "weather", "digest": "d1g3st", "strict": True}
    assert SPEC.schema == Weather.model_json_schema()  # the spec is left as it was


async def test_chat_sends_a_schema_strict_cannot_take_as_given_with_strict_false(
    loopback: LoopbackServer,
) -> None:
    loopback.script(Reply(events=text_stream(['{"size": 3}'])))
    schema = Sized.model_json_schema()
    req = request(OutputSpec("weather", schema, "x"))
    chunks = await run(chat(loopback), req)
    [got] = loopback.requests
    assert got.body["response_format"] == chat_format(schema, False)
    assert final(chunks).text == '{"size": 3}'
    recorded = req.metadata["native_output"]
    assert recorded["strict"] is False
    assert "$.properties.size: an optional property" in recorded["not_strict"]


async def test_chat_output_wins_over_a_response_format_parameter_which_passes_alone(
    loopback: LoopbackServer,
) -> None:
    mine = {"type": "json_object"}
    loopback.script(Reply(events=text_stream(["{}"])), Reply(events=text_stream(["{}"])))
    async with chat(loopback) as llm:
        [_ async for _ in llm.stream(request(None, response_format=mine))]
        [_ async for _ in llm.stream(request(SPEC, response_format=mine))]
    alone, both = loopback.bodies
    assert alone["response_format"] == mine
    assert both["response_format"] == chat_format(STRICT_SCHEMA, True)


async def test_chat_sends_nothing_more_when_the_messages_carry_the_schema(
    loopback: LoopbackServer,
) -> None:
    loopback.script(Reply(events=text_stream(["{}"])), Reply(events=text_stream(["{}"])))
    instruction = OutputSpec("weather", SCHEMA, "d", mode="instruction")
    async with chat(loopback) as llm:
        with_instruction = request(instruction)
        [_ async for _ in llm.stream(with_instruction)]
        [_ async for _ in llm.stream(request(None))]
    assert loopback.bodies[0] == loopback.bodies[1]
    assert "response_format" not in loopback.bodies[0]
    assert "native_output" not in with_instruction.metadata


REFUSAL = "I can't help with that."


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_chat_a_refusal_stays_a_refusal(loopback: LoopbackServer, stream: bool) -> None:
    if stream:
        events: list[dict[str, Any] | str] = [
            chunk({"role": "assistant", "content": None, "refusal": None}),
            chunk({"refusal": "I can't help "}),
            chunk({"refusal": "with that."}),
            chunk({}, "stop"),
            DONE,
        ]
        loopback.script(Reply(events=events))
    else:
        whole = completion(None)
        whole["choices"][0]["message"]["refusal"] = REFUSAL
        loopback.script(Reply(json=whole))
    answer = final(await run(chat(loopback, stream=stream), request()))
    assert (answer.text, answer.refusal) == ("", REFUSAL)


# ---------------------------------------------------------------------- Responses


def responses_format(schema: dict[str, Any], strict: bool) -> dict[str, Any]:
    return {"type": "json_schema", "name": "weather", "schema": schema, "strict": strict}


def whole_response(events: list[dict[str, Any] | str]) -> dict[str, Any]:
    last = events[-1]
    assert isinstance(last, dict)
    response: dict[str, Any] = last["response"]
    return response


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_responses_sends_text_format_with_the_strict_schema(
    loopback: LoopbackServer, stream: bool
) -> None:
    from openai.types.responses import response_create_params

    events = ResponsesStream().text(PIECES).completed()
    loopback.script(Reply(events=events) if stream else Reply(json=whole_response(events)))
    req = request(text={"verbosity": "low", "format": {"type": "text"}})
    chunks = await run(responses(loopback, stream=stream), req)
    [got] = loopback.requests
    assert got.path == "/v1/responses"
    # the answer type wins over the parameters' format; their verbosity stays
    assert got.body["text"] == {"verbosity": "low", "format": responses_format(STRICT_SCHEMA, True)}
    params = (
        response_create_params.ResponseCreateParamsStreaming
        if stream
        else response_create_params.ResponseCreateParamsNonStreaming
    )
    assert_matches_the_reference(got.body, params)
    answer = final(chunks)
    assert answer.text == ANSWER
    deltas = [c for c in chunks[:-1] if isinstance(c, TextDelta)]
    assert deltas == ([TextDelta(p) for p in PIECES] if stream else [])
    assert req.metadata["native_output"]["strict"] is True


async def test_responses_without_an_answer_type_keeps_its_text_parameter(
    loopback: LoopbackServer,
) -> None:
    loopback.script(Reply(events=ResponsesStream().text(["hi"]).completed()))
    mine = {"format": {"type": "json_object"}}
    await run(responses(loopback), request(None, text=mine))
    assert loopback.bodies[0]["text"] == mine


async def test_responses_sends_strict_false_for_a_schema_strict_cannot_take(
    loopback: LoopbackServer,
) -> None:
    loopback.script(Reply(events=ResponsesStream().text(['{"size": 3}']).completed()))
    schema = Sized.model_json_schema()
    await run(responses(loopback), request(OutputSpec("weather", schema, "x")))
    assert loopback.bodies[0]["text"] == {"format": responses_format(schema, False)}


async def test_responses_a_refusal_stays_a_refusal(loopback: LoopbackServer) -> None:
    stream = ResponsesStream()
    item = {"id": "msg_0", "type": "message", "status": "in_progress", "role": "assistant"}
    stream.add("response.output_item.added", output_index=0, item={**item, "content": []})
    for piece in ("I can't help ", "with that."):
        stream.add(
            "response.refusal.delta", item_id="msg_0", output_index=0, content_index=0, delta=piece
        )
    done = {**item, "status": "completed", "content": [{"type": "refusal", "refusal": REFUSAL}]}
    stream.add("response.output_item.done", output_index=0, item=done)
    stream.output.append(done)
    loopback.script(Reply(events=stream.completed()))
    answer = final(await run(responses(loopback), request()))
    assert (answer.text, answer.refusal) == ("", REFUSAL)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_an_engine_turn_asks_natively_sends_errors_back_and_returns_the_object(
    loopback: LoopbackServer, stream: bool
) -> None:
    """The engine and the adapter together: ``Engine(output_type=...)`` with the
    OpenAI adapter puts the strict schema in ``response_format`` on every call of
    the turn (no instruction in the messages), an answer that does not validate
    goes back with its errors, and the valid one is ``turn.output``."""
    from turnfsm import Engine

    def reply(text: str) -> Reply:
        return Reply(events=text_stream([text])) if stream else Reply(json=completion(text))

    loopback.script(reply('{"city": "Paris"}'), reply(ANSWER))
    llm = chat(loopback, stream=stream)
    async with llm, Engine(llm=llm, output_type=Weather) as engine:
        cid = await engine.create_context(model="gpt-4o-mini")
        turn = await engine.send(cid, "Weather in Paris?")
    assert turn.output == Weather(city="Paris", temp=14, note=None)
    first, second = loopback.requests
    for got in (first, second):
        assert got.body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "Weather", "schema": STRICT_SCHEMA, "strict": True},
        }
        # no instruction in words: the context has no system prompt, and none is added
        assert got.body["messages"][0]["role"] == "user"
        assert all(m["role"] != "system" for m in got.body["messages"])
    # the second call carries the first answer and what was wrong with it
    sent_back = second.body["messages"][-1]
    assert sent_back["role"] == "user" and "temp" in sent_back["content"]
    assert turn.messages[-1].metadata.extra["output"]["mode"] == "native"
