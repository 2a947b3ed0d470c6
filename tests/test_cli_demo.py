"""``turnfsm demo``: the main job a newcomer runs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from turnfsm.cli import main
from turnfsm.cli._demo import run_demo

APPROVED_TRACE = [
    "Idle",
    "ProcessingUserMessage",
    "AwaitingLLMResponse",
    "ProcessingLLMResponse",
    "AwaitingToolApproval",
    "ExecutingTools",
    "AwaitingLLMResponse",
    "StreamingLLMResponse",
    "ProcessingLLMResponse",
    "Idle",
    "ProcessingUserMessage",
    "AwaitingLLMResponse",
    "StreamingLLMResponse",
    "ProcessingLLMResponse",
    "Idle",
]


def test_demo_command_runs_without_a_terminal(tmp_path: Path) -> None:
    env = {**os.environ, "TURNFSM_STORE": f"sqlite:///{tmp_path / 'demo.db'}"}
    out = subprocess.run(
        [sys.executable, "-m", "turnfsm", "demo", "--json", "--delay", "0", "--yes"],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines[-1] == {"trace": APPROVED_TRACE}
    assert lines[1]["text"] == "The weather in London is 15 C and cloudy."


@pytest.mark.anyio
async def test_demo_streams_text_and_prints_the_states() -> None:
    buf = io.StringIO()
    assert await run_demo(False, 0.0, False, buf) == 0
    text = buf.getvalue()
    assert "assistant> The weather in London is 15 C and cloudy." in text
    assert "trace: " + " -> ".join(APPROVED_TRACE) in text


@pytest.mark.anyio
async def test_demo_asks_and_honours_a_denial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    buf = io.StringIO()
    assert await run_demo(True, 0.0, False, buf) == 0
    text = buf.getvalue()
    assert "approve get_weather" in text
    assert "could not get the weather (denied: the user said no)" in text


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``turnfsm ARGS`` in this process (its exit code, standard output and
    error), with no terminal to ask. The commands are the ones a process runs
    (``turnfsm.cli.main``); test_demo_command_runs_without_a_terminal runs
    one in a process of its own. In process, a command costs no interpreter
    start and package import: about a second each on a loaded machine."""
    out, err = io.StringIO(), io.StringIO()
    stdin = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        sys.stdin = stdin
    return subprocess.CompletedProcess(["turnfsm", *args], code, out.getvalue(), err.getvalue())


def test_demo_keeps_its_conversation_in_the_store_and_contexts_shows_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kept.db'}"
    assert _cli("demo", "--json", "--delay", "0", "--store", url).returncode == 0
    listed = _cli("contexts", "list", "--json", "--store", url)
    assert listed.returncode == 0, listed.stderr
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["state"] == "Idle"
    shown = _cli("contexts", "show", row["id"], "--store", url)
    data = json.loads(shown.stdout)
    assert [s["to"] for s in data["steps"]] == APPROVED_TRACE[1:]
    out = tmp_path / "export.json"
    assert _cli("contexts", "export", row["id"], "--store", url, "--out", str(out)).returncode == 0
    assert json.loads(out.read_text())["id"] == row["id"]
    assert _cli("contexts", "delete", row["id"], "--store", url).returncode == 0
    assert _cli("contexts", "list", "--store", url).stdout == ""
    missing = _cli("contexts", "show", row["id"], "--store", url)
    assert missing.returncode == 2
    assert "no context with id" in missing.stderr


def test_replay_can_keep_its_conversation_in_a_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'replayed.db'}"
    script = Path(__file__).parent / "scripts" / "weather_with_approval.json"
    assert _cli("replay", str(script), "--store", url).returncode == 0
    listed = _cli("contexts", "list", "--json", "--store", url)
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    shown = json.loads(_cli("contexts", "show", row["id"], "--store", url).stdout)
    trace = ["Idle", *(s["to"] for s in shown["steps"])]
    assert trace == json.loads(script.read_text())["expect"]["trace"]


def test_an_exported_context_imports_back_into_another_store(tmp_path: Path) -> None:
    first = f"sqlite:///{tmp_path / 'a.db'}"
    second = f"files:///{tmp_path / 'b'}"
    assert _cli("demo", "--json", "--delay", "0", "--store", first).returncode == 0
    (row,) = [
        json.loads(x)
        for x in _cli("contexts", "list", "--json", "--store", first).stdout.splitlines()
    ]
    out = tmp_path / "ctx.json"
    assert (
        _cli("contexts", "export", row["id"], "--store", first, "--out", str(out)).returncode == 0
    )
    imported = _cli("import", str(out), "--store", second)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.splitlines()[0] == row["id"]
    again = json.loads(_cli("contexts", "export", row["id"], "--store", second).stdout)
    assert again == json.loads(out.read_text())
