"""The OpenAI Chat Completions wire format, as pure functions over plain JSON
values (no ``openai`` here).

- :func:`chat_request_body` — the request body (``POST /chat/completions``);
- :class:`ChatStreamAssembler` — streamed ``chat.completion.chunk`` objects in,
  engine deltas out, and the whole answer at the end (tool calls assembled from
  their fragments); :func:`chat_completion_response` for a whole (non-streamed)
  ``chat.completion``.

What both formats share (errors, checks, usage, retry advice) is in
:mod:`._openai_common`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import InvalidInput
from ...model import (
    RESPONSES_KEY,
    LLMChunk,
    LLMRequest,
    LLMResponse,
    TextDelta,
    ThinkingDelta,
    ToolCallData,
    ToolCallDelta,
)
from ._openai_common import (
    AssembledCall,
    IncompleteStream,
    MalformedChunk,
    decode_arguments,
    expect_dict,
    expect_list,
    merge_parameters,
    new_call_id,
    normalize_usage,
    opt_str,
    short,
)
from ._output import native_schema, native_spec

__all__ = [
    "ChatStreamAssembler",
    "chat_completion_response",
    "chat_request_body",
]

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
    refuses it. What only the Responses API takes back (the messages'
    ``responses_items``) is left out.

    ``n`` other than 1 raises :class:`~turnfsm.errors.InvalidInput` before
    anything is sent: an answer is one message, and the other choices would
    be paid for and lost.

    A native answer type (``request.output``, mode ``native``) is sent as
    ``response_format: {"type": "json_schema", "json_schema": {"name",
    "schema", "strict"}}``, strict with the strict-compatible schema when
    :func:`~._output.native_schema` can make one; it wins over a
    ``response_format`` of the parameters, which goes as it is otherwise.
    """
    body: dict[str, Any] = {
        "model": model or request.model,
        "messages": [
            {k: v for k, v in m.items() if k != RESPONSES_KEY} if RESPONSES_KEY in m else m
            for m in request.messages
        ],
    }
    if request.tools:
        body["tools"] = list(request.tools)
    merge_parameters(body, (request.parameters, extra_body))
    spec = native_spec(request)
    if spec is not None:
        sent = native_schema(spec)
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": spec.name, "schema": sent.schema, "strict": sent.strict},
        }
    n = body.get("n")
    if n is not None and n != 1:
        raise InvalidInput(
            "parameters.n",
            f"n={n!r}: an answer is one message, so only n=1 is supported (leave n out)",
        )
    options = body.pop("stream_options", None)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True, **(options or {})}
    return body


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

    Only choice 0 is followed (the adapter never asks for ``n > 1``). A
    refusal (``delta.refusal``) is kept apart from the text and yields no delta;
    ``logprobs.content`` entries are collected when the request asked for them.
    Chunks with no choices (the usage chunk) and keys this reader does not know
    are passed over. Tool calls
    arrive as fragments keyed by ``index`` — the id, the name and pieces of the
    arguments across chunks, several calls interleaved — and are assembled per
    index; a server that leaves ``index`` out is followed by ``id`` (a new id
    starts a new call, no id continues the last one).
    """

    def __init__(self, new_id: Callable[[], str] = new_call_id) -> None:
        self._new_id = new_id
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._refusal: list[str] = []
        self._logprobs: list[Any] | None = None
        self._calls: dict[int, AssembledCall] = {}
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
        data = expect_dict(chunk, "a chunk")
        out: list[LLMChunk] = []
        model = data.get("model")
        if isinstance(model, str) and model:
            self.model = model
        if data.get("usage") is not None:
            self.usage = normalize_usage(expect_dict(data["usage"], "'usage'"))
        for choice in expect_list(data.get("choices"), "'choices'"):
            choice = expect_dict(choice, "a choice")
            if choice.get("index", 0) != 0:
                continue
            delta = expect_dict(choice.get("delta") or {}, "'delta'")
            thinking = _reasoning(delta)
            if thinking:
                self._thinking.append(thinking)
                out.append(ThinkingDelta(thinking))
            text = opt_str(delta.get("content"), "'delta.content'")
            if text:
                self._text.append(text)
                out.append(TextDelta(text))
            refusal = opt_str(delta.get("refusal"), "'delta.refusal'")
            if refusal:
                self._refusal.append(refusal)
            tokens = _logprob_tokens(choice)
            if tokens is not None:
                self._logprobs = (self._logprobs or []) + tokens
            for pos, fragment in enumerate(expect_list(delta.get("tool_calls"), "'tool_calls'")):
                out.append(self._tool_fragment(pos, expect_dict(fragment, "a tool call")))
            reason = opt_str(choice.get("finish_reason"), "'finish_reason'")
            if reason:
                self.finish_reason = reason
        return out

    def _tool_fragment(self, pos: int, fragment: dict[str, Any]) -> ToolCallDelta:
        call_id = opt_str(fragment.get("id"), "a tool call's 'id'") or None
        index = fragment.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            if index is not None:
                raise MalformedChunk(f"a tool call's 'index' is not an integer: {short(index)}")
            if call_id is not None and call_id in self._by_id:
                index = self._by_id[call_id]
            elif call_id is not None or not self._calls:
                index = max(self._calls, default=-1) + 1
            else:
                index = max(self._calls)
        call = self._calls.setdefault(index, AssembledCall())
        if call_id is not None and call.id is None:
            call.id = call_id
            self._by_id[call_id] = index
        function = expect_dict(fragment.get("function") or {}, "a tool call's 'function'")
        name = opt_str(function.get("name"), "a tool call's name") or None
        if name is not None and name != call.name:
            call.name += name  # set once; a repeated full name is not doubled
        raw = function.get("arguments")
        if isinstance(raw, dict):  # some servers send the object itself
            raw = json.dumps(raw)
        piece = opt_str(raw, "a tool call's arguments") or ""
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
            refusal="".join(self._refusal) if self._refusal else None,
            logprobs=self._logprobs or None,
        )


def _logprob_tokens(choice: Mapping[str, Any]) -> list[Any] | None:
    """A choice's ``logprobs.content`` entries (``None`` when it has none)."""
    logprobs = choice.get("logprobs")
    if logprobs is None:
        return None
    content = expect_dict(logprobs, "'logprobs'").get("content")
    if content is None:
        return None
    return expect_list(content, "'logprobs.content'")


