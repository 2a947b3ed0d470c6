"""Gemini through the official ``google-genai`` SDK: ``generateContent``, streamed.

This is the one module that imports ``google.genai`` (extra ``google``)::

    async with GeminiLLM("gemini-2.5-flash") as llm:
        engine = Engine(llm=llm, tools=[...])

The request is built by the pure :func:`gemini_request` (``_gemini_body``)
and sent with the SDK's ``client.aio.models.generate_content_stream``; each
chunk the SDK reads is taken back to the API's JSON and assembled by
:class:`GeminiStreamAssembler` (``_gemini_stream``, whose docstring has the
table of what each answer becomes). The SDK's own retries are off (one
attempt per request): the engine is the one layer that retries.

A ``thoughtSignature`` is opaque bytes to the SDK: it is kept as the API sent
it (standard base64) and handed back to the SDK as the same bytes, which the
SDK writes in the URL-safe base64 alphabet (the API reads both).

Error mapping (:func:`map_gemini_error`, the same errors and kinds as the
OpenAI and Anthropic adapters')::

    SDK / stream condition                        ->  turnfsm error        kind / status
    --------------------------------------------     -------------------  ------------------
    APIError (ClientError, ServerError) 408, 409,
      429, >= 500, also inside the stream         ->  TransientLLMError    status
    APIError 400, 401, 403, 404, ...              ->  PermanentLLMError    status
      + retry-after header, or the error's
        RetryInfo retryDelay ("7s")               ->  retry_after (seconds)
    a timeout of the HTTP client                  ->  TransientLLMError    kind "timeout"
    a transport error of the HTTP client          ->  TransientLLMError    kind "connection"
    malformed chunk, UnknownApiResponseError      ->  TransientLLMError    kind "malformed_chunk"
    stream ended before its finishReason          ->  TransientLLMError    kind "incomplete_stream"
    parameters the SDK's config refuses           ->  PermanentLLMError    kind "invalid_request"
    anything else                                 ->  PermanentLLMError    kind "adapter"

The message is the provider's own (``error.message`` of the body); an API key
never appears in it (any occurrence of the client's key is masked).
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx2
import pydantic
from google import genai
from google.genai import errors, types

from ...errors import InvalidInput, LLMError, PermanentLLMError, TransientLLMError
from ._base import LLMChunk, LLMRequest
from ._common import (
    OwnedClient,
    adapter_error,
    connection_error,
    masked,
    one_client,
    stream_break,
    timeout_error,
    with_partial,
)
from ._gemini_body import gemini_request
from ._gemini_stream import GeminiStreamAssembler
from ._openai_common import retry_after_seconds

__all__ = ["GeminiLLM", "gemini_request", "map_gemini_error"]

_ONE_ATTEMPT = types.HttpRetryOptions(attempts=1)
_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def _retry_delay(details: object) -> float | None:
    """``RetryInfo.retryDelay`` of an error body (``"7s"``), in seconds."""
    error = details.get("error") if isinstance(details, Mapping) else None
    items = error.get("details") if isinstance(error, Mapping) else None
    for item in items if isinstance(items, list) else ():
        delay = item.get("retryDelay") if isinstance(item, Mapping) else None
        match = _DELAY.match(delay) if isinstance(delay, str) else None
        if match:
            return float(match.group(1))
    return None


def _api_error(exc: errors.APIError, partial_text: str, now: float) -> LLMError:
    status = exc.code if isinstance(exc.code, int) else 500
    message = exc.message if isinstance(exc.message, str) and exc.message else f"HTTP {status}"
    headers = getattr(exc.response, "headers", None)
    retry_after = retry_after_seconds(headers, now) if isinstance(headers, Mapping) else None
    if retry_after is None:
        retry_after = _retry_delay(exc.details)
    base = LLMError.from_status(status, message, retry_after=retry_after)
    return type(base)(
        base.message, status=status, retry_after=retry_after, partial_text=partial_text
    )


def map_gemini_error(
    exc: BaseException,
    partial_text: str = "",
    *,
    now: float | None = None,
    secret: str | None = None,
) -> LLMError:
    """The :class:`~turnfsm.errors.LLMError` for an exception met at the
    Gemini boundary (the table is in this module's docstring).
    ``partial_text`` is the text a stream delivered before the failure;
    ``now`` (epoch seconds) dates a ``Retry-After`` given as an HTTP date;
    ``secret`` (the API key) is masked wherever it appears in the message."""
    return masked(_map(exc, partial_text, time.time() if now is None else now), secret)


def _map(exc: BaseException, partial_text: str, now: float) -> LLMError:
    if isinstance(exc, LLMError):
        return with_partial(exc, partial_text)
    if isinstance(exc, errors.APIError):
        return _api_error(exc, partial_text, now)
    if isinstance(exc, httpx2.TimeoutException):
        return timeout_error(partial_text)
    if isinstance(exc, httpx2.TransportError):
        return connection_error(f" ({type(exc).__name__}: {exc})", partial_text)
    if isinstance(exc, errors.UnknownApiResponseError):
        return TransientLLMError(str(exc), kind="malformed_chunk", partial_text=partial_text)
    broken = stream_break(exc, partial_text, "a chunk")
    if broken is not None:
        return broken
    return adapter_error(exc, partial_text)


def _to_bytes(text: object, where: str) -> bytes:
    """Base64 text (standard or URL-safe alphabet, padded or not) as its bytes."""
    if not isinstance(text, str):
        raise PermanentLLMError(f"{where} is not base64 text", kind="invalid_request")
    standard = text.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except ValueError as exc:
        raise PermanentLLMError(f"{where} is not base64: {exc}", kind="invalid_request") from exc


def _sdk_part(part: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(part)
    if "thoughtSignature" in out:
        out["thoughtSignature"] = _to_bytes(out["thoughtSignature"], "a part's thoughtSignature")
    inline = out.get("inlineData")
    if isinstance(inline, Mapping) and "data" in inline:
        out["inlineData"] = {**inline, "data": _to_bytes(inline["data"], "an inlineData's data")}
    return out


def _sdk_contents(contents: list[dict[str, Any]]) -> list[types.Content]:
    return [
        types.Content.model_validate(
            {"role": c["role"], "parts": [_sdk_part(p) for p in c["parts"]]}
        )
        for c in contents
    ]


def _jsonable(value: Any) -> Any:
    """An SDK dump as the API's JSON: bytes as standard base64."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def chunk_json(chunk: types.GenerateContentResponse) -> dict[str, Any]:
    """A chunk the SDK parsed, as the API's JSON (camelCase names)."""
    dumped = chunk.model_dump(
        mode="python", by_alias=True, exclude_none=True, exclude={"sdk_http_response"}
    )
    out = _jsonable(dumped)
    assert isinstance(out, dict)
    return out


class GeminiLLM(OwnedClient):
    """An :class:`~turnfsm.adapters.llm.LLM` over Gemini's ``generateContent``,
    streamed.

    ``model`` is the Gemini model to call (it wins over the context's model
    id). ``client`` is a ``google.genai.Client`` to use as it is (its key,
    base URL and options; :meth:`aclose` does not close it); without one, a
    client is built from ``api_key`` (default: ``GEMINI_API_KEY``, else
    ``GOOGLE_API_KEY``), ``base_url`` (default: the API's) and ``timeout``,
    and :meth:`aclose` closes it. Any other keyword is a generation parameter
    sent with every request (``temperature``, ``thinkingConfig``,
    ``safetySettings``, ...: a ``GenerateContentConfig`` field, camelCase or
    snake_case); the context's parameters win over them.

    Thought summaries and ``thoughtSignature`` s are stored as reasoning items
    and sent back on the part they came with, in their place, as Gemini
    requires before a ``functionResponse``.

    An answer type (``request.output``, mode ``native``) goes as the
    config's ``responseMimeType: "application/json"`` and
    ``responseJsonSchema``; the answer's text is the JSON.
    """

    native_output = True

    def __init__(
        self,
        model: str | None = None,
        *,
        client: genai.Client | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = 600.0,
        **params: Any,
    ) -> None:
        one_client(client, base_url, api_key)
        self._owns_client = client is None
        if client is None:
            options = types.HttpOptions(
                base_url=base_url,
                timeout=int(timeout * 1000) if timeout is not None else None,
                retry_options=_ONE_ATTEMPT,
            )
            try:
                client = genai.Client(api_key=api_key, http_options=options)
            except ValueError as exc:
                raise InvalidInput(
                    "api_key", f"no API key: pass api_key=, or set GEMINI_API_KEY ({exc})"
                ) from exc
        self.client: genai.Client = client
        self.model = model
        self.params = params
        self._key = api_key or getattr(client._api_client, "api_key", None)

    async def _close_client(self) -> None:
        await self.client.aio.aclose()

    def request_json(self, request: LLMRequest) -> dict[str, Any]:
        """``{"model", "contents", "config"}`` this adapter sends for ``request``,
        in the API's names."""
        return gemini_request(request, model=self.model, params=self.params)

    def _error(self, exc: BaseException, partial_text: str = "") -> LLMError:
        return map_gemini_error(exc, partial_text, secret=self._key)

    def _sdk_request(
        self, request: LLMRequest
    ) -> tuple[str, list[types.Content], types.GenerateContentConfig]:
        wire = self.request_json(request)
        model = wire["model"]
        if not isinstance(model, str) or not model:
            raise PermanentLLMError("no model: pass GeminiLLM(model) or set the context's model")
        try:
            contents = _sdk_contents(wire["contents"])
            config = types.GenerateContentConfig.model_validate(wire["config"])
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise PermanentLLMError(
                f"the request's parameters are not Gemini's: {problems}", kind="invalid_request"
            ) from exc
        options = config.http_options or types.HttpOptions()
        config.http_options = options.model_copy(update={"retry_options": _ONE_ATTEMPT})
        return model, contents, config

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        model, contents, config = self._sdk_request(request)
        assembler = GeminiStreamAssembler()
        try:
            chunks = await self.client.aio.models.generate_content_stream(
                model=model, contents=contents, config=config
            )
        except Exception as exc:
            raise self._error(exc) from exc
        try:
            async for chunk in chunks:
                for delta in assembler.feed(chunk_json(chunk)):
                    yield delta
            final = assembler.finish()
        except Exception as exc:
            raise self._error(exc, assembler.text) from exc
        finally:
            close = getattr(chunks, "aclose", None)  # the SDK's stream is an async generator
            if close is not None:
                await close()
        yield final
