"""The Anthropic Messages stream, read as pure functions over plain JSON values
(no ``anthropic`` here): :class:`MessagesStreamAssembler` turns the stream's
events into engine deltas and the whole answer.

What each answer becomes::

    the stream says                           the answer
    ---------------------------------------   ----------------------------------------------
    text blocks (text_delta)                  text (the blocks joined), TextDelta
    tool_use blocks (input_json_delta)        tool calls, ids kept; ToolCallDelta per piece
    thinking blocks (thinking_delta,          reasoning items (provider "anthropic", the
      signature_delta)                          thinking as the summary, data {"type":
                                                "thinking", "signature"}); thinking text,
                                                ThinkingDelta
    redacted_thinking blocks                  reasoning items (data {"type":
                                                "redacted_thinking", "data"})
    stop_reason end_turn / stop_sequence      finish_reason stop (tool_calls with calls)
    stop_reason tool_use                      finish_reason tool_calls
    stop_reason max_tokens,                   finish_reason length
      model_context_window_exceeded
    stop_reason refusal                       refusal (the text given with it, else the
                                                stop_details' explanation, else ""); no
                                                text; finish_reason content_filter
    stop_reason pause_turn                    incomplete_reason pause_turn (the turn ends
                                                incomplete; a new message continues it)
    any stop_reason                           provider_reason, as sent
    usage (message_start, then the            usage: prompt_tokens = input + cache read +
      cumulative message_delta counts)          cache creation tokens; completion_tokens =
                                                output tokens; the sent fields beside them
    error event                               StreamErrorEvent (its error type as code)
    ping, other events and blocks             passed over

Each reasoning item's ``position`` is the number of tool calls before it in
the answer, so the next request puts it back where it was. A stream that ends
before its stop reason raises :class:`IncompleteStream`; an event that is not
the wire format's shape raises :class:`MalformedChunk`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
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
    provider_usage,
)
from ._anthropic_body import ANTHROPIC_PROVIDER
from ._openai_common import (
    IncompleteStream,
    MalformedChunk,
    StreamErrorEvent,
    decode_arguments,
    expect_dict,
    new_call_id,
    opt_str,
    short,
)

__all__ = ["THINKING_SEPARATOR", "MessagesStreamAssembler", "anthropic_usage"]

THINKING_SEPARATOR = "\n\n"
"""Between two thinking blocks in ``thinking``, streamed or not."""

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
    "pause_turn": "stop",
}
_USAGE_COUNTS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def anthropic_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """A Messages ``usage`` in the engine's shape: every input token (cache
    reads and writes included) as ``prompt_tokens``, the output tokens
    (thinking included) as ``completion_tokens``, the sent fields beside
    them, and the cache and thinking figures under the shared names."""
    cache_read = usage.get("cache_read_input_tokens")
    cache_write = usage.get("cache_creation_input_tokens")
    details = usage.get("output_tokens_details")
    thinking = details.get("thinking_tokens") if isinstance(details, Mapping) else None
    return provider_usage(
        usage,
        prompt_tokens=sum(_count(usage.get(k)) for k in _USAGE_COUNTS),
        completion_tokens=_count(usage.get("output_tokens")),
        cache_read_tokens=cache_read if isinstance(cache_read, int) else None,
        cache_creation_tokens=cache_write if isinstance(cache_write, int) else None,
        reasoning_tokens=thinking if isinstance(thinking, int) else None,
    )


@dataclass(slots=True)
class _Block:
    """One content block of the answer, as far as it has come."""

    kind: str
    text: list[str] = field(default_factory=list)
    signature: str | None = None
    data: str | None = None
    call_id: str | None = None
    name: str = ""
    start_input: str = ""
    arguments: list[str] = field(default_factory=list)
    call_index: int = -1
    calls_before: int = 0


class MessagesStreamAssembler:
    """Turns Messages streaming events (decoded JSON) into engine deltas and
    the whole answer (the table is in this module's docstring)."""

    def __init__(self, new_id: Callable[[], str] = new_call_id) -> None:
        self._new_id = new_id
        self._blocks: dict[int, _Block] = {}
        self._order: list[int] = []
        self._calls = 0
        self._thinking_blocks = 0
        self._usage: dict[str, Any] = {}
        self._model: str | None = None
        self._stop_reason: str | None = None
        self._stop_details: object = None
        self._started = False
        self._stopped = False

    @property
    def text(self) -> str:
        """The text delivered so far."""
        return "".join(
            "".join(b.text) for i in self._order if (b := self._blocks[i]).kind == "text"
        )

    def _block(self, data: Mapping[str, Any]) -> _Block:
        index = data.get("index")
        if not isinstance(index, int) or index not in self._blocks:
            raise MalformedChunk(f"an event for a content block never started: {short(data)}")
        return self._blocks[index]

    def _start(self, data: Mapping[str, Any]) -> list[LLMChunk]:
        index = data.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise MalformedChunk(f"a content block without an 'index': {short(data)}")
        block = expect_dict(data.get("content_block"), "'content_block'")
        kind = opt_str(block.get("type"), "a content block's 'type'") or ""
        out = _Block(kind, calls_before=self._calls)
        chunks: list[LLMChunk] = []
        if kind == "text":
            first = opt_str(block.get("text"), "a text block's 'text'") or ""
            if first:
                out.text.append(first)
                chunks.append(TextDelta(first))
        elif kind == "thinking":
            first = opt_str(block.get("thinking"), "a thinking block's 'thinking'") or ""
            out.signature = opt_str(block.get("signature"), "a thinking block's 'signature'")
            if self._thinking_blocks:
                chunks.append(ThinkingDelta(THINKING_SEPARATOR))
            self._thinking_blocks += 1
            if first:
                out.text.append(first)
                chunks.append(ThinkingDelta(first))
        elif kind == "redacted_thinking":
            out.data = opt_str(block.get("data"), "a redacted thinking block's 'data'")
        elif kind == "tool_use":
            out.call_id = opt_str(block.get("id"), "a tool_use block's 'id'")
            out.name = opt_str(block.get("name"), "a tool_use block's 'name'") or ""
            start = block.get("input")
            if isinstance(start, dict) and start:
                out.start_input = json.dumps(start, ensure_ascii=False)
            out.call_index = self._calls
            self._calls += 1
            chunks.append(ToolCallDelta(index=out.call_index, id=out.call_id, name=out.name))
        self._blocks[index] = out
        self._order.append(index)
        return chunks

    def _delta(self, data: Mapping[str, Any]) -> list[LLMChunk]:
        block = self._block(data)
        delta = expect_dict(data.get("delta"), "a content block delta's 'delta'")
        kind = delta.get("type")
        if kind == "text_delta" and block.kind == "text":
            text = opt_str(delta.get("text"), "'text_delta' text") or ""
            block.text.append(text)
            return [TextDelta(text)] if text else []
        if kind == "thinking_delta" and block.kind == "thinking":
            text = opt_str(delta.get("thinking"), "'thinking_delta' thinking") or ""
            block.text.append(text)
            return [ThinkingDelta(text)] if text else []
        if kind == "signature_delta" and block.kind == "thinking":
            block.signature = opt_str(delta.get("signature"), "'signature_delta' signature")
            return []
        if kind == "input_json_delta" and block.kind == "tool_use":
            piece = opt_str(delta.get("partial_json"), "'input_json_delta' partial_json") or ""
            block.arguments.append(piece)
            return [ToolCallDelta(index=block.call_index, arguments=piece)] if piece else []
        return []  # citations, or a delta for a block kind not read here

    def _message_delta(self, data: Mapping[str, Any]) -> None:
        delta = expect_dict(data.get("delta"), "a message delta's 'delta'")
        reason = opt_str(delta.get("stop_reason"), "'stop_reason'")
        if reason is not None:
            self._stop_reason = reason
        if delta.get("stop_details") is not None:
            self._stop_details = delta["stop_details"]
        usage = data.get("usage")
        if isinstance(usage, dict):
            # cumulative counts: they replace; a count left out keeps its earlier value
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def feed(self, event: object) -> list[LLMChunk]:
        data = expect_dict(event, "an event")
        kind = data.get("type")
        if not isinstance(kind, str):
            raise MalformedChunk(f"an event without a 'type': {short(data)}")
        if kind == "error":
            error = data.get("error")
            error = error if isinstance(error, dict) else {}
            raise StreamErrorEvent(
                str(error.get("message") or "the server reported an error"),
                code=error.get("type"),
                type=error.get("type") if isinstance(error.get("type"), str) else None,
            )
        if kind == "message_start":
            message = expect_dict(data.get("message"), "'message_start' message")
            self._started = True
            model = message.get("model")
            self._model = model if isinstance(model, str) else None
            usage = message.get("usage")
            if isinstance(usage, dict):
                self._usage = {k: v for k, v in usage.items() if v is not None}
            return []
        if not self._started and kind != "ping":
            raise MalformedChunk(f"'{kind}' before 'message_start': {short(data)}")
        if kind == "content_block_start":
            return self._start(data)
        if kind == "content_block_delta":
            return self._delta(data)
        if kind == "message_delta":
            self._message_delta(data)
        elif kind == "message_stop":
            self._stopped = True
        return []  # content_block_stop, ping, and events not read here

    def _refusal(self, text: str) -> str:
        details = self._stop_details
        explanation = details.get("explanation") if isinstance(details, dict) else None
        return text or (explanation if isinstance(explanation, str) else "")

    def finish(self) -> LLMResponse:
        if not self._stopped and self._stop_reason is None:
            raise IncompleteStream(
                "the stream ended before the answer's stop reason (the answer is incomplete)"
            )
        blocks = [self._blocks[i] for i in self._order]
        text = "".join("".join(b.text) for b in blocks if b.kind == "text")
        calls = tuple(
            ToolCallData(
                b.call_id or self._new_id(),
                b.name,
                decode_arguments("".join(b.arguments) or b.start_input),
            )
            for b in blocks
            if b.kind == "tool_use"
        )
        reasoning: list[ReasoningData] = []
        thinking: list[str] = []
        for b in blocks:
            if b.kind == "thinking":
                said = "".join(b.text)
                thinking.append(said)
                reasoning.append(
                    ReasoningData(
                        "",
                        (said,),
                        provider=ANTHROPIC_PROVIDER,
                        data={"type": "thinking", "signature": b.signature or ""},
                        position=b.calls_before,
                    )
                )
            elif b.kind == "redacted_thinking":
                reasoning.append(
                    ReasoningData(
                        "",
                        provider=ANTHROPIC_PROVIDER,
                        data={"type": "redacted_thinking", "data": b.data or ""},
                        position=b.calls_before,
                    )
                )
        reason = self._stop_reason
        finish = _FINISH.get(reason or "", "stop")
        if finish == "stop" and calls:
            finish = "tool_calls"
        refusal = None
        if reason == "refusal":
            refusal, text = self._refusal(text), ""
        return LLMResponse(
            text=text,
            tool_calls=calls,
            thinking=THINKING_SEPARATOR.join(thinking) if thinking else None,
            usage=anthropic_usage(self._usage) if self._usage else None,
            finish_reason=finish,
            model=self._model,
            refusal=refusal,
            incomplete_reason="pause_turn" if reason == "pause_turn" else None,
            reasoning=tuple(reasoning),
            provider_reason=reason,
        )
