"""The OpenAI adapters: Chat Completions and Responses, through the official SDK.

This is the one module that imports ``openai`` (``docs/architecture.md``). It works
against the OpenAI API and any OpenAI-compatible server (vLLM, Ollama, LM Studio,
OpenRouter, Azure), chosen by ``base_url``::

    async with OpenAIChatAdapter(model="gpt-4o-mini") as llm:
        engine = Engine(llm=llm, tools=[...])
        ...

The request bodies are built by pure functions (``chat_request_body`` in
``_openai_chat``, ``responses_request_body`` in ``_openai_responses_body``) and sent
as they are with the SDK's ``post``; the answers are read as plain JSON by the
pure assemblers there. The SDK's own retries are off (``max_retries=0`` on the client and on
every request): the engine is the one layer that retries.

Error mapping (:func:`map_openai_error`, applied at this boundary with
``raise ... from exc``)::

    SDK / stream condition                       ->  turnfsm error          kind / status
    -------------------------------------------     ---------------------  ------------------
    APIStatusError 408, 409, 429, >= 500         ->  TransientLLMError      status
    APIStatusError 400, 401, 403, 404, 422, ...  ->  PermanentLLMError      status
      + header x-should-retry: true / false       ->  forces Transient / Permanent
      + retry-after-ms, retry-after (s or date)  ->  retry_after (seconds)
    APITimeoutError                              ->  TransientLLMError      kind "timeout"
    APIConnectionError (refused, reset, broken   ->  TransientLLMError      kind "connection"
      mid-stream: partial_text = text so far)
    error object inside a 200 stream (APIError   ->  by its code: an HTTP status as above;
      without status), Responses "error" /           server_error, rate_limit_exceeded, ...
      "response.failed" events                       transient; invalid_request_error, ...
                                                     permanent; unknown: transient
                                                                            kind "stream_error"
    malformed chunk (not JSON, or not the wire   ->  TransientLLMError      kind "malformed_chunk"
      format's shape)
    stream ended without finish_reason /         ->  TransientLLMError      kind "incomplete_stream"
      response.completed
    APIResponseValidationError                   ->  PermanentLLMError      kind "invalid_response"
    any other OpenAIError (e.g. no credentials)  ->  PermanentLLMError      kind "configuration"
    anything else                                ->  PermanentLLMError      kind "adapter"

A malformed chunk is transient on purpose: from the client's side it is the
same failure as a stream that breaks mid-way (the answer is incomplete and
cannot be trusted), it is often a proxy or transport fault that the next
attempt does not meet, and the retry budget (``RetryPolicy.max_attempts``)
bounds what a server that always sends garbage can cost; its message says
which chunk was wrong. Every error from a stream carries the text delivered
before it broke in ``partial_text`` (reported in events, never kept in history).
Invalid JSON in tool-call arguments is not an error here: the call keeps the
raw text and the engine answers it with an error result the model sees.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import openai
from openai import AsyncStream, RequestOptions

from ...errors import InvalidInput, LLMError, PermanentLLMError, TransientLLMError
from ._base import LLMChunk, LLMRequest, LLMResponse
from ._common import (
    HTTPClientAdapter,
    adapter_error,
    clip,
    connection_error,
    one_client,
    status_error,
    stream_break,
    timeout_error,
    with_partial,
)
from ._openai_chat import ChatStreamAssembler, chat_completion_response, chat_request_body
from ._openai_common import MalformedChunk, StreamErrorEvent, new_call_id
from ._openai_responses import ResponsesStreamAssembler, responses_request_body, responses_response
from ._output import native_schema, native_spec

__all__ = [
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "chat_request_body",
    "map_openai_error",
    "responses_request_body",
]

_TRANSIENT_CODES = frozenset(
    {
        "server_error",
        "internal_error",
        "api_error",
        "service_unavailable",
        "overloaded",
        "overloaded_error",
        "rate_limit_exceeded",
        "rate_limit_error",
        "timeout",
        "request_timeout",
        "stream_error",
    }
)
_PERMANENT_CODES = frozenset(
    {
        "invalid_request_error",
        "invalid_prompt",
        "invalid_api_key",
        "authentication_error",
        "permission_error",
        "permission_denied",
        "not_found_error",
        "model_not_found",
        "context_length_exceeded",
        "content_filter",
        "unsupported_parameter",
        "unsupported_value",
        "insufficient_quota",
    }
)


def _status_of(code: object) -> int | None:
    if isinstance(code, int) and not isinstance(code, bool):
        return code if 100 <= code <= 599 else None
    if isinstance(code, str) and code.isdigit():
        return _status_of(int(code))
    return None


def _stream_error(message: str, code: object, type_: str | None, partial_text: str) -> LLMError:
    """An error reported inside a stream: by an HTTP status in its code, else by its
    code or type, else transient (the stream broke mid-way)."""
    status = _status_of(code)
    if status is not None:
        err = LLMError.from_status(status, message)
        err.partial_text = partial_text
        return err
    names = {str(n) for n in (code, type_) if n}
    cls: type[LLMError] = (
        PermanentLLMError
        if names & _PERMANENT_CODES and not names & _TRANSIENT_CODES
        else TransientLLMError
    )
    label = "/".join(str(n) for n in (code, type_) if n)
    text = f"{message} ({label})" if label else message
    return cls(text, kind="stream_error", partial_text=partial_text)


def _status_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    elif isinstance(body, str) and body.strip():
        return clip(_one_line(body), 200)
    return f"HTTP {exc.status_code}"


_HIDDEN = re.compile(r"<(head|script|style)\b.*?</\1\s*>", re.I | re.S)
_TITLE = re.compile(r"<title\b[^>]*>(.*?)</title\s*>", re.I | re.S)
_TAG = re.compile(r"<[^>]*>")


def _one_line(body: str) -> str:
    """A text body as one line: an HTML page (a proxy's or a web server's error
    page) by its visible text, tags stripped and entities decoded (its
    <title> when it shows none); all whitespace runs as one space."""
    text = body
    if "<" in body and ">" in body:
        title = _TITLE.search(body)
        text = html.unescape(_TAG.sub(" ", _HIDDEN.sub(" ", body)))
        if not text.strip() and title is not None:
            text = html.unescape(_TAG.sub(" ", title.group(1)))
    return " ".join(text.split())


def map_openai_error(
    exc: BaseException, partial_text: str = "", *, now: float | None = None
) -> LLMError:
    """The :class:`~turnfsm.errors.LLMError` for an exception met at the OpenAI
    boundary (the table is in this module's docstring). ``partial_text`` is the
    text a stream delivered before the failure; ``now`` (epoch seconds, default
    the system clock) dates a ``Retry-After`` given as an HTTP date. Use it as
    ``raise map_openai_error(exc) from exc``."""
    if isinstance(exc, LLMError):
        return with_partial(exc, partial_text)
    if isinstance(exc, openai.APIStatusError):
        clock = time.time() if now is None else now
        headers = exc.response.headers
        return status_error(exc.status_code, _status_message(exc), headers, clock, partial_text)
    if isinstance(exc, openai.APITimeoutError):
        return timeout_error(partial_text)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        return connection_error(detail, partial_text)
    if isinstance(exc, openai.APIResponseValidationError):
        return PermanentLLMError(
            f"the server's answer is invalid: {exc.message}",
            status=exc.status_code,
            kind="invalid_response",
            partial_text=partial_text,
        )
    if isinstance(exc, openai.APIError):  # an error object inside a 200 stream
        return _stream_error(exc.message, exc.code, exc.type, partial_text)
    if isinstance(exc, StreamErrorEvent):
        return _stream_error(exc.message, exc.code, exc.type, partial_text)
    broken = stream_break(exc, partial_text, "a chunk")
    if broken is not None:
        return broken
    if isinstance(exc, openai.OpenAIError):
        return PermanentLLMError(str(exc), kind="configuration", partial_text=partial_text)
    return adapter_error(exc, partial_text)


_NO_RETRIES: RequestOptions = {"max_retries": 0}


class _OpenAIAdapter(HTTPClientAdapter):
    """What both adapters share: the client, its options, closing it."""

    _path: str

    def __init__(
        self,
        client: openai.AsyncOpenAI | None = None,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = 60.0,
        stream: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        new_id: Callable[[], str] = new_call_id,
    ) -> None:
        one_client(client, base_url, api_key)
        self._owns_client = client is None
        if client is None:
            try:
                client = openai.AsyncOpenAI(
                    api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0
                )
            except openai.OpenAIError as exc:
                raise InvalidInput(
                    "api_key",
                    f"no API key: pass api_key=, or set OPENAI_API_KEY (the SDK said: {exc})",
                ) from exc
        self.client: openai.AsyncOpenAI = client
        self.model = model
        self.streaming = stream
        self.extra_body = dict(extra_body or {})
        self._new_id = new_id

    def request_body(self, request: LLMRequest) -> dict[str, Any]:
        raise NotImplementedError

    def _whole(self, data: object) -> LLMResponse:
        """A non-streamed answer's body as one response."""
        raise NotImplementedError

    def _assembler(self) -> ChatStreamAssembler | ResponsesStreamAssembler:
        """What turns this API's stream into deltas and one final response."""
        raise NotImplementedError

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        body = self.request_body(request)
        spec = native_spec(request)
        if spec is not None:
            # whether the schema went strict (and why not), kept with the answer
            request.metadata["native_output"] = native_schema(spec).record(spec)
        if not self.streaming:
            data = await self._post(body)
            try:
                response = self._whole(data)
            except (MalformedChunk, StreamErrorEvent) as exc:
                raise map_openai_error(exc) from exc
            yield response
            return
        assembler = self._assembler()
        items = await self._open_stream(body)
        final: LLMResponse
        async with items:
            try:
                async for item in items:
                    for delta in assembler.feed(item):
                        yield delta
                final = assembler.finish()
            except Exception as exc:
                raise map_openai_error(exc, assembler.text) from exc
        yield final

    async def _post(self, body: dict[str, Any]) -> object:
        try:
            return await self.client.post(
                self._path, body=body, cast_to=object, options=_NO_RETRIES
            )
        except Exception as exc:
            raise map_openai_error(exc) from exc

    async def _open_stream(self, body: dict[str, Any]) -> AsyncStream[object]:
        try:
            return await self.client.post(
                self._path,
                body=body,
                cast_to=object,
                options=_NO_RETRIES,
                stream=True,
                stream_cls=AsyncStream[object],
            )
        except Exception as exc:
            raise map_openai_error(exc) from exc


class OpenAIChatAdapter(_OpenAIAdapter):
    """An :class:`~turnfsm.adapters.llm.LLM` over Chat Completions.

    ``client`` is an ``openai.AsyncOpenAI`` to use as it is (its base URL, key and
    timeout; it is not closed by :meth:`aclose`); without one, a client is built
    from ``base_url`` / ``api_key`` (default: ``OPENAI_BASE_URL`` /
    ``OPENAI_API_KEY``) and ``timeout``, and :meth:`aclose` closes it. ``model``
    overrides the context's model id. ``stream=False`` makes one non-streamed
    call per request (a whole answer: no ``StreamingLLMResponse``); when
    streaming, every answer is a streamed one, tool calls included (their
    fragments are yielded as :class:`~turnfsm.model.ToolCallDelta`).
    ``extra_body`` is merged into every body (vendor parameters such as
    ``top_k``). A missing API key raises :class:`~turnfsm.errors.InvalidInput`.
    ``new_id`` names a tool call the server sent without an id.

    An answer type (``request.output``, mode ``native``) goes as the
    ``response_format`` JSON schema (strict when the schema can be made
    strict-compatible; see :func:`chat_request_body`); what was sent is
    kept in ``request.metadata["native_output"]`` (name, digest, strict,
    and why not strict), which the engine stores with the answer.
    """

    native_output = True
    _path = "/chat/completions"

    def request_body(self, request: LLMRequest) -> dict[str, Any]:
        """The body this adapter sends for ``request``."""
        return chat_request_body(
            request, stream=self.streaming, model=self.model, extra_body=self.extra_body
        )

    def _whole(self, data: object) -> LLMResponse:
        return chat_completion_response(data, self._new_id)

    def _assembler(self) -> ChatStreamAssembler:
        return ChatStreamAssembler(self._new_id)


class OpenAIResponsesAdapter(_OpenAIAdapter):
    """An :class:`~turnfsm.adapters.llm.LLM` over the Responses API
    (``POST /responses``), with the same options and error mapping as
    :class:`OpenAIChatAdapter`. The conversation is sent whole each time as
    ``input`` items (the engine keeps the history; nothing relies on
    ``previous_response_id``): an earlier answer's reasoning items go back
    with it, so a reasoning model keeps its reasoning across tool calls.

    ``store`` is sent as the body's ``store`` when not ``None`` (default: not
    sent, the API's default applies). With ``store=False`` the API keeps
    nothing, so each request also asks for ``reasoning.encrypted_content`` and
    the reasoning goes back encrypted.

    An answer type (``request.output``, mode ``native``) goes as the
    ``text.format`` JSON schema, as :class:`OpenAIChatAdapter` sends its
    ``response_format``.
    """

    native_output = True
    _path = "/responses"

    def __init__(
        self,
        client: openai.AsyncOpenAI | None = None,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = 60.0,
        stream: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        new_id: Callable[[], str] = new_call_id,
        store: bool | None = None,
    ) -> None:
        super().__init__(
            client,
            model=model,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            stream=stream,
            extra_body=extra_body,
            new_id=new_id,
        )
        self.store = store

    def request_body(self, request: LLMRequest) -> dict[str, Any]:
        return responses_request_body(
            request,
            stream=self.streaming,
            model=self.model,
            extra_body=self.extra_body,
            store=self.store,
        )

    def _whole(self, data: object) -> LLMResponse:
        return responses_response(data, self._new_id)

    def _assembler(self) -> ResponsesStreamAssembler:
        return ResponsesStreamAssembler(self._new_id)
