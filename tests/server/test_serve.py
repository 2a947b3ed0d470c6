"""``turnfsm serve`` as a process: the host rule, SIGTERM, and a SIGKILL mid-turn;
and in this process, stopped as SIGTERM stops it (``run_server``'s ``stop``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from kit import (
    Served,
    listening_url,
    serve_in_process,
    wait_ready,
)  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm.cli import main
from turnfsm.cli._errors import CLIError
from turnfsm.cli._serve import load_tools
from turnfsm.storage import open_store

from .conftest import loopback_tls
from .test_events import read_events, until

HEADERS = {"Authorization": "Bearer token-alice"}
SERVE_ENV = {"TURNFSM_STORE": "", "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}
"""What the tests' servers take from the environment: no store, no model."""


def text_of(node: dict[str, Any]) -> str:
    content = node["message"]["content"]
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content)


@contextmanager
def serve(
    tmp: Path, *args: str, log_name: str = "serve.log"
) -> Iterator[tuple[subprocess.Popen[bytes], httpx.Client]]:
    """``turnfsm serve`` on ``tmp``'s ``serve.db``; its log in ``tmp / log_name``
    (a second process on the same store gives a name of its own)."""
    tokens = tmp / "tokens"
    tokens.write_text("token-alice alice\n")
    env = {**os.environ, **SERVE_ENV}
    # the log (standard error) to a file: a pipe no one reads would fill and stop the server
    log = (tmp / log_name).open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnfsm", "serve", "--port", "0",
         "--store", f"sqlite:///{tmp / 'serve.db'}", "--tokens", str(tokens), *args],
        stdout=subprocess.DEVNULL, stderr=log, env=env,
    )  # fmt: skip
    client: httpx.Client | None = None
    try:
        url = listening_url(proc, tmp / log_name)
        client = httpx.Client(verify=loopback_tls(), base_url=url, headers=HEADERS, timeout=30)
        wait_ready(url, process=proc, log=tmp / log_name)
        yield proc, client
    finally:
        if client is not None:
            client.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        log.close()


def test_non_loopback_host_needs_tokens_or_insecure(capsys: object) -> None:
    env_before = os.environ.pop("TURNFSM_SERVER_TOKENS", None)
    try:
        assert main(["serve", "--host", "0.0.0.0"]) == 2
    finally:
        if env_before is not None:
            os.environ["TURNFSM_SERVER_TOKENS"] = env_before


def test_tools_option_names_tools() -> None:
    tools = load_tools(["turnfsm.cli._demo:get_weather"])
    assert [t.name for t in tools] == ["get_weather"]
    for bad in ["turnfsm.cli._demo", "no_such_module:x", "turnfsm.cli._demo:nothing", "os:sep"]:
        with pytest.raises(CLIError):
            load_tools([bad])


@contextmanager
def serve_here(folder: Path, *args: str) -> Iterator[tuple[httpx.Client, Served]]:
    """``turnfsm serve`` on ``folder``'s ``serve.db`` in this process
    (``serve_in_process``): a client of it, and the run."""
    tokens = folder / "tokens"
    tokens.write_text("token-alice alice\n")
    store = f"sqlite:///{folder / 'serve.db'}"
    argv = ["--port", "0", "--store", store, "--tokens", str(tokens), *args]
    with (
        serve_in_process(*argv, env=SERVE_ENV) as served,
        httpx.Client(verify=loopback_tls(), base_url=served.url, headers=HEADERS, timeout=30) as c,
    ):
        yield c, served


def start_slow_turn(client: httpx.Client) -> str:
    cid: str = client.post("/api/contexts", json={"system_prompt": "Be kind."}).json()["id"]
    r = client.post(f"/api/contexts/{cid}/messages", json={"content": "hello"})
    assert r.status_code == 202, r.text
    return cid


def stopped_mid_turn(client: httpx.Client, stop: Callable[[], None]) -> str:
    """A turn streamed until its first text, then ``stop()``: the stream ends
    with ``StreamClosed``. The context's id."""
    cid = client.post("/api/contexts", json={}).json()["id"]
    with client.stream("GET", f"/api/contexts/{cid}/events") as r:
        events = read_events(r)
        client.post(f"/api/contexts/{cid}/messages", json={"content": "hello"})
        until(events, "ContentDelta")
        stop()
        rest = [e.event for e in events]
    assert rest[-1] == "StreamClosed"
    return str(cid)


