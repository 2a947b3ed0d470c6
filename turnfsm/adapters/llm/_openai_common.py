"""The OpenAI wire formats, as pure functions over plain JSON values (no ``openai`` here).

What goes out:

- :func:`chat_request_body` — the Chat Completions request body
  (``POST /chat/completions``);
- :func:`responses_request_body` — the Responses request body (``POST /responses``),
  its ``input`` items built from the chat-format messages by :func:`responses_input`.

What comes back:

- :class:`ChatStreamAssembler` — streamed ``chat.completion.chunk`` objects in,
  engine deltas out, and the whole answer at the end (tool calls assembled from
  their fragments); :func:`chat_completion_response` for a whole (non-streamed)
  ``chat.completion``;
- :class:`ResponsesStreamAssembler` — the Responses streaming events in, the same
  deltas and answer out; :func:`responses_response` for a whole ``response``.

And the headers that carry a provider's retry advice: :func:`retry_after_seconds`.

A chunk or event that is not what the wire format says raises
:class:`MalformedChunk`; a stream that ends before it says it is complete
raises :class:`IncompleteStream`; an error reported inside a stream (an
``error`` event, ``response.failed``) raises :class:`StreamErrorEvent`. The
adapter (``openai.py``) maps these, like the SDK's own errors, into
:class:`~turnfsm.errors.LLMError`.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

from ...model import (
    LLMChunk,
    LLMRequest,
    LLMResponse,
    TextDelta,
    ThinkingDelta,
    ToolCallData,
    ToolCallDelta,
)

__all__ = [
    "CHAT_OWNED_KEYS",
    "ChatStreamAssembler",
    "IncompleteStream",
    "MalformedChunk",
    "ResponsesStreamAssembler",
    "StreamErrorEvent",
    "chat_completion_response",
    "chat_request_body",
    "decode_arguments",
    "new_call_id",
    "normalize_usage",
    "responses_input",
    "responses_request_body",
    "responses_response",
    "responses_tools",
    "retry_after_seconds",
]

CHAT_OWNED_KEYS = frozenset({"model", "messages", "tools", "input", "stream"})
"""Body keys the request itself decides; the same keys in ``parameters`` or
``extra_body`` are ignored (the model is chosen by ``request.model`` or the
adapter's ``model=``)."""


# ---------------------------------------------------------------------- errors


class MalformedChunk(ValueError):
    """A streamed chunk (or a whole answer) is not what the wire format says."""


class IncompleteStream(ValueError):
    """The stream ended before the server said the answer was complete."""


class StreamErrorEvent(Exception):
    """The server reported an error inside a 200 stream (or a failed response)."""

    def __init__(self, message: str, *, code: object = None, type: str | None = None) -> None:
        self.message = message
        self.code = code
        self.type = type
        super().__init__(message)


# ---------------------------------------------------------------------- small helpers


def new_call_id() -> str:
    """An id for a tool call the server sent without one."""
    return f"call_{uuid.uuid4().hex[:24]}"


def decode_arguments(raw: str) -> dict[str, Any] | str:
    """Tool-call arguments as the model sent them: the decoded JSON object, or the
    raw text when it is not a JSON object (the engine turns that into an error
    result the model sees). Empty arguments are ``{}``."""
    if not raw.strip():
        return {}
    try:
        decoded = json.loads(raw)
    except (ValueError, RecursionError):  # nested too deeply for the parser
        return raw
    return decoded if isinstance(decoded, dict) else raw


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def normalize_usage(usage: object) -> dict[str, Any] | None:
    """Token usage in the engine's shape (``prompt_tokens``, ``completion_tokens``,
    ``total_tokens``, plus whatever else the server sent). The Responses API's
    ``input_tokens`` / ``output_tokens`` are renamed; its details are kept."""
    if not isinstance(usage, Mapping):
        return None
    out: dict[str, Any] = {str(k): v for k, v in usage.items()}
    if "prompt_tokens" not in out and "input_tokens" in out:
        out["prompt_tokens"] = out.pop("input_tokens")
    if "completion_tokens" not in out and "output_tokens" in out:
        out["completion_tokens"] = out.pop("output_tokens")
    prompt = _int(out.get("prompt_tokens"))
    completion = _int(out.get("completion_tokens"))
    out["prompt_tokens"] = prompt
    out["completion_tokens"] = completion
    out["total_tokens"] = _int(out.get("total_tokens")) or prompt + completion
    return out


def retry_after_seconds(headers: Mapping[str, str], now: float) -> float | None:
    """The delay a server asked for: ``retry-after-ms`` (milliseconds), else
    ``retry-after`` as seconds or as an HTTP date (relative to ``now``, epoch
    seconds; a date in the past is 0). ``None`` when absent or unreadable."""
    lower = {k.lower(): v for k, v in headers.items()}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lower.get(name)
        if value is None:
            continue
        try:
            seconds = float(value.strip()) / scale
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    value = lower.get("retry-after")
    if value is None:
        return None
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(when.timestamp() - now, 0.0)


def _merge_parameters(
    body: dict[str, Any], sources: Iterable[Mapping[str, Any] | None]
) -> dict[str, Any]:
    for source in sources:
        for key, value in (source or {}).items():
            if key not in CHAT_OWNED_KEYS:
                body[key] = value
    return body


# ---------------------------------------------------------------------- Chat Completions out


def chat_request_body(
    request: LLMRequest,
    *,
    stream: bool,
    model: str | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Chat Completions request body for ``request`` (pure; nothing is mutated).

    ``messages`` go as they are (the engine already speaks the chat format:
    ``system``/``developer``, ``user`` with text, ``image_url`` and ``file``
    parts, ``assistant`` with ``tool_calls``, ``tool`` with ``tool_call_id``);
    ``tools`` go when there are any (an empty list is refused by the API). The
    context's model parameters (``temperature``, ``max_tokens``, ...) are merged
    in, then ``extra_body``; neither can change the keys the request owns
    (:data:`CHAT_OWNED_KEYS`). Streaming asks for the final usage chunk
    (``stream_options.include_usage``) unless the parameters say otherwise;
    ``stream_options`` is dropped from a non-streamed body, where the API
    refuses it.
    """
    body: dict[str, Any] = {
        "model": model or request.model,
        "messages": list(request.messages),
    }
    if request.tools:
        body["tools"] = list(request.tools)
    _merge_parameters(body, (request.parameters, extra_body))
    options = body.pop("stream_options", None)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True, **(options or {})}
    return body


# ---------------------------------------------------------------------- Chat Completions in


@dataclass(slots=True)
class _Call:
    id: str | None = None
    name: str = ""
    arguments: str = ""


def _expect_dict(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedChunk(f"{what} is not a JSON object: {_short(value)}")
    return value


def _expect_list(value: object, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedChunk(f"{what} is not a JSON array: {_short(value)}")
    return value


def _opt_str(value: object, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise MalformedChunk(f"{what} is not a string: {_short(value)}")


def _short(value: object) -> str:
    text = json.dumps(value, default=repr) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


_REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Where OpenAI-compatible servers put reasoning text (DeepSeek, vLLM, Ollama,
OpenRouter, LM Studio); the first one present is used."""


def _reasoning(obj: Mapping[str, Any]) -> str | None:
    for key in _REASONING_FIELDS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            return value
    return None


class ChatStreamAssembler:
    """Turns streamed ``chat.completion.chunk`` objects into engine deltas and, at
    the end, the whole :class:`LLMResponse`.

    Only choice 0 is followed (the adapter never asks for ``n > 1``). Tool calls
    arrive as fragments keyed by ``index`` — the id, the name and pieces of the
    arguments across chunks, several calls interleaved — and are assembled per
    index; a server that leaves ``index`` out is followed by ``id`` (a new id
    starts a new call, no id continues the last one).
    """

    def __init__(self, new_id: Callable[[], str] = new_call_id) -> None:
        self._new_id = new_id
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._by_id: dict[str, int] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None

    @property
    def text(self) -> str:
        """The text delivered so far."""
        return "".join(self._text)

    def feed(self, chunk: object) -> list[LLMChunk]:
        """One decoded chunk in; the deltas it carries out (possibly none)."""
        data = _expect_dict(chunk, "a chunk")
        out: list[LLMChunk] = []
        model = data.get("model")
        if isinstance(model, str) and model:
            self.model = model
        if data.get("usage") is not None:
            self.usage = normalize_usage(_expect_dict(data["usage"], "'usage'"))
        for choice in _expect_list(data.get("choices"), "'choices'"):
            choice = _expect_dict(choice, "a choice")
            if choice.get("index", 0) != 0:
                continue
            delta = _expect_dict(choice.get("delta") or {}, "'delta'")
            thinking = _reasoning(delta)
            if thinking:
                self._thinking.append(thinking)
                out.append(ThinkingDelta(thinking))
            for key in ("content", "refusal"):
                text = _opt_str(delta.get(key), f"'delta.{key}'")
                if text:
                    self._text.append(text)
                    out.append(TextDelta(text))
            for pos, fragment in enumerate(_expect_list(delta.get("tool_calls"), "'tool_calls'")):
                out.append(self._tool_fragment(pos, _expect_dict(fragment, "a tool call")))
            reason = _opt_str(choice.get("finish_reason"), "'finish_reason'")
            if reason:
                self.finish_reason = reason
        return out

    def _tool_fragment(self, pos: int, fragment: dict[str, Any]) -> ToolCallDelta:
        call_id = _opt_str(fragment.get("id"), "a tool call's 'id'") or None
        index = fragment.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            if index is not None:
                raise MalformedChunk(f"a tool call's 'index' is not an integer: {_short(index)}")
            if call_id is not None and call_id in self._by_id:
                index = self._by_id[call_id]
            elif call_id is not None or not self._calls:
                index = max(self._calls, default=-1) + 1
            else:
                index = max(self._calls)
        call = self._calls.setdefault(index, _Call())
        if call_id is not None and call.id is None:
            call.id = call_id
            self._by_id[call_id] = index
        function = _expect_dict(fragment.get("function") or {}, "a tool call's 'function'")
        name = _opt_str(function.get("name"), "a tool call's name") or None
        if name is not None and name != call.name:
            call.name += name  # set once; a repeated full name is not doubled
        raw = function.get("arguments")
        if isinstance(raw, dict):  # some servers send the object itself
            raw = json.dumps(raw)
        piece = _opt_str(raw, "a tool call's arguments") or ""
        call.arguments += piece
        return ToolCallDelta(index=index, id=call_id, name=name, arguments=piece)

    def finish(self) -> LLMResponse:
        """The whole answer; :class:`IncompleteStream` if no chunk said it finished."""
        if self.finish_reason is None:
            raise IncompleteStream(
                "the stream ended without a finish_reason (the answer is incomplete)"
            )
        return LLMResponse(
            text=self.text,
            tool_calls=tuple(
                ToolCallData(c.id or self._new_id(), c.name, decode_arguments(c.arguments))
                for _, c in sorted(self._calls.items())
            ),
            thinking="".join(self._thinking) or None,
            usage=self.usage,
            finish_reason=self.finish_reason,
            model=self.model,
        )


def chat_completion_response(data: object, new_id: Callable[[], str] = new_call_id) -> LLMResponse:
    """A whole (non-streamed) ``chat.completion`` as an :class:`LLMResponse`."""
    body = _expect_dict(data, "the answer")
    choices = _expect_list(body.get("choices"), "'choices'")
    if not choices:
        raise MalformedChunk("the answer has no choices")
    choice = _expect_dict(choices[0], "a choice")
    message = _expect_dict(choice.get("message") or {}, "'message'")
    text = _opt_str(message.get("content"), "'message.content'") or ""
    refusal = _opt_str(message.get("refusal"), "'message.refusal'")
    if refusal and not text:
        text = refusal
    calls: list[ToolCallData] = []
    for raw in _expect_list(message.get("tool_calls"), "'tool_calls'"):
        call = _expect_dict(raw, "a tool call")
        function = _expect_dict(call.get("function") or {}, "a tool call's 'function'")
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments)
        calls.append(
            ToolCallData(
                _opt_str(call.get("id"), "a tool call's 'id'") or new_id(),
                _opt_str(function.get("name"), "a tool call's name") or "",
                decode_arguments(_opt_str(arguments, "a tool call's arguments") or ""),
            )
        )
    model = body.get("model")
    return LLMResponse(
        text=text,
        tool_calls=tuple(calls),
        thinking=_reasoning(message),
        usage=normalize_usage(body.get("usage")),
        finish_reason=_opt_str(choice.get("finish_reason"), "'finish_reason'")
        or ("tool_calls" if calls else "stop"),
        model=model if isinstance(model, str) else None,
    )


# ---------------------------------------------------------------------- Responses out


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def _input_part(part: object) -> object:
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": part.get("text", "")}
    if kind == "image_url":
        image = part.get("image_url")
        image = image if isinstance(image, dict) else {"url": image}
        return {
            "type": "input_image",
            "image_url": image.get("url"),
            "detail": image.get("detail") or "auto",
        }
    if kind == "file":
        raw = part.get("file")
        file: dict[str, Any] = raw if isinstance(raw, dict) else {}
        out: dict[str, Any] = {"type": "input_file"}
        for key in ("file_data", "file_id", "filename"):
            if key in file:
                out[key] = file[key]
        return out
    return part  # already a Responses part, or one we do not know: as it is


def _input_content(content: object) -> object:
    if isinstance(content, list):
        return [_input_part(p) for p in content]
    return content if content is not None else ""


def responses_input(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat-format messages as Responses ``input`` items.

    ``system``/``developer``/``user`` become ``message`` items (text parts as
    ``input_text``, images as ``input_image``, files as ``input_file``); an
    assistant's text becomes an assistant ``message`` and each of its tool calls
    a ``function_call`` item; a ``tool`` message becomes a
    ``function_call_output``. A chat ``name`` (the frontend operator) has no
    place in a Responses message and is left out.
    """
    items: list[dict[str, Any]] = []
    for msg in messages:
        role = msg.get("role")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": msg.get("tool_call_id"),
                    "output": _text_of(msg.get("content")),
                }
            )
        elif role == "assistant":
            text = _text_of(msg.get("content"))
            if text:
                items.append({"type": "message", "role": "assistant", "content": text})
            for call in msg.get("tool_calls") or ():
                function = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": function.get("arguments") or "{}",
                    }
                )
        else:
            items.append(
                {"type": "message", "role": role, "content": _input_content(msg.get("content"))}
            )
    return items


def responses_tools(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat tool definitions (``{"type": "function", "function": {...}}``) in the
    Responses' flat form. ``strict`` is false unless the definition asks for it
    (the Responses API would otherwise hold every schema to strict mode)."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, Mapping):
            out.append(dict(tool))  # a built-in tool, or already in the Responses form
            continue
        flat: dict[str, Any] = {"type": "function", "name": function.get("name")}
        if function.get("description") is not None:
            flat["description"] = function["description"]
        flat["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
        flat["strict"] = bool(function.get("strict", False))
        out.append(flat)
    return out


def _responses_tool_choice(choice: object) -> object:
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "function", "name": choice["function"].get("name")}
    return choice


def responses_request_body(
    request: LLMRequest,
    *,
    stream: bool,
    model: str | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Responses request body for ``request`` (pure).

    Model parameters are merged in with the Chat Completions names translated:
    ``max_tokens`` / ``max_completion_tokens`` become ``max_output_tokens``,
    ``reasoning_effort`` becomes ``reasoning.effort``, a chat-form
    ``tool_choice`` becomes the flat form. Other parameters go as they are (a
    parameter the Responses API does not know is refused by the server with a
    400, which says which one).
    """
    body: dict[str, Any] = {
        "model": model or request.model,
        "input": responses_input(request.messages),
    }
    if request.tools:
        body["tools"] = responses_tools(request.tools)
    params: dict[str, Any] = _merge_parameters({}, (request.parameters, extra_body))
    for old in ("max_completion_tokens", "max_tokens"):
        if old in params:
            value = params.pop(old)
            params.setdefault("max_output_tokens", value)
    if "reasoning_effort" in params:
        effort = params.pop("reasoning_effort")
        reasoning = params.get("reasoning")
        extra = reasoning if isinstance(reasoning, dict) else {}
        params["reasoning"] = {"effort": effort, **extra}
    if "tool_choice" in params:
        params["tool_choice"] = _responses_tool_choice(params["tool_choice"])
    params.pop("stream_options", None)
    body.update(params)
    if stream:
        body["stream"] = True
    return body


# ---------------------------------------------------------------------- Responses in

_INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _response_error(resp: Mapping[str, Any], default: str) -> StreamErrorEvent:
    error = resp.get("error")
    if isinstance(error, dict):
        return StreamErrorEvent(
            str(error.get("message") or default), code=error.get("code"), type=error.get("type")
        )
    return StreamErrorEvent(default)


def _output_of(resp: Mapping[str, Any], new_id: Callable[[], str]) -> tuple[str, list[_Call], str]:
    text: list[str] = []
    thinking: list[str] = []
    calls: list[_Call] = []
    for item in _expect_list(resp.get("output"), "'output'"):
        item = _expect_dict(item, "an output item")
        kind = item.get("type")
        if kind == "message":
            for part in _expect_list(item.get("content"), "a message's 'content'"):
                part = _expect_dict(part, "a content part")
                if part.get("type") == "output_text":
                    text.append(_opt_str(part.get("text"), "'output_text.text'") or "")
                elif part.get("type") == "refusal":
                    text.append(_opt_str(part.get("refusal"), "'refusal'") or "")
        elif kind == "function_call":
            calls.append(
                _Call(
                    _opt_str(item.get("call_id"), "a function call's 'call_id'") or new_id(),
                    _opt_str(item.get("name"), "a function call's 'name'") or "",
                    _opt_str(item.get("arguments"), "a function call's 'arguments'") or "",
                )
            )
        elif kind == "reasoning":
            for part in _expect_list(item.get("summary"), "a reasoning item's 'summary'"):
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    thinking.append(part["text"])
    return "".join(text), calls, "\n\n".join(thinking)


def _finish(resp: Mapping[str, Any], has_calls: bool) -> str:
    if resp.get("status") == "incomplete":
        details = resp.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return _INCOMPLETE_REASONS.get(str(reason), str(reason or "incomplete"))
    return "tool_calls" if has_calls else "stop"


def responses_response(data: object, new_id: Callable[[], str] = new_call_id) -> LLMResponse:
    """A whole (non-streamed) ``response`` object as an :class:`LLMResponse`."""
    resp = _expect_dict(data, "the answer")
    if resp.get("status") == "failed":
        raise _response_error(resp, "the response failed")
    text, calls, thinking = _output_of(resp, new_id)
    model = resp.get("model")
    return LLMResponse(
        text=text,
        tool_calls=tuple(
            ToolCallData(c.id or new_id(), c.name, decode_arguments(c.arguments)) for c in calls
        ),
        thinking=thinking or None,
        usage=normalize_usage(resp.get("usage")),
        finish_reason=_finish(resp, bool(calls)),
        model=model if isinstance(model, str) else None,
    )


class ResponsesStreamAssembler:
    """Turns Responses streaming events into engine deltas and the whole answer.

    Read: ``response.output_text.delta`` (and ``response.refusal.delta``) as
    text; ``response.reasoning_summary_text.delta`` (and the raw
    ``response.reasoning_text.delta``) as thinking; function calls from
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
        self._calls: list[_Call] = []
        self._slot: dict[object, int] = {}  # item id / output_index -> call ordinal
        self._final: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(self._text)

    def _call_for(self, event: Mapping[str, Any]) -> tuple[int, _Call] | None:
        for key in (event.get("item_id"), ("index", event.get("output_index"))):
            if key in self._slot:
                n = self._slot[key]
                return n, self._calls[n]
        return None

    def _add_call(self, event: Mapping[str, Any], item: Mapping[str, Any]) -> ToolCallDelta:
        n = len(self._calls)
        call = _Call(
            _opt_str(item.get("call_id"), "a function call's 'call_id'"),
            _opt_str(item.get("name"), "a function call's 'name'") or "",
            _opt_str(item.get("arguments"), "a function call's 'arguments'") or "",
        )
        self._calls.append(call)
        if isinstance(item.get("id"), str):
            self._slot[item["id"]] = n
        self._slot[("index", event.get("output_index"))] = n
        return ToolCallDelta(index=n, id=call.id, name=call.name or None, arguments=call.arguments)

    def feed(self, event: object) -> list[LLMChunk]:
        data = _expect_dict(event, "an event")
        kind = data.get("type")
        if not isinstance(kind, str):
            raise MalformedChunk(f"an event without a 'type': {_short(data)}")
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            text = _opt_str(data.get("delta"), f"'{kind}' delta") or ""
            if text:
                self._text.append(text)
                return [TextDelta(text)]
            return []
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            text = _opt_str(data.get("delta"), f"'{kind}' delta") or ""
            if text:
                self._thinking.append(text)
                return [ThinkingDelta(text)]
            return []
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = _expect_dict(data.get("item"), f"'{kind}' item")
            if item.get("type") != "function_call":
                return []
            found = self._call_for({**data, "item_id": item.get("id")})
            if found is None:
                return [self._add_call(data, item)]
            if kind == "response.output_item.done":  # the final values win
                call = found[1]
                call.id = _opt_str(item.get("call_id"), "'call_id'") or call.id
                call.name = _opt_str(item.get("name"), "'name'") or call.name
                args = _opt_str(item.get("arguments"), "'arguments'")
                call.arguments = args if args is not None else call.arguments
            return []
        if kind == "response.function_call_arguments.delta":
            found = self._call_for(data)
            if found is None:
                raise MalformedChunk(
                    f"arguments for a function call never announced: {_short(data)}"
                )
            piece = _opt_str(data.get("delta"), "'arguments' delta") or ""
            found[1].arguments += piece
            return [ToolCallDelta(index=found[0], arguments=piece)] if piece else []
        if kind == "response.function_call_arguments.done":
            found = self._call_for(data)
            args = _opt_str(data.get("arguments"), "'arguments'")
            if found is not None and args is not None:
                found[1].arguments = args
            return []
        if kind in ("response.completed", "response.incomplete"):
            self._final = _expect_dict(data.get("response"), f"'{kind}' response")
            return []
        if kind == "response.failed":
            raise _response_error(
                _expect_dict(data.get("response"), "'response.failed' response"),
                "the response failed",
            )
        if kind == "error":
            raise StreamErrorEvent(
                str(data.get("message") or "the server reported an error"),
                code=data.get("code"),
                type=data.get("type") if data.get("type") != "error" else None,
            )
        return []

    def finish(self) -> LLMResponse:
        final = self._final
        if final is None:
            raise IncompleteStream(
                "the stream ended without response.completed (the answer is incomplete)"
            )
        text, calls, thinking = self.text, list(self._calls), "".join(self._thinking)
        if not text and not calls:  # nothing streamed: the final response says it all
            text, calls, summary = _output_of(final, self._new_id)
            thinking = thinking or summary
        model = final.get("model")
        return LLMResponse(
            text=text,
            tool_calls=tuple(
                ToolCallData(c.id or self._new_id(), c.name, decode_arguments(c.arguments))
                for c in calls
            ),
            thinking=thinking or None,
            usage=normalize_usage(final.get("usage")),
            finish_reason=_finish(final, bool(calls)),
            model=model if isinstance(model, str) else None,
        )
