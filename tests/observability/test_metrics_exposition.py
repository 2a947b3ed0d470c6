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

from turnfsm import Approval, ContextNotFound, Engine, tool
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


def scraped(metrics: EngineMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``(sample name, sorted labels) -> value`` of a scrape of ``metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _fed(counter: Any, labelled: Any, histogram: Any) -> None:
    """The same updates, to prometheus_client's metrics or to ours."""
    counter.labels().inc() if hasattr(counter, "children") else counter.inc()
    for values, amount in ((("a", "x"), 1), (("b", "y"), 7), (("a", "x"), 2.5)):
        labelled.labels(*values).inc(amount)
    for state, amount in (
        ("s", 0.005),  # on a bound: in its bucket
        ("s", 0.0),
        ("t", 0.0051),
        ("s", 300.0),
        ("s", 300.5),  # past the last bound: +Inf only
        ("t", -1.0),
        ("s", 2.5e9),
    ):
        histogram.labels(state).observe(amount)


@pytest.mark.parametrize("created", [True, False])
def test_the_families_write_what_prometheus_clients_metrics_write(
    monkeypatch: pytest.MonkeyPatch, created: bool
) -> None:
    import threading

    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
    from prometheus_client import metrics as prometheus_metrics

    from turnfsm.observability._families import Counted, Histogrammed

    monkeypatch.setattr(time, "time", lambda: CREATED)
    monkeypatch.setattr(prometheus_metrics, "_use_created", created)
    buckets = (0.005, 0.01, 1, 300)
    theirs, ours, lock = CollectorRegistry(), CollectorRegistry(), threading.Lock()
    _fed(
        Counter("plain", "A plain counter", registry=theirs),
        Counter("pairs", "A counter by two labels", ["one", "two"], registry=theirs),
        Histogram("spans", "A histogram", ["state"], buckets=buckets, registry=theirs),
    )
    _fed(
        Counted("plain", "A plain counter", registry=ours, lock=lock),
        Counted("pairs", "A counter by two labels", ["one", "two"], registry=ours, lock=lock),
        Histogrammed("spans", "A histogram", ["state"], buckets=buckets, registry=ours, lock=lock),
    )
    expected = generate_latest(theirs).decode()
    assert ("_created" in expected) is created
    assert generate_latest(ours).decode() == expected


def test_the_running_gauge_counts_the_calls_under_way() -> None:
    seen: list[float] = []
    metrics = EngineMetrics()

    def running() -> float:
        return scraped(metrics)[("turnfsm_turns_running", ())]

    @tool(inline=True)
    def peek() -> str:
        """Read the running gauge."""
        seen.append(running())
        return "ok"

    answers = [
        {"tool_calls": [{"id": "p", "name": "peek", "arguments": {}}]},
        {"text": "done"},
    ]

    async def main() -> None:
        engine = metrics.attach(Engine(llm=ScriptedLLM(answers), tools=[peek]))
        async with engine:
            cid = await engine.create_context()
            assert (await engine.send(cid, "peek")).text == "done"
            seen.append(running())
            with pytest.raises(ContextNotFound):  # a call that raises ends too
                await engine.send("no-such-context", "again")
            seen.append(running())

    anyio.run(main)
    assert seen == [1.0, 0.0, 0.0]
    errors = (("call", "send"), ("stop_reason", "error"))
    assert scraped(metrics)[("turnfsm_turns_finished_total", errors)] == 1
