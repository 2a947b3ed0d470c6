"""How the spans of ``turnfsm serve`` nest (docs/observability.md, "Context
propagation"): FastAPI's HTTP span for the request, the engine call's span
under it, and the call's chat spans under that; in the caller's trace when the
request has a ``traceparent``. A real server on 127.0.0.1 and a real client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kit import loopback_tls, skip_without  # tests/ is on sys.path
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from server.conftest import serve_in_thread

from turnfsm import Engine
from turnfsm.testing import ScriptedLLM

from .conftest import Provider

skip_without("fastapi")

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = "00f067aa0ba902b7"


class _Ended(SpanProcessor):
    """Sets ``done`` once a span of the name given has ended."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.done = threading.Event()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if span.name == self.name:
            self.done.set()


@pytest.fixture
def served(
    tmp_path: Path, provider: Provider, global_spans: InMemorySpanExporter
) -> Iterator[tuple[str, _Ended]]:
    from turnfsm.server import ServerConfig, create_app

    tp, _ = provider
    ended = _Ended("turnfsm.send")
    tp.add_span_processor(ended)
    db = tmp_path / "traced.db"
    app = create_app(
        lambda: Engine(llm=ScriptedLLM([{"text": "hi"}]), store=f"sqlite:///{db}"),
        ServerConfig(),
    )
    for url in serve_in_thread(app):
        yield url, ended


def _send(url: str, ended: _Ended, headers: dict[str, str]) -> None:
    with httpx.Client(verify=loopback_tls(), base_url=url, timeout=30) as c:
        cid = c.post("/api/contexts", json={}).json()["id"]
        posted = c.post(
            f"/api/contexts/{cid}/messages",  # 202: the turn goes on in a task
            json={"content": "hello"},
            headers=headers,
        )
        assert posted.status_code == 202
        assert ended.done.wait(60), "the turn's span did not end"


def _ancestors(span: ReadableSpan, spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    found = []
    parent = span.parent
    while parent is not None and parent.span_id in by_id:
        found.append(by_id[parent.span_id])
        parent = found[-1].parent
    return found


def _turn_spans(
    spans: tuple[ReadableSpan, ...],
) -> tuple[ReadableSpan, ReadableSpan, ReadableSpan]:
    (send,) = [s for s in spans if s.name == "turnfsm.send"]
    (chat,) = [s for s in spans if s.name.startswith("chat ")]
    (http,) = [
        s
        for s in spans
        if s.kind is trace.SpanKind.SERVER and s.attributes.get("http.request.method") == "POST"
        if s.context.trace_id == send.context.trace_id
    ]
    return http, send, chat


def test_a_requests_turn_nests_under_its_http_span_in_the_callers_trace(
    served: tuple[str, _Ended], global_spans: InMemorySpanExporter
) -> None:
    url, ended = served
    _send(url, ended, {"traceparent": f"00-{TRACE_ID}-{CALLER}-01"})
    spans = global_spans.get_finished_spans()
    http, send, chat = _turn_spans(spans)
    assert http.name == "POST /api/contexts/{context_id}/messages"
    assert http.parent is not None and http.parent.is_remote
    assert format(http.parent.span_id, "016x") == CALLER
    assert format(http.context.trace_id, "032x") == TRACE_ID
    # HTTP span -> (FastAPI's endpoint span) -> turn span -> chat span
    assert http in _ancestors(send, spans)
    assert chat.parent is not None and chat.parent.span_id == send.context.span_id
    assert {s.context.trace_id for s in (http, send, chat)} == {http.context.trace_id}


def test_without_a_traceparent_the_http_span_is_the_root(
    served: tuple[str, _Ended], global_spans: InMemorySpanExporter
) -> None:
    url, ended = served
    _send(url, ended, {})
    spans = global_spans.get_finished_spans()
    http, send, chat = _turn_spans(spans)
    assert http.parent is None
    assert _ancestors(send, spans)[-1] is http
    assert chat.parent is not None and chat.parent.span_id == send.context.span_id