def chat_completion_response(data: object, new_id: Callable[[], str] = new_call_id) -> LLMResponse:
    """A whole (non-streamed) ``chat.completion`` as an :class:`LLMResponse`."""
    body = expect_dict(data, "the answer")
    choices = expect_list(body.get("choices"), "'choices'")
    if not choices:
        raise MalformedChunk("the answer has no choices")
    choice = expect_dict(choices[0], "a choice")
    message = expect_dict(choice.get("message") or {}, "'message'")
    text = opt_str(message.get("content"), "'message.content'") or ""
    refusal = opt_str(message.get("refusal"), "'message.refusal'") or None
    calls: list[ToolCallData] = []
    for raw in expect_list(message.get("tool_calls"), "'tool_calls'"):
        call = expect_dict(raw, "a tool call")
        function = expect_dict(call.get("function") or {}, "a tool call's 'function'")
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments)
        calls.append(
            ToolCallData(
                opt_str(call.get("id"), "a tool call's 'id'") or new_id(),
                opt_str(function.get("name"), "a tool call's name") or "",
                decode_arguments(opt_str(arguments, "a tool call's arguments") or ""),
            )
        )
    model = body.get("model")
    return LLMResponse(
        text=text,
        tool_calls=tuple(calls),
        thinking=_reasoning(message),
        usage=normalize_usage(body.get("usage")),
        finish_reason=opt_str(choice.get("finish_reason"), "'finish_reason'")
        or ("tool_calls" if calls else "stop"),
        model=model if isinstance(model, str) else None,
        refusal=refusal,
        logprobs=_logprob_tokens(choice) or None,
    )
