"""A typed answer through Gemini's own mechanism (``responseMimeType`` and
``responseJsonSchema`` in the generation config), over loopback through the
real ``google-genai`` SDK: the body the server gets carries the schema, and
the answer comes back as the JSON text, streamed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from gemini_loopback import LoopbackServer, Reply
from pydantic import BaseModel

from turnfsm.adapters.llm._gemini_body import gemini_request
from turnfsm.model import LLMChunk, LLMRequest, LLMResponse, OutputSpec, TextDelta

pytestmark = pytest.mark.anyio

PIECES = ['{"city": "Pa', 'ris", "temp"', ": 14}"]


class Weather(BaseModel):
    city: str
    temp: int
    note: str | None = None


SCHEMA = Weather.model_json_schema()
SPEC = OutputSpec("weather", SCHEMA, "d1g3st")


def request(output: OutputSpec | None = SPEC, **parameters: Any) -> LLMRequest:
    return LLMRequest(
        "c",
        "ignored",
        [{"role": "user", "content": "Weather in Paris?"}],
        parameters=parameters,
        output=output,
    )


def json_answer(pieces: list[str]) -> Reply:
    chunks = []
    for n, piece in enumerate(pieces):
        candidate: dict[str, Any] = {
            "content": {"parts": [{"text": piece}], "role": "model"},
            "index": 0,
        }
        if n == len(pieces) - 1:
            candidate["finishReason"] = "STOP"
        data = {
            "candidates": [candidate],
            "usageMetadata": {"promptTokenCount": 8, "totalTokenCount": 8},
            "modelVersion": "gemini-2.5-flash",
            "responseId": "r1",
        }
        chunks.append(b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\r\n\r\n")
    return Reply(chunks=chunks)


async def run(server: LoopbackServer, req: LLMRequest, **params: Any) -> list[LLMChunk]:
    from turnfsm.adapters.llm import GeminiLLM

    async with GeminiLLM("gemini-2.5-flash", base_url=server.url, api_key="k", **params) as llm:
        return [c async for c in llm.stream(req)]


def test_gemini_says_it_sends_the_schema_natively() -> None:
    from turnfsm.adapters.llm import GeminiLLM

    assert GeminiLLM.native_output is True


@pytest.mark.parametrize(
    "theirs",
    [
        {},
        {"response_schema": {"type": "STRING"}, "response_mime_type": "text/plain"},
        {"responseJsonSchema": {"type": "string"}},
    ],
    ids=["alone", "over_snake_case", "over_camel_case"],
)
async def test_the_schema_goes_in_the_generation_config_and_the_text_is_the_json(
    loopback: LoopbackServer, theirs: dict[str, Any]
) -> None:
    loopback.script(json_answer(PIECES))
    chunks = await run(loopback, request(**theirs), temperature=0.2)
    [got] = loopback.requests
    assert got.path == "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    config = got.body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == SCHEMA  # Gemini takes JSON Schema as it is
    assert "responseSchema" not in config and "response_schema" not in config
    assert config["temperature"] == 0.2
    final = chunks[-1]
    assert isinstance(final, LLMResponse)
    assert [c for c in chunks[:-1] if isinstance(c, TextDelta)] == [TextDelta(p) for p in PIECES]
    assert final.text == "".join(PIECES)
    assert json.loads(final.text) == {"city": "Paris", "temp": 14}


def test_without_an_answer_type_the_config_is_what_it_was() -> None:
    theirs = {"response_mime_type": "application/json", "response_schema": {"type": "STRING"}}
    assert gemini_request(request(None, **theirs))["config"] == theirs
    instruction = OutputSpec("weather", SCHEMA, "d", mode="instruction")
    assert gemini_request(request(instruction)) == gemini_request(request(None))
    assert gemini_request(request(None))["config"] == {}
