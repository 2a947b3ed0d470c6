"""A stored workflow history of today's code, replayed with Temporal's
``Replayer``: the workflow code must make the same decisions on it.

``histories/tool_loop.json`` is one context's workflow: a streamed answer
asking for a tool that needs approval, the approval, the tool, a transient
LLM failure with its backoff timer, and the answer. When a change to the
declared table or the effects makes a running workflow decide differently,
this test fails with Temporal's non-determinism error: guard the change
with ``workflow.patched`` (docs/temporal.md, "Versioning"), keep this file,
and record a new one beside it (``python tests/temporal/test_replay_history.py``
from the repository root writes it again).
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.client import Client

from turnfsm import MemoryStore, RetryPolicy, Tool
from turnfsm.engine import wait_fixed

HISTORY = Path(__file__).parent / "histories" / "tool_loop.json"
QUEUE = "turnfsm-history"


def _tools(approval: str = "required") -> list[Tool]:
    return [
        Tool.from_spec(
            "delete_file",
            "Delete a file.",
            {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            lambda path: f"deleted {path}",
            approval=approval,  # type: ignore[arg-type]
        )
    ]


OPTIONS: dict[str, Any] = {"retry": RetryPolicy(max_attempts=3, wait=wait_fixed(0.2))}


async def _replay(approval: str = "required") -> None:
    from temporalio.client import WorkflowHistory

    from turnfsm.temporal import replayer

    data = json.loads(HISTORY.read_text())
    history = WorkflowHistory.from_json(data["workflow_id"], data["history"])
    await replayer(tools=_tools(approval), **OPTIONS).replay_workflow(history)


def test_the_stored_history_replays_without_non_determinism() -> None:
    anyio.run(_replay)


def test_a_changed_decision_is_caught_as_non_determinism() -> None:
    """The check can fail: the same history, replayed by a worker on which
    the tool needs no approval, takes another path through the table."""
    from temporalio.workflow import NondeterminismError

    with pytest.raises(NondeterminismError):
        anyio.run(_replay, "auto")


async def record(address: str) -> dict[str, Any]:  # pragma: no cover - run by hand
    from turnfsm.temporal import TemporalEngine, TemporalWorker, workflow_id
    from turnfsm.testing import ScriptedLLM

    client = await Client.connect(address)
    store = MemoryStore()
    llm = ScriptedLLM(
        [
            {
                "chunks": ["Let me ", "delete it."],
                "tool_calls": [{"id": "c1", "name": "delete_file", "arguments": {"path": "/x"}}],
            },
            {"error": {"status": 503, "message": "overloaded"}},
            {"text": "Deleted."},
        ]
    )
    async with (
        TemporalWorker(
            client,
            store=store,
            llm=llm,
            tools=_tools(),
            task_queue=QUEUE,
            event_log=None,
            **OPTIONS,
        ),
        TemporalEngine(client, store=store, task_queue=QUEUE) as engine,
    ):
        cid = await engine.create_context(context_id=f"history-{uuid.uuid4().hex[:8]}")
        turn = await engine.send(cid, "delete /x")
        assert str(turn.state) == "AwaitingToolApproval", turn
        turn = await engine.approve(cid, "c1")
        assert turn.text == "Deleted.", turn
        history = await client.get_workflow_handle(workflow_id(cid)).fetch_history()
    return {"workflow_id": workflow_id(cid), "history": json.loads(history.to_json())}


if __name__ == "__main__":  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from temporal.devserver import DevServer, find_cli

    cli = find_cli()
    assert cli is not None
    server = DevServer(cli)
    server.start()
    try:
        recorded = anyio.run(record, server.address)
    finally:
        server.stop()
    HISTORY.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"wrote {HISTORY}")
