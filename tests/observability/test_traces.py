"""OpenTelemetry spans of engine calls (docs/observability.md): the span tree,
names, attributes and transition events of every golden script, message
content only under the opt-in, and a submitted turn's trace continued by the
worker that runs it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from kit import make_engine
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from turnfsm import Engine, Worker, tool
from turnfsm.engine import Watch
from turnfsm.engine._observing._otel_spans import CAPTURE_CONTENT_ENV, TRACE_CONTEXT_KEY
from turnfsm.errors import IllegalTransition
from turnfsm.replay import run_script
from turnfsm.storage import SQLiteStore
from turnfsm.testing import ScriptedLLM

from .conftest import by_name

SCRIPTS = Path(__file__).parent.parent / "scripts"
EXPECTED: dict[str, dict[str, Any]] = json.loads(
    (SCRIPTS.parent / "scripts_expected.json").read_text()
)
GOLDEN = sorted(name for name, e in EXPECTED.items() if e["exit"] == 0)

Provider = tuple[TracerProvider, InMemorySpanExporter]

pytestmark = pytest.mark.anyio


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "temp_c": 21}


@tool
def broken(city: str) -> dict[str, Any]:
    """Always fails."""
    raise RuntimeError(f"no weather for {city}")


def _calls(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    return sorted(
        (s for s in spans if s.name.startswith("turnfsm.")), key=lambda s: s.start_time or 0
    )


def _transitions(span: ReadableSpan) -> list[tuple[str, str, str]]:
    """The span's transition events (each named by its edge) as (from, to, trigger)."""
    found = []
    for e in span.events:
        if e.attributes is None or "turnfsm.trigger" not in e.attributes:
            continue
        source, dest = (
            str(e.attributes["turnfsm.from_state"]),
            str(e.attributes["turnfsm.to_state"]),
        )
        assert e.name == f"{source} → {dest}"
        found.append((source, dest, str(e.attributes["turnfsm.trigger"])))
    return found


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_script_spans(global_spans: InMemorySpanExporter, name: str) -> None:
    result = run_script(SCRIPTS / name)
    assert result.failures == []
    spans = global_spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    cid = result.context_id
    calls = [c for c in _calls(spans) if c.attributes["gen_ai.conversation.id"] == cid]
    assert calls, "no span for the script's engine calls"

    # the transitions of the table, as events of the call spans, are the
    # script's StateChanged events: the FSM path reads in the trace
    changes = [
        (e["from_state"], e["to_state"], e["trigger"])
        for e in result.events
        if e["kind"] == "StateChanged" and e["context_id"] == cid
    ]
    events = [t for c in calls for t in _transitions(c)]
    assert events == changes
    assert [to for _, to, _ in events] == result.trace[1:]

    # one chat span per LLM attempt, each the child of its call's span
    chats = [
        s
        for s in spans
        if s.name.startswith("chat ") and s.attributes["gen_ai.conversation.id"] == cid
    ]
    assert len(chats) == sum(1 for a, _, _ in changes if a == "AwaitingLLMResponse")
    for chat in chats:
        assert chat.kind is trace.SpanKind.CLIENT
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "turnfsm.replay"
        assert chat.name == f"chat {chat.attributes['gen_ai.request.model']}"
        assert chat.parent is not None
        parent = by_id[chat.parent.span_id]
        assert parent.name.startswith("turnfsm.")
        assert parent.attributes["gen_ai.conversation.id"] == cid
        answered = "gen_ai.response.finish_reasons" in chat.attributes
        assert answered == (chat.status.status_code is not trace.StatusCode.ERROR)

    # one execute_tool span per tool run, its status the result's
    results = {
        e["call_id"]: e
        for e in result.events
        if e["kind"] == "ToolResult" and e["context_id"] == cid
    }
    runs: dict[str, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        if span.name.startswith("execute_tool ") and (
            span.attributes["gen_ai.conversation.id"] == cid
        ):
            runs.setdefault(str(span.attributes["gen_ai.tool.call.id"]), []).append(span)
    for call_id, spans_of_call in runs.items():
        assert call_id in results
        *waited, last = spans_of_call
        for span in spans_of_call:
            assert span.attributes["gen_ai.tool.name"] == results[call_id]["tool_name"]
            assert span.name == f"execute_tool {results[call_id]['tool_name']}"
            assert span.parent is not None
            assert by_id[span.parent.span_id].name.startswith("turnfsm.")
        failed = last.status.status_code is trace.StatusCode.ERROR
        assert failed == (not results[call_id]["success"])
        # a run before the last: a sub-task whose child waited for a human
        for span in waited:
            assert "waits for a human" in (span.status.description or "")

    # no message content without the opt-in
    for span in spans:
        assert not any(
            k in (span.attributes or {})
            for k in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.result")
        )


async def test_a_tool_loop_is_one_call_span_with_its_children(provider: Provider) -> None:
    tp, exporter = provider
    made = make_engine(
        [
            {
                "tool_calls": [{"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 5},
            },
            {"text": "It is 21 C.", "usage": {"prompt_tokens": 30, "completion_tokens": 4}},
        ],
        tools=[get_weather],
        tracer_provider=tp,
    )
    async with made.engine as engine:
        cid = await engine.create_context(model="gpt-test", parameters={"temperature": 0.5})
        turn = await engine.send(cid, "Weather in Oslo?")
    assert turn.text == "It is 21 C."
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == [
        "chat gpt-test",
        "chat gpt-test",
        "execute_tool get_weather",
        "turnfsm.send",
    ]
    (call,) = by_name(spans, "turnfsm.send")
    assert call.parent is None
    assert call.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert call.attributes["turnfsm.call"] == "send"
    assert call.attributes["turnfsm.state"] == "Idle"
    assert call.attributes["turnfsm.stop_reason"] == "completed"
    assert call.status.status_code is trace.StatusCode.UNSET
    for child in spans:
        if child is not call:
            assert child.parent is not None and child.parent.span_id == call.context.span_id
            assert child.context.trace_id == call.context.trace_id
    first, second = sorted(by_name(spans, "chat gpt-test"), key=lambda s: s.start_time or 0)
    assert first.attributes["gen_ai.request.model"] == "gpt-test"
    assert first.attributes["gen_ai.response.model"] == "gpt-test"
    assert first.attributes["gen_ai.request.temperature"] == 0.5
    assert first.attributes["gen_ai.usage.input_tokens"] == 12
    assert first.attributes["gen_ai.usage.output_tokens"] == 5
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first.attributes["gen_ai.provider.name"] == "turnfsm.scripted"
    assert second.attributes["gen_ai.usage.input_tokens"] == 30
    assert second.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert second.attributes["turnfsm.iteration"] == 2
    (run,) = by_name(spans, "execute_tool get_weather")
    assert run.attributes["gen_ai.operation.name"] == "execute_tool"
    assert run.attributes["gen_ai.tool.call.id"] == "c1"
    assert run.attributes["gen_ai.tool.type"] == "function"
    assert first.end_time is not None and run.start_time is not None
    assert first.end_time <= run.start_time
    assert run.end_time is not None and second.start_time is not None
    assert run.end_time <= second.start_time
    assert [to for _, to, _ in _transitions(call)] == [s.value for s in turn.states]


async def test_failures_are_errors_on_their_spans(provider: Provider) -> None:
    tp, exporter = provider
    made = make_engine(
        [
            {"error": {"status": 503}},
            {"tool_calls": [{"id": "c1", "name": "broken", "arguments": {"city": "Oslo"}}]},
            {"error": {"status": 401}},
        ],
        tools=[broken],
        tracer_provider=tp,
    )
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Weather?")
    assert turn.state.value == "PermanentFailure"
    spans = exporter.get_finished_spans()
    chats = sorted(
        (s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_time or 0
    )
    assert [c.attributes.get("error.type") for c in chats] == [
        "llm_failed_transient",
        None,
        "llm_failed_permanent",
    ]
    assert chats[0].status.status_code is trace.StatusCode.ERROR
    assert chats[2].status.description and "401" in chats[2].status.description
    (run,) = [s for s in spans if s.name == "execute_tool broken"]
    assert run.status.status_code is trace.StatusCode.ERROR
    assert "no weather for Oslo" in (run.status.description or "")
    (call,) = by_name(spans, "turnfsm.send")
    assert call.attributes["error.type"] == "turn_failed"
    assert call.attributes["turnfsm.stop_reason"] == "failed"
    assert call.status.status_code is trace.StatusCode.ERROR


async def test_a_refused_call_is_an_error_span(provider: Provider) -> None:
    tp, exporter = provider
    async with make_engine([], tracer_provider=tp).engine as engine:
        cid = await engine.create_context()
        with pytest.raises(IllegalTransition):
            await engine.retry(cid)  # nothing failed: the table has no retry from Idle
    (span,) = by_name(exporter.get_finished_spans(), "turnfsm.retry")
    assert span.status.status_code is trace.StatusCode.ERROR
    assert span.attributes["error.type"] == "IllegalTransition"
    assert span.attributes["turnfsm.state.before"] == "Idle"
    assert [e.name for e in span.events] == ["exception"]


async def test_message_content_only_under_the_opt_in(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, exporter = provider
    answers = [
        {"tool_calls": [{"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}]},
        {"text": "Sunny."},
    ]
    for opted_in in (False, True):
        if opted_in:
            monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
        else:
            monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
        exporter.clear()
        made = make_engine(answers, tools=[get_weather], tracer_provider=tp)
        async with made.engine as engine:
            cid = await engine.create_context(system_prompt="Be brief.")
            await engine.send(cid, "Weather in Oslo?")
        spans = exporter.get_finished_spans()
        first = min(
            (s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_time or 0
        )
        (run,) = [s for s in spans if s.name.startswith("execute_tool")]
        content_keys = {"gen_ai.input.messages", "gen_ai.output.messages"}
        if not opted_in:
            assert not content_keys & set(first.attributes or {})
            assert "gen_ai.tool.call.arguments" not in (run.attributes or {})
            continue
        inputs = json.loads(str(first.attributes["gen_ai.input.messages"]))
        assert inputs == [
            {"role": "user", "parts": [{"type": "text", "content": "Weather in Oslo?"}]}
        ]
        system = json.loads(str(first.attributes["gen_ai.system_instructions"]))
        assert system == [{"type": "text", "content": "Be brief."}]
        outputs = json.loads(str(first.attributes["gen_ai.output.messages"]))
        assert outputs[0]["role"] == "assistant"
        assert outputs[0]["parts"][0]["type"] == "tool_call"
        assert outputs[0]["parts"][0]["name"] == "get_weather"
        assert json.loads(str(run.attributes["gen_ai.tool.call.arguments"])) == {"city": "Oslo"}
        assert json.loads(str(run.attributes["gen_ai.tool.call.result"])) == {
            "city": "Oslo",
            "temp_c": 21,
        }


async def test_the_callers_span_parents_the_call(provider: Provider) -> None:
    tp, exporter = provider
    tracer = tp.get_tracer("app")
    async with make_engine([{"text": "hi"}], tracer_provider=tp).engine as engine:
        cid = await engine.create_context()
        with tracer.start_as_current_span("request") as outer:
            await engine.send(cid, "hello")
    (call,) = by_name(exporter.get_finished_spans(), "turnfsm.send")
    assert call.parent is not None
    assert call.parent.span_id == outer.get_span_context().span_id
    # the engine left the caller's context as it found it
    assert not trace.get_current_span().get_span_context().is_valid


async def test_a_submitted_turn_continues_the_submitters_trace(
    provider: Provider, tmp_path: Path
) -> None:
    tp, exporter = provider
    db = tmp_path / "work.db"
    tracer = tp.get_tracer("app")
    submitter = Engine(llm=ScriptedLLM([]), store=SQLiteStore(db), tracer_provider=tp)
    async with submitter:
        cid = await submitter.create_context()
        with tracer.start_as_current_span("POST /messages") as request:
            mid = await submitter.submit(cid, "hello worker")
        plain = await submitter.create_context()
    # a message submitted with no provider carries nothing
    untraced = Engine(llm=ScriptedLLM([]), store=SQLiteStore(db))
    async with untraced:
        plain_mid = await untraced.submit(plain, "no trace")

    worker_engine = Engine(
        llm=ScriptedLLM([{"text": "done"}, {"text": "done too"}]),
        store=SQLiteStore(db),
        tracer_provider=tp,
    )
    async with worker_engine:
        worker = Worker(worker_engine, poll=0.05)
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            with anyio.fail_after(20):
                for _ in range(1000):
                    if worker.finished >= 2:
                        break
                    await anyio.sleep(0.02)
            worker.stop()

    spans = exporter.get_finished_spans()
    (submit,) = by_name(spans, "turnfsm.submit")
    assert submit.parent is not None
    assert submit.parent.span_id == request.get_span_context().span_id
    claims = {s.attributes["gen_ai.conversation.id"]: s for s in by_name(spans, "turnfsm.claim")}
    claim = claims[cid]
    assert claim.context.trace_id == submit.context.trace_id
    assert claim.parent is not None and claim.parent.span_id == submit.context.span_id
    assert claim.attributes["turnfsm.state.before"] == "ProcessingUserMessage"
    assert [to for _, to, _ in _transitions(claim)][-1] == "Idle"
    # the other context's turn is a trace of its own
    assert claims[plain].parent is None

    # the trace context travels in the message's metadata.extra, only when
    # there is one: a message submitted without a trace is stored as before
    with sqlite3.connect(db) as conn:
        bodies = dict(conn.execute("SELECT id, body FROM messages").fetchall())
    traced = json.loads(bodies[mid])["message"]["metadata"]["extra"]
    assert set(traced) == {TRACE_CONTEXT_KEY}
    assert traced[TRACE_CONTEXT_KEY]["traceparent"].split("-")[1] == format(
        submit.context.trace_id, "032x"
    )
    assert json.loads(bodies[plain_mid])["message"]["metadata"]["extra"] == {}
    assert "trace_context" not in str(bodies[plain_mid])


class _Boom(Watch):
    def transition(self, rt: Any, source: str, trigger: str, dest: str) -> None:
        raise RuntimeError("observer broke")


class _Observer:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def begin(self, context_id: str, call: str) -> Watch:
        self.calls.append(call)
        return _Boom()


async def test_a_failing_observer_is_logged_and_the_turn_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    observer = _Observer()
    async with make_engine([{"text": "fine"}, {"text": "fine again"}]).engine as engine:
        remove = engine.observe(observer)
        cid = await engine.create_context()
        turn = await engine.send(cid, "hi")
        remove()
        await engine.send(cid, "again")
    assert turn.text == "fine"
    assert observer.calls == ["send"]  # removed: not asked about the second call
    printed = capsys.readouterr()
    assert "observer_failed" in printed.out + printed.err
    assert "observer broke" in printed.out + printed.err


def test_no_tracer_provider_no_opentelemetry_import() -> None:
    code = """
import anyio, sys
from turnfsm import Engine
from turnfsm.testing import ScriptedLLM

async def main():
    async with Engine(llm=ScriptedLLM([{"text": "hi"}])) as engine:
        cid = await engine.create_context()
        await engine.send(cid, "hello")
anyio.run(main)
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_call_names() -> None:
    import functools

    from turnfsm.engine import _calls
    from turnfsm.engine._observing._observers import call_name
    from turnfsm.model import ApprovalStatus

    def decide(*statuses: ApprovalStatus) -> Any:
        decisions = {f"c{i}": (s, None) for i, s in enumerate(statuses)}
        return functools.partial(_calls.start_decide, None, decisions)

    approved, denied = ApprovalStatus.APPROVED, ApprovalStatus.DENIED
    assert call_name(decide(approved, approved)) == "approve"
    assert call_name(decide(denied)) == "deny"
    assert call_name(decide(approved, denied)) == "decide"
    send = functools.partial(_calls.start_send, None, [], None, None)
    assert call_name(send) == "send"
    assert call_name(send, hand_off=True) == "submit"
    resume = functools.partial(_calls.start_resume, None)
    assert call_name(resume) == "resume"
    assert call_name(resume, claimed=True) == "claim"
    assert call_name(functools.partial(_calls.start_update_config, None, {}, None)) == (
        "update_config"
    )
