"""The CLI's export (docs/observability.md): ``turnfsm chat`` sends its spans
over OTLP/HTTP to a receiver on 127.0.0.1 that decodes what arrived, the
environment variables that ask for an export, and ``turnfsm worker``'s
metrics port after a submitted turn."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from kit import listening_on_pipe, loopback_tls  # tests/ is on sys.path

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from turnfsm import Engine
from turnfsm.cli import main
from turnfsm.observability import TelemetrySetupError, tracing_from_env
from turnfsm.storage import SQLiteStore
from turnfsm.testing import ScriptedLLM


class _Receiver(BaseHTTPRequestHandler):
    got: list[tuple[str, dict[str, str], bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.got.append((self.path, headers, body))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, dict[str, str], bytes]]]]:
    got: list[tuple[str, dict[str, str], bytes]] = []
    handler = type("Receiver", (_Receiver,), {"got": got})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(TURNFSM_STORE="", OPENAI_API_KEY="", OPENAI_BASE_URL="", **extra)
    return env


def _attrs(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in items:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = [v.string_value for v in value.array_value.values]
        else:
            out[kv.key] = getattr(value, kind)
    return out


def test_chat_exports_its_spans_over_otlp_http(
    receiver: tuple[str, list[tuple[str, dict[str, str], bytes]]],
) -> None:
    url, got = receiver
    out = subprocess.run(
        [sys.executable, "-m", "turnfsm", "chat", "--demo", "--store", "memory://",
         "--approve", "all", "-m", "weather in Paris?"],
        capture_output=True, text=True, timeout=120, check=False,
        env=_env(OTEL_EXPORTER_OTLP_ENDPOINT=url, OTEL_SERVICE_NAME="chat-under-test"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "15 C and cloudy" in out.stdout
    assert got, "nothing arrived at the receiver"
    spans: list[Any] = []
    for path, headers, body in got:
        assert path == "/v1/traces"
        assert headers["content-type"] == "application/x-protobuf"
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            assert _attrs(rs.resource.attributes)["service.name"] == "chat-under-test"
            for ss in rs.scope_spans:
                assert ss.scope.name == "turnfsm"
                spans.extend(ss.spans)
    names = sorted(s.name for s in spans)
    # the send (tool call, approval asked for by --approve all), then the approve
    assert "turnfsm.send" in names
    assert "execute_tool get_weather" in names
    assert any(n.startswith("chat ") for n in names)
    by_id = {s.span_id: s for s in spans}
    (run,) = [s for s in spans if s.name == "execute_tool get_weather"]
    attrs = _attrs(run.attributes)
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["gen_ai.tool.name"] == "get_weather"
    assert by_id[run.parent_span_id].name.startswith("turnfsm.")
    chat = next(s for s in spans if s.name.startswith("chat "))
    chat_attrs = _attrs(chat.attributes)
    assert chat_attrs["gen_ai.provider.name"] == "turnfsm.demo"
    assert chat_attrs["gen_ai.operation.name"] == "chat"
    call = by_id[chat.parent_span_id]
    events = list(call.events)
    assert events[0].name == "Idle → ProcessingUserMessage"
    assert _attrs(events[0].attributes) == {
        "turnfsm.trigger": "user_message",
        "turnfsm.from_state": "Idle",
        "turnfsm.to_state": "ProcessingUserMessage",
    }


def test_what_the_environment_asks_for() -> None:
    assert tracing_from_env("x", {}) is None
    assert tracing_from_env("x", {"OTEL_TRACES_EXPORTER": "none"}) is None
    assert (
        tracing_from_env("x", {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}) is None
    )
    with pytest.raises(TelemetrySetupError, match="'zipkin'"):
        tracing_from_env("x", {"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(TelemetrySetupError, match="http/protobuf"):
        tracing_from_env(
            "x",
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        )


def test_a_bad_exporter_is_a_cli_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In this process: the exporter is refused before any is set up."""
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(name)  # as _env() leaves them out of a process's
    for name in ("TURNFSM_STORE", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "jaeger")
    assert main(["chat", "--demo", "--store", "memory://", "-m", "hi"]) == 2
    assert "turnfsm chat: OTEL_TRACES_EXPORTER='jaeger'" in capsys.readouterr().err


def _submitted(db: Path) -> None:
    async def go() -> None:
        async with Engine(llm=ScriptedLLM([]), store=SQLiteStore(db)) as engine:
            cid = await engine.create_context()
            await engine.submit(cid, "hello worker")

    anyio.run(go)


def _scrape(
    client: httpx.Client, url: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    try:
        text = client.get(url, timeout=5).text
    except httpx.TransportError:
        return None
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_worker_metrics_after_a_submitted_turn(tmp_path: Path) -> None:
    db = tmp_path / "work.db"
    _submitted(db)
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnfsm", "worker", "--store", f"sqlite:///{db}",
         "--poll", "0.1", "--metrics-port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(), text=True,
    )  # fmt: skip
    claim_done = (
        "turnfsm_turns_finished_total",
        (("call", "claim"), ("stop_reason", "completed")),
    )
    said = ""
    try:
        # the port --metrics-port 0 took, as the worker says it
        url, said = listening_on_pipe(proc)
        assert url.endswith("/metrics"), said
        values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        deadline = time.monotonic() + 60
        # one client for every try: each new one (httpx.get makes one)
        # loads the CA certificates again
        with httpx.Client(verify=loopback_tls()) as client:
            while time.monotonic() < deadline:
                assert proc.poll() is None, said + (proc.stderr.read() if proc.stderr else "")
                values = _scrape(client, url) or {}
                if values.get(claim_done):
                    break
                time.sleep(0.1)
        assert values[claim_done] == 1
        assert values[("turnfsm_worker_claims_total", ())] == 1
        assert values[("turnfsm_worker_takeovers_total", ())] == 0  # freshly submitted
        assert values[("turnfsm_turns_started_total", (("call", "claim"),))] == 1
        answered = (("model", "demo"), ("outcome", "answered"))
        assert values[("turnfsm_llm_seconds_count", answered)] >= 1
    finally:
        proc.terminate()
        _, rest = proc.communicate(timeout=30)
    assert proc.returncode == 0, said + rest
