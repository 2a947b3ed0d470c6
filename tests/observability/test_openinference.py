"""The spans as Arize Phoenix and Arize read them (docs/observability.md,
"OpenInference"): every model call's span carries its own request and answer,
the OpenInference kinds, values and token counts sit beside the GenAI
attributes (content only under the opt-in), and each transition event is named
by its edge."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from kit import make_engine
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from turnfsm import tool
from turnfsm.engine._observing._otel_spans import CAPTURE_CONTENT_ENV
from turnfsm.enhancers import Compaction
from turnfsm.model import LLMRequest

from .conftest import by_name

Provider = tuple[TracerProvider, InMemorySpanExporter]

pytestmark = pytest.mark.anyio

TOOL_LOOP: list[dict[str, Any]] = [
    {
        "tool_calls": [{"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5},
    },
    {"text": "It is 21 C.", "usage": {"prompt_tokens": 30, "completion_tokens": 4}},
]

CONTENT_PREFIXES = (
    "input.",
    "output.",
    "llm.input_messages.",
    "llm.output_messages.",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "temp_c": 21}


def _in_order(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.name.startswith(prefix)), key=lambda s: s.start_time or 0)


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _messages(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """A flattened OpenInference message list read back: one dict per index,
    keyed by what follows ``{prefix}.{i}.``."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith(prefix + "."):
            index, rest = key[len(prefix) + 1 :].split(".", 1)
            found.setdefault(int(index), {})[rest] = value
    assert sorted(found) == list(range(len(found))), f"{prefix} has a gap: {sorted(found)}"
    return [found[i] for i in range(len(found))]


async def _tool_loop(
    tp: TracerProvider, monkeypatch: pytest.MonkeyPatch, *, capture: bool
) -> tuple[str, Any, Any]:
    if capture:
        monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    else:
        monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    made = make_engine(TOOL_LOOP, tools=[get_weather], tracer_provider=tp)
    async with made.engine as engine:
        cid = await engine.create_context(
            model="gpt-test", system_prompt="Be brief.", parameters={"temperature": 0.5}
        )
        turn = await engine.send(cid, "Weather in Oslo?")
    assert turn.text == "It is 21 C."
    return cid, turn, made.llm


