"""The request bodies (pure): Chat Completions and Responses, against golden JSON.

The conversation of the golden files is produced by the engine itself (a
scripted LLM records the request of its last call): a system prompt, a user
message with an image part, two tool rounds (the second with two parallel
calls), model parameters from the context config. Each golden body is also
checked against the SDK's request types, which are generated from the OpenAI
API reference (``CompletionCreateParamsStreaming``,
``ResponseCreateParamsStreaming``): every key must be one the reference
knows and every value must have its documented type.

``UPDATE_GOLDEN=1 pytest tests/openai/test_openai_body.py`` rewrites the files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from openai_samples import assert_matches_the_reference

from turnfsm import Engine, tool
from turnfsm.adapters.llm._openai_chat import chat_request_body
from turnfsm.adapters.llm._openai_responses import (
    responses_input,
    responses_request_body,
    responses_tools,
)
from turnfsm.model import LLMRequest
from turnfsm.records import ImagePart, TextPart
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

GOLDEN = Path(__file__).parent / "golden"
IMAGE = "https://upload.wikimedia.org/wikipedia/commons/3/3f/Fronalpstock_big.jpg"


@tool
def get_weather(city: str, unit: str = "celsius") -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: The city name, e.g. "Zurich".
        unit: "celsius" or "fahrenheit".
    """
    return {"city": city, "temp": 14, "unit": unit}


@tool
def get_time(timezone: str) -> str:
    """The current time in a timezone.

    Args:
        timezone: An IANA timezone name, e.g. "Europe/Zurich".
    """
    return "2026-01-01T10:00:00+01:00"


async def _recorded_request() -> LLMRequest:
    llm = ScriptedLLM(
        [
            {
                "tool_calls": [
                    {"id": "call_1", "name": "get_weather", "arguments": {"city": "Zurich"}}
                ]
            },
            {
                "text": "Let me check the time as well.",
                "tool_calls": [
                    {
                        "id": "call_2",
                        "name": "get_time",
                        "arguments": {"timezone": "Europe/Zurich"},
                    },
                    {
                        "id": "call_3",
                        "name": "get_weather",
                        "arguments": {"city": "Lucerne", "unit": "celsius"},
                    },
                ],
            },
            {"text": "It is 10:00 and 14 C in Zurich and Lucerne."},
        ]
    )
    async with Engine(
        llm=llm, tools=[get_weather, get_time], clock=FakeClock(), ids=SequentialIds()
    ) as engine:
        cid = await engine.create_context(
            system_prompt="You are a concise travel assistant.",
            model="gpt-4o-mini",
            parameters={"temperature": 0.2, "max_tokens": 256},
        )
        turn = await engine.send(
            cid,
            [
                TextPart(text="Where was this photo taken, and what is the weather there now?"),
                ImagePart(url=IMAGE, detail="high"),
            ],
        )
        assert turn.text == "It is 10:00 and 14 C in Zurich and Lucerne."
    return llm.requests[-1]


@pytest.fixture
async def request_() -> LLMRequest:
    return await _recorded_request()


def _check_golden(name: str, body: dict[str, Any]) -> None:
    path = GOLDEN / name
    text = json.dumps(body, indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, "utf-8")
    assert json.loads(path.read_text("utf-8")) == json.loads(text), f"{name} differs"


@pytest.mark.anyio
async def test_chat_body_matches_the_golden_file(request_: LLMRequest) -> None:
    from openai.types.chat import completion_create_params

    body = chat_request_body(request_, stream=True)
    _check_golden("chat_body.json", body)
    assert_matches_the_reference(body, completion_create_params.CompletionCreateParamsStreaming)


@pytest.mark.anyio
async def test_responses_body_matches_the_golden_file(request_: LLMRequest) -> None:
    from openai.types.responses import response_create_params

    body = responses_request_body(request_, stream=True)
    _check_golden("responses_body.json", body)
    assert_matches_the_reference(body, response_create_params.ResponseCreateParamsStreaming)


