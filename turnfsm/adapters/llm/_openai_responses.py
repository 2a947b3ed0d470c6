"""The OpenAI Responses wire format, as pure functions over plain JSON values
(no ``openai`` here).

- :func:`responses_request_body` — the request body (``POST /responses``), its
  ``input`` items built from the chat-format messages by :func:`responses_input`
  and its tools by :func:`responses_tools`;
- :class:`ResponsesStreamAssembler` — the Responses streaming events in, engine
  deltas and the whole answer out; :func:`responses_response` for a whole
  ``response``.

The request side is :mod:`._openai_responses_body` (its names are exported
here too). What both formats share (errors, checks, usage, retry advice) is in
:mod:`._openai_common`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...model import (
    LLMChunk,
    LLMResponse,
    ReasoningData,
    TextDelta,
    ThinkingDelta,
    ToolCallData,
    ToolCallDelta,
)
from ._openai_common import (
    AssembledCall,
    IncompleteStream,
    MalformedChunk,
    StreamErrorEvent,
    decode_arguments,
    expect_dict,
    expect_list,
    new_call_id,
    normalize_usage,
    opt_str,
    short,
)
from ._openai_responses_body import (
    ENCRYPTED_REASONING,
    responses_input,
    responses_request_body,
    responses_tools,
)

__all__ = [
    "ENCRYPTED_REASONING",
    "SUMMARY_SEPARATOR",
    "ResponsesStreamAssembler",
    "responses_input",
    "responses_request_body",
    "responses_response",
    "responses_tools",
]

# ---------------------------------------------------------------------- Responses in

SUMMARY_SEPARATOR = "\n\n"
"""Between two reasoning summary parts (and two reasoning items) in ``thinking``,
streamed or not."""

_INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _response_error(resp: Mapping[str, Any], default: str) -> StreamErrorEvent:
    error = resp.get("error")
    if isinstance(error, dict):
        return StreamErrorEvent(
            str(error.get("message") or default), code=error.get("code"), type=error.get("type")
        )
    return StreamErrorEvent(default)


@dataclass(slots=True)
class _Output:
    """What a response's ``output`` items hold."""

    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: list[AssembledCall] = field(default_factory=list)
    reasoning: list[ReasoningData] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)
    raw_reasoning: list[str] = field(default_factory=list)
    phase: str | None = None
    logprobs: list[Any] | None = None

    @property
    def thinking(self) -> str:
        return SUMMARY_SEPARATOR.join(self.summary or self.raw_reasoning)


def _reasoning_item(item: Mapping[str, Any], out: _Output) -> None:
    summary = []
    for part in expect_list(item.get("summary"), "a reasoning item's 'summary'"):
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            summary.append(part["text"])
    out.summary.extend(summary)
    for part in expect_list(item.get("content"), "a reasoning item's 'content'"):
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            out.raw_reasoning.append(part["text"])
    rid = opt_str(item.get("id"), "a reasoning item's 'id'")
    if rid:  # without an id it cannot be sent back
        out.reasoning.append(
            ReasoningData(
                rid,
                tuple(summary),
                opt_str(item.get("encrypted_content"), "'encrypted_content'"),
            )
        )


def _output_of(items: Iterable[object], new_id: Callable[[], str]) -> _Output:
    out = _Output()
    for item in items:
        item = expect_dict(item, "an output item")
        kind = item.get("type")
        if kind == "message":
            phase = opt_str(item.get("phase"), "a message's 'phase'")
            if phase is not None:
                out.phase = phase
            for part in expect_list(item.get("content"), "a message's 'content'"):
                part = expect_dict(part, "a content part")
                if part.get("type") == "output_text":
                    out.text.append(opt_str(part.get("text"), "'output_text.text'") or "")
                    if part.get("logprobs") is not None:
                        tokens = expect_list(part.get("logprobs"), "'output_text.logprobs'")
                        out.logprobs = (out.logprobs or []) + tokens
                elif part.get("type") == "refusal":
                    out.refusal.append(opt_str(part.get("refusal"), "'refusal'") or "")
        elif kind == "function_call":
            out.calls.append(
                AssembledCall(
                    opt_str(item.get("call_id"), "a function call's 'call_id'") or new_id(),
                    opt_str(item.get("name"), "a function call's 'name'") or "",
                    opt_str(item.get("arguments"), "a function call's 'arguments'") or "",
                )
            )
        elif kind == "reasoning":
            _reasoning_item(item, out)
    return out


def _finish(resp: Mapping[str, Any], has_calls: bool) -> tuple[str, str | None]:
    """The finish reason (Chat Completions names) and the incomplete reason as sent."""
    if resp.get("status") == "incomplete":
        details = resp.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        sent = str(reason or "incomplete")
        return _INCOMPLETE_REASONS.get(sent, sent), sent
    return ("tool_calls" if has_calls else "stop"), None


