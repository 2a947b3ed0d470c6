"""A real Arize Phoenix reads the engine's spans as LLM, tool and agent spans
(docs/observability.md, "OpenInference").

``-m phoenix`` only: Phoenix is large and is not in the test extra. The test
runs the ``phoenix`` executable that ``TURNFSM_PHOENIX`` names (CI installs
``arize-phoenix`` into a virtualenv of its own), else one on ``PATH``; it
starts ``phoenix serve`` on loopback, exports a traced tool loop to it over
OTLP/HTTP and reads the spans back through Phoenix's REST API.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from kit import make_engine
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from ports import PORT_TRIES, free_port, listening_ports, lost_the_port

from turnfsm.engine._observing._otel_spans import CAPTURE_CONTENT_ENV

from .test_openinference import TOOL_LOOP, get_weather

pytestmark = pytest.mark.phoenix

PROJECT = "turnfsm-test"
STARTUP_SECONDS = 180.0  # a bound on a first start (migrations), not a wait
INGEST_SECONDS = 60.0


def _phoenix() -> str:
    named = os.environ.get("TURNFSM_PHOENIX") or shutil.which("phoenix")
    if not named:
        pytest.skip("no phoenix executable: set TURNFSM_PHOENIX or put arize-phoenix on PATH")
    return named


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[str]:
    """A ``phoenix serve`` of this test on loopback, ready: its base URL.
    Phoenix must be given its ports: a start that lost one to another
    process (its log says the address is in use, or its process does not
    listen on the port that answers) is tried again on new ones."""
    started: tuple[subprocess.Popen[bytes], str] | str = ""
    for attempt in range(1, PORT_TRIES + 1):
        started = _start_phoenix(tmp_path / f"phoenix-{attempt}")
        if not isinstance(started, str):
            break
        assert attempt < PORT_TRIES and lost_the_port(started), started[-2000:]
    assert not isinstance(started, str)
    proc, base = started
    try:
        yield base
    finally:
        _stop(proc)


def _start_phoenix(folder: Path) -> tuple[subprocess.Popen[bytes], str] | str:
    """A ready Phoenix and its URL, or its log when it lost a port or exited."""
    folder.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_WORKING_DIR": str(folder / "phoenix"),
    }
    with (folder / "phoenix.log").open("wb") as log:
        proc = subprocess.Popen(
            [_phoenix(), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_SECONDS
    with httpx.Client() as client:
        while True:
            said = (folder / "phoenix.log").read_text(errors="replace")
            if proc.poll() is not None or lost_the_port(said):
                _stop(proc)
                return said
            # what answers must be this Phoenix, not a process that took its port
            if port in listening_ports(proc.pid, children=True):
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"{base}/healthz", timeout=5).status_code == 200:
                        return proc, base
            if time.monotonic() > deadline:
                _stop(proc)
                raise AssertionError(f"phoenix did not answer /healthz:\n{said[-2000:]}")
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _spans(base: str, count: int) -> list[dict[str, Any]]:
    """The project's spans once Phoenix has ingested ``count`` of them."""
    deadline = time.monotonic() + INGEST_SECONDS
    while True:
        got = httpx.get(f"{base}/v1/projects/{PROJECT}/spans", params={"limit": 100}, timeout=10)
        if got.status_code == 200:
            spans: list[dict[str, Any]] = got.json()["data"]
            if len(spans) >= count:
                return spans
        assert time.monotonic() < deadline, f"phoenix has {got.status_code}: {got.text[:500]}"
        time.sleep(0.2)


def test_phoenix_shows_llm_tool_and_agent_spans(
    phoenix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    tp = TracerProvider(resource=Resource.create({"openinference.project.name": PROJECT}))
    tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix}/v1/traces")))

    async def turn() -> str:
        async with make_engine(TOOL_LOOP, tools=[get_weather], tracer_provider=tp).engine as e:
            cid = await e.create_context(model="gpt-test")
            await e.send(cid, "Weather in Oslo?")
            return cid

    cid = anyio.run(turn)
    tp.shutdown()

    spans = _spans(phoenix, 4)
    kinds = {s["name"]: s["span_kind"] for s in spans}
    assert kinds == {
        "turnfsm.send": "AGENT",
        "chat gpt-test": "LLM",
        "execute_tool get_weather": "TOOL",
    }
    assert len(spans) == 4
    (agent,) = [s for s in spans if s["name"] == "turnfsm.send"]
    assert agent["parent_id"] is None
    assert agent["attributes"]["input.value"] == "Weather in Oslo?"
    assert agent["attributes"]["output.value"] == "It is 21 C."
    for span in spans:
        assert span["attributes"]["session.id"] == cid
        if span is not agent:
            assert span["parent_id"] == agent["context"]["span_id"]
    first, second = sorted(
        (s for s in spans if s["span_kind"] == "LLM"), key=lambda s: s["start_time"]
    )
    assert first["attributes"]["llm.token_count.total"] == 17
    assert second["attributes"]["llm.token_count.total"] == 34
    # the second model call's input, as Phoenix keeps it, holds the tool's result
    read = second["attributes"]
    assert read["llm.input_messages.2.message.role"] == "tool"
    assert json.loads(read["llm.input_messages.2.message.content"])["temp_c"] == 21
    assert read["output.value"] == "It is 21 C."