async def test_every_chat_span_carries_its_own_request_and_answer(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, exporter = provider
    _, _, llm = await _tool_loop(tp, monkeypatch, capture=True)
    first, second = _in_order(exporter.get_finished_spans(), "chat ")
    sent = [r.messages for r in llm.requests]
    assert len(sent) == 2 and len(sent[1]) > len(sent[0])
    for span, messages in ((first, sent[0]), (second, sent[1])):
        attrs = _attrs(span)
        # the request this attempt sent, in both conventions
        assert json.loads(attrs["input.value"]) == messages
        assert attrs["input.mime_type"] == "application/json"
        chat = json.loads(attrs["gen_ai.input.messages"])
        assert len(chat) == sum(1 for m in messages if m["role"] != "system")
        flat = _messages(attrs, "llm.input_messages")
        assert [m["message.role"] for m in flat] == [m["role"] for m in messages]

    # the second one reads the tool's result
    chat = json.loads(_attrs(second)["gen_ai.input.messages"])
    assert chat[-1]["role"] == "tool"
    assert chat[-1]["parts"][0]["type"] == "tool_call_response"
    flat = _messages(_attrs(second), "llm.input_messages")
    assert flat[0] == {"message.role": "system", "message.content": "Be brief."}
    assert flat[1] == {"message.role": "user", "message.content": "Weather in Oslo?"}
    assert flat[2]["message.role"] == "assistant"
    assert flat[2]["message.tool_calls.0.tool_call.function.name"] == "get_weather"
    assert flat[2]["message.tool_calls.0.tool_call.id"] == "c1"
    assert flat[3]["message.role"] == "tool"
    assert flat[3]["message.tool_call_id"] == "c1"
    assert json.loads(flat[3]["message.content"]) == {"city": "Oslo", "temp_c": 21}

    # and each its own answer
    out1 = _messages(_attrs(first), "llm.output_messages")
    assert len(out1) == 1 and out1[0]["message.role"] == "assistant"
    assert out1[0]["message.tool_calls.0.tool_call.function.name"] == "get_weather"
    arguments = out1[0]["message.tool_calls.0.tool_call.function.arguments"]
    assert json.loads(arguments) == {"city": "Oslo"}
    assert _attrs(first)["output.mime_type"] == "application/json"
    assert json.loads(_attrs(first)["output.value"])[0]["tool_calls"][0]["id"] == "c1"
    out2 = _messages(_attrs(second), "llm.output_messages")
    assert out2 == [{"message.role": "assistant", "message.content": "It is 21 C."}]
    assert _attrs(second)["output.value"] == "It is 21 C."
    assert _attrs(second)["output.mime_type"] == "text/plain"


async def test_a_retried_attempt_carries_its_request(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, exporter = provider
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    made = make_engine([{"error": {"status": 503}}, {"text": "Hello."}], tracer_provider=tp)
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Hi")
    assert turn.text == "Hello."
    failed, answered = _in_order(exporter.get_finished_spans(), "chat ")
    assert failed.attributes is not None and failed.attributes["error.type"] == (
        "llm_failed_transient"
    )
    for span in (failed, answered):
        flat = _messages(_attrs(span), "llm.input_messages")
        assert flat == [{"message.role": "user", "message.content": "Hi"}]
    assert "output.value" not in _attrs(failed)
    assert _attrs(answered)["output.value"] == "Hello."


async def test_a_request_built_again_after_a_summary_is_the_one_recorded(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, exporter = provider
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    words = "the quick brown fox jumps over the lazy dog while it rains over the old town"

    def summary(request: LLMRequest) -> bool:
        return request.metadata.get("purpose") == "compaction"

    def answer(request: LLMRequest) -> dict[str, Any]:
        return {"text": "a summary" if summary(request) else "answer: " + words}

    made = make_engine(answer, compaction=Compaction(300, keep_tokens=100), tracer_provider=tp)
    async with made.engine as engine:
        cid = await engine.create_context()
        for i in range(8):
            await engine.send(cid, f"question {i}: {words}")
    requests = made.llm.requests
    assert any(summary(r) for r in requests), "no summary was made"
    sent = [r.messages for r in requests if not summary(r)]
    chats = _in_order(exporter.get_finished_spans(), "chat ")
    assert [json.loads(_attrs(s)["input.value"]) for s in chats] == sent


async def test_openinference_kinds_and_counts(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, exporter = provider
    cid, _, _ = await _tool_loop(tp, monkeypatch, capture=True)
    spans = exporter.get_finished_spans()
    (call,) = by_name(spans, "turnfsm.send")
    first, second = _in_order(spans, "chat ")
    (run,) = by_name(spans, "execute_tool get_weather")
    for span in spans:
        assert _attrs(span)["session.id"] == cid

    agent = _attrs(call)
    assert agent["openinference.span.kind"] == "AGENT"
    assert agent["agent.name"] == "turnfsm"
    assert agent["input.value"] == "Weather in Oslo?"
    assert agent["input.mime_type"] == "text/plain"
    assert agent["output.value"] == "It is 21 C."
    assert agent["output.mime_type"] == "text/plain"

    for span, (prompt, completion) in ((first, (12, 5)), (second, (30, 4))):
        attrs = _attrs(span)
        assert attrs["openinference.span.kind"] == "LLM"
        assert attrs["llm.model_name"] == "gpt-test"
        assert attrs["llm.provider"] == "turnfsm.scripted"
        assert attrs["llm.system"] == "turnfsm.scripted"
        assert attrs["llm.token_count.prompt"] == prompt
        assert attrs["llm.token_count.completion"] == completion
        assert attrs["llm.token_count.total"] == prompt + completion
        assert json.loads(attrs["llm.invocation_parameters"]) == {"temperature": 0.5}

    tool_attrs = _attrs(run)
    assert tool_attrs["openinference.span.kind"] == "TOOL"
    assert tool_attrs["tool.name"] == "get_weather"
    assert tool_attrs["tool.description"] == "Current weather for a city."
    assert json.loads(tool_attrs["tool.parameters"]) == get_weather.parameters
    assert json.loads(tool_attrs["input.value"]) == {"city": "Oslo"}
    assert json.loads(tool_attrs["output.value"]) == {"city": "Oslo", "temp_c": 21}
    assert tool_attrs["input.mime_type"] == tool_attrs["output.mime_type"] == "application/json"


async def test_a_call_that_runs_no_model_is_a_chain(provider: Provider) -> None:
    tp, exporter = provider
    async with make_engine([], tracer_provider=tp).engine as engine:
        cid = await engine.create_context()
        await engine.update_config(cid, title="renamed")
    (span,) = by_name(exporter.get_finished_spans(), "turnfsm.update_config")
    assert _attrs(span)["openinference.span.kind"] == "CHAIN"
    assert _attrs(span)["session.id"] == cid


async def test_no_content_without_the_opt_in(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, exporter = provider
    await _tool_loop(tp, monkeypatch, capture=False)
    spans = exporter.get_finished_spans()
    assert len(spans) == 4
    for span in spans:
        leaked = [k for k in _attrs(span) if k.startswith(CONTENT_PREFIXES)]
        assert leaked == [], f"{span.name} carries {leaked}"
    # what is not content is there all the same
    kinds = sorted(str(_attrs(s)["openinference.span.kind"]) for s in spans)
    assert kinds == ["AGENT", "LLM", "LLM", "TOOL"]
    for chat in _in_order(spans, "chat "):
        assert _attrs(chat)["llm.model_name"] == "gpt-test"
        assert isinstance(_attrs(chat)["llm.token_count.total"], int)
    (run,) = by_name(spans, "execute_tool get_weather")
    assert _attrs(run)["tool.name"] == "get_weather"


async def test_transition_events_are_named_by_their_edges(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, exporter = provider
    _, turn, _ = await _tool_loop(tp, monkeypatch, capture=False)
    (call,) = by_name(exporter.get_finished_spans(), "turnfsm.send")
    path = ["Idle", *(s.value for s in turn.states)]
    edges = [f"{a} → {b}" for a, b in itertools.pairwise(path)]
    assert [e.name for e in call.events] == edges
    assert "ExecutingTools → AwaitingLLMResponse" in edges
    for event, (a, b) in zip(call.events, itertools.pairwise(path), strict=True):
        attrs = dict(event.attributes or {})
        assert (attrs["turnfsm.from_state"], attrs["turnfsm.to_state"]) == (a, b)
        assert isinstance(attrs["turnfsm.trigger"], str)