def responses_response(data: object, new_id: Callable[[], str] = new_call_id) -> LLMResponse:
    """A whole (non-streamed) ``response`` object as an :class:`LLMResponse`."""
    resp = expect_dict(data, "the answer")
    if resp.get("status") == "failed":
        raise _response_error(resp, "the response failed")
    out = _output_of(expect_list(resp.get("output"), "'output'"), new_id)
    model = resp.get("model")
    finish, incomplete = _finish(resp, bool(out.calls))
    return LLMResponse(
        text="".join(out.text),
        tool_calls=tuple(
            ToolCallData(c.id or new_id(), c.name, decode_arguments(c.arguments)) for c in out.calls
        ),
        thinking=out.thinking or None,
        usage=normalize_usage(resp.get("usage")),
        finish_reason=finish,
        model=model if isinstance(model, str) else None,
        refusal="".join(out.refusal) if out.refusal else None,
        incomplete_reason=incomplete,
        reasoning=tuple(out.reasoning),
        phase=out.phase,
        logprobs=out.logprobs or None,
    )


class ResponsesStreamAssembler:
    """Turns Responses streaming events into engine deltas and the whole answer.

    Read: ``response.output_text.delta`` as text (its ``logprobs`` kept);
    ``response.refusal.delta`` as the refusal (no delta: it is not text);
    ``response.reasoning_summary_text.delta`` (and the raw
    ``response.reasoning_text.delta``) as thinking, a new summary part
    starting with :data:`SUMMARY_SEPARATOR` so the streamed thinking is the
    parts joined as a whole answer joins them; ``response.output_item.done``
    items (reasoning with its ``encrypted_content``, messages with their
    ``phase``) as the answer's output, unless the final response lists its
    own; function calls from
    ``response.output_item.added`` (id, name), ``response.function_call_arguments.delta``
    (argument pieces), ``...arguments.done`` and ``response.output_item.done``
    (the final values); ``response.completed`` / ``response.incomplete`` end the
    answer with its usage. ``error`` and ``response.failed`` raise
    :class:`StreamErrorEvent`. Other events are ignored.
    """

    def __init__(self, new_id: Callable[[], str] = new_call_id) -> None:
        self._new_id = new_id
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: list[AssembledCall] = []
        self._slot: dict[object, int] = {}  # item id / output_index -> call ordinal
        self._final: dict[str, Any] | None = None
        self._refusal: list[str] = []
        self._logprobs: list[Any] | None = None
        self._part: tuple[object, ...] | None = None  # the thinking part being streamed
        self._done: dict[int, dict[str, Any]] = {}  # output_index -> finished item

    @property
    def text(self) -> str:
        return "".join(self._text)

    def _call_for(self, event: Mapping[str, Any]) -> tuple[int, AssembledCall] | None:
        for key in (event.get("item_id"), ("index", event.get("output_index"))):
            if key in self._slot:
                n = self._slot[key]
                return n, self._calls[n]
        return None

    def _add_call(self, event: Mapping[str, Any], item: Mapping[str, Any]) -> ToolCallDelta:
        n = len(self._calls)
        call = AssembledCall(
            opt_str(item.get("call_id"), "a function call's 'call_id'"),
            opt_str(item.get("name"), "a function call's 'name'") or "",
            opt_str(item.get("arguments"), "a function call's 'arguments'") or "",
        )
        self._calls.append(call)
        if isinstance(item.get("id"), str):
            self._slot[item["id"]] = n
        self._slot[("index", event.get("output_index"))] = n
        return ToolCallDelta(index=n, id=call.id, name=call.name or None, arguments=call.arguments)

    def feed(self, event: object) -> list[LLMChunk]:
        data = expect_dict(event, "an event")
        kind = data.get("type")
        if not isinstance(kind, str):
            raise MalformedChunk(f"an event without a 'type': {short(data)}")
        on = _ON_EVENT.get(kind)
        return on(self, kind, data) if on is not None else []

    def _text_delta(self, kind: str, data: dict[str, Any]) -> list[LLMChunk]:
        if data.get("logprobs"):
            tokens = expect_list(data.get("logprobs"), "'logprobs'")
            self._logprobs = (self._logprobs or []) + tokens
        text = opt_str(data.get("delta"), f"'{kind}' delta") or ""
        if text:
            self._text.append(text)
            return [TextDelta(text)]
        return []

    def _refusal_delta(self, kind: str, data: dict[str, Any]) -> list[LLMChunk]:
        self._refusal.append(opt_str(data.get("delta"), f"'{kind}' delta") or "")
        return []

    def _reasoning_delta(self, kind: str, data: dict[str, Any]) -> list[LLMChunk]:
        text = opt_str(data.get("delta"), f"'{kind}' delta") or ""
        if not text:
            return []
        part = (
            kind,
            data.get("item_id"),
            data.get("output_index"),
            data.get("summary_index", data.get("content_index")),
        )
        out: list[LLMChunk] = []
        if self._part is not None and part != self._part:
            self._thinking.append(SUMMARY_SEPARATOR)
            out.append(ThinkingDelta(SUMMARY_SEPARATOR))
        self._part = part
        self._thinking.append(text)
        out.append(ThinkingDelta(text))
        return out

    def _output_item(self, kind: str, data: dict[str, Any]) -> list[LLMChunk]:
        item = expect_dict(data.get("item"), f"'{kind}' item")
        index = data.get("output_index")
        if kind == "response.output_item.done" and isinstance(index, int):
            self._done[index] = item
        if item.get("type") != "function_call":
            return []
        found = self._call_for({**data, "item_id": item.get("id")})
        if found is None:
            return [self._add_call(data, item)]
        if kind == "response.output_item.done":  # the final values win
            call = found[1]
            call.id = opt_str(item.get("call_id"), "'call_id'") or call.id
            call.name = opt_str(item.get("name"), "'name'") or call.name
            args = opt_str(item.get("arguments"), "'arguments'")
            call.arguments = args if args is not None else call.arguments
        return []

    def _arguments_delta(self, kind: str, data: dict[str, Any]) -> list[LLMChunk]:
        found = self._call_for(data)
        if found is None:
            raise MalformedChunk(f"arguments for a function call never announced: {short(data)}")
        piece = opt_str(data.get("delta"), "'arguments' delta") or ""
        found[1].arguments += piece
        return [ToolCallDelta(index=found[0], arguments=piece)] if piece else []

    def _arguments_done(self, kind: str, data: dict[str, Any]) -> list[LLMChunk]:
        found = self._call_for(data)
        args = opt_str(data.get("arguments"), "'arguments'")
        if found is not None and args is not None:
            found[1].arguments = args
        return []

    def _completed(self, kind: str, data: dict[str, Any]) -> list[LLMChunk]:
        self._final = expect_dict(data.get("response"), f"'{kind}' response")
        return []

    def _failed(self, kind: str, data: dict[str, Any]) -> list[LLMChunk]:
        raise _response_error(
            expect_dict(data.get("response"), "'response.failed' response"),
            "the response failed",
        )

    def _error(self, kind: str, data: dict[str, Any]) -> list[LLMChunk]:
        raise StreamErrorEvent(
            str(data.get("message") or "the server reported an error"),
            code=data.get("code"),
            type=data.get("type") if data.get("type") != "error" else None,
        )

    def finish(self) -> LLMResponse:
        final = self._final
        if final is None:
            raise IncompleteStream(
                "the stream ended without response.completed (the answer is incomplete)"
            )
        listed = expect_list(final.get("output"), "'output'")
        items = listed or [self._done[i] for i in sorted(self._done)]
        whole = _output_of(items, str)  # ids for calls without one: given below, once
        text, calls = self.text, list(self._calls)
        if not text and not calls:  # nothing streamed: the output items say it all
            text, calls = "".join(whole.text), whole.calls
        thinking = whole.thinking or "".join(self._thinking)
        refusal = "".join(whole.refusal) if whole.refusal else None
        if refusal is None and self._refusal:
            refusal = "".join(self._refusal)
        model = final.get("model")
        finish, incomplete = _finish(final, bool(calls))
        return LLMResponse(
            text=text,
            tool_calls=tuple(
                ToolCallData(c.id or self._new_id(), c.name, decode_arguments(c.arguments))
                for c in calls
            ),
            thinking=thinking or None,
            usage=normalize_usage(final.get("usage")),
            finish_reason=finish,
            model=model if isinstance(model, str) else None,
            refusal=refusal,
            incomplete_reason=incomplete,
            reasoning=tuple(whole.reasoning),
            phase=whole.phase,
            logprobs=self._logprobs or whole.logprobs or None,
        )


_OnEvent = Callable[[ResponsesStreamAssembler, str, dict[str, Any]], list[LLMChunk]]

_ON_EVENT: dict[str, _OnEvent] = {
    "response.output_text.delta": ResponsesStreamAssembler._text_delta,
    "response.refusal.delta": ResponsesStreamAssembler._refusal_delta,
    "response.reasoning_summary_text.delta": ResponsesStreamAssembler._reasoning_delta,
    "response.reasoning_text.delta": ResponsesStreamAssembler._reasoning_delta,
    "response.output_item.added": ResponsesStreamAssembler._output_item,
    "response.output_item.done": ResponsesStreamAssembler._output_item,
    "response.function_call_arguments.delta": ResponsesStreamAssembler._arguments_delta,
    "response.function_call_arguments.done": ResponsesStreamAssembler._arguments_done,
    "response.completed": ResponsesStreamAssembler._completed,
    "response.incomplete": ResponsesStreamAssembler._completed,
    "response.failed": ResponsesStreamAssembler._failed,
    "error": ResponsesStreamAssembler._error,
}
"""What each kind of event does to the answer being assembled (the chunks it
gives); a kind not here is ignored."""
