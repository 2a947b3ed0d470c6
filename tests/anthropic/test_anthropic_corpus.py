"""Real Messages API bodies, replayed byte for byte on loopback, through a real
engine on a real SQLite store: what turnfsm stores must agree with the
official SDK's own accumulation of the same bytes (``MessageStream``,
``get_final_message()``), and the second request (after a tool call) must
carry back what the API requires, as the loopback server received it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jiter
import pytest
from anthropic_corpus import Case, corpus
from anthropic_loopback import LoopbackServer
from provider_cases import stored_turn

from turnfsm import State, tool
from turnfsm.model import InternalMessage, Role

if TYPE_CHECKING:
    from anthropic.types import Message

    from turnfsm.adapters.llm import AnthropicLLM


pytestmark = pytest.mark.anyio

CASES = corpus()
RAN: list[dict[str, Any]] = []
CACHE = {"type": "ephemeral"}


@tool
def get_weather(location: str) -> dict[str, Any]:
    """Current weather for a location."""
    RAN.append({"location": location})
    return {"location": location, "temp_c": 15}


@tool
def make_file(filename: str, lines_of_text: list[str]) -> str:
    """Write a file."""
    raise AssertionError("a call cut at the token limit never runs")


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


@pytest.fixture
async def llm(loopback: LoopbackServer) -> AsyncIterator[AnthropicLLM]:
    from turnfsm.adapters.llm import AnthropicLLM

    async with AnthropicLLM(
        "claude-sonnet-4-5", base_url=loopback.url, api_key="sk-ant-loopback-key", max_tokens=512
    ) as adapter:
        yield adapter


async def sdk_final(loopback: LoopbackServer, case: Case) -> Message:
    """The SDK's own accumulation of the case's bytes."""
    import anthropic

    loopback.script(case.reply())
    client = anthropic.AsyncAnthropic(base_url=loopback.url, api_key="sk-ant-x", max_retries=0)
    async with client.messages.stream(
        model="claude-sonnet-4-5", max_tokens=512, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        message = await stream.get_final_message()
    await client.close()
    loopback.requests.clear()
    return message


def sent_back(message: Message) -> list[dict[str, Any]]:
    """The assistant turn as the API requires it back: every block, in order,
    thinking with its signature and redacted thinking unchanged."""
    out: list[dict[str, Any]] = []
    for b in message.content:
        if b.type == "thinking":
            out.append({"type": "thinking", "thinking": b.thinking, "signature": b.signature})
        elif b.type == "redacted_thinking":
            out.append({"type": "redacted_thinking", "data": b.data})
        elif b.type == "text":
            out.append({"type": "text", "text": b.text})
        elif b.type == "tool_use":
            out.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
    return out


def assert_agrees(stored: InternalMessage, sdk: Message) -> None:
    texts = "".join(b.text for b in sdk.content if b.type == "text")
    refused = sdk.stop_reason == "refusal"
    if refused:
        details = sdk.stop_details
        explanation = getattr(details, "explanation", None) if details is not None else None
        assert stored.refusal == (texts or explanation or "")
        assert stored.text == ""
        assert stored.outcome == "refusal"
    else:
        assert stored.refusal is None
        assert stored.text == texts
    thinking = [b.thinking for b in sdk.content if b.type == "thinking"]
    assert stored.thinking == ("\n\n".join(thinking) if thinking else None)
    calls = [b for b in sdk.content if b.type == "tool_use"]
    assert [(c.id, c.tool_name) for c in stored.tool_calls or ()] == [(b.id, b.name) for b in calls]
    for mine, theirs in zip(stored.tool_calls or (), calls, strict=True):
        if mine.raw_arguments is None:
            assert mine.arguments == theirs.input
        else:  # cut at the token limit: the text as sent; the SDK parsed it partially
            assert jiter.from_json(mine.raw_arguments.encode(), partial_mode=True) == theirs.input
    reasoning = []
    before = 0
    for b in sdk.content:
        if b.type == "tool_use":
            before += 1
        elif b.type == "thinking":
            reasoning.append(([b.thinking], {"type": "thinking", "signature": b.signature}, before))
        elif b.type == "redacted_thinking":
            reasoning.append(([], {"type": "redacted_thinking", "data": b.data}, before))
    assert [(r.summary, r.data, r.position) for r in stored.reasoning or ()] == reasoning
    assert {r.provider for r in stored.reasoning or ()} <= {"anthropic"}
    meta = stored.metadata
    assert meta.provider_reason == sdk.stop_reason
    assert meta.model == sdk.model
    usage = sdk.usage
    assert meta.usage is not None
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    assert meta.usage.prompt_tokens == usage.input_tokens + cache_read + cache_write
    assert meta.usage.completion_tokens == usage.output_tokens
    assert meta.usage.extras["input_tokens"] == usage.input_tokens
    if sdk.stop_reason == "max_tokens":
        assert stored.outcome == "length"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_the_stored_answer_agrees_with_the_sdk(
    case: Case, loopback: LoopbackServer, llm: AnthropicLLM, tmp_path: Path
) -> None:
    sdk = await sdk_final(loopback, case)
    follow = corpus()[0]  # a text answer after the tool results
    loopback.script(case.reply(), follow.reply())
    turn, _, history = await stored_turn(llm, [get_weather, make_file], tmp_path / "t.db")
    assert turn.state == State.IDLE
    answer = history[1].message
    assert answer.role is Role.ASSISTANT
    assert_agrees(answer, sdk)

    first = loopback.bodies[0]
    assert first["system"] == [{"type": "text", "text": "Be brief.", "cache_control": CACHE}]
    assert first["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "Weather in Paris?",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        }
    ]
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert (first["stream"], first["max_tokens"], first["model"]) == (
        True,
        512,
        "claude-sonnet-4-5",
    )
    if not case.tools:
        assert len(loopback.bodies) == 1
        return
    second = loopback.bodies[1]
    calls = [b for b in sdk.content if b.type == "tool_use"]
    assert [b.input for b in calls] == RAN
    assert second["messages"][-2:] == [
        {"role": "assistant", "content": sent_back(sdk)},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": b.id,
                    "content": f'{{"location":"{b.input["location"]}","temp_c":15}}',
                }
                | ({"cache_control": {"type": "ephemeral"}} if b is calls[-1] else {})
                for b in calls
            ],
        },
    ]
    assert history[-1].message.text == "Hello there!"
