"""What every provider adapter shares, with no SDK in it: the owned client's
lifecycle (:class:`OwnedClient`, :class:`HTTPClientAdapter`), the error
mapping's common cases (an API key masked out of a message, an HTTP status
with its retry advice, a broken or malformed stream), and the small pieces the
request builders all need (the text of a chat message's content, a stored
reasoning item of this provider, one turn appended to a message list).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, Self

from ...errors import InvalidInput, LLMError, PermanentLLMError, TransientLLMError
from ...model._json import loads_json
from ._openai_common import IncompleteStream, MalformedChunk, retry_after_seconds

__all__ = [
    "HTTPClientAdapter",
    "OwnedClient",
    "adapter_error",
    "append_turn",
    "arguments_object",
    "clip",
    "connection_error",
    "masked",
    "one_client",
    "own_reasoning",
    "status_error",
    "stream_break",
    "text_of",
    "timeout_error",
    "with_partial",
]


# ---------------------------------------------------------------------- the client


class OwnedClient:
    """An adapter's client: closed by :meth:`aclose` (and on leaving ``async
    with``) only when the adapter built it (``_owns_client``)."""

    _owns_client: bool

    async def _close_client(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close the HTTP client, when this adapter built it."""
        if self._owns_client:
            await self._close_client()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def one_client(client: object, base_url: str | None, api_key: str | None) -> None:
    """Refuse a client given together with what would build one."""
    if client is not None and (base_url is not None or api_key is not None):
        raise InvalidInput("client", "give a client, or base_url/api_key to build one, not both")


class _HTTPClient(Protocol):
    @property
    def base_url(self) -> Any: ...

    async def close(self) -> None: ...


class HTTPClientAdapter(OwnedClient):
    """An :class:`OwnedClient` whose SDK client has a ``base_url`` and ``close()``
    (the ``openai`` and ``anthropic`` clients)."""

    client: _HTTPClient

    @property
    def base_url(self) -> str:
        return str(self.client.base_url)

    async def _close_client(self) -> None:
        await self.client.close()


# ---------------------------------------------------------------------- errors


def clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def masked(err: LLMError, secret: str | None) -> LLMError:
    """``err`` with every occurrence of ``secret`` (an API key of 8 characters or
    more) in its message replaced by ``***``."""
    if secret and len(secret) >= 8:
        err.message = err.message.replace(secret, "***")
    err.args = (err.message,)
    return err


def with_partial(err: LLMError, partial_text: str) -> LLMError:
    """An :class:`LLMError` raised inside the adapter, given the text a stream
    delivered before it when it carries none."""
    if partial_text and not err.partial_text:
        err.partial_text = partial_text
    return err


def status_error(
    status: int,
    message: str,
    headers: Mapping[str, str],
    now: float,
    partial_text: str,
) -> LLMError:
    """An HTTP error status: transient or permanent by the status, unless the
    ``x-should-retry`` header says otherwise; ``retry_after`` from the headers."""
    retry_after = retry_after_seconds(headers, now)
    base = LLMError.from_status(status, message, retry_after=retry_after)
    should = (headers.get("x-should-retry") or "").strip().lower()
    cls: type[LLMError] = type(base)
    if should == "true":
        cls = TransientLLMError
    elif should == "false":
        cls = PermanentLLMError
    return cls(base.message, status=status, retry_after=retry_after, partial_text=partial_text)


def timeout_error(partial_text: str) -> LLMError:
    return TransientLLMError("request timed out", kind="timeout", partial_text=partial_text)


def connection_error(detail: str, partial_text: str) -> LLMError:
    return TransientLLMError(
        f"the connection failed{detail}", kind="connection", partial_text=partial_text
    )


def stream_break(exc: BaseException, partial_text: str, unit: str) -> LLMError | None:
    """The error for a stream that is not what its wire format says (a ``unit``,
    "a chunk" or "an event", that is not JSON or not the format's shape) or that
    ends before it is complete; ``None`` for any other exception."""
    if isinstance(exc, json.JSONDecodeError):
        return TransientLLMError(
            f"{unit} is not JSON: {clip(exc.doc)!r} ({exc.msg} at char {exc.pos})",
            kind="malformed_chunk",
            partial_text=partial_text,
        )
    if isinstance(exc, MalformedChunk | UnicodeDecodeError):
        return TransientLLMError(str(exc), kind="malformed_chunk", partial_text=partial_text)
    if isinstance(exc, IncompleteStream):
        return TransientLLMError(str(exc), kind="incomplete_stream", partial_text=partial_text)
    return None


def adapter_error(exc: BaseException, partial_text: str) -> LLMError:
    """The error for an exception no other case names."""
    return PermanentLLMError(
        f"{type(exc).__name__}: {exc}", kind="adapter", partial_text=partial_text
    )


# ---------------------------------------------------------------------- request bodies


def text_of(content: object) -> str:
    """The text of a chat message's content: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def arguments_object(arguments: object) -> dict[str, Any]:
    """A stored call's arguments as the JSON object a provider requires: the
    decoded object, else ``{}``."""
    if isinstance(arguments, str):
        try:
            decoded = loads_json(arguments) if arguments.strip() else {}
        except ValueError:
            return {}
        return decoded if isinstance(decoded, dict) else {}
    return {}


def own_reasoning(
    items: Iterable[object], provider: str, *, unlabelled: bool = False
) -> list[Mapping[str, Any]]:
    """The stored reasoning items of ``provider`` (another provider's reasoning
    means nothing to it, and is left out); an item with no ``provider`` counts
    as this one's when ``unlabelled``."""
    out: list[Mapping[str, Any]] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        label = item.get("provider", provider) if unlabelled else item.get("provider")
        if label == provider:
            out.append(item)
    return out


def append_turn(
    turns: list[dict[str, Any]], role: str, items: list[dict[str, Any]], key: str
) -> None:
    """Add ``items`` (under ``key``) as a turn of ``role``; consecutive user
    turns become one (tool results, then what the user said). Nothing is added
    for no items."""
    if not items:
        return
    if turns and turns[-1]["role"] == role == "user":
        turns[-1][key].extend(items)
    else:
        turns.append({"role": role, key: items})
