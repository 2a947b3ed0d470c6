"""A typed answer through Claude's structured outputs (``output_config.format``),
over loopback through the real ``anthropic`` SDK: the body the server gets
carries the schema, the body is one the SDK's request type knows, and the
answer comes back as the JSON text, streamed; a refusal stays a refusal."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from anthropic_corpus import event, lines, splice
from anthropic_loopback import LoopbackServer, Reply
from pydantic import BaseModel

from turnfsm.adapters.llm import ScriptedLLM
from turnfsm.adapters.llm._anthropic_body import anthropic_request_body
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.model import LLMChunk, LLMRequest, LLMResponse, OutputSpec, TextDelta

pytestmark = pytest.mark.anyio

PIECES = ['{"city": "Pa', 'ris", "temp"', ": 14}"]


class Address(BaseModel):
    city: str


class Weather(BaseModel):
    city: str
    temp: int
    where: Address | None = None


SCHEMA = Weather.model_json_schema()
SPEC = OutputSpec("weather", SCHEMA, "d1g3st")


def request(output: OutputSpec | None = SPEC, **parameters: Any) -> LLMRequest:
    return LLMRequest(
        "c",
        "claude-x",
        [{"role": "user", "content": "Weather in Paris?"}],
        parameters=parameters,
        output=output,
    )


def json_answer(pieces: list[str]) -> Reply:
    text = [
        event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        *(
            event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "text_delta", "text": p}},
            )
            for p in pieces
        ),
        event("content_block_stop", {"index": 0}),
    ]
    return Reply(chunks=splice(text, stop="end_turn", start="basic_response.txt"))


async def run(server: LoopbackServer, req: LLMRequest, **kwargs: Any) -> list[LLMChunk]:
    from turnfsm.adapters.llm import AnthropicLLM

    async with AnthropicLLM("claude-x", base_url=server.url, api_key="k", **kwargs) as llm:
        return [c async for c in llm.stream(req)]


def test_claude_says_it_sends_the_schema_natively_and_the_test_doubles_do_not() -> None:
    from turnfsm.adapters.llm import AnthropicLLM

    assert AnthropicLLM.native_output is True
    assert getattr(ScriptedLLM, "native_output", False) is False
    assert getattr(DemoLLM, "native_output", False) is False


async def test_the_schema_goes_as_output_config_format_and_the_text_is_the_json(
    loopback: LoopbackServer,
) -> None:
    from anthropic.types import OutputConfigParam

    loopback.script(json_answer(PIECES))
    chunks = await run(loopback, request(output_config={"effort": "low"}))
    [got] = loopback.requests
    assert got.path == "/v1/messages"
    fmt = got.body["output_config"]["format"]
    assert fmt["type"] == "json_schema"
    # the schema as given, every object closed, as the API requires
    assert fmt["schema"]["properties"] == SCHEMA["properties"]
    assert fmt["schema"]["required"] == ["city", "temp"]
    assert fmt["schema"]["additionalProperties"] is False
    assert fmt["schema"]["$defs"]["Address"]["additionalProperties"] is False
    assert got.body["output_config"]["effort"] == "low"  # the parameters' own config stays
    assert got.body["stream"] is True
    assert "tools" not in got.body and "tool_choice" not in got.body  # no forced tool
    # the SDK's own type of the field takes it whole (a key it does not know would be dropped)
    config = pydantic.TypeAdapter(OutputConfigParam).validate_python(got.body["output_config"])
    assert config == got.body["output_config"]
    final = chunks[-1]
    assert isinstance(final, LLMResponse)
    assert [c for c in chunks[:-1] if isinstance(c, TextDelta)] == [TextDelta(p) for p in PIECES]
    assert final.text == "".join(PIECES)
    assert json.loads(final.text) == {"city": "Paris", "temp": 14}
    assert "additionalProperties" not in SPEC.schema  # the spec is left as it was


def test_without_an_answer_type_the_body_is_what_it_was() -> None:
    mine = {"format": {"type": "json_schema", "schema": {"type": "string"}}}
    plain = anthropic_request_body(request(None, output_config=mine))
    assert plain["output_config"] == mine
    instruction = OutputSpec("weather", SCHEMA, "d", mode="instruction")
    assert anthropic_request_body(request(instruction)) == anthropic_request_body(request(None))
    assert "output_config" not in anthropic_request_body(request(None))


async def test_a_refusal_stays_a_refusal(loopback: LoopbackServer) -> None:
    loopback.script(Reply(chunks=lines("refusal_response.txt")))
    chunks = await run(loopback, request())
    final = chunks[-1]
    assert isinstance(final, LLMResponse)
    assert final.refusal is not None and final.text == ""
    assert final.finish_reason == "content_filter"
