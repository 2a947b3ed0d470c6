"""Sub-tasks on a real Temporal server: a ``subtask()`` tool's child context
runs its turns in a workflow of its own, a child workflow of its parent's."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import pytest

from temporal.devserver import RunningServer

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.client import Client, WorkflowExecutionStatus

from turnfsm import FinalAnswer, MemoryStore, State, ask_user, subtask, tool
from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log
from turnfsm.testing import ScriptedLLM

RAN: list[str] = []


@tool(idempotent=True)
def lookup(key: str) -> str:
    """Look a key up."""
    RAN.append(f"lookup:{key}")
    return f"value of {key}"


@tool(approval="required")
def publish(text: str) -> str:
    """Publish a text (a human approves)."""
    RAN.append(f"publish:{text}")
    return "published"


def research(**spec: Any) -> Any:
    return subtask(
        "research",
        "Research in a helper.",
        tools=spec.pop("tools", ["lookup", "publish"]),
        summarizer=FinalAnswer(),
        **spec,
    )


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": name, "arguments": arguments}]}


RESEARCH = _call("r1", "research", task="Find k")


@pytest.fixture(scope="module")
def client(temporal_server: RunningServer) -> Client:
    return anyio.run(Client.connect, temporal_server.address)


@asynccontextmanager
async def _hosted(
    client: Client,
    answers: Sequence[dict[str, Any]],
    tools: Sequence[Any],
    llm: Any = None,
    **options: Any,
) -> AsyncIterator[tuple[Any, Any]]:
    """A worker with the scripted model (or ``llm``) and ``tools``, and a
    client engine, on a task queue of their own and one store."""
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    RAN.clear()
    store, queue = MemoryStore(), f"sub-{uuid.uuid4().hex[:10]}"
    llm = ScriptedLLM(list(answers)) if llm is None else llm
    async with (
        TemporalWorker(client, store=store, llm=llm, tools=tools, task_queue=queue, **options),
        TemporalEngine(client, store=store, task_queue=queue, tools=tools) as engine,
    ):
        yield engine, llm


async def _describe(client: Client, context_id: str) -> Any:
    from turnfsm.temporal import workflow_id

    return await client.get_workflow_handle(workflow_id(context_id)).describe()


async def _activities(client: Client, context_id: str) -> list[str]:
    """The activities the context's workflow (its current run) scheduled, by name."""
    from turnfsm.temporal import workflow_id

    history = await client.get_workflow_handle(workflow_id(context_id)).fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


