"""What the OpenAI wire formats share, as pure functions over plain JSON values
(no ``openai`` here): the errors a malformed answer raises, the checks that
name what is wrong, call ids and arguments, usage, and the headers that carry a
provider's retry advice (:func:`retry_after_seconds`).

The two formats are :mod:`._openai_chat` (Chat Completions) and
:mod:`._openai_responses` (Responses).

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

from ...model._json import loads_json

__all__ = [
    "CHAT_OWNED_KEYS",
    "AssembledCall",
    "IncompleteStream",
    "MalformedChunk",
    "StreamErrorEvent",
    "decode_arguments",
    "expect_dict",
    "expect_list",
    "merge_parameters",
    "new_call_id",
    "normalize_usage",
    "opt_str",
    "retry_after_seconds",
    "short",
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
        decoded = loads_json(raw)
    except ValueError:  # not JSON, or nested too deeply to be stored
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


def merge_parameters(
    body: dict[str, Any], sources: Iterable[Mapping[str, Any] | None]
) -> dict[str, Any]:
    for source in sources:
        for key, value in (source or {}).items():
            if key not in CHAT_OWNED_KEYS:
                body[key] = value
    return body


# ---------------------------------------------------------------------- parsing answers


@dataclass(slots=True)
class AssembledCall:
    """A tool call put together from the fragments (or the item) of an answer."""

    id: str | None = None
    name: str = ""
    arguments: str = ""


def expect_dict(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedChunk(f"{what} is not a JSON object: {short(value)}")
    return value


def expect_list(value: object, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedChunk(f"{what} is not a JSON array: {short(value)}")
    return value


def opt_str(value: object, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise MalformedChunk(f"{what} is not a string: {short(value)}")


def short(value: object) -> str:
    text = json.dumps(value, default=repr) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