def test_sigterm_closes_streams_and_cancels_the_turn(tmp_path: Path) -> None:
    with serve(tmp_path, "--demo-delay", "0.2") as (proc, client):
        cid = stopped_mid_turn(client, lambda: proc.send_signal(signal.SIGTERM))
        # uvicorn shuts down, then re-raises the signal it caught: a clean stop by SIGTERM
        assert proc.wait(20) in (0, -signal.SIGTERM)
    cancelled_cleanly(tmp_path / "serve.db", cid)


def test_a_stop_from_the_process_closes_streams_and_cancels_the_turn(tmp_path: Path) -> None:
    """``run_server(stop=...)``, off the main thread: ``ServerStop.stop()`` does
    what SIGTERM does, and the command ends with 0. What the server set for
    its process (the collector, structlog) is put back after it."""
    import gc

    import structlog

    before = (gc.get_threshold(), structlog.is_configured())
    with serve_here(tmp_path, "--demo-delay", "0.2") as (client, served):
        assert gc.get_threshold() != before[0] and structlog.is_configured()
        cid = stopped_mid_turn(client, served.stop)
        served.stopped(within=20)
    assert served.code == 0, served.said()
    cancelled_cleanly(tmp_path / "serve.db", cid)
    assert (gc.get_threshold(), structlog.is_configured()) == before


def cancelled_cleanly(db: Path, cid: str) -> None:
    # the store, read directly: cancelled cleanly (the cancel edge), its text kept
    steps, ctx = anyio.run(stored, db, cid)
    assert ctx.current_state == "Idle"
    assert [(s.from_state, s.trigger) for s in steps][-1] == ("StreamingLLMResponse", "cancel")
    last = ctx.history()[-1].message
    assert last.role == "assistant" and last.text
    assert last.metadata.cancelled


async def stored(db: Path, cid: str) -> tuple[list[Any], Any]:
    store = open_store(f"sqlite:///{db}", create=False)
    try:
        return await store.steps(cid), await store.load(cid)
    finally:
        await store.aclose()


def wait_for(client: httpx.Client, cid: str, state: str) -> None:
    deadline = time.monotonic() + 20
    while (st := client.get(f"/api/contexts/{cid}/state").json())["state"] != state:
        assert time.monotonic() < deadline, st
        time.sleep(0.05)


def test_sigkill_mid_turn_then_restart_resumes_it(tmp_path: Path) -> None:
    with serve(tmp_path, "--demo-delay", "0.2") as (proc, client):
        # a call while a turn runs is refused; cancel stops the turn at once
        first = start_slow_turn(client)
        wait_for(client, first, "StreamingLLMResponse")
        busy = client.post(f"/api/contexts/{first}/messages", json={"content": "again"})
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "context_busy"
        assert client.get(f"/api/contexts/{first}/state").json()["running"]  # still known
        cancelled = client.post(f"/api/contexts/{first}/cancel").json()
        assert cancelled["state"] == "Idle" and cancelled["stop_reason"] == "cancelled"
        assert not client.get(f"/api/contexts/{first}/state").json()["running"]

        cid = start_slow_turn(client)
        wait_for(client, cid, "StreamingLLMResponse")
        proc.kill()
        proc.wait(10)
    # recover() on start resumes the turn (a server in this process: the
    # killed one was the process under test)
    with serve_here(tmp_path) as (client, _):
        deadline = time.monotonic() + 20
        while (st := client.get(f"/api/contexts/{cid}/state").json())["state"] != "Idle":
            assert time.monotonic() < deadline, st
            time.sleep(0.05)
        msgs = client.get(f"/api/contexts/{cid}/messages").json()["messages"]
        roles = [m["message"]["role"] for m in msgs]
        assert roles == ["user", "assistant"]
        assert text_of(msgs[-1]).startswith("I am the demo model.")
        verify = client.get(f"/api/contexts/{cid}/audit/verify").json()
        assert verify["ok"] and verify["final_state"] == "Idle", verify
        # a stream from before the crash resumes from the server's kept events:
        # each seq once, either as the event or inside a Resync's range
        with client.stream(
            "GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": "0"}
        ) as r:
            got = [e for e in until(read_events(r), "TurnCompleted") if e.event != "Heartbeat"]
    covered: list[int] = []
    for e in got:
        if e.event == "Resync":
            covered += range(e.data["first_seq"], e.data["last_seq"] + 1)
        else:
            covered.append(int(e.id or 0))
    assert covered == list(range(1, len(covered) + 1)), [(e.event, e.id) for e in got]
    changes = [e.data for e in got if e.event == "StateChanged"]
    assert changes[0]["from_state"] == "Idle" and changes[-1]["to_state"] == "Idle"