async def _every_run(client: Client, context_id: str) -> list[Any]:
    """The history events of every run of the context's workflow, the first
    run's first (followed back from the current run through continue-as-new)."""
    from turnfsm.temporal import workflow_id

    events: list[Any] = []
    run_id: str | None = None
    while True:
        handle = client.get_workflow_handle(workflow_id(context_id), run_id=run_id)
        run = list((await handle.fetch_history()).events)
        events[:0] = run
        started = run[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id or None
        if run_id is None:
            return events


async def _ended(client: Client, context_id: str) -> WorkflowExecutionStatus | None:
    """The status of the context's workflow once it is no longer running
    (a child's ends a moment after its parent's call returned)."""
    with anyio.fail_after(10):
        while True:
            status = (await _describe(client, context_id)).status
            if status is not WorkflowExecutionStatus.RUNNING:
                return status
            await anyio.sleep(0.05)


async def _audit_ok(engine: Any, cid: str) -> bool:
    ctx = await engine.get_context(cid)
    steps = await engine.steps(cid)
    lines = audit_jsonl(audit_records(cid, steps, ctx.message_pool.values())).splitlines()
    return verify_audit_log(lines).ok


@pytest.mark.temporal  # seconds: with -m temporal (.ci/run)
def test_a_subtasks_child_runs_in_a_child_workflow_of_its_parents(client: Client) -> None:
    """The child's turns (its model calls, its tool) run in the child's own
    workflow, started by the parent's as its child; deleted after its
    summary, the child's workflow ends."""
    from turnfsm.temporal import workflow_id

    async def go() -> None:
        answers = [
            RESEARCH,  # the parent's model calls the sub-task
            _call("c1", "lookup", key="k"),  # the child's
            {"text": "k is 'value of k'."},  # the child's answer: the summary
            {"text": "k has a value."},  # the parent's answer
        ]
        async with _hosted(client, answers, [lookup, publish, research()]) as (engine, llm):
            parent = await engine.create_context()
            turn = await engine.send(parent, "What is k?")
            assert turn.state is State.IDLE and turn.text == "k has a value."
            assert RAN == ["lookup:k"]
            child = llm.requests[1].context_id
            assert child != parent and llm.requests[2].context_id == child
            described = await _describe(client, child)
            assert described.parent_id == workflow_id(parent)
            # the child's model calls and tool in the child's history only
            mine = await _activities(client, child)
            assert mine.count("turnfsm.llm") == 2 and mine.count("turnfsm.tool") == 1
            theirs = await _activities(client, parent)
            assert theirs.count("turnfsm.llm") == 2 and "turnfsm.tool" not in theirs
            assert await _ended(client, child) is WorkflowExecutionStatus.COMPLETED
            assert (await _describe(client, parent)).status is WorkflowExecutionStatus.RUNNING
            assert await engine.children(parent) == []
            ctx = await engine.get_context(parent)
            [result] = [n.message.tool_result for n in ctx.history() if n.message.tool_result]
            assert result.success and result.result == "k is 'value of k'."
            assert await _audit_ok(engine, parent)

    anyio.run(go)


@pytest.mark.temporal  # seconds: with -m temporal (.ci/run)
def test_an_approval_the_child_waits_for_is_given_on_the_parent(client: Client) -> None:
    """The child waits for approval in its own workflow; the parent's turn
    surfaces its call; ``approve`` on the parent reaches the child, which
    runs the tool and answers, and the parent's turn finishes."""

    async def go() -> None:
        answers = [
            RESEARCH,
            _call("p1", "publish", text="note"),  # the child's call waits
            {"text": "Published the note."},
            {"text": "All done."},
        ]
        async with _hosted(client, answers, [lookup, publish, research()]) as (engine, llm):
            parent = await engine.create_context()
            turn = await engine.send(parent, "Publish")
            assert turn.state is State.AWAITING_TOOL_APPROVAL
            assert [c.id for c in turn.pending_tool_calls] == ["p1"]
            child = llm.requests[1].context_id
            waiting = await engine.get_context(child)
            assert waiting.current_state == State.AWAITING_TOOL_APPROVAL
            # the child waits in its workflow, which is running
            assert (await _describe(client, child)).status is WorkflowExecutionStatus.RUNNING
            assert RAN == []

            turn = await engine.approve(parent, "p1")
            assert turn.state is State.IDLE and turn.text == "All done."
            assert RAN == ["publish:note"]
            assert "turnfsm.tool" in await _activities(client, child)
            assert "turnfsm.tool" not in await _activities(client, parent)
            assert await _ended(client, child) is WorkflowExecutionStatus.COMPLETED
            assert await engine.children(parent) == []
            assert await _audit_ok(engine, parent)

    anyio.run(go)


@pytest.mark.temporal
def test_a_kept_childs_workflow_keeps_running(client: Client) -> None:
    async def go() -> None:
        answers = [RESEARCH, {"text": "found it"}, {"text": "done"}]
        tools = [lookup, publish, research(keep=True)]
        async with _hosted(client, answers, tools) as (engine, llm):
            parent = await engine.create_context()
            turn = await engine.send(parent, "go")
            assert turn.text == "done"
            [info] = await engine.children(parent)
            assert info.finished and info.context_id == llm.requests[1].context_id
            await anyio.sleep(0.5)
            described = await _describe(client, info.context_id)
            assert described.status is WorkflowExecutionStatus.RUNNING
            kept = await engine.get_context(info.context_id)
            assert kept.config.archived and kept.current_state == State.IDLE

    anyio.run(go)


@pytest.mark.temporal
def test_a_decision_sent_to_the_childs_own_workflow(client: Client) -> None:
    """A decision given on the child's id goes to its workflow; the parent's
    next resume lists its own waiting call, whose approval finishes it."""

    async def go() -> None:
        answers = [
            RESEARCH,
            _call("p1", "publish", text="note"),
            {"text": "Published."},
            {"text": "Done."},
        ]
        async with _hosted(client, answers, [lookup, publish, research()]) as (engine, llm):
            parent = await engine.create_context()
            await engine.send(parent, "Publish")
            child = llm.requests[1].context_id
            turn = await engine.approve(child, "p1")
            assert turn.state is State.IDLE and turn.text == "Published."
            assert RAN == ["publish:note"]
            resumed = await engine.resume(parent)
            assert [c.id for c in resumed.pending_tool_calls] == ["r1"]
            turn = await engine.approve(parent, "r1")
            assert turn.state is State.IDLE and turn.text == "Done."
            assert await _ended(client, child) is WorkflowExecutionStatus.COMPLETED
            assert await engine.children(parent) == []
            assert await _audit_ok(engine, parent)

    anyio.run(go)


@pytest.mark.temporal
def test_a_question_of_the_child_is_answered_on_the_parent(client: Client) -> None:
    """``answer`` on the parent reaches the question its child's workflow waits on."""

    async def go() -> None:
        question = {"question": "Which city?", "choices": ["Oslo", "Rome"]}
        answers = [
            RESEARCH,
            _call("q1", "ask_user", **question),
            {"text": "The user picked Rome."},
            {"text": "Rome it is."},
        ]
        tools = [ask_user, research(tools=["ask_user"])]
        async with _hosted(client, answers, tools) as (engine, llm):
            parent = await engine.create_context()
            turn = await engine.send(parent, "Where do we go?")
            assert turn.state is State.AWAITING_TOOL_APPROVAL
            assert [q.call_id for q in turn.questions] == ["q1"]
            turn = await engine.answer(parent, "q1", "Rome")
            assert turn.state is State.IDLE and turn.text == "Rome it is."
            child = llm.requests[1].context_id
            assert llm.requests[2].messages[-1]["content"] == "Rome"
            assert await _ended(client, child) is WorkflowExecutionStatus.COMPLETED
            assert await _audit_ok(engine, parent)

    anyio.run(go)


@pytest.mark.temporal
def test_a_nested_subtask_runs_one_level_down(client: Client) -> None:
    """A child whose model calls a sub-task: the grandchild's workflow is the
    child's child; its call waits, surfaces on the top, is denied there, and
    every level goes on."""
    from turnfsm.temporal import workflow_id

    async def go() -> None:
        inner = subtask("inner", "A helper's helper.", tools=["publish"], summarizer=FinalAnswer())
        outer = subtask("outer", "A helper.", tools=["inner", "publish"], summarizer=FinalAnswer())
        answers = [
            _call("o1", "outer", task="Delegate"),  # the top
            _call("i1", "inner", task="Publish"),  # the child
            _call("p1", "publish", text="note"),  # the grandchild: waits
            {"text": "Not published."},  # the grandchild, after the denial
            {"text": "The helper could not publish."},  # the child
            {"text": "Nothing was published."},  # the top
        ]
        async with _hosted(client, answers, [lookup, publish, inner, outer]) as (engine, llm):
            top = await engine.create_context()
            turn = await engine.send(top, "Go")
            assert turn.state is State.AWAITING_TOOL_APPROVAL
            assert [c.id for c in turn.pending_tool_calls] == ["p1"]
            child, grandchild = llm.requests[1].context_id, llm.requests[2].context_id
            assert len({top, child, grandchild}) == 3
            assert (await _describe(client, child)).parent_id == workflow_id(top)
            assert (await _describe(client, grandchild)).parent_id == workflow_id(child)
            turn = await engine.deny(top, "p1", "not today")
            assert turn.state is State.IDLE and turn.text == "Nothing was published."
            assert RAN == []
            assert "turnfsm.llm" in await _activities(client, grandchild)
            for cid in (grandchild, child):
                assert await _ended(client, cid) is WorkflowExecutionStatus.COMPLETED
            assert await engine.children(top) == []
            assert await _audit_ok(engine, top)

    anyio.run(go)


@pytest.mark.temporal
def test_the_parent_continues_as_new_and_its_child_goes_on(client: Client) -> None:
    """With a small history limit the parent's workflow continues as new
    while its child waits for approval: the child's workflow is not
    terminated, and the approval on the parent's next run reaches it."""

    async def go() -> None:
        answers = [
            RESEARCH,
            _call("p1", "publish", text="note"),
            {"text": "Published."},
            {"text": "Done."},
        ]
        tools = [lookup, publish, research(keep=True)]
        async with _hosted(client, answers, tools, history_limit=12) as (engine, llm):
            parent = await engine.create_context()
            await engine.send(parent, "Publish")
            child = llm.requests[1].context_id
            # the run that ran the call continued as new: the current one has
            # run nothing yet
            with anyio.fail_after(10):
                while True:
                    if not await _activities(client, parent):
                        break
                    await anyio.sleep(0.05)
            assert (await _describe(client, parent)).status is WorkflowExecutionStatus.RUNNING
            assert (await _describe(client, child)).status is WorkflowExecutionStatus.RUNNING
            turn = await engine.approve(parent, "p1")
            assert turn.state is State.IDLE and turn.text == "Done."
            assert RAN == ["publish:note"]
            [info] = await engine.children(parent)
            assert info.finished and info.context_id == child
            # the new run found the child's workflow running, and called it there
            events = await _every_run(client, parent)
            assert [
                e.HasField("start_child_workflow_execution_failed_event_attributes") for e in events
            ].count(True) == 1
            # the parent went on as new again; its kept child is still there
            await anyio.sleep(0.5)
            assert (await _describe(client, child)).status is WorkflowExecutionStatus.RUNNING
            assert await _audit_ok(engine, parent)

    anyio.run(go)


class _ChildHangs:
    """The parent's model calls the sub-task; the child's streams one delta,
    then waits until cancelled."""

    def __init__(self) -> None:
        self.contexts: list[str] = []
        self.waiting = anyio.Event()

    async def stream(self, request: Any) -> Any:
        from turnfsm.model import LLMResponse, TextDelta, ToolCallData

        self.contexts.append(request.context_id)
        if len(self.contexts) == 1:
            yield LLMResponse(
                tool_calls=(ToolCallData(id="r1", name="research", arguments={"task": "k"}),)
            )
            return
        if len(self.contexts) > 2:
            yield LLMResponse(text="again")
            return
        yield TextDelta("Searching ")
        self.waiting.set()
        await anyio.sleep_forever()


@pytest.mark.temporal
def test_a_cancel_of_the_parent_is_sent_on_to_its_child(client: Client) -> None:
    """``cancel`` on the parent while its child's model streams: the child's
    turn is cancelled in its workflow (its partial text kept, marked
    cancelled), and the parent's call ends through its own cancel edge."""

    async def go() -> None:
        llm = _ChildHangs()
        tools = [lookup, publish, research()]
        async with _hosted(client, [], tools, llm=llm, heartbeat_timeout=timedelta(seconds=1)) as (
            engine,
            _,
        ):
            parent = await engine.create_context()
            sent: list[Any] = []
            async with anyio.create_task_group() as tg:

                async def send() -> None:
                    sent.append(await engine.send(parent, "go"))

                tg.start_soon(send)
                with anyio.fail_after(20):
                    await llm.waiting.wait()
                with anyio.fail_after(30):
                    cancelled = await engine.cancel(parent)
            assert cancelled.state is State.IDLE and str(cancelled.stop_reason) == "cancelled"
            assert sent[0].state is State.IDLE
            assert [str(s) for s in await engine.trace(parent)] == [
                "Idle",
                "ProcessingUserMessage",
                "AwaitingLLMResponse",
                "ProcessingLLMResponse",
                "ExecutingTools",
                "Idle",
            ]
            # (in-process the child's call is stopped where it was, away from
            # rest; here the child's own workflow takes the cancel edge)
            child = llm.contexts[1]
            assert [str(s) for s in await engine.trace(child)] == [
                "Idle",
                "ProcessingUserMessage",
                "AwaitingLLMResponse",
                "StreamingLLMResponse",
                "Idle",
            ]
            partial = (await engine.get_context(child)).history()[-1].message
            assert partial.text == "Searching " and partial.metadata.cancelled
            ctx = await engine.get_context(parent)
            [result] = [n.message.tool_result for n in ctx.history() if n.message.tool_result]
            assert not result.success
            assert (await _describe(client, child)).status is WorkflowExecutionStatus.RUNNING
            assert await _audit_ok(engine, parent)

    anyio.run(go)


def _counted(child: Any) -> str:
    """A sync summarizer: in the workflow it is called there, not in a thread."""
    return f"the child has {len(child.history())} messages"


def test_a_sync_summarizer_of_a_subtask_runs_in_the_workflow(client: Client) -> None:
    async def go() -> None:
        answers = [RESEARCH, {"text": "found it"}, {"text": "done"}]
        helper = subtask("research", "Research in a helper.", tools=["lookup"], summarizer=_counted)
        async with _hosted(client, answers, [lookup, helper]) as (engine, _):
            parent = await engine.create_context()
            # bounded: a workflow task that fails (a thread started in the
            # workflow) is retried for ever, and the turn would never end
            with anyio.fail_after(300):
                turn = await engine.send(parent, "go")
            assert turn.state is State.IDLE and turn.text == "done", turn
            ctx = await engine.get_context(parent)
            [result] = [n.message.tool_result for n in ctx.history() if n.message.tool_result]
            assert result.success and result.result == "the child has 2 messages"

    anyio.run(go)
