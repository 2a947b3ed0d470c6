"""Wire-format samples, written from the OpenAI API reference.

Chat Completions streaming (``chat.completion.chunk``)::

    {"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
     "model": "gpt-4o-mini", "system_fingerprint": "fp_44709d6fcb",
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                  "logprobs": null, "finish_reason": null}]}

The first chunk carries the role, later ones ``content`` pieces or
``tool_calls`` fragments (``{"index", "id", "type": "function", "function":
{"name", "arguments"}}`` first, then ``{"index", "function": {"arguments":
piece}}``), the last one a ``finish_reason``; with
``stream_options.include_usage`` a final chunk has ``"choices": []`` and the
``usage``; then ``data: [DONE]``.

Responses streaming: ``response.created``, ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta`` ...,
``response.function_call_arguments.delta`` ..., ``response.output_item.done``,
``response.completed`` (with ``usage``: ``input_tokens``, ``output_tokens``,
``total_tokens``), each with a ``sequence_number``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pydantic
from openai_loopback import DONE

MODEL = "gpt-4o-mini"
CREATED = 1_767_225_600


def chunk(
    delta: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    *,
    choices: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``."""
    out: dict[str, Any] = {
        "id": "chatcmpl-loop1",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "system_fingerprint": "fp_loopback",
        "choices": choices
        if choices is not None
        else [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def usage(prompt: int = 12, completion: int = 5) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def text_stream(pieces: Sequence[str], *, with_usage: bool = True) -> list[dict[str, Any] | str]:
    """A streamed text answer: role chunk, content pieces, finish, usage, [DONE]."""
    events: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in pieces]
    events.append(chunk({}, "stop"))
    if with_usage:
        events.append(chunk(choices=[], usage=usage()))
    events.append(DONE)
    return events


def tool_call_stream(
    calls: Sequence[tuple[str, str, dict[str, Any]]],
    *,
    text: Sequence[str] = (),
    piece: int = 4,
) -> list[dict[str, Any] | str]:
    """Text, then several parallel tool calls whose arguments are split into
    ``piece``-character fragments and interleaved across chunks."""
    events: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": None})]
    events += [chunk({"content": t}) for t in text]
    for i, (call_id, name, _) in enumerate(calls):
        first = {
            "index": i,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [first]}))
    splits = [
        [json.dumps(args)[k : k + piece] for k in range(0, len(json.dumps(args)), piece)]
        for _, _, args in calls
    ]
    for step in range(max(len(s) for s in splits)):
        for i, parts in enumerate(splits):  # interleaved: call 0, call 1, ... per step
            if step < len(parts):
                events.append(
                    chunk({"tool_calls": [{"index": i, "function": {"arguments": parts[step]}}]})
                )
    events.append(chunk({}, "tool_calls"))
    events.append(chunk(choices=[], usage=usage(30, 40)))
    events.append(DONE)
    return events


def completion(
    content: str | None = None,
    tool_calls: Sequence[tuple[str, str, dict[str, Any] | str]] = (),
    finish_reason: str | None = None,
) -> dict[str, Any]:
    """A whole ``chat.completion`` (non-streamed)."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": cid,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for cid, name, args in tool_calls
        ]
    return {
        "id": "chatcmpl-loop2",
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": usage(),
    }


# ---------------------------------------------------------------------- Responses


def _response(status: str, output: list[dict[str, Any]], with_usage: bool) -> dict[str, Any]:
    return {
        "id": "resp_loop1",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 20,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 3},
            "total_tokens": 27,
        }
        if with_usage
        else None,
    }


class ResponsesStream:
    """Builds a Responses event stream with running ``sequence_number``s."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any] | str] = []
        self.output: list[dict[str, Any]] = []
        self.add("response.created", response=_response("in_progress", [], False))

    def add(self, type_: str, **fields: Any) -> ResponsesStream:
        self.events.append({"type": type_, "sequence_number": len(self.events), **fields})
        return self

    def reasoning(self, pieces: Sequence[str]) -> ResponsesStream:
        n = len(self.output)
        item = {"id": f"rs_{n}", "type": "reasoning", "summary": []}
        self.add("response.output_item.added", output_index=n, item=item)
        for p in pieces:
            self.add(
                "response.reasoning_summary_text.delta",
                item_id=item["id"],
                output_index=n,
                summary_index=0,
                delta=p,
            )
        done = {**item, "summary": [{"type": "summary_text", "text": "".join(pieces)}]}
        self.add("response.output_item.done", output_index=n, item=done)
        self.output.append(done)
        return self

    def text(self, pieces: Sequence[str]) -> ResponsesStream:
        n = len(self.output)
        item: dict[str, Any] = {
            "id": f"msg_{n}",
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        self.add("response.output_item.added", output_index=n, item=item)
        part = {"type": "output_text", "text": "", "annotations": []}
        self.add(
            "response.content_part.added",
            item_id=item["id"],
            output_index=n,
            content_index=0,
            part=part,
        )
        for p in pieces:
            self.add(
                "response.output_text.delta",
                item_id=item["id"],
                output_index=n,
                content_index=0,
                delta=p,
                logprobs=[],
            )
        full = {**part, "text": "".join(pieces)}
        self.add(
            "response.output_text.done",
            item_id=item["id"],
            output_index=n,
            content_index=0,
            text=full["text"],
            logprobs=[],
        )
        done = {**item, "status": "completed", "content": [full]}
        self.add("response.output_item.done", output_index=n, item=done)
        self.output.append(done)
        return self

    def function_call(
        self, call_id: str, name: str, arguments: dict[str, Any], piece: int = 5
    ) -> ResponsesStream:
        n = len(self.output)
        item = {
            "id": f"fc_{n}",
            "type": "function_call",
            "status": "in_progress",
            "call_id": call_id,
            "name": name,
            "arguments": "",
        }
        self.add("response.output_item.added", output_index=n, item=item)
        raw = json.dumps(arguments)
        for k in range(0, len(raw), piece):
            self.add(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=n,
                delta=raw[k : k + piece],
            )
        self.add(
            "response.function_call_arguments.done",
            item_id=item["id"],
            output_index=n,
            arguments=raw,
        )
        done = {**item, "status": "completed", "arguments": raw}
        self.add("response.output_item.done", output_index=n, item=done)
        self.output.append(done)
        return self

    def completed(self) -> list[dict[str, Any] | str]:
        self.add("response.completed", response=_response("completed", self.output, True))
        return self.events


# ---------------------------------------------------------------------- the reference


def _materialize(value: Any) -> Any:
    """A validated value as plain JSON values (pydantic validates iterables lazily)."""
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or type(value).__name__ == "ValidatorIterator":
        return [_materialize(v) for v in value]
    return value


_ADAPTERS: dict[Any, pydantic.TypeAdapter[Any]] = {}


def assert_matches_the_reference(body: dict[str, Any], params_type: Any) -> None:
    """``body`` validates against the SDK's request type and loses nothing doing so
    (a key the reference does not know would be dropped, a wrong type refused)."""
    adapter = _ADAPTERS.setdefault(params_type, pydantic.TypeAdapter(params_type))
    # (the adapter must outlive the lazy iterators it returns: keep it referenced)
    validated = _materialize(adapter.validate_python(body))
    assert validated == json.loads(json.dumps(body))
