"""A corpus of provider answers that do not end as a plain text answer.

Each :class:`Case` is one answer body as the provider sends it (a whole JSON
body, or the events of a stream), written after the shapes the OpenAI API
reference and the SDK's types give: refusals, answers cut at the token limit
(with and without a tool-call fragment), content filters (Azure's
``content_filter_results`` and ``prompt_filter_results`` chunks included),
Responses answers marked ``incomplete``, reasoning items with several summary
parts and ``encrypted_content``, a commentary message's ``phase``, parallel
calls, logprobs, usage-only final chunks, chunks with empty ``choices`` and
event types no reader knows (they must be passed over).

``expect`` says what the stored assistant message holds; the tests check it
against the engine and against the SDK's own accumulation of the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from openai_loopback import DONE, Reply

MODEL = "gpt-4o-2024-08-06"
CREATED = 1_767_225_600


@dataclass(frozen=True)
class Expect:
    text: str = ""
    refusal: str | None = None
    finish_reason: str = "stop"
    stop_reason: str = "completed"
    thinking: str | None = None
    calls: tuple[tuple[str, str, str], ...] = ()
    """(id, name, the argument text)."""
    incomplete_reason: str | None = None
    reasoning_ids: tuple[str, ...] = ()
    encrypted: tuple[str | None, ...] = ()
    phase: str | None = None
    logprob_tokens: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Case:
    name: str
    api: str  # "chat" or "responses"
    streamed: bool
    body: Any  # a whole answer (dict), or the stream's events
    expect: Expect
    parameters: dict[str, Any] = field(default_factory=dict)

    def reply(self) -> Reply:
        return Reply(events=self.body) if self.streamed else Reply(json=self.body)


# ---------------------------------------------------------------------- Chat Completions


def _chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    logprobs: Any = None,
    choices: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "chatcmpl-BvX3kq9",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "service_tier": "default",
        "system_fingerprint": "fp_a288987b44",
        "choices": choices
        if choices is not None
        else [{"index": 0, "delta": delta or {}, "logprobs": logprobs, "finish_reason": finish}],
        "obfuscation": "xQ3",
    }
    out.update(extra or {})
    return out


def _usage_chunk(prompt: int = 31, completion: int = 12) -> dict[str, Any]:
    return _chunk(
        choices=[],
        extra={
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {
                    "reasoning_tokens": 0,
                    "audio_tokens": 0,
                    "accepted_prediction_tokens": 0,
                    "rejected_prediction_tokens": 0,
                },
            }
        },
    )


def _completion(message: dict[str, Any], finish: str, logprobs: Any = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-BvX3kr2",
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}
        ],
        "usage": {"prompt_tokens": 31, "completion_tokens": 12, "total_tokens": 43},
        "service_tier": "default",
        "system_fingerprint": "fp_a288987b44",
    }


REFUSAL = "I'm sorry, but I can't help with that request."

_AZURE_PROMPT_FILTER = _chunk(
    choices=[],
    extra={
        "model": "",
        "created": 0,
        "id": "",
        "object": "",
        "prompt_filter_results": [
            {
                "prompt_index": 0,
                "content_filter_results": {
                    "hate": {"filtered": False, "severity": "safe"},
                    "violence": {"filtered": False, "severity": "safe"},
                },
            }
        ],
    },
)


def _tok(token: str, logprob: float) -> dict[str, Any]:
    return {
        "token": token,
        "logprob": logprob,
        "bytes": list(token.encode()),
        "top_logprobs": [{"token": token, "logprob": logprob, "bytes": list(token.encode())}],
    }


CHAT_CASES = [
    Case(
        "chat_refusal_stream",
        "chat",
        True,
        [
            _chunk({"role": "assistant", "content": None, "refusal": None}),
            _chunk({"refusal": "I'm sorry, but I "}),
            _chunk({"refusal": "can't help with "}),
            _chunk({"refusal": "that request."}),
            _chunk({}, "stop"),
            _usage_chunk(),
            DONE,
        ],
        Expect(refusal=REFUSAL, stop_reason="refusal"),
    ),
    Case(
        "chat_refusal_whole",
        "chat",
        False,
        _completion(
            {"role": "assistant", "content": None, "refusal": REFUSAL, "annotations": []}, "stop"
        ),
        Expect(refusal=REFUSAL, stop_reason="refusal"),
    ),
    Case(
        "chat_length_stream",
        "chat",
        True,
        [
            _chunk({"role": "assistant", "content": "", "refusal": None}),
            _chunk({"content": "The history of Rome "}),
            _chunk({"content": "begins with"}),
            _chunk({}, "length"),
            _usage_chunk(completion=5),
            DONE,
        ],
        Expect(
            text="The history of Rome begins with", finish_reason="length", stop_reason="length"
        ),
        {"max_completion_tokens": 5},
    ),
    Case(
        "chat_length_whole",
        "chat",
        False,
        _completion(
            {"role": "assistant", "content": "The history of Rome begins with", "refusal": None},
            "length",
        ),
        Expect(
            text="The history of Rome begins with", finish_reason="length", stop_reason="length"
        ),
    ),
    Case(
        "chat_length_tool_fragment_stream",
        "chat",
        True,
        [
            _chunk({"role": "assistant", "content": None}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_Qm1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Os'}}]}),
            _chunk({}, "length"),
            _usage_chunk(),
            DONE,
        ],
        Expect(
            finish_reason="length",
            stop_reason="length",
            calls=(("call_Qm1", "get_weather", '{"city": "Os'),),
        ),
    ),
    Case(
        "chat_content_filter_stream",
        "chat",
        True,
        [
            _AZURE_PROMPT_FILTER,
            _chunk({"role": "assistant", "content": ""}, extra={"prompt_filter_results": []}),
            _chunk(
                {"content": "Here is how the"},
                choices=[
                    {
                        "index": 0,
                        "delta": {"content": "Here is how the"},
                        "finish_reason": None,
                        "content_filter_results": {"violence": {"filtered": False}},
                    }
                ],
            ),
            _chunk(
                choices=[
                    {
                        "index": 0,
                        "delta": {},
                        "finish_reason": "content_filter",
                        "content_filter_results": {
                            "violence": {"filtered": True, "severity": "medium"}
                        },
                    }
                ]
            ),
            _usage_chunk(),
            DONE,
        ],
        Expect(
            text="Here is how the", finish_reason="content_filter", stop_reason="content_filter"
        ),
    ),
    Case(
        "chat_content_filter_whole",
        "chat",
        False,
        _completion({"role": "assistant", "content": None, "refusal": None}, "content_filter"),
        Expect(finish_reason="content_filter", stop_reason="content_filter"),
    ),
    Case(
        "chat_parallel_calls_stream",
        "chat",
        True,
        [
            _chunk(choices=[]),  # an empty choices chunk before anything
            _chunk({"role": "assistant", "content": None, "refusal": None}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_A1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}]}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_B2",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            ),
            _chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"city": "Rome"}'}}]}),
            _chunk({}, "tool_calls"),
            _usage_chunk(),
            DONE,
        ],
        Expect(
            finish_reason="tool_calls",
            stop_reason="completed",
            calls=(
                ("call_A1", "get_weather", '{"city": "Oslo"}'),
                ("call_B2", "get_weather", '{"city": "Rome"}'),
            ),
        ),
    ),
    Case(
        "chat_logprobs_stream",
        "chat",
        True,
        [
            _chunk({"role": "assistant", "content": ""}, logprobs={"content": [], "refusal": None}),
            _chunk({"content": "Hi"}, logprobs={"content": [_tok("Hi", -0.01)], "refusal": None}),
            _chunk({"content": "!"}, logprobs={"content": [_tok("!", -0.4)], "refusal": None}),
            _chunk({}, "stop"),
            _usage_chunk(),
            DONE,
        ],
        Expect(text="Hi!", logprob_tokens=("Hi", "!")),
        {"logprobs": True, "top_logprobs": 1},
    ),
    Case(
        "chat_logprobs_whole",
        "chat",
        False,
        _completion(
            {"role": "assistant", "content": "Hi!", "refusal": None},
            "stop",
            {"content": [_tok("Hi", -0.01), _tok("!", -0.4)], "refusal": None},
        ),
        Expect(text="Hi!", logprob_tokens=("Hi", "!")),
        {"logprobs": True, "top_logprobs": 1},
    ),
]


# ---------------------------------------------------------------------- Responses


def _response(
    status: str,
    output: list[dict[str, Any]],
    *,
    incomplete: str | None = None,
) -> dict[str, Any]:
    return {
        "id": "resp_68af1c2e",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": None,
        "max_output_tokens": 64 if incomplete == "max_output_tokens" else None,
        "model": "o4-mini-2025-04-16",
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": "medium", "summary": "detailed"},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": 40,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 64,
            "output_tokens_details": {"reasoning_tokens": 48},
            "total_tokens": 104,
        }
        if status != "in_progress"
        else None,
        "user": None,
        "metadata": {},
    }


class _Events:
    def __init__(self) -> None:
        self.events: list[dict[str, Any] | str] = []
        self.add("response.created", response=_response("in_progress", []))
        self.add("response.in_progress", response=_response("in_progress", []))

    def add(self, type_: str, **fields: Any) -> _Events:
        self.events.append({"type": type_, "sequence_number": len(self.events), **fields})
        return self

    def reasoning(self, n: int, rid: str, parts: list[list[str]], encrypted: str) -> dict[str, Any]:
        item = {"id": rid, "type": "reasoning", "summary": [], "encrypted_content": None}
        self.add("response.output_item.added", output_index=n, item=item)
        for k, pieces in enumerate(parts):
            empty = {"type": "summary_text", "text": ""}
            self.add(
                "response.reasoning_summary_part.added",
                item_id=rid,
                output_index=n,
                summary_index=k,
                part=empty,
            )
            for p in pieces:
                self.add(
                    "response.reasoning_summary_text.delta",
                    item_id=rid,
                    output_index=n,
                    summary_index=k,
                    delta=p,
                    obfuscation="aB3",
                )
            full = {"type": "summary_text", "text": "".join(pieces)}
            self.add(
                "response.reasoning_summary_text.done",
                item_id=rid,
                output_index=n,
                summary_index=k,
                text=full["text"],
            )
            self.add(
                "response.reasoning_summary_part.done",
                item_id=rid,
                output_index=n,
                summary_index=k,
                part=full,
            )
        done = {
            **item,
            "summary": [{"type": "summary_text", "text": "".join(p)} for p in parts],
            "encrypted_content": encrypted,
        }
        self.add("response.output_item.done", output_index=n, item=done)
        return done

    def message(
        self,
        n: int,
        mid: str,
        pieces: list[str],
        *,
        kind: str = "output_text",
        status: str = "completed",
        phase: str | None = None,
        logprobs: list[list[dict[str, Any]]] | None = None,
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "id": mid,
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        if phase is not None:
            item["phase"] = phase
        self.add("response.output_item.added", output_index=n, item=item)
        empty: dict[str, Any] = (
            {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            if kind == "output_text"
            else {"type": "refusal", "refusal": ""}
        )
        self.add(
            "response.content_part.added", item_id=mid, output_index=n, content_index=0, part=empty
        )
        event = "response.output_text.delta" if kind == "output_text" else "response.refusal.delta"
        for i, p in enumerate(pieces):
            extra: dict[str, Any] = {}
            if kind == "output_text":
                extra["logprobs"] = logprobs[i] if logprobs else []
            self.add(event, item_id=mid, output_index=n, content_index=0, delta=p, **extra)
        whole = "".join(pieces)
        if kind == "output_text":
            tokens = [t for group in logprobs or [] for t in group]
            part = {"type": "output_text", "text": whole, "annotations": [], "logprobs": tokens}
            self.add(
                "response.output_text.done",
                item_id=mid,
                output_index=n,
                content_index=0,
                text=whole,
                logprobs=tokens,
            )
        else:
            part = {"type": "refusal", "refusal": whole}
            self.add(
                "response.refusal.done",
                item_id=mid,
                output_index=n,
                content_index=0,
                refusal=whole,
            )
        self.add(
            "response.content_part.done", item_id=mid, output_index=n, content_index=0, part=part
        )
        done = {**item, "status": status, "content": [part]}
        self.add("response.output_item.done", output_index=n, item=done)
        return done

    def call(self, n: int, fid: str, call_id: str, name: str, raw: str) -> dict[str, Any]:
        item = {
            "id": fid,
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": call_id,
            "name": name,
        }
        self.add("response.output_item.added", output_index=n, item=item)
        for k in range(0, len(raw), 6):
            self.add(
                "response.function_call_arguments.delta",
                item_id=fid,
                output_index=n,
                delta=raw[k : k + 6],
                obfuscation="Zk",
            )
        self.add(
            "response.function_call_arguments.done", item_id=fid, output_index=n, arguments=raw
        )
        done = {**item, "status": "completed", "arguments": raw}
        self.add("response.output_item.done", output_index=n, item=done)
        return done

    def end(self, output: list[dict[str, Any]], incomplete: str | None = None) -> list[Any]:
        if incomplete:
            self.add(
                "response.incomplete",
                response=_response("incomplete", output, incomplete=incomplete),
            )
        else:
            self.add("response.completed", response=_response("completed", output))
        return self.events


ENC = "gAAAAABo1r9XQm" + "x" * 40
PARTS = [
    ["**Checking the forecast**\n\nThe user wants ", "the weather in Oslo."],
    ["**Choosing the tool**\n\nI will call ", "get_weather."],
]
THINKING = "\n\n".join("".join(p) for p in PARTS)


def _refusal_stream() -> list[Any]:
    ev = _Events()
    msg = ev.message(
        0, "msg_01", ["I'm sorry, but I ", "can't help with ", "that request."], kind="refusal"
    )
    ev.add("response.some_future_event", note="an event type no reader knows")
    return ev.end([msg])


def _reasoning_stream() -> tuple[list[Any], list[dict[str, Any]]]:
    ev = _Events()
    rs = ev.reasoning(0, "rs_01", PARTS, ENC)
    ev.add("keepalive")
    fc = ev.call(1, "fc_02", "call_W1", "get_weather", '{"city":"Oslo"}')
    return ev.end([rs, fc]), [rs, fc]


def _incomplete_stream() -> tuple[list[Any], list[dict[str, Any]]]:
    ev = _Events()
    rs = ev.reasoning(0, "rs_11", [["Thinking about ", "Rome."]], ENC)
    msg = ev.message(1, "msg_12", ["Rome was ", "founded in"], status="incomplete")
    return ev.end([rs, msg], "max_output_tokens"), [rs, msg]


def _commentary_stream() -> tuple[list[Any], list[dict[str, Any]]]:
    ev = _Events()
    msg = ev.message(0, "msg_21", ["Let me check ", "the weather."], phase="commentary")
    fc = ev.call(1, "fc_22", "call_C1", "get_weather", '{"city":"Oslo"}')
    return ev.end([msg, fc]), [msg, fc]


def _logprobs_stream() -> tuple[list[Any], list[dict[str, Any]]]:
    ev = _Events()
    lp = [
        [{"token": "Hi", "logprob": -0.01, "bytes": [72, 105], "top_logprobs": []}],
        [{"token": "!", "logprob": -0.4, "bytes": [33], "top_logprobs": []}],
    ]
    msg = ev.message(0, "msg_31", ["Hi", "!"], logprobs=lp)
    return ev.end([msg]), [msg]


_reasoning_events, _reasoning_output = _reasoning_stream()
_incomplete_events, _incomplete_output = _incomplete_stream()
_commentary_events, _commentary_output = _commentary_stream()
_logprobs_events, _logprobs_output = _logprobs_stream()
_refusal_events = _refusal_stream()

_REASONING_EXPECT = Expect(
    finish_reason="tool_calls",
    thinking=THINKING,
    calls=(("call_W1", "get_weather", '{"city":"Oslo"}'),),
    reasoning_ids=("rs_01",),
    encrypted=(ENC,),
)
_INCOMPLETE_EXPECT = Expect(
    text="Rome was founded in",
    finish_reason="length",
    stop_reason="length",
    thinking="Thinking about Rome.",
    incomplete_reason="max_output_tokens",
    reasoning_ids=("rs_11",),
    encrypted=(ENC,),
)
_COMMENTARY_EXPECT = Expect(
    text="Let me check the weather.",
    finish_reason="tool_calls",
    calls=(("call_C1", "get_weather", '{"city":"Oslo"}'),),
    phase="commentary",
)

RESPONSES_CASES = [
    Case(
        "resp_refusal_stream",
        "responses",
        True,
        _refusal_events,
        Expect(refusal=REFUSAL, stop_reason="refusal"),
    ),
    Case(
        "resp_refusal_whole",
        "responses",
        False,
        _response(
            "completed",
            [
                {
                    "id": "msg_01",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "refusal", "refusal": REFUSAL}],
                }
            ],
        ),
        Expect(refusal=REFUSAL, stop_reason="refusal"),
    ),
    Case("resp_reasoning_stream", "responses", True, _reasoning_events, _REASONING_EXPECT),
    Case(
        "resp_reasoning_whole",
        "responses",
        False,
        _response("completed", _reasoning_output),
        _REASONING_EXPECT,
    ),
    Case("resp_incomplete_stream", "responses", True, _incomplete_events, _INCOMPLETE_EXPECT),
    Case(
        "resp_incomplete_whole",
        "responses",
        False,
        _response("incomplete", _incomplete_output, incomplete="max_output_tokens"),
        _INCOMPLETE_EXPECT,
    ),
    Case(
        "resp_content_filter_whole",
        "responses",
        False,
        _response("incomplete", [], incomplete="content_filter"),
        Expect(
            finish_reason="content_filter",
            stop_reason="content_filter",
            incomplete_reason="content_filter",
        ),
    ),
    Case("resp_commentary_stream", "responses", True, _commentary_events, _COMMENTARY_EXPECT),
    Case(
        "resp_commentary_whole",
        "responses",
        False,
        _response("completed", _commentary_output),
        _COMMENTARY_EXPECT,
    ),
    Case(
        "resp_logprobs_stream",
        "responses",
        True,
        _logprobs_events,
        Expect(text="Hi!", logprob_tokens=("Hi", "!")),
        {"logprobs": True, "top_logprobs": 1},
    ),
    Case(
        "resp_logprobs_whole",
        "responses",
        False,
        _response("completed", _logprobs_output),
        Expect(text="Hi!", logprob_tokens=("Hi", "!")),
        {"logprobs": True, "top_logprobs": 1},
    ),
]

CASES = CHAT_CASES + RESPONSES_CASES


def arguments_text(raw: str) -> Any:
    """The stored form of argument text: the object when it decodes to one."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
