"""``turnfsm demo``: the main job a newcomer runs."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

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


def test_demo_command_runs_without_a_terminal() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "turnfsm", "demo", "--json", "--delay", "0"],
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
