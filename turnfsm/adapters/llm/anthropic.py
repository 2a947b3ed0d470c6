"""Claude through the official ``anthropic`` SDK: the Messages API, streamed.

This is the one module that imports ``anthropic`` (extra ``anthropic``)::

    async with AnthropicLLM("claude-sonnet-4-5", thinking={"type": "enabled",
                                                           "budget_tokens": 2048}) as llm:
        engine = Engine(llm=llm, tools=[...])

The request body is built by the pure :func:`anthropic_request_body`
(``_anthropic_body``) and sent as it is with the SDK's ``post``; the stream is
read as plain JSON by :class:`MessagesStreamAssembler` (``_anthropic_stream``,
whose docstring has the table of what each answer becomes). The SDK's own
retries are off (``max_retries=0`` on every request): the engine is the one
layer that retries.

Error mapping (:func:`map_anthropic_error`, the same errors and kinds as the
OpenAI adapter's)::

    SDK / stream condition                        ->  turnfsm error        kind / status
    --------------------------------------------     -------------------  ------------------
    APIStatusError 408, 409, 429, >= 500 (529)    ->  TransientLLMError    status
    APIStatusError 400, 401, 403, 404, 413, ...   ->  PermanentLLMError    status
      + header x-should-retry: true / false        ->  forces Transient / Permanent
      + retry-after-ms, retry-after (s or date)   ->  retry_after (seconds)
    an ``error`` event in the stream               ->  by its type: overloaded_error,
      (overloaded_error, api_error, ...)               api_error, rate_limit_error,
                                                       timeout_error transient; others
                                                       permanent        kind "stream_error"
    APITimeoutError                               ->  TransientLLMError    kind "timeout"
    APIConnectionError                            ->  TransientLLMError    kind "connection"
    malformed event                               ->  TransientLLMError    kind "malformed_chunk"
    stream ended before its stop reason           ->  TransientLLMError    kind "incomplete_stream"
    APIResponseValidationError                    ->  PermanentLLMError    kind "invalid_response"
    no credentials, any other AnthropicError      ->  PermanentLLMError    kind "configuration"
    anything else                                 ->  PermanentLLMError    kind "adapter"

The message is the provider's own (``error.message`` of the body); an API key
never appears in it (any occurrence of the client's key is masked).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anthropic
from anthropic import AsyncStream

from ...errors import InvalidInput, LLMError, PermanentLLMError, TransientLLMError
from ._anthropic_body import anthropic_request_body
from ._anthropic_stream import MessagesStreamAssembler
from ._base import LLMChunk, LLMRequest
from ._common import (
    HTTPClientAdapter,
    adapter_error,
    connection_error,
    masked,
    one_client,
    status_error,
    stream_break,
    timeout_error,
    with_partial,
)
from ._openai_common import StreamErrorEvent, new_call_id

__all__ = ["AnthropicLLM", "anthropic_request_body", "map_anthropic_error"]

_TRANSIENT_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
_PATH = "/v1/messages"


def _error_field(body: object, name: str) -> str | None:
    error = body.get("error") if isinstance(body, Mapping) else None
    value = error.get(name) if isinstance(error, Mapping) else None
    return value if isinstance(value, str) and value else None


def _status_message(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    message = _error_field(body, "message")
    if message is not None:
        return message
    if isinstance(body, str) and body.strip():
        text = body.strip()
        return text if len(text) <= 200 else text[:197] + "..."
    return f"HTTP {exc.status_code}"


def _stream_error(message: str, type_: object, partial_text: str) -> LLMError:
    name = str(type_) if type_ else ""
    cls: type[LLMError] = (
        TransientLLMError if not name or name in _TRANSIENT_TYPES else PermanentLLMError
    )
    text = f"{message} ({name})" if name else message
    return cls(text, kind="stream_error", partial_text=partial_text)


def map_anthropic_error(
    exc: BaseException,
    partial_text: str = "",
    *,
    now: float | None = None,
    secret: str | None = None,
) -> LLMError:
    """The :class:`~turnfsm.errors.LLMError` for an exception met at the
    Anthropic boundary (the table is in this module's docstring).
    ``partial_text`` is the text a stream delivered before the failure;
    ``now`` (epoch seconds) dates a ``Retry-After`` given as an HTTP date;
    ``secret`` (the API key) is masked wherever it appears in the message."""
    return masked(_map(exc, partial_text, time.time() if now is None else now), secret)


def _map(exc: BaseException, partial_text: str, now: float) -> LLMError:
    if isinstance(exc, LLMError):
        return with_partial(exc, partial_text)
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        if status < 300:  # an error event inside a 200 stream
            return _stream_error(_status_message(exc), _error_field(exc.body, "type"), partial_text)
        return status_error(status, _status_message(exc), exc.response.headers, now, partial_text)
    if isinstance(exc, anthropic.APITimeoutError):
        return timeout_error(partial_text)
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__
        detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        return connection_error(detail, partial_text)
    if isinstance(exc, anthropic.APIResponseValidationError):
        return PermanentLLMError(
            f"the server's answer is invalid: {exc.message}",
            status=exc.status_code,
            kind="invalid_response",
            partial_text=partial_text,
        )
    if isinstance(exc, StreamErrorEvent):
        return _stream_error(exc.message, exc.type, partial_text)
    broken = stream_break(exc, partial_text, "an event")
    if broken is not None:
        return broken
    if isinstance(exc, TypeError) and "authentication method" in str(exc):
        return PermanentLLMError(
            "no API key: pass api_key=, or set ANTHROPIC_API_KEY",
            kind="configuration",
            partial_text=partial_text,
        )
    if isinstance(exc, anthropic.AnthropicError):
        return PermanentLLMError(str(exc), kind="configuration", partial_text=partial_text)
    return adapter_error(exc, partial_text)


class AnthropicLLM(HTTPClientAdapter):
    """An :class:`~turnfsm.adapters.llm.LLM` over Claude's Messages API, streamed.

    ``model`` is the Claude model to call (it wins over the context's model
    id). ``client`` is an ``anthropic.AsyncAnthropic`` to use as it is (its
    base URL, key and timeout; :meth:`aclose` does not close it); without
    one, a client is built from ``api_key`` / ``base_url`` (default:
    ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``) and ``timeout``, and
    :meth:`aclose` closes it. ``max_tokens`` is sent when the context's
    parameters set none (the API requires it). ``thinking`` turns extended
    thinking on (``{"type": "enabled", "budget_tokens": N}``; sent unless
    the context's parameters give their own). ``cache`` puts prompt-cache
    breakpoints on the system prompt, the tools and the newest turn (on by
    default; ``cache=False`` sends none). Any other keyword is a Messages
    parameter sent with every request (``temperature``, ``top_k``,
    ``metadata``, ...); the context's parameters win over them.

    The thinking blocks of an answer (with their signatures) and its redacted
    thinking are stored as reasoning items and sent back unchanged, in their
    place, on the next request, as Claude requires before a ``tool_result``.

    An answer type (``request.output``, mode ``native``) goes as the body's
    ``output_config.format`` JSON schema (Claude's structured outputs); the
    answer's text is the JSON, streamed as text deltas.
    """

    native_output = True

    def __init__(
        self,
        model: str | None = None,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = 4096,
        thinking: Mapping[str, Any] | None = None,
        cache: bool = True,
        timeout: float | None = 600.0,
        new_id: Callable[[], str] = new_call_id,
        **params: Any,
    ) -> None:
        one_client(client, base_url, api_key)
        if type(max_tokens) is not int or max_tokens < 1:
            raise InvalidInput("max_tokens", f"must be an int >= 1, got {max_tokens!r}")
        if thinking is not None and not isinstance(thinking, Mapping):
            raise InvalidInput("thinking", f"must be a mapping or None, got {thinking!r}")
        self._owns_client = client is None
        if client is None:
            client = anthropic.AsyncAnthropic(
                api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0
            )
        self.client: anthropic.AsyncAnthropic = client
        self.model = model
        self.max_tokens = max_tokens
        self.thinking = dict(thinking) if thinking is not None else None
        self.cache = cache
        self.params = params
        self._new_id = new_id

    def request_body(self, request: LLMRequest) -> dict[str, Any]:
        """The body this adapter sends for ``request``."""
        return anthropic_request_body(
            request,
            model=self.model,
            max_tokens=self.max_tokens,
            thinking=self.thinking,
            params=self.params,
            cache=self.cache,
        )

    def _error(self, exc: BaseException, partial_text: str = "") -> LLMError:
        return map_anthropic_error(exc, partial_text, secret=self.client.api_key)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        body = self.request_body(request)
        try:
            events = await self.client.post(
                _PATH,
                body=body,
                cast_to=object,
                options={"max_retries": 0},
                stream=True,
                stream_cls=AsyncStream[object],
            )
        except Exception as exc:
            raise self._error(exc) from exc
        assembler = MessagesStreamAssembler(self._new_id)
        async with events:
            try:
                async for event in events:
                    for delta in assembler.feed(event):
                        yield delta
                final = assembler.finish()
            except Exception as exc:
                raise self._error(exc, assembler.text) from exc
        yield final
