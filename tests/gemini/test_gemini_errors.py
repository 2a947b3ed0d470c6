"""Errors of the Gemini API, over loopback, through a real engine: an error
inside a 200 stream, 429 / 503 / 500 / 504 (transient, the delay the server
asked for honoured, then success), and 400 / 401 / 403 / 404 (permanent, the
provider's message, no key in it)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
from gemini_corpus import corpus, error_mid_stream, status_error
from gemini_loopback import LoopbackServer, Reply
from provider_cases import ALR, IDLE, PF, PLR, PUM, SLR, TF, one_turn

from turnfsm import State
from turnfsm.errors import InvalidInput, PermanentLLMError, TransientLLMError
from turnfsm.events import Failed, Retrying
from turnfsm.model import RESPONSES_KEY, LLMRequest
from turnfsm.testing import FakeClock

if TYPE_CHECKING:
    from turnfsm.adapters.llm import GeminiLLM


pytestmark = pytest.mark.anyio

KEY = "AIzaSyLoopbackSecretKey0123456789abcdef"
TEXT = corpus()[0]  # "The capital of France is Paris."
REQUEST = LLMRequest("c", "gemini-2.5-flash", [{"role": "user", "content": "Hi"}])


@pytest.fixture
async def llm(loopback: LoopbackServer) -> AsyncIterator[GeminiLLM]:
    from turnfsm.adapters.llm import GeminiLLM

    async with GeminiLLM("gemini-2.5-flash", base_url=loopback.url, api_key=KEY) as adapter:
        yield adapter


async def test_an_error_mid_stream_is_retried_and_its_text_not_kept(
    loopback: LoopbackServer, llm: GeminiLLM
) -> None:
    loopback.script(error_mid_stream(), TEXT.reply())
    turn, seen, history = await one_turn(llm, FakeClock())
    assert [s.value for s in turn.states] == [PUM, ALR, SLR, TF, ALR, SLR, PLR, IDLE]
    [retrying] = [e for e in seen if isinstance(e, Retrying)]
    assert retrying.error == "HTTP 500: Error"
    assert turn.text == "The capital of France is Paris."
    assert [n.message.text for n in history] == ["Hi", "The capital of France is Paris."]
    assert len(loopback.requests) == 2 and loopback.bodies[0] == loopback.bodies[1]


@pytest.mark.parametrize(
    ("code", "status", "message", "retry_after", "delay", "waited"),
    [
        (429, "RESOURCE_EXHAUSTED", "Resource has been exhausted", None, "7s", 7.0),
        (429, "RESOURCE_EXHAUSTED", "Quota exceeded", "3", None, 3.0),
        (503, "UNAVAILABLE", "The model is overloaded. Please try again later.", "2", None, 2.0),
        (500, "INTERNAL", "An internal error has occurred.", None, None, None),
        (504, "DEADLINE_EXCEEDED", "Deadline exceeded", None, None, None),
    ],
)
async def test_a_transient_status_then_success(
    loopback: LoopbackServer,
    llm: GeminiLLM,
    code: int,
    status: str,
    message: str,
    retry_after: str | None,
    delay: str | None,
    waited: float | None,
) -> None:
    loopback.script(
        status_error(code, status, message, retry_after=retry_after, delay=delay), TEXT.reply()
    )
    clock = FakeClock()
    turn, seen, _ = await one_turn(llm, clock)
    assert [s.value for s in turn.states] == [PUM, ALR, TF, ALR, SLR, PLR, IDLE]
    [retrying] = [e for e in seen if isinstance(e, Retrying)]
    assert retrying.error == f"HTTP {code}: {message}"
    if waited is not None:
        assert clock.sleeps == [waited]  # the provider's delay, not the backoff
    assert turn.text == "The capital of France is Paris."
    # one layer retries: the SDK sent each request once
    assert len(loopback.requests) == 2


@pytest.mark.parametrize(
    ("code", "status", "message"),
    [
        (400, "INVALID_ARGUMENT", "Please use a valid role: user, model."),
        (400, "INVALID_ARGUMENT", f"API key not valid. Please pass a valid API key. {KEY}"),
        (401, "UNAUTHENTICATED", "Request had invalid authentication credentials."),
        (403, "PERMISSION_DENIED", f"Method doesn't allow unregistered callers ({KEY})"),
        (404, "NOT_FOUND", "models/gemini-nope is not found for API version v1beta"),
    ],
)
async def test_a_permanent_status_fails_with_the_providers_message_and_no_key(
    loopback: LoopbackServer, llm: GeminiLLM, code: int, status: str, message: str
) -> None:
    loopback.script(status_error(code, status, message))
    turn, seen, _ = await one_turn(llm)
    assert turn.state == State.PERMANENT_FAILURE
    assert [s.value for s in turn.states] == [PUM, ALR, PF]
    [failed] = [e for e in seen if isinstance(e, Failed)]
    assert failed.error == f"HTTP {code}: {message.replace(KEY, '***')}"
    assert KEY not in failed.error
    assert len(loopback.requests) == 1
    assert loopback.requests[0].headers["x-goog-api-key"] == KEY  # it was sent


async def test_a_stream_that_ends_without_a_finish_reason_is_retried(
    loopback: LoopbackServer, llm: GeminiLLM
) -> None:
    cut = Reply(chunks=TEXT.chunks[:1])
    loopback.script(cut, Reply(chunks=[b'data: {"candidates": [}\r\n\r\n']), TEXT.reply())
    got = []
    for _ in range(2):
        with pytest.raises(TransientLLMError) as info:
            async for _chunk in llm.stream(REQUEST):
                pass
        got.append(info.value)
    assert got[0].kind == "incomplete_stream" and got[0].partial_text == "The"
    assert got[1].kind == "malformed_chunk"
    chunks = [c async for c in llm.stream(REQUEST)]
    assert chunks[-1].text == "The capital of France is Paris."  # type: ignore[union-attr]


async def test_unknown_parameters_and_a_missing_key_are_named(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.genai import errors

    from turnfsm.adapters.llm import GeminiLLM
    from turnfsm.adapters.llm.gemini import map_gemini_error

    async with GeminiLLM("gemini-2.5-flash", base_url=loopback.url, api_key=KEY, logprobz=3) as llm:
        with pytest.raises(PermanentLLMError) as info:
            async for _chunk in llm.stream(REQUEST):
                pass
    assert info.value.kind == "invalid_request"
    assert "logprobz" in info.value.message
    assert loopback.requests == []  # refused before anything was sent
    bad = LLMRequest(
        "c",
        "gemini-2.5-flash",
        [
            {
                "role": "assistant",
                "content": "x",
                RESPONSES_KEY: {
                    "reasoning": [
                        {
                            "id": "",
                            "summary": [],
                            "provider": "google",
                            "data": {"part": "text", "thoughtSignature": "YWJj!"},
                        }
                    ]
                },
            }
        ],
    )
    async with GeminiLLM("gemini-2.5-flash", base_url=loopback.url, api_key=KEY) as llm:
        with pytest.raises(PermanentLLMError) as info:
            async for _chunk in llm.stream(bad):
                pass
    assert info.value.kind == "invalid_request"
    assert info.value.message.startswith("a part's thoughtSignature is not base64")
    assert loopback.requests == []
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InvalidInput, match="GEMINI_API_KEY"):
        GeminiLLM("gemini-2.5-flash", base_url=loopback.url)
    assert map_gemini_error(ValueError("x")).kind == "adapter"
    server = errors.ServerError(503, {"error": {"code": 503, "message": "busy"}})
    assert isinstance(map_gemini_error(server), TransientLLMError)


def test_without_the_extra_the_import_error_names_it() -> None:
    """A real interpreter where ``google.genai`` cannot be imported."""
    code = (
        "import sys; sys.modules['google.genai'] = None\n"
        "import turnfsm.adapters.llm as llm\n"
        "try:\n"
        "    llm.GeminiLLM\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == (
        "GeminiLLM needs the google-genai SDK: pip install 'turnfsm[google]'"
    )


async def test_a_client_of_ones_own_that_retries_still_sends_each_request_once(
    loopback: LoopbackServer,
) -> None:
    from google import genai
    from google.genai import types

    from turnfsm.adapters.llm import GeminiLLM

    retrying = types.HttpRetryOptions(attempts=4, initial_delay=0.01, max_delay=0.01)
    client = genai.Client(
        api_key=KEY, http_options=types.HttpOptions(base_url=loopback.url, retry_options=retrying)
    )
    loopback.script(status_error(503, "UNAVAILABLE", "overloaded"), TEXT.reply())
    async with GeminiLLM("gemini-2.5-flash", client=client) as llm:
        with pytest.raises(TransientLLMError) as info:
            async for _chunk in llm.stream(REQUEST):
                pass
    assert info.value.status == 503
    assert len(loopback.requests) == 1  # the engine is the one layer that retries
    await client.aio.aclose()
