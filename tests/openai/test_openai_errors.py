"""The error mapping at the OpenAI boundary (``map_openai_error``), on its own.

The SDK's exceptions are built here as the SDK builds them (an ``httpx2``
response with its status and headers); the loopback tests check the same
rules end to end.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import TYPE_CHECKING

import httpx2
import pytest

from turnfsm.adapters.llm._openai_common import (
    IncompleteStream,
    MalformedChunk,
    StreamErrorEvent,
    retry_after_seconds,
)
from turnfsm.errors import LLMError, PermanentLLMError, TransientLLMError

if TYPE_CHECKING:
    import openai


NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
REQUEST = httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions")


def status_classes() -> dict[int, type[openai.APIStatusError]]:
    """The SDK's error class of each status (a function: the SDK is imported by
    the tests that use it, not when the module is collected)."""
    import openai

    return {
        400: openai.BadRequestError,
        401: openai.AuthenticationError,
        403: openai.PermissionDeniedError,
        404: openai.NotFoundError,
        409: openai.ConflictError,
        422: openai.UnprocessableEntityError,
        429: openai.RateLimitError,
    }


def status_error(
    status: int, headers: dict[str, str] | None = None, message: str = "nope"
) -> openai.APIStatusError:
    import openai

    response = httpx2.Response(status, headers=headers or {}, request=REQUEST)
    cls = status_classes().get(
        status, openai.InternalServerError if status >= 500 else openai.APIStatusError
    )
    body = {"message": message, "type": "x", "param": None, "code": None}
    return cls(f"Error code: {status} - {message}", response=response, body=body)


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
def test_retryable_statuses_are_transient(status: int) -> None:
    from turnfsm.adapters.llm.openai import map_openai_error

    err = map_openai_error(status_error(status), now=NOW)
    assert isinstance(err, TransientLLMError)
    assert err.retryable is True
    assert err.status == status
    assert err.describe() == f"HTTP {status}: nope"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_are_permanent(status: int) -> None:
    from turnfsm.adapters.llm.openai import map_openai_error

    err = map_openai_error(status_error(status), now=NOW)
    assert isinstance(err, PermanentLLMError)
    assert err.retryable is False
    assert err.status == status


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"Retry-After-Ms": "1500"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # milliseconds win
        (
            {
                "retry-after": format_datetime(
                    datetime(2026, 1, 1, 0, 0, 42, tzinfo=UTC), usegmt=True
                )
            },
            42.0,
        ),
        ({"retry-after": "Wed, 31 Dec 2025 23:59:00 GMT"}, 0.0),  # a date in the past
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-4"}, None),
        ({"retry-after-ms": "nan"}, None),
        ({}, None),
    ],
)
def test_retry_after_headers(headers: dict[str, str], expected: float | None) -> None:
    from turnfsm.adapters.llm.openai import map_openai_error

    assert retry_after_seconds(headers, NOW) == expected
    err = map_openai_error(status_error(429, headers), now=NOW)
    assert err.retry_after == expected


def test_x_should_retry_forces_either_way() -> None:
    from turnfsm.adapters.llm.openai import map_openai_error

    forced_off = map_openai_error(status_error(503, {"x-should-retry": "false"}), now=NOW)
    assert isinstance(forced_off, PermanentLLMError)
    assert forced_off.status == 503
    forced_on = map_openai_error(status_error(400, {"x-should-retry": "true"}), now=NOW)
    assert isinstance(forced_on, TransientLLMError)
    assert forced_on.status == 400
    neutral = map_openai_error(status_error(429, {"x-should-retry": "maybe"}), now=NOW)
    assert isinstance(neutral, TransientLLMError)


def test_a_status_error_without_a_json_body() -> None:
    import openai

    from turnfsm.adapters.llm.openai import map_openai_error

    response = httpx2.Response(502, request=REQUEST)
    exc = openai.InternalServerError(
        "Error code: 502", response=response, body="<html>Bad Gateway</html>"
    )
    err = map_openai_error(exc)
    assert isinstance(err, TransientLLMError)
    assert err.describe() == "HTTP 502: Bad Gateway"  # the page by its text, one line


def test_timeouts_and_connection_errors_are_transient() -> None:
    import openai

    from turnfsm.adapters.llm.openai import map_openai_error

    timeout = map_openai_error(openai.APITimeoutError(request=REQUEST), "par")
    assert isinstance(timeout, TransientLLMError)
    assert (timeout.kind, timeout.status, timeout.partial_text) == ("timeout", None, "par")
    try:
        try:
            raise httpx2.ConnectError("[Errno 111] Connection refused")
        except httpx2.ConnectError as cause:
            raise openai.APIConnectionError(request=REQUEST) from cause
    except openai.APIConnectionError as exc:
        conn = map_openai_error(exc)
    assert isinstance(conn, TransientLLMError)
    assert conn.kind == "connection"
    assert "Connection refused" in conn.describe()


@pytest.mark.parametrize(
    ("body", "cls", "status"),
    [
        ({"message": "boom", "type": "server_error", "code": None}, TransientLLMError, None),
        (
            {"message": "slow", "type": "tokens", "code": "rate_limit_exceeded"},
            TransientLLMError,
            None,
        ),
        (
            {"message": "bad", "type": "invalid_request_error", "code": None},
            PermanentLLMError,
            None,
        ),
        ({"message": "vllm", "type": "BadRequestError", "code": 400}, PermanentLLMError, 400),
        ({"message": "oops", "type": "InternalServerError", "code": "500"}, TransientLLMError, 500),
        ({"message": "who knows"}, TransientLLMError, None),
    ],
)
def test_an_error_inside_a_stream(
    body: dict[str, object], cls: type[LLMError], status: int | None
) -> None:
    import openai

    from turnfsm.adapters.llm.openai import map_openai_error

    exc = openai.APIError(str(body["message"]), REQUEST, body=body)
    err = map_openai_error(exc, "half an ans")
    assert type(err) is cls
    assert err.status == status
    assert err.partial_text == "half an ans"
    assert str(body["message"]) in err.describe()


def test_responses_stream_error_events_use_the_same_rules() -> None:
    from turnfsm.adapters.llm.openai import map_openai_error

    err = map_openai_error(StreamErrorEvent("overloaded", code="server_error"))
    assert isinstance(err, TransientLLMError)
    assert err.kind == "stream_error"
    err = map_openai_error(StreamErrorEvent("too long", code="context_length_exceeded"))
    assert isinstance(err, PermanentLLMError)


def test_malformed_and_incomplete_streams_are_transient() -> None:
    from turnfsm.adapters.llm.openai import map_openai_error

    try:
        json.loads("{not json")
    except json.JSONDecodeError as exc:
        err = map_openai_error(exc, "so far")
    assert isinstance(err, TransientLLMError)
    assert err.kind == "malformed_chunk"
    assert "'{not json'" in err.describe()
    assert err.partial_text == "so far"
    err = map_openai_error(MalformedChunk("'choices' is not a JSON array: 3"))
    assert (type(err), err.kind) == (TransientLLMError, "malformed_chunk")
    err = map_openai_error(IncompleteStream("ended early"))
    assert (type(err), err.kind) == (TransientLLMError, "incomplete_stream")


def test_other_errors_are_permanent() -> None:
    import openai

    from turnfsm.adapters.llm.openai import map_openai_error

    err = map_openai_error(openai.OpenAIError("Missing credentials."))
    assert (type(err), err.kind) == (PermanentLLMError, "configuration")
    err = map_openai_error(RuntimeError("a bug"))
    assert (type(err), err.kind) == (PermanentLLMError, "adapter")
    assert err.describe() == "adapter: RuntimeError: a bug"


def test_our_own_errors_pass_through() -> None:
    from turnfsm.adapters.llm.openai import map_openai_error

    mine = TransientLLMError("x", kind="timeout")
    assert map_openai_error(mine, "p") is mine
    assert mine.partial_text == "p"
