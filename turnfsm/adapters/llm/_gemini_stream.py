"""The Gemini ``streamGenerateContent`` stream, read as pure functions over
plain JSON values (no ``google.genai`` here): :class:`GeminiStreamAssembler`
turns the stream's chunks (each a ``GenerateContentResponse`` in the API's
camelCase names, a ``thoughtSignature`` as its base64 text) into engine
deltas and the whole answer.

What each answer becomes::

    the stream says                            the answer
    ----------------------------------------   ---------------------------------------------
    text parts                                 text (joined), TextDelta
    thought parts (``thought: true``)          reasoning items (provider "google", the
                                                 summary, data {"part": "thought"}); the
                                                 thinking text, ThinkingDelta
    functionCall parts                         tool calls (one per part, in order; the
                                                 part's ``id`` if sent, else
                                                 ``call_<responseId>_<n>``), ToolCallDelta
    a thoughtSignature on a part               a reasoning item (data {"part":
                                                 "functionCall" | "text" | "thought",
                                                 "thoughtSignature"}; a thought keeps its
                                                 own), placed where it came; for text and
                                                 thoughts "at" is where the signed part
                                                 began in the joined text (the parts
                                                 before it go back unsigned, apart)
    finishReason STOP                          stop (tool_calls with calls)
    finishReason MAX_TOKENS                    length
    finishReason SAFETY, PROHIBITED_CONTENT,   content_filter
      RECITATION, BLOCKLIST, SPII,
      IMAGE_SAFETY, IMAGE_PROHIBITED_CONTENT
    promptFeedback.blockReason (no answer)     content_filter; provider_reason the
                                                 blockReason
    finishReason MALFORMED_FUNCTION_CALL       incomplete_reason MALFORMED_FUNCTION_CALL
                                                 (the turn ends incomplete: the model's
                                                 call could not be read, nothing runs)
    any other finishReason                     stop
    any finishReason                           provider_reason, as sent
    usageMetadata (the last one sent)          usage: prompt_tokens = promptTokenCount;
                                                 completion_tokens = candidatesTokenCount
                                                 + thoughtsTokenCount; cached and thinking
                                                 tokens in the details; the sent fields
    the stream ends with no finishReason       IncompleteStream (retried)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
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
from ._gemini_body import GOOGLE_PROVIDER
from ._openai_common import IncompleteStream, MalformedChunk, expect_dict, expect_list, short

__all__ = ["FILTERED", "GeminiStreamAssembler", "call_id", "gemini_usage"]

FILTERED = frozenset(
    {
        "SAFETY",
        "PROHIBITED_CONTENT",
        "RECITATION",
        "BLOCKLIST",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
    }
)
"""The finish reasons that end a turn ``content_filter``."""
THINKING_SEPARATOR = "\n\n"


def call_id(response_id: str | None, index: int, name: str, args: object) -> str:
    """The id of a call Gemini sent without one: the same answer always gives
    the same id (a replay, a resume), from the response's id and the call's
    index (or, without a response id, a digest of the call)."""
    if response_id:
        return f"call_{response_id}_{index}"
    digest = hashlib.sha256(
        json.dumps([index, name, args], sort_keys=True, default=str).encode()
    ).hexdigest()
    return f"call_{digest[:24]}"


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def gemini_usage(sent: Mapping[str, Any]) -> dict[str, Any]:
    """``usageMetadata`` in the engine's shape (see the module's table)."""
    thoughts = sent.get("thoughtsTokenCount")
    cached = sent.get("cachedContentTokenCount")
    return provider_usage(
        sent,
        prompt_tokens=_int(sent.get("promptTokenCount")),
        completion_tokens=_int(sent.get("candidatesTokenCount")) + _int(thoughts),
        cache_read_tokens=_int(cached) if cached is not None else None,
        reasoning_tokens=_int(thoughts) if thoughts is not None else None,
    )


@dataclass
class _Thought:
    text: list[str] = field(default_factory=list)
    signature: str | None = None
    signed_at: int = 0  # where, in the thought's text, the signed part began
    calls_before: int = 0


@dataclass
class _Call:
    id: str | None
    name: str
    args: dict[str, Any]
    signature: str | None = None


class GeminiStreamAssembler:
    """Feed it each chunk (:meth:`feed`, which returns the deltas to stream),
    then call :meth:`finish` for the whole answer."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._text_signature: str | None = None
        self._text_signed_at = 0
        self._text_calls_before = 0
        self._thoughts: list[_Thought] = []
        self._calls: list[_Call] = []
        self._last_was_thought = False
        self._finish: str | None = None
        self._block: str | None = None
        self._usage: dict[str, Any] | None = None
        self._model: str | None = None
        self._response_id: str | None = None

    @property
    def text(self) -> str:
        """The text delivered so far."""
        return "".join(self._text)

    def _part(self, part: Mapping[str, Any]) -> list[LLMChunk]:
        signature = part.get("thoughtSignature")
        if signature is not None and not isinstance(signature, str):
            raise MalformedChunk(f"a part's 'thoughtSignature' is not a string: {short(part)}")
        call = part.get("functionCall")
        if call is not None:
            call = expect_dict(call, "a part's 'functionCall'")
            name = call.get("name")
            if not isinstance(name, str) or not name:
                raise MalformedChunk(f"a functionCall without a 'name': {short(call)}")
            args = call.get("args") if call.get("args") is not None else {}
            args = expect_dict(args, "a functionCall's 'args'")
            given = call.get("id")
            given = given if isinstance(given, str) and given else None
            index = len(self._calls)
            self._calls.append(_Call(given, name, args, signature))
            self._last_was_thought = False
            the_id = given or call_id(self._response_id, index, name, args)
            return [
                ToolCallDelta(index=index, id=the_id, name=name),
                ToolCallDelta(index=index, arguments=json.dumps(args, ensure_ascii=False)),
            ]
        text = part.get("text")
        if text is not None and not isinstance(text, str):
            raise MalformedChunk(f"a part's 'text' is not a string: {short(part)}")
        if part.get("thought") is True:
            chunks: list[LLMChunk] = []
            signed_twice = signature is not None and self._thoughts[-1].signature is not None
            if not self._last_was_thought or signed_twice:
                if self._thoughts:
                    chunks.append(ThinkingDelta(THINKING_SEPARATOR))
                self._thoughts.append(_Thought(calls_before=len(self._calls)))
            thought = self._thoughts[-1]
            if signature is not None:
                thought.signature = signature
                thought.signed_at = len("".join(thought.text))
            thought.text.append(text or "")
            self._last_was_thought = True
            return [*chunks, ThinkingDelta(text)] if text else chunks
        if text is None and signature is None:
            return []  # a part kind not read here (executable code, ...)
        self._last_was_thought = False
        if not self._text and self._text_signature is None:
            self._text_calls_before = len(self._calls)
        if signature is not None:
            self._text_signature = signature
            self._text_signed_at = len(self.text)
        if text:
            self._text.append(text)
            return [TextDelta(text)]
        return []

    def feed(self, chunk: object) -> list[LLMChunk]:
        data = expect_dict(chunk, "a chunk")
        error = data.get("error")
        if error is not None:
            raise MalformedChunk(f"an error inside the stream: {short(error)}")
        if isinstance(data.get("modelVersion"), str):
            self._model = data["modelVersion"]
        if isinstance(data.get("responseId"), str) and self._response_id is None:
            self._response_id = data["responseId"]
        usage = data.get("usageMetadata")
        if usage is not None:
            self._usage = dict(expect_dict(usage, "'usageMetadata'"))
        feedback = data.get("promptFeedback")
        if isinstance(feedback, dict) and isinstance(feedback.get("blockReason"), str):
            self._block = feedback["blockReason"]
        out: list[LLMChunk] = []
        for candidate in expect_list(data.get("candidates"), "'candidates'"):
            candidate = expect_dict(candidate, "a candidate")
            if candidate.get("index", 0) not in (0, None):
                continue  # only the first candidate is read
            content = candidate.get("content")
            if content is not None:
                content = expect_dict(content, "a candidate's 'content'")
                for part in expect_list(content.get("parts"), "'parts'"):
                    out += self._part(expect_dict(part, "a part"))
            reason = candidate.get("finishReason")
            if isinstance(reason, str) and reason:
                self._finish = reason
        return out

    def _reasoning(self) -> tuple[ReasoningData, ...]:
        items: list[ReasoningData] = []
        for t in self._thoughts:
            data: dict[str, Any] = {"part": "thought"}
            if t.signature is not None:
                data["thoughtSignature"] = t.signature
                data["at"] = t.signed_at
            items.append(
                ReasoningData(
                    "",
                    ("".join(t.text),),
                    provider=GOOGLE_PROVIDER,
                    data=data,
                    position=t.calls_before,
                )
            )
        if self._text_signature is not None:
            items.append(
                ReasoningData(
                    "",
                    provider=GOOGLE_PROVIDER,
                    data={
                        "part": "text",
                        "thoughtSignature": self._text_signature,
                        "at": self._text_signed_at,
                    },
                    position=self._text_calls_before,
                )
            )
        for n, call in enumerate(self._calls):
            if call.signature is not None:
                items.append(
                    ReasoningData(
                        "",
                        provider=GOOGLE_PROVIDER,
                        data={"part": "functionCall", "thoughtSignature": call.signature},
                        position=n,
                    )
                )
        return tuple(sorted(items, key=lambda r: r.position))

    def finish(self) -> LLMResponse:
        reason = self._finish if self._finish is not None else self._block
        if reason is None:
            raise IncompleteStream(
                "the stream ended before the answer's finishReason (the answer is incomplete)"
            )
        calls = tuple(
            ToolCallData(c.id or call_id(self._response_id, n, c.name, c.args), c.name, c.args)
            for n, c in enumerate(self._calls)
        )
        if self._finish is None or reason in FILTERED:
            finish = "content_filter"
        elif reason == "MAX_TOKENS":
            finish = "length"
        else:
            finish = "tool_calls" if calls else "stop"
        thinking = [("".join(t.text)) for t in self._thoughts]
        return LLMResponse(
            text=self.text,
            tool_calls=calls,
            thinking=THINKING_SEPARATOR.join(thinking) if thinking else None,
            usage=gemini_usage(self._usage) if self._usage else None,
            finish_reason=finish,
            model=self._model,
            incomplete_reason=reason if reason == "MALFORMED_FUNCTION_CALL" else None,
            reasoning=self._reasoning(),
            provider_reason=reason,
        )
