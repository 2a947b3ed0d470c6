"""The Messages request body (pure) and the stream reader's mapping of what the
corpus does not cover: images and files, tool choice, parameters, the cache
switch, refused and foreign turns, usage with cache figures, pause_turn."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import pytest

from turnfsm.adapters.llm._anthropic_body import anthropic_request_body
from turnfsm.adapters.llm._anthropic_stream import MessagesStreamAssembler
from turnfsm.adapters.llm._openai_common import IncompleteStream, MalformedChunk
from turnfsm.model import RESPONSES_KEY, LLMRequest

CACHE = {"type": "ephemeral"}


def body(messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    tools = kwargs.pop("tools", [])
    parameters = kwargs.pop("parameters", {})
    request = LLMRequest("c", "claude-x", messages, tools=tools, parameters=parameters)
    return anthropic_request_body(request, **kwargs)


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_images_and_files_go_as_the_api_takes_them() -> None:
    pdf = base64.b64encode(b"%PDF-1.4").decode()
    note = base64.b64encode("héllo".encode()).decode()
    out = body(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look"},
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
                    {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
                    {
                        "type": "file",
                        "file": {
                            "filename": "a.pdf",
                            "file_data": f"data:application/pdf;base64,{pdf}",
                        },
                    },
                    {
                        "type": "file",
                        "file": {
                            "filename": "n.txt",
                            "file_data": f"data:text/plain;base64,{note}",
                        },
                    },
                ],
            }
        ],
        cache=False,
    )
    assert out["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAAA"},
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.org/a.png"}},
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
                    "title": "a.pdf",
                },
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "héllo"},
                    "title": "n.txt",
                },
            ],
        }
    ]


def test_parameters_are_translated_and_the_context_wins() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    out = body(
        [{"role": "user", "content": "Hi"}],
        tools=tools,
        parameters={
            "max_completion_tokens": 99,
            "stop": "END",
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "temperature": 0.5,
            "stream_options": {"include_usage": True},
        },
        params={"temperature": 1.0, "top_k": 5},
        max_tokens=512,
        thinking={"type": "enabled", "budget_tokens": 2048},
    )
    assert out["max_tokens"] == 99
    assert out["stop_sequences"] == ["END"]
    assert out["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert (out["temperature"], out["top_k"]) == (0.5, 5)
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "stream_options" not in out and "parallel_tool_calls" not in out
    assert "max_completion_tokens" not in out
    assert out["tools"] == [
        {"name": "f", "input_schema": {"type": "object"}, "cache_control": CACHE}
    ]
    named = body(
        [{"role": "user", "content": "Hi"}],
        parameters={"tool_choice": {"type": "function", "function": {"name": "f"}}},
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    assert named["tool_choice"] == {"type": "tool", "name": "f"}
    assert named["max_tokens"] == 4096
    mine = body(
        [{"role": "user", "content": "Hi"}],
        parameters={"thinking": {"type": "disabled"}},
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    assert mine["thinking"] == {"type": "disabled"}


def test_the_cache_switch_puts_breakpoints_or_none() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Again"},
    ]
    tools = [{"type": "function", "function": {"name": n}} for n in ("a", "b")]
    on = body(messages, tools=tools)
    assert on["system"] == [{"type": "text", "text": "Be brief.", "cache_control": CACHE}]
    assert [t.get("cache_control") for t in on["tools"]] == [None, CACHE]
    assert on["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "Again", "cache_control": CACHE}],
    }
    assert "cache_control" not in json.dumps(on["messages"][:-1])
    off = body(messages, tools=tools, cache=False)
    assert "cache_control" not in json.dumps(off)


def test_a_refused_turn_and_another_providers_reasoning_are_left_out() -> None:
    out = body(
        [
            {"role": "user", "content": "Do the bad thing"},
            {"role": "assistant", "content": "I will not", "refusal": "No."},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [call("t1", "w", '{"c":"Oslo"}'), call("t2", "w", '{"c":"Rome"}')],
                RESPONSES_KEY: {
                    "reasoning": [
                        {"id": "rs_1", "summary": ["openai plan"], "encrypted_content": "gAAA"},
                        {
                            "id": "",
                            "summary": ["first"],
                            "provider": "anthropic",
                            "data": {"type": "thinking", "signature": "sig1"},
                        },
                        {
                            "id": "",
                            "summary": ["between"],
                            "provider": "anthropic",
                            "data": {"type": "thinking", "signature": "sig2"},
                            "position": 1,
                        },
                        {
                            "id": "",
                            "summary": ["another provider's thought"],
                            "provider": "google",
                            "data": {"type": "thinking", "signature": "not Claude's"},
                        },
                    ]
                },
            },
            {"role": "tool", "tool_call_id": "t1", "content": "15"},
            {"role": "tool", "tool_call_id": "t2", "content": "20"},
            {"role": "user", "content": "Thanks"},
        ],
        cache=False,
    )
    assert out["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Do the bad thing"},
                {"type": "text", "text": "Weather?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "first", "signature": "sig1"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "w", "input": {"c": "Oslo"}},
                {"type": "thinking", "thinking": "between", "signature": "sig2"},
                {"type": "tool_use", "id": "t2", "name": "w", "input": {"c": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "15"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "20"},
                {"type": "text", "text": "Thanks"},
            ],
        },
    ]


def _sse(*events: dict[str, Any]) -> MessagesStreamAssembler:
    asm = MessagesStreamAssembler()
    for e in events:
        asm.feed(e)
    return asm


START = {
    "type": "message_start",
    "message": {
        "model": "claude-x",
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 90,
            "cache_creation_input_tokens": 5,
            "output_tokens": 1,
        },
    },
}


def test_usage_counts_cache_reads_and_writes_and_thinking() -> None:
    out = _sse(
        START,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 20, "output_tokens_details": {"thinking_tokens": 7}},
        },
    ).finish()
    assert out.usage is not None
    assert (out.usage["prompt_tokens"], out.usage["completion_tokens"]) == (105, 20)
    assert out.usage["total_tokens"] == 125
    assert out.usage["prompt_tokens_details"] == {"cached_tokens": 90, "cache_creation_tokens": 5}
    assert out.usage["completion_tokens_details"] == {"reasoning_tokens": 7}
    assert out.usage["cache_read_input_tokens"] == 90


def test_pause_turn_is_an_incomplete_answer_and_a_stream_without_a_stop_reason_is_incomplete() -> (
    None
):
    paused = _sse(START, {"type": "message_delta", "delta": {"stop_reason": "pause_turn"}})
    out = paused.finish()
    assert (out.finish_reason, out.incomplete_reason, out.provider_reason) == (
        "stop",
        "pause_turn",
        "pause_turn",
    )
    with pytest.raises(IncompleteStream):
        _sse(START).finish()


def test_importing_the_adapters_package_does_not_import_the_sdk() -> None:
    code = (
        "import sys, turnfsm, turnfsm.adapters.llm as llm\n"
        "assert 'anthropic' not in sys.modules, 'imported early'\n"
        "cls = llm.AnthropicLLM\n"
        "assert 'anthropic' in sys.modules and cls.__name__ == 'AnthropicLLM'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _block(index: int, block: dict[str, Any], *deltas: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": index, "content_block": block},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def test_thinking_between_two_calls_keeps_its_place() -> None:
    use = {"type": "tool_use", "name": "w", "input": {}}
    events = [
        START,
        *_block(0, {**use, "id": "t1"}, {"type": "input_json_delta", "partial_json": '{"c":1}'}),
        *_block(
            1,
            {"type": "thinking", "thinking": "", "signature": ""},
            {"type": "thinking_delta", "thinking": "now the second"},
            {"type": "signature_delta", "signature": "sig"},
        ),
        *_block(2, {**use, "id": "t2"}, {"type": "input_json_delta", "partial_json": '{"c":2}'}),
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
    ]
    out = _sse(*events).finish()
    assert [(c.id, c.arguments) for c in out.tool_calls] == [("t1", {"c": 1}), ("t2", {"c": 2})]
    [item] = out.reasoning
    assert (item.summary, item.data, item.position) == (
        ("now the second",),
        {"type": "thinking", "signature": "sig"},
        1,
    )
    assert out.finish_reason == "tool_calls"


def test_a_delta_for_a_block_never_started_is_a_malformed_event() -> None:
    with pytest.raises(MalformedChunk, match="never started"):
        _sse(START, {"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta"}})