# ---------------------------------------------------------------------- the log


LOG_PROGRAM = """
import gc, json, sys
import structlog
from turnfsm.server._run import GC_THRESHOLDS, configure_logging, tune_collector
collector = [gc.get_threshold() == (700, 10, 10)]
tune_collector()
collector += [gc.get_threshold() == GC_THRESHOLDS, GC_THRESHOLDS[0] > 700]
collector.append(gc.get_freeze_count() > 1000)
for configured in (False, True):
    # each case as a fresh process has it: structlog not configured
    structlog.reset_defaults()
    if configured:
        structlog.configure(processors=[structlog.processors.JSONRenderer()])
    print(json.dumps({"case": configured}), file=sys.stderr, flush=True)
    configure_logging()
    structlog.get_logger("turnfsm.server").info("request", method="GET", status=200)
    structlog.get_logger("turnfsm.server").debug("not shown")
    sys.stdout.flush()
    sys.stderr.flush()
print(json.dumps({"collector": collector}), file=sys.stderr)
"""


@pytest.fixture(scope="module")
def process_wide() -> dict[str, Any]:
    """The log lines of each logging case and the collector's checks, from one
    process of their own (both settings are process-wide): standard output and
    standard error by case, each case starting from structlog's defaults."""
    run = subprocess.run(
        [sys.executable, "-c", LOG_PROGRAM], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    err: dict[str, Any] = {"stderr": {}, "collector": None}
    case: bool | None = None
    for line in run.stderr.splitlines():
        if line.startswith("{"):
            mark = json.loads(line)
            if "case" in mark:
                case = mark["case"]
                err["stderr"][case] = []
                continue
            err["collector"] = mark["collector"]
            continue
        assert case is not None, run.stderr
        err["stderr"][case].append(line)
    # the application's renderer writes to standard output, and only its case does
    err["stdout"] = run.stdout.splitlines()
    return err


@pytest.mark.parametrize("configured", [False, True])
def test_the_server_logs_key_value_lines_unless_the_application_configured_structlog(
    process_wide: dict[str, Any], configured: bool
) -> None:
    if configured:  # the application's own renderer, levels and output, untouched
        lines = process_wide["stdout"]
        assert lines == [
            '{"method": "GET", "status": 200, "event": "request"}',
            '{"event": "not shown"}',
        ]
        assert process_wide["stderr"][True] == []
    else:  # to standard error: standard output is what a command outputs
        lines = process_wide["stderr"][False]
        assert len(lines) == 1, lines
        assert lines[0].startswith("timestamp='")
        assert lines[0].split(" ", 1)[1] == "level='info' event='request' method='GET' status=200"


_STAMP = re.compile(r"^timestamp='\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z' ")


@pytest.mark.parametrize(
    ("method", "fields"),
    [
        (
            "info",
            {"event": "request", "method": "POST", "path": "/a b'c", "status": 202, "ms": 0.8},
        ),
        ("warning", {"event": "event_log_read_failed", "context_id": "c1", "error": "x\ny"}),
        ("warn", {"event": "old name"}),
        ("exception", {"event": "boom", "exc": None}),
        ("info", {"event": "bound", "level": "kept?", "timestamp": 1, "n": [1, {"a": 2}]}),
        ("info", {"method": "GET"}),  # no event: as structlog's renderer, event=None
    ],
)
def test_the_log_line_is_the_one_structlogs_processors_make(
    method: str, fields: dict[str, Any]
) -> None:
    import structlog

    from turnfsm.server._run import key_value_line

    chain: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"),
        structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"]),
    ]
    theirs: Any = dict(fields)
    for processor in chain:
        theirs = processor(None, method, theirs)
    ours = key_value_line(None, method, dict(fields))
    assert _STAMP.match(ours) and _STAMP.match(theirs), (ours, theirs)
    assert _STAMP.sub("", ours) == _STAMP.sub("", theirs)


def test_the_server_tunes_the_collector_for_its_life(process_wide: dict[str, Any]) -> None:
    """``run_server`` freezes what exists at start and raises the collector's
    first threshold (in a process of its own: the setting is process-wide)."""
    assert process_wide["collector"] == [True, True, True, True]