def test_the_golden_chat_body_reads_as_the_reference_says() -> None:
    """Spelled out, so that a reader can check the golden file against the docs."""
    body = json.loads((GOLDEN / "chat_body.json").read_text("utf-8"))
    assert body["model"] == "gpt-4o-mini"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["max_tokens"]) == (0.2, 256)
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "tool"]
    system, user, first, result1, second, result2, result3 = body["messages"]
    assert system == {"role": "system", "content": "You are a concise travel assistant."}
    assert user["content"][1] == {
        "type": "image_url",
        "image_url": {"url": IMAGE, "detail": "high"},
    }
    assert user["content"][0]["type"] == "text"
    assert first["content"] is None
    assert first["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Zurich"}'},
        }
    ]
    assert result1 == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"city":"Zurich","temp":14,"unit":"celsius"}',
    }
    assert second["content"] == "Let me check the time as well."
    assert [c["id"] for c in second["tool_calls"]] == ["call_2", "call_3"]
    assert [r["tool_call_id"] for r in (result2, result3)] == ["call_2", "call_3"]
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "get_time"]
    for t in body["tools"]:
        assert t["type"] == "function"
        assert t["function"]["parameters"]["type"] == "object"


def _request(**kwargs: Any) -> LLMRequest:
    base: dict[str, Any] = {
        "context_id": "c",
        "model": "ctx-model",
        "messages": [{"role": "user", "content": "hi"}],
    }
    return LLMRequest(**{**base, **kwargs})


def test_a_non_streamed_body_has_no_stream_keys() -> None:
    body = chat_request_body(
        _request(parameters={"stream_options": {"include_usage": False}}), stream=False
    )
    assert body == {"model": "ctx-model", "messages": [{"role": "user", "content": "hi"}]}


def test_no_tools_key_without_tools_and_parameters_merge_in_order() -> None:
    req = _request(parameters={"temperature": 0.5, "top_p": 0.9, "model": "nope", "stream": False})
    body = chat_request_body(
        req, stream=True, model="override", extra_body={"top_k": 20, "top_p": 1}
    )
    assert "tools" not in body
    assert body["model"] == "override"
    assert body["temperature"] == 0.5
    assert body["top_p"] == 1  # extra_body after the context's parameters
    assert body["top_k"] == 20
    assert body["stream"] is True  # owned keys are not overridden


def test_stream_options_from_parameters_are_kept() -> None:
    body = chat_request_body(
        _request(parameters={"stream_options": {"include_usage": False}}), stream=True
    )
    assert body["stream_options"] == {"include_usage": False}


def test_the_body_builder_mutates_nothing() -> None:
    messages = [{"role": "user", "content": "hi"}]
    params = {"temperature": 1.0}
    req = _request(messages=messages, parameters=params)
    body = chat_request_body(req, stream=True)
    body["messages"].append({"role": "user", "content": "more"})
    assert messages == [{"role": "user", "content": "hi"}]
    assert params == {"temperature": 1.0}


def test_responses_input_items() -> None:
    items = responses_input(
        [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "name": "frontend_operator", "content": "hello"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "see"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {
                        "type": "file",
                        "file": {
                            "filename": "a.pdf",
                            "file_data": "data:application/pdf;base64,QQ==",
                        },
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
            {"role": "assistant", "content": "done"},
        ]
    )
    assert items == [
        {"type": "message", "role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": "hello"},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "see"},
                {
                    "type": "input_image",
                    "image_url": "data:image/png;base64,AAAA",
                    "detail": "auto",
                },
                {
                    "type": "input_file",
                    "file_data": "data:application/pdf;base64,QQ==",
                    "filename": "a.pdf",
                },
            ],
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "message", "role": "assistant", "content": "done"},
    ]


def test_responses_tools_and_parameters() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "description": "d",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    assert responses_tools(tools) == [
        {
            "type": "function",
            "name": "f",
            "description": "d",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        }
    ]
    req = _request(
        tools=tools,
        parameters={
            "max_tokens": 100,
            "reasoning_effort": "low",
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "temperature": 0,
            "stream_options": {"include_usage": True},
        },
    )
    body = responses_request_body(req, stream=False)
    assert body["max_output_tokens"] == 100
    assert body["reasoning"] == {"effort": "low"}
    assert body["tool_choice"] == {"type": "function", "name": "f"}
    assert body["temperature"] == 0
    assert "stream" not in body and "stream_options" not in body and "max_tokens" not in body
