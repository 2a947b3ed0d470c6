"""Errors of the Messages API, over loopback, through a real engine: an
``overloaded_error`` event inside a 200 stream, 429 / 529 / 503 (transient,
``retry-after`` honoured, then success), and 400 / 401 / 403 / 404 (permanent,
the provider's message, no key in it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import httpx2
import pytest
from anthropic_corpus import corpus, overloaded_mid_stream, status_error
from anthropic_loopback import LoopbackServer, Reply
from provider_cases import ALR, IDLE, PF, PLR, PUM, SLR, TF, one_turn

from turnfsm import State
from turnfsm.errors import PermanentLLMError, TransientLLMError
from turnfsm.events import Failed, Retrying
from turnfsm.model import LLMRequest
from turnfsm.testing import FakeClock

if TYPE_CHECKING:
    from turnfsm.adapters.llm import AnthropicLLM


pytestmark = pytest.mark.anyio

KEY = "sk-ant-api03-loopback-secret-key"
TEXT = corpus()[0]  # "Hello there!"
REQUEST = LLMRequest("c", "claude-haiku-4-5", [{"role": "user", "content": "Hi"}])


@pytest.fixture
async def llm(loopback: LoopbackServer) -> AsyncIterator[AnthropicLLM]:
    from turnfsm.adapters.llm import AnthropicLLM

    async with AnthropicLLM("claude-haiku-4-5", base_url=loopback.url, api_key=KEY) as adapter:
        yield adapter


async def test_an_overloaded_event_mid_stream_is_retried_and_its_text_not_kept(
    loopback: LoopbackServer, llm: AnthropicLLM
) -> None:
    loopback.script(overloaded_mid_stream(), TEXT.reply())
    clock = FakeClock()
    turn, seen, history = await one_turn(llm, clock)
    assert [s.value for s in turn.states] == [PUM, ALR, SLR, TF, ALR, SLR, PLR, IDLE]
    [retrying] = [e for e in seen if isinstance(e, Retrying)]
    assert retrying.error == "stream_error: Overloaded (overloaded_error)"
    assert turn.text == "Hello there!"
    assert [n.message.text for n in history] == ["Hi", "Hello there!"]
    assert len(loopback.requests) == 2 and loopback.bodies[0] == loopback.bodies[1]


@pytest.mark.parametrize(
    ("status", "type_", "message", "retry_after", "waited"),
    [
        (
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your rate limit",
            "7",
            7.0,
        ),
        (529, "overloaded_error", "Overloaded", "2", 2.0),
        (503, "api_error", "Service unavailable", None, None),
        (500, "api_error", "Internal server error", None, None),
    ],
)
async def test_a_transient_status_then_success(
    loopback: LoopbackServer,
    llm: AnthropicLLM,
    status: int,
    type_: str,
    message: str,
    retry_after: str | None,
    waited: float | None,
) -> None:
    loopback.script(status_error(status, type_, message, retry_after), TEXT.reply())
    clock = FakeClock()
    turn, seen, _ = await one_turn(llm, clock)
    assert [s.value for s in turn.states] == [PUM, ALR, TF, ALR, SLR, PLR, IDLE]
    [retrying] = [e for e in seen if isinstance(e, Retrying)]
    assert retrying.error == f"HTTP {status}: {message}"
    if waited is not None:
        assert clock.sleeps == [waited]  # the provider's delay, not the backoff
    assert turn.text == "Hello there!"
    # one layer retries: the SDK sent each request once
    assert len(loopback.requests) == 2


@pytest.mark.parametrize(
    ("status", "type_", "message"),
    [
        (400, "invalid_request_error", "messages.1.content.0.type: Expected `thinking`"),
        (401, "authentication_error", f"invalid x-api-key {KEY}"),
        (403, "permission_error", "Your API key does not have permission"),
        (404, "not_found_error", "model: claude-nope"),
    ],
)
async def test_a_permanent_status_fails_with_the_providers_message_and_no_key(
    loopback: LoopbackServer, llm: AnthropicLLM, status: int, type_: str, message: str
) -> None:
    loopback.script(status_error(status, type_, message))
    turn, seen, _ = await one_turn(llm)
    assert turn.state == State.PERMANENT_FAILURE
    assert [s.value for s in turn.states] == [PUM, ALR, PF]
    [failed] = [e for e in seen if isinstance(e, Failed)]
    assert failed.error == f"HTTP {status}: {message.replace(KEY, '***')}"
    assert KEY not in failed.error
    assert len(loopback.requests) == 1
    headers = loopback.requests[0].headers
    assert KEY in (headers.get("x-api-key") or headers.get("authorization") or "")  # it was sent


async def test_the_mapping_by_type_and_header(loopback: LoopbackServer, llm: AnthropicLLM) -> None:
    """x-should-retry wins over the status; a stream error's type decides."""
    import anthropic

    from turnfsm.adapters.llm.anthropic import map_anthropic_error

    loopback.script(
        Reply(
            status=500,
            body=b'{"type":"error","error":{"type":"api_error","message":"boom"}}',
            headers={"x-should-retry": "false"},
        ),
        Reply(
            chunks=[
                b"event: error\n",
                b'data: {"type":"error","error":'
                b'{"type":"invalid_request_error","message":"bad"}}\n\n',
            ]
        ),
    )
    errors = []
    for _ in range(2):
        with pytest.raises(PermanentLLMError) as info:
            async for _chunk in llm.stream(REQUEST):
                pass
        errors.append(info.value)
    first, second = errors
    assert isinstance(first, PermanentLLMError) and first.status == 500
    assert isinstance(second, PermanentLLMError) and second.kind == "stream_error"
    assert second.message == "bad (invalid_request_error)"
    assert map_anthropic_error(ValueError("x")).kind == "adapter"
    timeout = anthropic.APITimeoutError(request=httpx2.Request("POST", loopback.url))
    assert isinstance(map_anthropic_error(timeout), TransientLLMError)


async def test_an_event_that_is_not_json_is_retried_as_a_malformed_chunk(
    loopback: LoopbackServer, llm: AnthropicLLM
) -> None:
    loopback.script(
        Reply(chunks=[b"event: message_start\n", b"data: {not json\n", b"\n"]), TEXT.reply()
    )
    turn, seen, _ = await one_turn(llm)
    [retrying] = [e for e in seen if isinstance(e, Retrying)]
    assert retrying.error.startswith("malformed_chunk: an event is not JSON: '{not json'")
    assert turn.text == "Hello there!"
