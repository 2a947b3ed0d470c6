"""The bounds of the engine's loaded-context cache on a real ``turnfsm serve``
(in this process) and ``turnfsm worker`` process: ``--max-loaded-contexts`` and
``--max-loaded-messages`` reach the engine, the cache never holds more than
them however many contexts are served, and ``/metrics`` says so
(docs/server.md, "Memory")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kit import listening_url, serve_in_process, skip_without  # tests/ is on sys.path

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

from turnfsm.cli import build_parser
from turnfsm.cli._cache_options import (
    SERVER_MAX_LOADED_CONTEXTS,
    SERVER_MAX_LOADED_MESSAGES,
    cache_settings,
)

skip_without("fastapi")

from .conftest import loopback_tls  # noqa: E402 - the server's stack, after the skip

CONTEXTS = 8
"""Contexts served, each with one turn: more than either bound below allows."""
READY_SECONDS = 60.0
"""How long a process may take to answer its readiness probe (a hang, not a speed)."""


def gauges(url: str, token: str | None = None) -> dict[str, float]:
    """The ``turnfsm_loaded_*`` gauges of a scrape of ``url``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    scrape = httpx.get(url, headers=headers, timeout=30, verify=loopback_tls())
    assert scrape.status_code == 200, scrape.text
    return {
        s.name: s.value
        for family in text_string_to_metric_families(scrape.text)
        for s in family.samples
        if s.name.startswith("turnfsm_loaded_")
    }


def until_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_SECONDS
    # one client for every try: each new one (httpx.get makes one)
    # loads the CA certificates again
    with httpx.Client(verify=loopback_tls()) as client:
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if client.get(url, timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "TURNFSM_STORE": ""}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "turnfsm", *argv], stdout=out, stderr=subprocess.STDOUT, env=env
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def serve(tmp_path: Path, *flags: str) -> Iterator[str]:
    """``turnfsm serve`` on a SQLite file with ``flags``, in this process (the
    subject is the engine it serves, not the process); yields its URL."""
    tokens = tmp_path / "tokens"
    tokens.write_text("token-alice alice\n")
    argv = ["--port", "0", "--tokens", str(tokens)]
    env = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "TURNFSM_STORE": ""}
    with serve_in_process(*argv, "--store", f"sqlite:///{tmp_path / 'c.db'}", *flags, env=env) as s:
        yield s.url
    assert "Traceback" not in s.said()


@pytest.mark.parametrize(
    ("flags", "contexts_max", "messages_max"),
    [
        (("--max-loaded-contexts", "3"), 3, SERVER_MAX_LOADED_MESSAGES),
        (("--max-loaded-messages", "5"), SERVER_MAX_LOADED_CONTEXTS, 5),
    ],
    ids=["contexts", "messages"],
)
def test_serve_keeps_the_cache_within_its_bounds(
    tmp_path: Path, flags: tuple[str, ...], contexts_max: int, messages_max: int
) -> None:
    for url in serve(tmp_path, *flags):
        metrics = f"{url}/metrics"
        auth = {"Authorization": "Bearer token-alice"}
        with httpx.Client(verify=loopback_tls(), base_url=url, headers=auth, timeout=60) as c:
            first = gauges(metrics, "token-alice")
            assert first["turnfsm_loaded_contexts_max"] == contexts_max
            assert first["turnfsm_loaded_messages_max"] == messages_max
            seen_contexts, seen_messages, ids = [], [], []
            for k in range(CONTEXTS):
                cid = c.post("/api/contexts", json={}).json()["id"]
                ids.append(cid)
                turn = c.post(
                    f"/api/contexts/{cid}/messages?wait=true", json={"content": f"hi {k}"}
                )
                assert turn.status_code == 200 and turn.json()["state"] == "Idle", turn.text
                now = gauges(metrics, "token-alice")
                seen_contexts.append(now["turnfsm_loaded_contexts"])
                seen_messages.append(now["turnfsm_loaded_messages"])
            assert max(seen_contexts) <= contexts_max, seen_contexts
            assert max(seen_messages) <= messages_max, seen_messages
            # contexts were unloaded on the way (the cache did not keep them all) ...
            assert 0 < seen_contexts[-1] < CONTEXTS, seen_contexts
            # ... and the first one, no longer loaded, takes a turn from the store
            again = c.post(f"/api/contexts/{ids[0]}/messages?wait=true", json={"content": "again"})
            assert again.status_code == 200 and again.json()["state"] == "Idle", again.text
            page = c.get(f"/api/contexts/{ids[0]}/messages", params={"limit": 100}).json()
            texts = [str(m) for m in page["messages"]]
            assert len(texts) == 4 and "hi 0" in texts[0] and "again" in texts[2], texts
            last = gauges(metrics, "token-alice")
            assert last["turnfsm_loaded_contexts"] <= contexts_max
            assert last["turnfsm_loaded_messages"] <= messages_max


def test_worker_takes_the_bounds_and_shows_them(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    argv = ["worker", "--store", f"sqlite:///{tmp_path / 'w.db'}", "--metrics-port", "0"]
    proc = start([*argv, "--max-loaded-contexts", "7", "--max-loaded-messages", "70"], log)
    try:
        url = listening_url(proc, log, within=READY_SECONDS)
        until_ready(proc, url, log)
        found = gauges(url)
    finally:
        stop(proc)
    assert found == {
        "turnfsm_loaded_contexts": 0,
        "turnfsm_loaded_messages": 0,
        "turnfsm_loaded_contexts_max": 7,
        "turnfsm_loaded_messages_max": 70,
    }
    assert proc.returncode == 0, log.read_text()


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_the_defaults_are_the_servers(command: str) -> None:
    assert cache_settings(build_parser().parse_args([command])) == {
        "max_loaded": SERVER_MAX_LOADED_CONTEXTS,
        "max_loaded_messages": SERVER_MAX_LOADED_MESSAGES,
    }
