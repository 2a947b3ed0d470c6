"""The Gemini request: images and files, translated parameters, tool choice,
thoughts placed between calls, another provider's reasoning left out; the
pure body, and the same body as the SDK puts it on the wire."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from gemini_corpus import corpus
from gemini_loopback import LoopbackServer

from turnfsm.adapters.llm._gemini_body import gemini_request
from turnfsm.model import RESPONSES_KEY, LLMRequest, LLMResponse, ToolCallDelta

pytestmark = pytest.mark.anyio

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-not-really-an-image+/").decode()
PDF = base64.b64encode(b"%PDF-1.7 a file").decode()
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather.",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
    },
}


def call(n: int, location: str) -> dict[str, Any]:
    return {
        "id": f"c{n}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": f'{{"location": "{location}"}}'},
    }


def user_with_media() -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "image_url", "image_url": {"url": "gs://bucket/cat.jpg"}},
            {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}"}},
        ],
    }


def test_images_and_files_are_inline_data_or_file_data() -> None:
    body = gemini_request(LLMRequest("c", "gemini-2.5-flash", [user_with_media()]))
    assert body["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "What is this?"},
                {"inlineData": {"mimeType": "image/png", "data": PNG}},
                {"fileData": {"fileUri": "gs://bucket/cat.jpg", "mimeType": "image/png"}},
                {"inlineData": {"mimeType": "application/pdf", "data": PDF}},
            ],
        }
    ]


def test_parameters_and_tool_choice_are_translated() -> None:
    request = LLMRequest(
        "c",
        "gemini-2.5-flash",
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        tools=[TOOL],
        parameters={
            "max_tokens": 64,
            "stop": "END",
            "top_p": 0.5,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": False,
            "stream_options": {"include_usage": True},
        },
    )
    body = gemini_request(request, model="gemini-2.5-pro", params={"temperature": 0.2, "topP": 1})
    assert body["model"] == "gemini-2.5-pro"
    assert body["config"] == {
        "temperature": 0.2,
        "topP": 0.5,  # the context's parameters win over the adapter's
        "maxOutputTokens": 64,
        "stopSequences": ["END"],
        "toolConfig": {
            "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}
        },
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Weather.",
                        "parametersJsonSchema": TOOL["function"]["parameters"],
                    }
                ]
            }
        ],
    }
    auto = gemini_request(
        LLMRequest(
            "c", "m", [{"role": "user", "content": "Hi"}], parameters={"tool_choice": "required"}
        )
    )
    assert auto["config"]["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}


def test_thoughts_keep_their_place_and_other_providers_reasoning_is_left_out() -> None:
    reasoning = [
        {"id": "", "summary": ["first"], "provider": "google", "data": {"part": "thought"}},
        {
            "id": "",
            "summary": ["between"],
            "provider": "google",
            "data": {"part": "thought", "thoughtSignature": "AAAA"},
            "position": 1,
        },
        {
            "id": "",
            "summary": [],
            "provider": "google",
            "data": {"part": "functionCall", "thoughtSignature": "BBBB"},
        },
        {"id": "rs_1", "summary": ["openai's"], "encrypted_content": "ENC"},
        {
            "id": "",
            "summary": ["claude's"],
            "provider": "anthropic",
            "data": {"part": "functionCall", "thoughtSignature": "CCCC", "type": "thinking"},
            "position": 1,
        },
    ]
    messages = [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [call(0, "Paris"), call(1, "Oslo")],
            RESPONSES_KEY: {"reasoning": reasoning},
        },
        {"role": "tool", "tool_call_id": "c0", "content": '{"temp_c": 15}'},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "user", "content": "Thanks"},
        {"role": "assistant", "content": "", "tool_calls": []},
    ]
    body = gemini_request(LLMRequest("c", "m", messages))
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Paris and Oslo?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "first", "thought": True},
                {"text": "Checking."},
                {
                    "functionCall": {"name": "get_weather", "args": {"location": "Paris"}},
                    "thoughtSignature": "BBBB",
                },
                {"text": "between", "thought": True, "thoughtSignature": "AAAA"},
                {"functionCall": {"name": "get_weather", "args": {"location": "Oslo"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"temp_c": 15}}},
                {"functionResponse": {"name": "get_weather", "response": {"result": "sunny"}}},
                {"text": "Thanks"},
            ],
        },
    ]


async def test_media_and_signatures_reach_the_wire_as_the_same_bytes(
    loopback: LoopbackServer,
) -> None:
    from turnfsm.adapters.llm import GeminiLLM

    loopback.script(corpus()[0].reply())
    messages = [
        user_with_media(),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call(0, "Paris")],
            RESPONSES_KEY: {
                "reasoning": [
                    {
                        "id": "",
                        "summary": [],
                        "provider": "google",
                        "data": {"part": "functionCall", "thoughtSignature": "ab+/cd=="},
                    }
                ]
            },
        },
        {"role": "tool", "tool_call_id": "c0", "content": "{}"},
    ]
    async with GeminiLLM("gemini-2.5-flash", base_url=loopback.url, api_key="k") as llm:
        chunks = [c async for c in llm.stream(LLMRequest("c", "x", messages, tools=[TOOL]))]
    assert chunks[-1].text == "The capital of France is Paris."  # type: ignore[union-attr]
    [sent] = loopback.bodies
    user, model, result = sent["contents"]
    image = user["parts"][1]["inlineData"]
    assert base64.urlsafe_b64decode(image["data"]) == base64.b64decode(PNG)
    # the SDK writes some nested fields in snake_case; the API reads both
    assert user["parts"][2] == {
        "fileData": {"file_uri": "gs://bucket/cat.jpg", "mime_type": "image/png"}
    }
    assert base64.urlsafe_b64decode(model["parts"][0]["thoughtSignature"]) == base64.b64decode(
        "ab+/cd=="
    )
    assert result == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "get_weather", "response": {}}}],
    }


async def test_streamed_call_deltas_carry_the_ids_of_the_answers_calls(
    loopback: LoopbackServer,
) -> None:
    from turnfsm.adapters.llm import GeminiLLM

    cases = {c.name: c for c in corpus()}
    loopback.script(cases["parallel_calls"].reply(), cases["parallel_calls"].reply())
    request = LLMRequest("c", "x", [{"role": "user", "content": "Paris and Oslo?"}], tools=[TOOL])
    async with GeminiLLM("gemini-2.5-flash", base_url=loopback.url, api_key="k") as llm:
        runs = [[c async for c in llm.stream(request)] for _ in range(2)]
    for chunks in runs:
        final = chunks[-1]
        assert isinstance(final, LLMResponse)
        streamed = [(d.index, d.id) for d in chunks if isinstance(d, ToolCallDelta) and d.id]
        assert streamed == [(n, c.id) for n, c in enumerate(final.tool_calls)]
    # the same answer gives the same ids (a replay, a resume)
    ids = [[c.id for c in r[-1].tool_calls] for r in runs]  # type: ignore[union-attr]
    assert ids[0] == ids[1] == ["call_pc9mafbwMdOjz7IP6bPY8Ac_0", "call_pc9mafbwMdOjz7IP6bPY8Ac_1"]


async def test_parameters_reach_the_wire_in_the_generation_config(
    loopback: LoopbackServer,
) -> None:
    from turnfsm.adapters.llm import GeminiLLM

    loopback.script(corpus()[0].reply())
    async with GeminiLLM(
        "gemini-2.5-flash",
        base_url=loopback.url,
        api_key="k",
        temperature=0.7,
        thinkingConfig={"includeThoughts": True},
    ) as llm:
        request = LLMRequest(
            "c",
            "ignored",
            [{"role": "user", "content": "Hi"}],
            parameters={"max_tokens": 50, "stop": "X", "seed": 3, "temperature": 0.1},
        )
        [_ async for _ in llm.stream(request)]
    [sent] = loopback.requests
    assert sent.path == "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    config = sent.body["generationConfig"]
    assert config["temperature"] == 0.1  # the context's parameter wins
    assert (config["maxOutputTokens"], config["stopSequences"], config["seed"]) == (50, ["X"], 3)
    # the SDK writes nested fields in snake_case; the API reads both
    assert config["thinkingConfig"] == {"include_thoughts": True}
