"""Every golden script of tests/scripts, its turns run on Temporal.

Each script is run twice: in-process (``run_script``, as
tests/test_replay_golden.py runs it) and with its turns on a real Temporal
dev server (a :class:`TemporalWorker` holding the script's tape as its LLM
and tools, a :class:`TemporalEngine` giving the script's inputs). Both give
the same trace and the same stored messages (message ids and times aside:
the workflow's ids are its own deterministic ones, and its clock is
Temporal's), the script's own checks pass, and the audit log verifies.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from temporal.compare import normal_messages
from temporal.devserver import RunningServer

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.client import Client

from turnfsm import MemoryStore, records
from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log
from turnfsm.engine import wait_fixed
from turnfsm.errors import TurnFSMError
from turnfsm.replay import load_script, run_script
from turnfsm.replay._runner import (
    Failure,
    _check_final,
    _check_state,
    _input,
    _Tape,
    build_engine,
)
from turnfsm.replay._script import Script
from turnfsm.storage._logtypes import LogNote

SCRIPTS = Path(__file__).parents[1] / "scripts"
EXPECTED: dict[str, dict[str, Any]] = json.loads(
    (SCRIPTS.parent / "scripts_expected.json").read_text()
)
GOLDEN = sorted(name for name, e in EXPECTED.items() if e["exit"] == 0)

# One script of each kind runs in the default test command (a text answer, an
# approval, a retry after a transient failure, a cancel mid-stream, a question,
# a sub-task, a compaction); all of them run with ``-m temporal`` (its own step
# of .ci/run), which keeps the default command within its time.
EVERY_KIND = {
    "text_answer.json",
    "weather_with_approval.json",
    "transient_error_then_success.json",
    "cancel_mid_stream.json",
    "question_with_approval.json",
    "subtask_approval.json",
    "compaction.json",
}
SCRIPT_PARAMS = [
    pytest.param(name, marks=() if name in EVERY_KIND else pytest.mark.temporal) for name in GOLDEN
]


class _Log:
    """An event log that keeps what it is given (rows and rung notes)."""

    shared = True
    rings = True

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.notes: list[LogNote] = []

    async def open(self) -> None:
        return None

    async def add(self, rows: Any, notes: Any) -> None:
        self.rows += rows
        self.notes += notes

    def events(self, cid: str) -> list[tuple[int, str]]:
        """The context's events, durable and rung, as (seq, kind), by seq."""
        seen = {(s, k) for c, s, k, _ in self.rows if c == cid}
        seen |= {
            (n.seq, json.loads(str(n.event))["kind"])
            for n in self.notes
            if n.event is not None and n.context_id == cid
        }
        return sorted(seen)


async def _run_on_temporal(
    client: Client, script: Script
) -> tuple[list[Failure], list[str], list[dict[str, Any]], list[str], list[tuple[int, str]]]:
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    tape = _Tape(script.steps)
    reference = build_engine(script, tape)  # the script's LLM, tools and options
    settings = reference._d.settings
    store = MemoryStore()
    log = _Log()
    queue = f"golden-{uuid.uuid4().hex[:10]}"
    failures: list[Failure] = []
    cfg = script.config
    async with (
        TemporalWorker(
            client,
            store=store,
            llm=reference.llm,
            tools=list(reference.tools),
            task_queue=queue,
            event_log=log,
            # the same attempts; shorter waits (real timers here, a fake clock
            # in-process): a wait decides no edge, so the trace is the same
            retry=dataclasses.replace(
                reference.retry_policy, wait=wait_fixed(0.05), max_retry_after=0.05
            ),
            max_iterations=reference.max_iterations,
            limit_notice=reference.limit_notice,
            tool_history_rounds=cfg.tool_history_rounds,
            compaction=settings.view_plan.compaction,
            modes=script.modes,
            output_type=cfg.output_type,
            output_retries=cfg.output_retries,
        ),
        TemporalEngine(
            client, store=store, task_queue=queue, tools=list(reference.tools), modes=script.modes
        ) as engine,
    ):
        # what the client's engine does itself (branches, config) has its
        # events from it, as a server's relay takes them from its own engine
        engine.tap(lambda ev: log.rows.append((ev.context_id, ev.seq, ev.kind, "")))
        cid = await engine.create_context(
            system_prompt=cfg.system_prompt,
            model=cfg.model,
            mode=cfg.mode,
            parameters=cfg.parameters,
        )
        while tape.stop is None and (step := tape.peek()) is not None:
            if step.kind == "expect":
                tape.take()
                ctx = await engine.get_context(cid)
                asked = [c.id for c in await engine._subcontexts.pending(cid)]
                failures.extend(_check_state(step.index, step.value, ctx, asked))
                continue
            if step.is_outcome:
                tape.fail(f"{step.describe()} was not used")
                break
            tape.take()
            try:
                await _input(engine, cid, step)
            except TurnFSMError as exc:
                if tape.stop is None:
                    tape.stop = Failure("tape", step.index, f"refused: {exc}")
        ctx = await engine.get_context(cid)
        trace = [str(s) for s in await engine.trace(cid)]
        steps = await store.steps(cid)
    failures.extend(tape.checks)
    if tape.stop is not None:
        failures.append(tape.stop)
    elif script.expect is not None:
        failures.extend(_check_final(script.expect, trace, ctx))
    messages = [records.to_python(n) for n in ctx.history()]
    audit = audit_jsonl(audit_records(cid, steps, ctx.message_pool.values())).splitlines()
    return failures, trace, messages, audit, log.events(cid)


@pytest.fixture(scope="module")
def client(temporal_server: RunningServer) -> Client:
    return anyio.run(Client.connect, temporal_server.address)


@pytest.mark.parametrize("name", SCRIPT_PARAMS)
def test_golden_script_on_temporal(client: Client, name: str) -> None:
    script = load_script(SCRIPTS / name)
    here = run_script(script)
    assert here.ok, here.report()
    failures, trace, messages, audit, events = anyio.run(_run_on_temporal, client, script)
    assert not failures, [f.message for f in failures]
    assert trace == here.trace
    # what a server's streams would be given: the same seqs, the same kinds
    assert events == sorted((e["seq"], e["kind"]) for e in here.events)
    assert normal_messages(messages) == normal_messages(here.messages)
    assert verify_audit_log(audit).ok
