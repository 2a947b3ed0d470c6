"""``OpenAIChatAdapter`` against the loopback server, through the real ``openai`` SDK.

No transport mocks: the SDK opens a real socket to 127.0.0.1, sends the body,
and decodes the SSE stream the server writes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from kit import refusing_port
from openai_loopback import DONE, LoopbackServer, Reply, error_body
from openai_samples import chunk, completion, text_stream, tool_call_stream

from turnfsm.errors import InvalidInput, LLMError, PermanentLLMError, TransientLLMError
from turnfsm.model import (
    LLMChunk,
    LLMRequest,
    LLMResponse,
    TextDelta,
    ThinkingDelta,
    ToolCallData,
    ToolCallDelta,
)

if TYPE_CHECKING:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter


pytestmark = pytest.mark.anyio

KEY = "sk-loopback"


def request(**kwargs: Any) -> LLMRequest:
    base: dict[str, Any] = {
        "context_id": "ctx",
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "parameters": {"temperature": 0.1},
    }
    return LLMRequest(**{**base, **kwargs})


def adapter(server: LoopbackServer, **kwargs: Any) -> OpenAIChatAdapter:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter

    return OpenAIChatAdapter(base_url=server.url, api_key=KEY, **{"timeout": 10.0, **kwargs})


async def collect(llm: OpenAIChatAdapter, req: LLMRequest | None = None) -> list[LLMChunk]:
    return [c async for c in llm.stream(req or request())]


async def fail(llm: OpenAIChatAdapter, req: LLMRequest | None = None) -> LLMError:
    with pytest.raises(LLMError) as info:
        await collect(llm, req)
    return info.value


async def test_plain_text_streams_as_deltas(loopback: LoopbackServer) -> None:
    loopback.script(Reply(events=text_stream(["Hel", "lo", " there."])))
    async with adapter(loopback) as llm:
        req = request()
        chunks = await collect(llm, req)
        sent = llm.request_body(req)
    assert chunks[:-1] == [TextDelta("Hel"), TextDelta("lo"), TextDelta(" there.")]
    final = chunks[-1]
    assert isinstance(final, LLMResponse)
    assert (final.text, final.finish_reason, final.model) == ("Hello there.", "stop", "gpt-4o-mini")
    assert final.usage is not None and final.usage["prompt_tokens"] == 12
    [got] = loopback.requests
    assert got.path == "/v1/chat/completions"
    assert got.body == sent  # the pure body is exactly what went on the wire
    assert got.body["stream"] is True and got.body["stream_options"] == {"include_usage": True}
    assert got.body["temperature"] == 0.1
    assert got.headers["authorization"] == f"Bearer {KEY}"
    assert got.headers["accept"] == "application/json"
    assert got.headers["x-stainless-retry-count"] == "0"


async def test_text_and_parallel_tool_calls_split_across_many_chunks(
    loopback: LoopbackServer,
) -> None:
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("call_w", "get_weather", {"city": "Buenos Aires", "unit": "celsius"}),
        ("call_t", "get_time", {"timezone": "America/Argentina/Buenos_Aires"}),
        ("call_x", "convert", {"amount": 12.5, "from": "USD", "to": "ARS"}),
    ]
    events = tool_call_stream(calls, text=["Let me ", "look."], piece=3)
    assert len(events) > 40
    loopback.script(Reply(events=events))
    async with adapter(loopback) as llm:
        chunks = await collect(llm)
    final = chunks[-1]
    assert isinstance(final, LLMResponse)
    assert final.text == "Let me look."
    assert final.tool_calls == tuple(ToolCallData(*c) for c in calls)
    assert final.finish_reason == "tool_calls"
    fragments = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert {f.index for f in fragments} == {0, 1, 2}
    joined = {i: "".join(f.arguments for f in fragments if f.index == i) for i in range(3)}
    assert [json.loads(joined[i]) for i in range(3)] == [c[2] for c in calls]


async def test_reasoning_content_is_thinking(loopback: LoopbackServer) -> None:
    loopback.script(
        Reply(
            events=[
                chunk({"role": "assistant", "reasoning_content": "Two and "}),
                chunk({"reasoning_content": "two."}),
                chunk({"content": "4"}),
                chunk({}, "stop"),
                DONE,
            ]
        )
    )
    async with adapter(loopback) as llm:
        chunks = await collect(llm)
    assert chunks[:3] == [ThinkingDelta("Two and "), ThinkingDelta("two."), TextDelta("4")]
    final = chunks[-1]
    assert isinstance(final, LLMResponse)
    assert (final.thinking, final.usage) == ("Two and two.", None)


async def test_not_streamed_is_one_whole_answer(loopback: LoopbackServer) -> None:
    loopback.script(Reply(json=completion("Fine.", [("c1", "f", '{"broken": ')])))
    async with adapter(loopback, stream=False) as llm:
        chunks = await collect(llm)
    [final] = chunks
    assert isinstance(final, LLMResponse)
    assert final.text == "Fine."
    assert final.tool_calls == (ToolCallData("c1", "f", '{"broken": '),)  # raw: invalid JSON
    body = loopback.requests[0].body
    assert "stream" not in body and "stream_options" not in body


async def test_429_with_retry_after_is_transient_and_not_retried_by_the_sdk(
    loopback: LoopbackServer,
) -> None:
    import openai

    loopback.script(
        Reply(
            status=429,
            json=error_body("Rate limit reached", "requests", "rate_limit_exceeded"),
            headers={"retry-after": "2"},
        )
    )
    async with adapter(loopback) as llm:
        err = await fail(llm)
    assert isinstance(err, TransientLLMError)
    assert (err.status, err.retry_after) == (429, 2.0)
    assert err.describe() == "HTTP 429: Rate limit reached"
    assert isinstance(err.__cause__, openai.RateLimitError)  # raise ... from exc
    assert len(loopback.requests) == 1  # max_retries=0: the engine is the one retry layer


async def test_retry_after_ms(loopback: LoopbackServer) -> None:
    loopback.script(
        Reply(
            status=503,
            json=error_body("busy", "server_error"),
            headers={"retry-after-ms": "250", "retry-after": "9"},
        )
    )
    async with adapter(loopback) as llm:
        err = await fail(llm)
    assert isinstance(err, TransientLLMError)
    assert err.retry_after == 0.25


async def test_x_should_retry_false_on_a_503_is_permanent(loopback: LoopbackServer) -> None:
    loopback.script(
        Reply(
            status=503, json=error_body("down", "server_error"), headers={"x-should-retry": "false"}
        )
    )
    async with adapter(loopback) as llm:
        err = await fail(llm)
    assert isinstance(err, PermanentLLMError)
    assert err.status == 503
    assert len(loopback.requests) == 1


async def test_401_is_permanent(loopback: LoopbackServer) -> None:
    import openai

    loopback.script(
        Reply(
            status=401,
            json=error_body(
                "Incorrect API key provided: sk-loop****.",
                "invalid_request_error",
                "invalid_api_key",
            ),
        )
    )
    async with adapter(loopback) as llm:
        err = await fail(llm)
    assert isinstance(err, PermanentLLMError)
    assert err.status == 401
    assert "Incorrect API key" in err.describe()
    assert isinstance(err.__cause__, openai.AuthenticationError)


async def test_a_500_error_in_the_middle_of_a_stream(loopback: LoopbackServer) -> None:
    """The status line said 200; the server then reports an error in the stream."""
    events: list[Any] = text_stream(["The answer ", "is "])[:3]
    events.append(
        {
            "error": {
                "message": "The server had an error",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
    )
    loopback.script(Reply(events=events))
    async with adapter(loopback) as llm:
        seen: list[LLMChunk] = []
        with pytest.raises(TransientLLMError) as info:
            async for c in llm.stream(request()):
                seen.append(c)
    err = info.value
    assert seen == [TextDelta("The answer "), TextDelta("is ")]
    assert err.kind == "stream_error"
    assert err.partial_text == "The answer is "
    assert "The server had an error" in err.describe()


async def test_a_stream_that_breaks_mid_way(loopback: LoopbackServer) -> None:
    import openai

    loopback.script(Reply(events=text_stream(["one ", "two ", "three"]), break_after=3))
    async with adapter(loopback) as llm:
        err = await fail(llm)
    assert isinstance(err, TransientLLMError)
    assert err.kind == "connection"
    assert err.partial_text == "one two "
    assert isinstance(err.__cause__, openai.APIConnectionError)


async def test_a_stream_that_ends_without_finishing(loopback: LoopbackServer) -> None:
    loopback.script(Reply(events=[chunk({"content": "cut"}), DONE]))
    async with adapter(loopback) as llm:
        err = await fail(llm)
    assert (type(err), err.kind, err.partial_text) == (
        TransientLLMError,
        "incomplete_stream",
        "cut",
    )


async def test_a_malformed_chunk(loopback: LoopbackServer) -> None:
    loopback.script(
        Reply(events=[chunk({"content": "ok "}), '{"id": "chatcmpl-1", "choices": [{"ind', DONE])
    )
    async with adapter(loopback) as llm:
        err = await fail(llm)
    assert isinstance(err, TransientLLMError)
    assert err.kind == "malformed_chunk"
    assert err.partial_text == "ok "
    assert "not JSON" in err.describe()


async def test_a_chunk_of_the_wrong_shape(loopback: LoopbackServer) -> None:
    loopback.script(Reply(events=[{"id": "x", "choices": {"index": 0}}, DONE]))
    async with adapter(loopback) as llm:
        err = await fail(llm)
    assert (type(err), err.kind) == (TransientLLMError, "malformed_chunk")
    assert "'choices' is not a JSON array" in err.describe()


async def test_a_timeout(loopback: LoopbackServer) -> None:
    import openai

    loopback.script(Reply(events=text_stream(["late"]), delay=5.0))
    async with adapter(loopback, timeout=0.3) as llm:
        err = await fail(llm)
    assert isinstance(err, TransientLLMError)
    assert err.kind == "timeout"
    assert isinstance(err.__cause__, openai.APITimeoutError)


async def test_an_unreachable_server() -> None:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter

    with refusing_port() as port:  # a port nobody listens on while it is held
        url = f"http://127.0.0.1:{port}/v1"
        async with OpenAIChatAdapter(base_url=url, api_key=KEY) as llm:
            err = await fail(llm)
    assert isinstance(err, TransientLLMError)
    assert err.kind == "connection"


async def test_a_given_client_is_used_and_left_open(loopback: LoopbackServer) -> None:
    import openai

    from turnfsm.adapters.llm.openai import OpenAIChatAdapter

    loopback.script(Reply(events=text_stream(["a"])), Reply(events=text_stream(["b"])))
    async with openai.AsyncOpenAI(base_url=loopback.url, api_key=KEY, max_retries=5) as client:
        llm = OpenAIChatAdapter(client, model="override-model")
        await collect(llm)
        await llm.aclose()  # not ours to close
        chunks = await collect(llm)
    assert isinstance(chunks[-1], LLMResponse) and chunks[-1].text == "b"
    assert [r.body["model"] for r in loopback.requests] == ["override-model"] * 2
    assert loopback.requests[0].headers["x-stainless-retry-count"] == "0"
    with pytest.raises(InvalidInput):
        OpenAIChatAdapter(client, base_url=loopback.url)


async def test_a_given_client_does_not_retry(loopback: LoopbackServer) -> None:
    import openai

    from turnfsm.adapters.llm.openai import OpenAIChatAdapter

    loopback.script(
        Reply(status=500, json=error_body("x", "server_error")), Reply(events=text_stream(["b"]))
    )
    async with openai.AsyncOpenAI(base_url=loopback.url, api_key=KEY, max_retries=5) as client:
        err = await fail(OpenAIChatAdapter(client))
    assert isinstance(err, TransientLLMError)
    assert len(loopback.requests) == 1


def test_a_missing_api_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)
    with pytest.raises(InvalidInput, match="OPENAI_API_KEY"):
        OpenAIChatAdapter()
