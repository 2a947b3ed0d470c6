"""The stream assemblers (pure): chunks and events in, deltas and one answer out."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from openai_samples import chunk, completion, tool_call_stream

from turnfsm.adapters.llm._openai_chat import ChatStreamAssembler, chat_completion_response
from turnfsm.adapters.llm._openai_common import (
    IncompleteStream,
    MalformedChunk,
    StreamErrorEvent,
    decode_arguments,
    normalize_usage,
)
from turnfsm.adapters.llm._openai_responses import ResponsesStreamAssembler, responses_response
from turnfsm.model import TextDelta, ThinkingDelta, ToolCallData, ToolCallDelta


def _ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"gen_{next(counter)}"


def feed_all(events: list[Any]) -> tuple[list[Any], ChatStreamAssembler]:
    asm = ChatStreamAssembler(_ids())
    out: list[Any] = []
    for ev in events:
        if ev != "[DONE]":
            out += asm.feed(ev)
    return out, asm


def test_parallel_calls_interleaved_across_chunks() -> None:
    calls = [
        ("call_a", "get_weather", {"city": "Paris", "unit": "celsius"}),
        ("call_b", "get_time", {"timezone": "Europe/Paris"}),
        ("call_c", "get_weather", {"city": "Rome"}),
    ]
    deltas, asm = feed_all(tool_call_stream(calls, text=["Checking", " three things."], piece=3))
    final = asm.finish()
    assert final.text == "Checking three things."
    assert final.tool_calls == tuple(ToolCallData(cid, name, args) for cid, name, args in calls)
    assert final.finish_reason == "tool_calls"
    assert final.usage is not None and final.usage["total_tokens"] == 70
    fragments = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert len(fragments) > 12  # many small pieces
    assert {f.index for f in fragments} == {0, 1, 2}
    assert [(f.index, f.id, f.name) for f in fragments if f.id] == [
        (0, "call_a", "get_weather"),
        (1, "call_b", "get_time"),
        (2, "call_c", "get_weather"),
    ]


def test_calls_without_index_or_id_and_repeated_names() -> None:
    """Some compatible servers send whole calls without ``index``, repeat the name,
    send the arguments as an object, or leave the id out."""
    events = [
        chunk({"tool_calls": [{"id": "x1", "function": {"name": "f", "arguments": '{"a":'}}]}),
        chunk({"tool_calls": [{"function": {"name": "f", "arguments": "1}"}}]}),
        chunk({"tool_calls": [{"id": "x2", "function": {"name": "g", "arguments": {"b": 2}}}]}),
        chunk({"tool_calls": [{"index": 5, "function": {"name": "h", "arguments": ""}}]}),
        chunk({}, "tool_calls"),
    ]
    _, asm = feed_all(events)
    assert asm.finish().tool_calls == (
        ToolCallData("x1", "f", {"a": 1}),
        ToolCallData("x2", "g", {"b": 2}),
        ToolCallData("gen_1", "h", {}),
    )


def test_invalid_arguments_stay_raw() -> None:
    events = [
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c", "function": {"name": "f", "arguments": '{"a": 1'}}
                ]
            }
        ),
        chunk({}, "tool_calls"),
    ]
    _, asm = feed_all(events)
    assert asm.finish().tool_calls[0].arguments == '{"a": 1'
    assert decode_arguments("[1, 2]") == "[1, 2]"  # JSON, but not an object
    assert decode_arguments("  ") == {}


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_fields_become_thinking(field: str) -> None:
    events = [
        chunk({"role": "assistant", field: "Let me "}),
        chunk({field: "think."}),
        chunk({"content": "42"}),
        chunk({}, "stop"),
    ]
    deltas, asm = feed_all(events)
    assert deltas == [ThinkingDelta("Let me "), ThinkingDelta("think."), TextDelta("42")]
    final = asm.finish()
    assert (final.thinking, final.text, final.usage) == ("Let me think.", "42", None)


def test_other_choices_are_ignored() -> None:
    events = [
        chunk(choices=[{"index": 1, "delta": {"content": "other"}, "finish_reason": None}]),
        chunk({"content": "mine"}, "stop"),
    ]
    deltas, _asm = feed_all(events)
    assert deltas == [TextDelta("mine")]


def test_no_finish_reason_is_an_incomplete_stream() -> None:
    _, asm = feed_all([chunk({"content": "half"})])
    with pytest.raises(IncompleteStream):
        asm.finish()
    assert asm.text == "half"


@pytest.mark.parametrize(
    "bad",
    [
        [1, 2],
        {"choices": "nope"},
        {"choices": [{"index": 0, "delta": "text"}]},
        {"choices": [{"index": 0, "delta": {"content": 3}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "0"}]}}]},
        {"choices": [], "usage": [1]},
    ],
)
def test_malformed_chunks_are_named(bad: Any) -> None:
    with pytest.raises(MalformedChunk, match="not"):
        ChatStreamAssembler().feed(bad)


def test_a_whole_completion() -> None:
    data = completion(None, [("c1", "f", {"x": 1}), ("c2", "g", "not json")])
    data["choices"][0]["message"]["reasoning_content"] = "hmm"
    final = chat_completion_response(data, _ids())
    assert final.tool_calls == (
        ToolCallData("c1", "f", {"x": 1}),
        ToolCallData("c2", "g", "not json"),
    )
    assert (final.text, final.thinking, final.finish_reason) == ("", "hmm", "tool_calls")
    with pytest.raises(MalformedChunk, match="no choices"):
        chat_completion_response({"choices": []})


def test_usage_normalized() -> None:
    assert normalize_usage({"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}) == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "total_tokens": 7,
    }
    assert normalize_usage({"prompt_tokens": None, "completion_tokens": 2}) == {
        "prompt_tokens": 0,
        "completion_tokens": 2,
        "total_tokens": 2,
    }
    assert normalize_usage(None) is None


# ---------------------------------------------------------------------- Responses


def _ev(type_: str, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "sequence_number": 0, **fields}


def _completed(
    output: list[dict[str, Any]], status: str = "completed", **extra: Any
) -> dict[str, Any]:
    return _ev(
        f"response.{status}",
        response={
            "id": "r",
            "status": status,
            "model": "m",
            "output": output,
            "usage": None,
            **extra,
        },
    )


def test_responses_events_to_deltas_and_answer() -> None:
    asm = ResponsesStreamAssembler(_ids())
    events = [
        _ev("response.created", response={"id": "r", "status": "in_progress", "output": []}),
        _ev(
            "response.reasoning_summary_text.delta",
            item_id="rs",
            output_index=0,
            summary_index=0,
            delta="Hm.",
        ),
        _ev("response.output_text.delta", item_id="m", output_index=1, content_index=0, delta="Hi"),
        _ev(
            "response.output_item.added",
            output_index=2,
            item={
                "id": "fc",
                "type": "function_call",
                "call_id": "call_1",
                "name": "f",
                "arguments": "",
            },
        ),
        _ev("response.function_call_arguments.delta", item_id="fc", output_index=2, delta='{"a"'),
        _ev("response.function_call_arguments.delta", item_id="fc", output_index=2, delta=": 1}"),
        _ev(
            "response.function_call_arguments.done",
            item_id="fc",
            output_index=2,
            arguments='{"a": 1}',
        ),
        _completed([]),
    ]
    deltas = [d for ev in events for d in asm.feed(ev)]
    assert deltas == [
        ThinkingDelta("Hm."),
        TextDelta("Hi"),
        ToolCallDelta(index=0, id="call_1", name="f", arguments=""),
        ToolCallDelta(index=0, arguments='{"a"'),
        ToolCallDelta(index=0, arguments=": 1}"),
    ]
    final = asm.finish()
    assert (final.text, final.thinking, final.finish_reason) == ("Hi", "Hm.", "tool_calls")
    assert final.tool_calls == (ToolCallData("call_1", "f", {"a": 1}),)


def test_responses_without_deltas_read_the_final_output() -> None:
    asm = ResponsesStreamAssembler(_ids())
    asm.feed(
        _completed(
            [{"type": "message", "content": [{"type": "output_text", "text": "whole"}]}],
            status="incomplete",
            incomplete_details={"reason": "max_output_tokens"},
        )
    )
    final = asm.finish()
    assert (final.text, final.finish_reason) == ("whole", "length")


def test_responses_errors_and_incomplete_streams() -> None:
    with pytest.raises(StreamErrorEvent, match="overloaded") as info:
        ResponsesStreamAssembler().feed(_ev("error", code="server_error", message="overloaded"))
    assert info.value.code == "server_error"
    failed = _ev(
        "response.failed",
        response={"status": "failed", "error": {"code": "rate_limit_exceeded", "message": "slow"}},
    )
    with pytest.raises(StreamErrorEvent, match="slow"):
        ResponsesStreamAssembler().feed(failed)
    with pytest.raises(IncompleteStream):
        ResponsesStreamAssembler().finish()
    with pytest.raises(MalformedChunk):
        ResponsesStreamAssembler().feed({"no": "type"})
    with pytest.raises(MalformedChunk, match="never announced"):
        ResponsesStreamAssembler().feed(
            _ev("response.function_call_arguments.delta", item_id="zz", output_index=9, delta="{")
        )


def test_a_whole_response() -> None:
    data = {
        "status": "completed",
        "model": "m",
        "output": [
            {
                "type": "reasoning",
                "summary": [
                    {"type": "summary_text", "text": "a"},
                    {"type": "summary_text", "text": "b"},
                ],
            },
            {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"},
        ],
        "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
    }
    final = responses_response(data)
    assert final.tool_calls == (ToolCallData("c9", "f", {}),)
    assert final.thinking == "a\n\nb"
    assert final.usage == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    with pytest.raises(StreamErrorEvent, match="quota"):
        responses_response(
            {"status": "failed", "error": {"code": "insufficient_quota", "message": "quota"}}
        )
