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

from turnfsm import FinalAnswer, MemoryStore, RetryPolicy, Tool, subtask
from turnfsm.engine import wait_fixed

HISTORIES = Path(__file__).parent / "histories"
HISTORY = HISTORIES / "tool_loop.json"
SUBTASK_IN_WORKFLOW = HISTORIES / "subtask_in_workflow.json"
"""A parent's workflow that ran its sub-task's child itself (before sub-tasks
were child workflows): the child waited for approval, the approval came on
the parent, the child and then the parent finished."""
SUBTASK_CHILD_WORKFLOW = HISTORIES / "subtask_child_workflow.json"
"""The same calls, the child's turns in its own workflow (a child workflow
of the parent's, called by signals)."""
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


def _subtask_tools() -> list[Tool]:
    return [
        *_tools(),
        subtask("helper", "Hand a task to a helper.", summarizer=FinalAnswer()),
    ]


OPTIONS: dict[str, Any] = {"retry": RetryPolicy(max_attempts=3, wait=wait_fixed(0.2))}


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


async def _replay(
    approval: str = "required", path: Path = HISTORY, tools: list[Tool] | None = None
) -> None:
    from temporalio.client import WorkflowHistory

    from turnfsm.temporal import replayer

    data = _load(path)
    history = WorkflowHistory.from_json(data["workflow_id"], data["history"])
    tools = _tools(approval) if tools is None else tools
    await replayer(tools=tools, **OPTIONS).replay_workflow(history)


def test_the_stored_history_replays_without_non_determinism() -> None:
    anyio.run(_replay)


@pytest.mark.parametrize(
    "path", [SUBTASK_IN_WORKFLOW, SUBTASK_CHILD_WORKFLOW], ids=lambda p: p.stem
)
def test_a_parents_history_with_a_subtask_replays(path: Path) -> None:
    """A history of the code before sub-tasks were child workflows replays on
    the old path (``workflow.patched``), and one of today's on the new."""
    anyio.run(_replay, "required", path, _subtask_tools())


def test_the_old_subtask_history_needs_its_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard is needed: without it, the old history replayed sends the
    child's task to a child workflow where it ran the child's turns itself."""
    from temporalio.workflow import NondeterminismError

    from turnfsm.temporal import _children

    monkeypatch.setattr(_children.WorkflowEngine, "elsewhere", lambda self, cid: cid != self.home)
    with pytest.raises(NondeterminismError):
        anyio.run(_replay, "required", SUBTASK_IN_WORKFLOW, _subtask_tools())


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


async def record_subtask(address: str) -> dict[str, Any]:  # pragma: no cover - run by hand
    """The parent's workflow of a sub-task whose child waits for approval."""
    from turnfsm.temporal import TemporalEngine, TemporalWorker, workflow_id
    from turnfsm.testing import ScriptedLLM

    client = await Client.connect(address)
    store = MemoryStore()
    llm = ScriptedLLM(
        [
            {"tool_calls": [{"id": "h1", "name": "helper", "arguments": {"task": "Delete /x"}}]},
            {"tool_calls": [{"id": "c1", "name": "delete_file", "arguments": {"path": "/x"}}]},
            {"text": "Deleted /x."},
            {"text": "The helper deleted it."},
        ]
    )
    tools = _subtask_tools()
    async with (
        TemporalWorker(
            client,
            store=store,
            llm=llm,
            tools=tools,
            task_queue=QUEUE,
            event_log=None,
            **OPTIONS,
        ),
        TemporalEngine(client, store=store, task_queue=QUEUE, tools=tools) as engine,
    ):
        cid = await engine.create_context(context_id=f"history-{uuid.uuid4().hex[:8]}")
        turn = await engine.send(cid, "delete /x with a helper")
        assert str(turn.state) == "AwaitingToolApproval", turn
        turn = await engine.approve(cid, "c1")
        assert turn.text == "The helper deleted it.", turn
        history = await client.get_workflow_handle(workflow_id(cid)).fetch_history()
    return {"workflow_id": workflow_id(cid), "history": json.loads(history.to_json())}


if __name__ == "__main__":  # pragma: no cover
    # python tests/temporal/test_replay_history.py [tool_loop|subtask PATH]
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from temporal.devserver import DevServer, find_cli

    which = sys.argv[1] if len(sys.argv) > 1 else "tool_loop"
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else HISTORY
    cli = find_cli()
    assert cli is not None
    server = DevServer(cli)
    server.start()
    try:
        recorded = anyio.run(record if which == "tool_loop" else record_subtask, server.address)
    finally:
        server.stop()
    target.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"wrote {target}")
