"""A scripted LLM: answers from a list, or from a handler function.

The answers use the vocabulary of the replay format's ``llm`` steps
(``docs/script-format.md``)::

    {"text": "Hello"}                                  a whole answer
    {"chunks": ["Hel", "lo"]}                          a streamed answer
    {"tool_calls": [{"id": "call_1", "name": "get_weather",
                     "arguments": {"city": "London"}}]}   (with "text" or "chunks")
    {"thinking": "...", "usage": {...}}                  reasoning content, token usage
    {"refusal": "I can't help with that."}             the model refuses
    {"chunks": ["It was"], "finish_reason": "length"}  cut at the token limit
    {"chunks": [...], "cancel_after": 1}               a cancel request after 1 chunk
    {"chunks": [...], "fail_after": 1, "error": {...}} the stream breaks after 1 chunk
    {"error": {"status": 429, "retry_after": 0.5}}     this attempt fails
    {"error": {"kind": "timeout"}}                     ... or without a status

A handler gets the provider-format request like a real adapter would and
returns one such answer (or an :class:`LLMResponse`), sync or async.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ...errors import InvalidInput, LLMError, PermanentLLMError, TransientLLMError
from ...model._json import loads_json
from ._base import LLMChunk, LLMRequest, LLMResponse, TextDelta, ThinkingDelta, ToolCallData

__all__ = [
    "Answer",
    "AnswerSpec",
    "ErrorSpec",
    "Handler",
    "ScriptedLLM",
    "ToolCallSpec",
    "play",
]


class ErrorSpec(BaseModel):
    """An LLM failure: an HTTP status, or a ``kind`` of failure without one."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    status: int | None = Field(default=None, ge=100, le=599)
    kind: Literal["timeout", "connection"] | None = None
    retry_after: float | None = Field(default=None, ge=0)
    message: str | None = None

    @model_validator(mode="after")
    def _status_or_kind(self) -> ErrorSpec:
        if (self.status is None) == (self.kind is None):
            raise ValueError("give exactly one of 'status' and 'kind'")
        return self

    def to_error(self, partial_text: str = "") -> LLMError:
        if self.status is not None:
            err = LLMError.from_status(
                self.status, self.message or f"HTTP {self.status}", retry_after=self.retry_after
            )
            err.partial_text = partial_text
            return err
        return TransientLLMError(
            self.message or f"request {self.kind}",
            kind=self.kind,
            retry_after=self.retry_after,
            partial_text=partial_text,
        )


class ToolCallSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class AnswerSpec(BaseModel):
    """One scripted answer (an ``llm`` step's body, or an ``llm_error``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    text: str | None = None
    chunks: list[str] | None = None
    tool_calls: list[ToolCallSpec] | None = None
    thinking: str | None = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    refusal: str | None = None
    """The model refuses: kept apart from the text, the turn ends ``refusal``."""
    cancel_after: int | None = Field(default=None, ge=0)
    fail_after: int | None = Field(default=None, ge=0)
    error: ErrorSpec | None = None
    expect_request: dict[str, Any] | None = None
    """Checked by the replay runner, not here."""

    @model_validator(mode="after")
    def _consistent(self) -> AnswerSpec:
        if self.text is not None and self.chunks is not None:
            raise ValueError("give 'text' or 'chunks', not both")
        if self.refusal is not None and (self.tool_calls or self.error is not None):
            raise ValueError("a 'refusal' answer has no 'tool_calls' and no 'error'")
        if self.error is None:
            if self.fail_after is not None:
                raise ValueError("'fail_after' needs an 'error'")
            if (
                self.text is None
                and self.chunks is None
                and not self.tool_calls
                and self.refusal is None
            ):
                raise ValueError("an answer needs 'text', 'chunks', 'tool_calls' or 'refusal'")
        elif self.fail_after is None and (
            self.text is not None or self.tool_calls or self.chunks is not None
        ):
            raise ValueError(
                "an 'error' answer has no 'text', 'chunks' or 'tool_calls' (a stream that "
                "breaks gives 'chunks', 'fail_after' and 'error')"
            )
        if self.chunks is not None:
            for key in ("fail_after", "cancel_after"):
                n = getattr(self, key)
                if n is not None and n > len(self.chunks):
                    raise ValueError(f"'{key}' is {n}, but there are {len(self.chunks)} chunks")
        if (self.cancel_after is not None or self.fail_after is not None) and self.chunks is None:
            raise ValueError("'cancel_after' and 'fail_after' apply to 'chunks'")
        return self

    @classmethod
    def parse(cls, answer: Mapping[str, Any]) -> AnswerSpec:
        """Accepts an ``llm`` body or ``{"llm_error": {...}}``; raises :class:`InvalidInput`."""
        data: Mapping[str, Any] = answer
        as_error = "llm_error" in answer
        if as_error:
            if len(answer) != 1:
                raise InvalidInput("answer", "'llm_error' stands alone")
            data = {"error": answer["llm_error"]}
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = [str(p) for p in first["loc"]]
            if as_error and loc and loc[0] == "error":
                loc[0] = "llm_error"  # name the key the caller wrote
            raise InvalidInput(".".join(["answer", *loc]), first["msg"]) from exc

    def response(self, model: str | None = None) -> LLMResponse:
        text = self.text if self.text is not None else "".join(self.chunks or ())
        return LLMResponse(
            text=text,
            tool_calls=tuple(
                ToolCallData(c.id, c.name, _decode_arguments(c.arguments))
                for c in self.tool_calls or ()
            ),
            thinking=self.thinking,
            usage=self.usage,
            finish_reason=self.finish_reason or ("tool_calls" if self.tool_calls else "stop"),
            model=model,
            refusal=self.refusal,
        )


def _decode_arguments(arguments: dict[str, Any] | str) -> dict[str, Any] | str:
    if isinstance(arguments, dict):
        return arguments
    try:
        decoded = loads_json(arguments)
    except ValueError:  # not JSON, or nested too deeply to be stored
        return arguments
    return decoded if isinstance(decoded, dict) else arguments


Answer = Mapping[str, Any] | AnswerSpec | LLMResponse
Handler = Callable[[LLMRequest], Answer | Awaitable[Answer]]


class ScriptedLLM:
    """An :class:`~turnfsm.adapters.llm.LLM` that plays answers from a list or a handler.

    ``requests`` keeps every request it received, in order (``record=False`` turns
    that off for long benchmarks). A call with no answer left fails permanently,
    with a message saying so.
    """

    def __init__(self, answers: Iterable[Answer] | Handler, *, record: bool = True) -> None:
        self._handler: Handler | None = None
        self._answers: list[Answer] = []
        if callable(answers):
            self._handler = answers
        else:
            self._answers = list(answers)
            for i, a in enumerate(self._answers):
                if isinstance(a, Mapping):
                    try:
                        self._answers[i] = AnswerSpec.parse(a)
                    except InvalidInput as exc:
                        raise InvalidInput(f"answers[{i}]", str(exc)) from exc
        self._next = 0
        self._record = record
        self.requests: list[LLMRequest] = []

    @property
    def remaining(self) -> int:
        """Answers not yet played (0 for a handler)."""
        return len(self._answers) - self._next

    def _ask(self, request: LLMRequest) -> object:
        """The handler's answer to ``request`` (sync, or an awaitable), or the
        next answer of the list."""
        if self._handler is not None:
            return self._handler(request)
        if self._next >= len(self._answers):
            raise PermanentLLMError(f"scripted LLM has no answer left for call {self._next + 1}")
        answer = self._answers[self._next]
        self._next += 1
        return answer

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        # An iterator object rather than an async generator: a generator costs
        # the event loop's first-iteration hook (a weak set entry, removed by a
        # callback when it dies) and a GeneratorExit thrown into it when the
        # engine closes it after the final chunk, in every call of every test.
        # It is as lazy: nothing runs before the first read.
        return _Stream(self, request)


async def _settled(got: object) -> AnswerSpec | LLMResponse:
    """What :meth:`ScriptedLLM._ask` gave, awaited and parsed."""
    answer = await got if inspect.isawaitable(got) else got
    if isinstance(answer, LLMResponse | AnswerSpec):
        return answer
    return AnswerSpec.parse(answer)  # type: ignore[arg-type]  # a handler's mapping


class _Stream:
    """What :meth:`ScriptedLLM.stream` returns: on the first read the request
    is recorded and the answer asked for; an :class:`LLMResponse` is the one
    chunk, any other answer is played by :func:`play`. Closed, or read to its
    end, it gives no more chunks."""

    __slots__ = ("_llm", "_played", "_request")

    def __init__(self, llm: ScriptedLLM, request: LLMRequest) -> None:
        self._llm = llm
        self._request: LLMRequest | None = request
        """Held until the first read or close (then ``None``): the engine
        shares its history with the request only while nothing else holds it."""
        self._played: AsyncGenerator[LLMChunk, None] | None = None

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> LLMChunk:
        played = self._played
        if played is None:
            request = self._request
            if request is None:  # read before, or closed
                raise StopAsyncIteration
            self._request = None
            llm = self._llm
            if llm._record:
                llm.requests.append(request)
            got = llm._ask(request)
            if type(got) is LLMResponse:  # a handler's usual answer
                return got
            answer = await _settled(got)
            if isinstance(answer, LLMResponse):
                return answer
            self._played = played = play(answer, request)
        return await played.__anext__()

    async def aclose(self) -> None:
        self._request = None
        played = self._played
        if played is not None:
            await played.aclose()


async def play(answer: AnswerSpec, request: LLMRequest) -> AsyncGenerator[LLMChunk, None]:
    """Play one scripted answer as an adapter would stream it."""
    if answer.error is not None and answer.fail_after is None:
        raise answer.error.to_error()
    if answer.chunks is None:
        yield answer.response(request.model)
        return
    if answer.thinking:
        yield ThinkingDelta(answer.thinking)
    delivered: list[str] = []
    for n, chunk in enumerate(answer.chunks):
        if n == answer.fail_after and answer.error is not None:
            raise answer.error.to_error("".join(delivered))
        if n == answer.cancel_after:
            request.request_cancel()
            await anyio.lowlevel.checkpoint()
        delivered.append(chunk)
        yield TextDelta(chunk)
    if answer.fail_after is not None and answer.error is not None:
        raise answer.error.to_error("".join(delivered))
    if answer.cancel_after is not None and answer.cancel_after >= len(answer.chunks):
        request.request_cancel()
        await anyio.lowlevel.checkpoint()
    yield answer.response(request.model)
