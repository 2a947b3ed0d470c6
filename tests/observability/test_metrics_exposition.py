"""The exact text ``EngineMetrics`` answers at ``/metrics`` after scripted
turns: every metric's name, help, type, label names and values, histogram
buckets and counts, pinned in ``metrics_exposition.txt`` (docs/observability.md).

The observer's clock and the creation timestamps are fixed, so the durations
observed (and the buckets they fall in) are the same on every run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

pytest.importorskip("prometheus_client")

from turnfsm import Approval, Engine, tool
from turnfsm.observability import EngineMetrics
from turnfsm.testing import ScriptedLLM

GOLDEN = Path(__file__).with_name("metrics_exposition.txt")
CREATED = 1_767_225_600.0  # 2026-01-01, the creation time of every series


@tool
def lookup(city: str) -> dict[str, Any]:
    """Look a city up."""
    if city == "Atlantis":
        raise RuntimeError("no such city")
    return {"city": city}


@tool(approval=Approval.REQUIRED)
def send_mail(to: str) -> str:
    """Send a mail (needs approval)."""
    return f"sent to {to}"


def _turn(i: int) -> list[dict[str, Any]]:
    usage = {"prompt_tokens": 10 + i, "completion_tokens": 3}
    return [
        {"tool_calls": [{"id": f"a{i}", "name": "lookup", "arguments": {"city": "Oslo"}}]},
        {
            "tool_calls": [{"id": f"b{i}", "name": "lookup", "arguments": {"city": "Atlantis"}}],
            "usage": usage,
        },
        {"text": f"Oslo is real ({i}).", "usage": usage},
    ]


def _clock() -> Iterator[float]:
    """Readings whose differences grow by half each time, so that the
    observed durations cross every bucket, up to ``+Inf``."""
    now, step = 100.0, 0.001
    while True:
        yield now
        now += step
        step *= 1.5


async def _scripted(metrics: EngineMetrics) -> None:
    answers = [a for i in range(4) for a in _turn(i)]
    answers.append({"tool_calls": [{"id": "m", "name": "send_mail", "arguments": {"to": "al"}}]})
    engine = metrics.attach(Engine(llm=ScriptedLLM(answers), tools=[lookup, send_mail]))
    async with engine:
        cid = await engine.create_context()
        for i in range(4):
            turn = await engine.send(cid, f"Oslo {i}?")
            assert turn.text == f"Oslo is real ({i}).", turn
        turn = await engine.send(cid, "Mail al")
        assert turn.state.value == "AwaitingToolApproval"


@pytest.fixture
def fixed_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    import turnfsm.observability._metrics as module

    readings = _clock()
    monkeypatch.setattr(
        module, "time", SimpleNamespace(perf_counter=lambda: next(readings), time=time.time)
    )
    monkeypatch.setattr(time, "time", lambda: CREATED)


@pytest.mark.usefixtures("fixed_clocks")
def test_a_scrape_after_scripted_turns_is_the_pinned_text() -> None:
    metrics = EngineMetrics()
    anyio.run(_scripted, metrics)
    text = metrics.render().decode()
    assert text == GOLDEN.read_text(), text
