"""Prometheus metrics of a real server on 127.0.0.1 after scripted turns, and
an HTTP request's ``traceparent`` parenting the turn's spans
(docs/observability.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kit import loopback_tls, skip_without  # tests/ is on sys.path

pytest.importorskip("prometheus_client")

from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from server.conftest import serve_in_thread

from turnfsm import Approval, Engine, tool
from turnfsm.observability import EngineMetrics
from turnfsm.testing import ScriptedLLM

skip_without("fastapi")

TOKENS = {"token-alice": "alice", "token-bob": "bob"}


@tool(approval=Approval.REQUIRED)
def send_mail(to: str) -> str:
    """Send a mail (needs approval)."""
    return f"sent to {to}"


@tool
def lookup(city: str) -> dict[str, Any]:
    """Look a city up."""
    if city == "Atlantis":
        raise RuntimeError("no such city")
    return {"city": city}


def _answers() -> list[dict[str, Any]]:
    usage = {"prompt_tokens": 10, "completion_tokens": 3}
    return [
        # turn 1: a tool that runs, then one that fails, then text
        {
            "tool_calls": [{"id": "a", "name": "lookup", "arguments": {"city": "Oslo"}}],
            "usage": usage,
        },
        {
            "tool_calls": [{"id": "b", "name": "lookup", "arguments": {"city": "Atlantis"}}],
            "usage": usage,
        },
        {"text": "Oslo is real.", "usage": usage},
        # turn 2: a call that waits for approval, approved, then text
        {"tool_calls": [{"id": "c", "name": "send_mail", "arguments": {"to": "bob"}}]},
        {"text": "Mail sent."},
    ]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``(sample name, sorted labels) -> value`` of a scrape."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path / "metrics.db"
    app = create_app(
        lambda: Engine(
            llm=ScriptedLLM(_answers()), tools=[lookup, send_mail], store=f"sqlite:///{db}"
        ),
        ServerConfig(tokens=dict(TOKENS), heartbeat=0.5),
    )
    yield from serve_in_thread(app)


def test_metrics_after_scripted_turns(url: str) -> None:
    auth = {"Authorization": "Bearer token-alice"}
    with httpx.Client(verify=loopback_tls(), base_url=url, headers=auth, timeout=30) as c:
        assert httpx.get(f"{url}/metrics", timeout=30).status_code == 401  # behind the tokens
        cid = c.post("/api/contexts", json={"model": "gpt-test"}).json()["id"]
        turn = c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "Oslo?"})
        assert turn.json()["state"] == "Idle", turn.text
        turn = c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "Mail bob"})
        assert turn.json()["state"] == "AwaitingToolApproval", turn.text

        scrape = c.get("/metrics")
        assert scrape.status_code == 200
        assert scrape.headers["content-type"].startswith("text/plain")
        m = samples(scrape.text)
        assert m[("turnfsm_turns_started_total", (("call", "send"),))] == 2
        done = (("call", "send"), ("stop_reason", "completed"))
        assert m[("turnfsm_turns_finished_total", done)] == 1
        waits = (("call", "send"), ("stop_reason", "awaiting_approval"))
        assert m[("turnfsm_turns_finished_total", waits)] == 1
        assert m[("turnfsm_turns_awaiting_approval", ())] == 1
        assert m[("turnfsm_turns_running", ())] == 0
        answered = (("model", "gpt-test"), ("outcome", "answered"))
        assert m[("turnfsm_llm_seconds_count", answered)] == 4
        assert m[("turnfsm_llm_seconds_sum", answered)] > 0
        assert m[("turnfsm_llm_tokens_total", (("kind", "input"), ("model", "gpt-test")))] == 30
        assert m[("turnfsm_llm_tokens_total", (("kind", "output"), ("model", "gpt-test")))] == 9
        assert m[("turnfsm_tool_seconds_count", (("tool", "lookup"),))] == 2
        assert m[("turnfsm_tool_errors_total", (("tool", "lookup"),))] == 1
        # each of turn 1's three LLM calls was one visit of AwaitingLLMResponse
        visits = m[("turnfsm_state_seconds_count", (("state", "AwaitingLLMResponse"),))]
        assert visits == 4
        assert m[("turnfsm_state_seconds_count", (("state", "ExecutingTools"),))] == 2
        assert ("turnfsm_state_seconds_count", (("state", "Idle"),)) not in m
        # no label carries a context id
        assert cid not in scrape.text

        # the approval: the context no longer waits; a stream is open meanwhile
        with c.stream("GET", f"/api/contexts/{cid}/events") as events:
            lines = events.iter_lines()  # kept: a dropped iterator closes the stream
            assert next(lines).startswith("event: ")
            assert samples(c.get("/metrics").text)[("turnfsm_stream_clients", ())] == 1
        approved = c.post(f"/api/contexts/{cid}/tools/approve?wait=true", json={"approve": ["c"]})
        assert approved.json()["state"] == "Idle", approved.text
        m = samples(c.get("/metrics").text)
        assert m[("turnfsm_turns_awaiting_approval", ())] == 0
        assert m[("turnfsm_turns_started_total", (("call", "approve"),))] == 1
        assert m[("turnfsm_tool_seconds_count", (("tool", "send_mail"),))] == 1
        assert m[("turnfsm_stream_clients", ())] == 0
        # another tenant's token reads the same process-wide figures
        other = httpx.get(
            f"{url}/metrics", headers={"Authorization": "Bearer token-bob"}, timeout=30
        )
        assert samples(other.text)[("turnfsm_turns_started_total", (("call", "approve"),))] == 1


def test_a_wait_for_the_clients_results_is_not_a_wait_for_a_human() -> None:
    import anyio

    weather = {"type": "function", "function": {"name": "weather"}}
    answers = [
        {"tool_calls": [{"id": "w", "name": "weather", "arguments": {}}]},
        {"tool_calls": [{"id": "m", "name": "send_mail", "arguments": {"to": "al"}}]},
    ]

    async def main() -> list[float]:
        metrics = EngineMetrics()
        seen: list[float] = []
        engine = metrics.attach(Engine(llm=ScriptedLLM(answers), tools=[send_mail]))
        async with engine:
            cid = await engine.create_context()
            turn = await engine.send(cid, "weather?", client_tools=[weather])
            assert turn.client_tool_calls and turn.state.value == "AwaitingToolApproval"
            seen.append(samples_of(metrics)[("turnfsm_turns_awaiting_approval", ())])
            turn = await engine.submit_results(cid, {"w": "sun"})
            assert [c.id for c in turn.pending_tool_calls] == ["m"]
            seen.append(samples_of(metrics)[("turnfsm_turns_awaiting_approval", ())])
        return seen

    assert anyio.run(main) == [0, 1]


def samples_of(metrics: EngineMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    return samples(generate_latest(metrics.registry).decode())


def test_label_values_are_bounded() -> None:
    metrics = EngineMetrics(max_label_values=2)
    assert [metrics.models(f"m{i}") for i in range(4)] == ["m0", "m1", "_other", "_other"]
    assert metrics.models("m0") == "m0"


def test_a_requests_traceparent_parents_the_turn(
    tmp_path: Path, global_spans: InMemorySpanExporter
) -> None:
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path / "traced.db"
    app = create_app(
        lambda: Engine(llm=ScriptedLLM([{"text": "hi"}]), store=f"sqlite:///{db}"),
        ServerConfig(),
    )
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent = "00f067aa0ba902b7"
    for url in serve_in_thread(app):
        with httpx.Client(verify=loopback_tls(), base_url=url, timeout=30) as c:
            cid = c.post("/api/contexts", json={}).json()["id"]
            posted = c.post(
                f"/api/contexts/{cid}/messages",  # 202: the turn goes on in a task
                json={"content": "hello"},
                headers={"traceparent": f"00-{trace_id}-{parent}-01"},
            )
            assert posted.status_code == 202
            c.get(f"/api/contexts/{cid}/state")
            for _ in range(200):
                if [s for s in global_spans.get_finished_spans() if s.name == "turnfsm.send"]:
                    break
                time.sleep(0.02)
    (send,) = [s for s in global_spans.get_finished_spans() if s.name == "turnfsm.send"]
    assert format(send.context.trace_id, "032x") == trace_id
    # under FastAPI's HTTP span, itself the child of the caller's (test_http_spans.py)
    assert send.parent is not None and not send.parent.is_remote
    chat = [s for s in global_spans.get_finished_spans() if s.name.startswith("chat ")]
    assert chat and all(s.context.trace_id == send.context.trace_id for s in chat)
    # a request without one starts a trace of its own
    assert not trace.get_current_span().get_span_context().is_valid


def test_serve_without_the_metrics_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import turnfsm.observability
    from turnfsm.server import ServerConfig, create_app

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # not installed
    monkeypatch.delitem(sys.modules, "turnfsm.observability._metrics", raising=False)
    # and the name an earlier import kept in the package, as in a fresh process
    monkeypatch.delitem(vars(turnfsm.observability), "EngineMetrics", raising=False)
    db = tmp_path / "plain.db"
    app = create_app(
        lambda: Engine(llm=ScriptedLLM([{"text": "hi"}]), store=f"sqlite:///{db}"),
        ServerConfig(),
    )
    assert app.state.metrics is None
    for url in serve_in_thread(app):
        with httpx.Client(verify=loopback_tls(), base_url=url, timeout=30) as c:
            answer = c.get("/metrics")
            assert answer.status_code == 404
            assert "metrics_unavailable" in answer.text
            cid = c.post("/api/contexts", json={}).json()["id"]
            turn = c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "hello"})
            assert turn.json()["text"] == "hi"


@pytest.fixture
def chat_url(tmp_path: Path) -> Iterator[str]:
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path / "formats.db"
    answers = [{"text": f"answer {i}"} for i in range(5)]
    app = create_app(
        lambda: Engine(llm=ScriptedLLM(answers), store=f"sqlite:///{db}"),
        ServerConfig(tokens=dict(TOKENS), heartbeat=0.5),
    )
    yield from serve_in_thread(app)


def test_request_formats_are_counted_by_format(chat_url: str) -> None:
    cm = {"contextManagement": {"currentMessage": {"role": "user", "content": "hi"}}}
    legacy = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    auth = {"Authorization": "Bearer token-alice"}
    with httpx.Client(verify=loopback_tls(), base_url=chat_url, headers=auth, timeout=30) as c:
        for body in (cm, cm, legacy):
            r = c.post("/api/chat?wait=true", json=body)
            assert r.status_code == 200, r.text
        assert c.post("/api/chat", json={"messages": []}).status_code == 422  # not counted
        cid = c.post("/api/contexts", json={}).json()["id"]  # a plain message: not counted
        r = c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "hi"})
        assert r.status_code == 200, r.text
        m = samples(c.get("/metrics").text)
    name = "turnfsm_request_format_total"
    counted = {labels: value for (n, labels), value in m.items() if n == name}
    assert counted == {(("format", "context_management"),): 2, (("format", "legacy"),): 1}
    assert m[("turnfsm_turns_started_total", (("call", "send_request"),))] == 3


@pytest.mark.anyio
async def test_an_imported_body_answered_is_counted_in_its_format() -> None:
    from turnfsm.adapters.inbound import import_request_body

    metrics = EngineMetrics()
    body = {"messages": [{"role": "user", "content": "hi", "messageId": "m1"}]}
    engine = metrics.attach(Engine(llm=ScriptedLLM([{"text": "hello"}]), store="memory://"))
    async with engine:
        ctx = import_request_body(body)
        await engine.store.create(ctx)
        turn = await engine.send_request(body, ctx.id)
        assert turn.text == "hello"
    m = samples(metrics.render().decode())
    assert m[("turnfsm_request_format_total", (("format", "legacy"),))] == 1


def test_each_labelled_child_is_asked_for_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The observer keeps each child per tuple of label values: the same
    turns again ask the metrics' ``labels()`` nothing new, and count as
    before."""
    import anyio

    from turnfsm.observability._families import _Family

    asked: list[tuple[str, tuple[str, ...]]] = []
    labels = _Family.labels

    def counted(self: Any, *values: str) -> Any:
        asked.append((self.name, values))
        return labels(self, *values)

    monkeypatch.setattr(_Family, "labels", counted)
    usage = {"prompt_tokens": 10, "completion_tokens": 3}
    answer = [
        {"tool_calls": [{"id": "a", "name": "lookup", "arguments": {"city": "Oslo"}}]},
        {"text": "Oslo is real.", "usage": usage},
    ]

    async def main() -> EngineMetrics:
        metrics = EngineMetrics()
        engine = metrics.attach(Engine(llm=ScriptedLLM(answer * 3), tools=[lookup]))
        async with engine:
            cid = await engine.create_context()
            for _ in range(3):
                await engine.send(cid, "Oslo?")
        return metrics

    metrics = anyio.run(main)
    assert asked and len(asked) == len(set(asked)), asked
    got = samples_of(metrics)
    assert got[("turnfsm_turns_started_total", (("call", "send"),))] == 3
    finished = (("call", "send"), ("stop_reason", "completed"))
    assert got[("turnfsm_turns_finished_total", finished)] == 3
    assert got[("turnfsm_tool_seconds_count", (("tool", "lookup"),))] == 3
    assert got[("turnfsm_llm_tokens_total", (("kind", "input"), ("model", "scripted")))] == 30
