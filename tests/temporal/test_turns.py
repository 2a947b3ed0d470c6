"""Turns on a real Temporal server: the engine's table inside a workflow, its
I/O as activities, its calls as Updates."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from temporal.devserver import DevServer, RunningServer

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.client import Client

from turnfsm import Engine, MemoryStore, SQLiteStore, State, tool
from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log
from turnfsm.engine import LLMSummarizer
from turnfsm.engine._accepted import ON_ACCEPTED
from turnfsm.errors import (
    ContextBusy,
    ContextNotFound,
    IllegalTransition,
    InvalidInput,
    SubContextError,
)
from turnfsm.storage._logtypes import LogNote
from turnfsm.testing import ScriptedLLM

TEXT_TRACE = ["ProcessingUserMessage", "AwaitingLLMResponse", "ProcessingLLMResponse", "Idle"]


def _queue() -> str:
    return f"q-{uuid.uuid4().hex[:10]}"


async def _audit_ok(store: Any, cid: str) -> bool:
    ctx = await store.load(cid)
    steps = await store.steps(cid)
    lines = audit_jsonl(audit_records(cid, steps, ctx.message_pool.values())).splitlines()
    return verify_audit_log(lines).ok


class _Recording:
    """An event log that keeps what it is given (rows and rung notes): a row
    already kept is left as it is (the event log's contract), and one given
    again with other content is a conflict. ``early``: deltas rung before
    every lower seq was kept or rung (a reader would be given a seq the log
    cannot fill)."""

    shared = True
    rings = True

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, str, str]] = []
        self.notes: list[LogNote] = []
        self.kept: dict[tuple[str, int], str] = {}
        self.conflicts: list[tuple[str, int]] = []
        self.early: list[int] = []
        self.rung: set[int] = set()

    async def open(self) -> None:
        return None

    async def add(self, rows: Sequence[Any], notes: Sequence[LogNote]) -> None:
        for row in rows:
            key = (row[0], row[1])
            if key in self.kept:
                if self.kept[key] != row[3]:
                    self.conflicts.append(key)
                continue
            self.kept[key] = row[3]
            self.rows.append(row)
        for note in notes:
            if note.event is not None:
                seen = {s for (_, s) in self.kept} | self.rung
                if not set(range(1, note.seq)) <= seen:
                    self.early.append(note.seq)
                self.rung.add(note.seq)
        self.notes += notes

    async def after(self, context_id: str, after: int, upto: int | None = None) -> list[Any]:
        return sorted(
            (s, k, j)
            for c, s, k, j in self.rows
            if c == context_id and s > after and (upto is None or s <= upto)
        )


def test_a_plain_text_turn_runs_on_temporal(temporal_server: RunningServer, tmp_path: Path) -> None:
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    async def go() -> None:
        client = await Client.connect(temporal_server.address)
        store_url = f"sqlite:///{tmp_path / 'turns.db'}"
        queue = _queue()
        llm = ScriptedLLM([{"text": "Hello there"}])
        async with (
            TemporalWorker(client, store=store_url, llm=llm, task_queue=queue),
            TemporalEngine(client, store=store_url, task_queue=queue) as engine,
        ):
            cid = await engine.create_context(system_prompt="Be brief.")
            turn = await engine.send(cid, "hi")
            assert turn.state is State.IDLE
            assert turn.text == "Hello there"
            assert [str(s) for s in turn.states] == TEXT_TRACE
            ctx = await engine.get_context(cid)
            assert [n.message.text for n in ctx.history()] == ["hi", "Hello there"]
            assert [str(s) for s in await engine.trace(cid)] == ["Idle", *TEXT_TRACE]
            assert await _audit_ok(engine.store, cid)
        # the events went to the store's event log, as a worker's relay writes them
        log_store = SQLiteStore(tmp_path / "turns.db")
        from turnfsm.storage._eventlog import open_event_log

        log = open_event_log(log_store)
        await log.open()
        kinds = [k for _, k, _ in await log.after(cid, 0)]
        assert kinds[-1] == "TurnCompleted" and "MessageCompleted" in kinds
        await log.aclose()
        await log_store.aclose()

    anyio.run(go)


def test_deltas_and_events_reach_the_log_with_the_engines_seqs(
    temporal_server: RunningServer,
) -> None:
    """Each delta is rung by the LLM activity as it arrives, each durable event
    written after its commit: together they are the seqs 1..event_seq, the
    same kinds in the same order as an in-process engine sends them."""
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    answer = {"chunks": ["Once ", "upon ", "a time."]}

    async def in_process() -> list[tuple[int, str]]:
        async with Engine(llm=ScriptedLLM([answer])) as engine:
            cid = await engine.create_context()
            async with engine.subscribe(cid) as sub:
                await engine.send(cid, "a story")
                return [(e.seq, e.kind) for e in sub.drain()]

    async def on_temporal() -> tuple[list[tuple[int, str]], str, int]:
        client = await Client.connect(temporal_server.address)
        store, log, queue = MemoryStore(), _Recording(), _queue()
        async with (
            TemporalWorker(
                client, store=store, llm=ScriptedLLM([answer]), task_queue=queue, event_log=log
            ),
            TemporalEngine(client, store=store, task_queue=queue) as engine,
        ):
            cid = await engine.create_context()
            await engine.send(cid, "a story")
            ctx = await engine.get_context(cid)
        deltas = [n for n in log.notes if n.event is not None]
        seen = [(s, k) for _, s, k, _ in log.rows]
        seen += [(n.seq, json.loads(str(n.event))["kind"]) for n in deltas]
        text = "".join(json.loads(str(n.event))["delta"] for n in deltas)
        # no delta before the stream_started step is kept; that step's row,
        # written by the LLM activity and again by its commit, the same
        assert log.early == [] and log.conflicts == []
        return sorted(seen), text, ctx.event_seq

    here = anyio.run(in_process)
    there, text, last = anyio.run(on_temporal)
    assert there == here
    assert [s for s, _ in there] == list(range(1, last + 1))
    assert text == "Once upon a time."


def test_the_engines_errors_come_back_as_themselves(temporal_server: RunningServer) -> None:
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    async def go() -> None:
        client = await Client.connect(temporal_server.address)
        store, queue = MemoryStore(), _queue()
        gate, entered = anyio.Event(), anyio.Event()

        @tool(approval="auto")
        async def slow() -> str:
            """Waits."""
            entered.set()
            await gate.wait()
            return "done"

        llm = ScriptedLLM(
            [{"tool_calls": [{"id": "c1", "name": "slow", "arguments": {}}]}, {"text": "ok"}]
        )
        async with (
            TemporalWorker(client, store=store, llm=llm, tools=[slow], task_queue=queue),
            TemporalEngine(client, store=store, task_queue=queue) as engine,
        ):
            with pytest.raises(ContextNotFound):
                await engine.send("no-such-context", "hi")
            # the workflow started for it ends (no workflow lingers for nothing)
            from temporalio.client import WorkflowExecutionStatus

            from turnfsm.temporal import workflow_id

            handle = client.get_workflow_handle(workflow_id("no-such-context"))
            with anyio.fail_after(20):
                await handle.result()
            assert (await handle.describe()).status is WorkflowExecutionStatus.COMPLETED
            cid = await engine.create_context()
            with pytest.raises(IllegalTransition):
                await engine.retry(cid)  # Idle has no retry
            turns: list[Any] = []
            accepted: list[str] = []

            async def send() -> None:
                ON_ACCEPTED.set(lambda: accepted.append("go"))
                turns.append(await engine.send(cid, "go"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(send)
                with anyio.fail_after(20):
                    await entered.wait()  # the turn runs its tool: the context is busy
                # told "accepted" long before the turn ends (serve's 202)
                assert accepted == ["go"]
                # the busy call is refused by the workflow's validator: never accepted
                ON_ACCEPTED.set(lambda: accepted.append("again"))
                with pytest.raises(ContextBusy):
                    await engine.send(cid, "again")
                gate.set()
            assert turns[0].state is State.IDLE and turns[0].text == "ok"
            assert accepted == ["go"]

    anyio.run(go)


def test_a_lost_call_of_a_tool_that_is_not_idempotent_is_never_run_again(
    temporal_server: RunningServer,
) -> None:
    """A worker stops while a tool runs: a tool that is not idempotent is not
    attempted again; the call comes back as outcome_unknown, for a human. An
    idempotent one is run again by Temporal's retry, on the next worker."""
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    async def run(idempotent: bool) -> tuple[Any, int, list[str]]:
        client = await Client.connect(temporal_server.address)
        store, queue = MemoryStore(), _queue()
        runs: list[int] = []
        first = anyio.Event()

        async def charge(amount: int) -> str:
            runs.append(amount)
            if len(runs) == 1:
                first.set()
                await anyio.sleep_forever()  # lost with its worker
            return f"charged {amount}"

        from turnfsm import Tool

        t = Tool.from_spec(
            "charge",
            "Charge the card.",
            {
                "type": "object",
                "properties": {"amount": {"type": "integer"}},
                "required": ["amount"],
            },
            charge,
            idempotent=idempotent,
        )
        answers = [
            {"tool_calls": [{"id": "c1", "name": "charge", "arguments": {"amount": 5}}]},
            {"text": "done"},
        ]
        options: dict[str, Any] = {"tools": [t], "task_queue": queue}
        turns: list[Any] = []
        returned = anyio.Event()
        async with TemporalEngine(client, store=store, task_queue=queue) as engine:
            cid = await engine.create_context()

            async def send() -> None:
                turns.append(await engine.send(cid, "pay"))
                returned.set()

            async with anyio.create_task_group() as tg:
                w1 = TemporalWorker(client, store=store, llm=ScriptedLLM(answers), **options)
                await w1.__aenter__()
                tg.start_soon(send)
                with anyio.fail_after(30):
                    await first.wait()
                await w1.__aexit__(None, None, None)  # its running activity is lost
                async with TemporalWorker(
                    client, store=store, llm=ScriptedLLM(answers[1:]), **options
                ):
                    with anyio.fail_after(60):
                        await returned.wait()
                    trace = [str(s) for s in await engine.trace(cid)]
                    assert await _audit_ok(store, cid)
        return turns[0], len(runs), trace

    turn, runs, trace = anyio.run(run, False)
    assert runs == 1
    assert turn.state is State.AWAITING_TOOL_APPROVAL
    assert [c.id for c in turn.pending_tool_calls] == ["c1"]
    assert "outcome unknown" in (turn.pending_tool_calls[0].reason or "")
    assert trace[-2:] == ["ExecutingTools", "AwaitingToolApproval"]

    turn, runs, trace = anyio.run(run, True)
    assert runs == 2
    assert turn.state is State.IDLE and turn.text == "done"
    assert "AwaitingToolApproval" not in trace


def test_an_approval_waits_across_a_worker_restart_and_a_server_restart(
    own_temporal_server: DevServer, tmp_path: Path
) -> None:
    """The workflow waits for the approval holding no worker; the worker stops,
    the Temporal server is killed (SIGKILL) and started again on its database
    file, a new worker starts, and the approval finishes the turn."""
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    ran: list[str] = []

    @tool(approval="required")
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    store_url = f"sqlite:///{tmp_path / 'approval.db'}"
    queue = _queue()

    async def ask() -> str:
        client = await Client.connect(own_temporal_server.address)
        llm = ScriptedLLM(
            [{"tool_calls": [{"id": "c1", "name": "delete_file", "arguments": {"path": "/tmp/x"}}]}]
        )
        async with (
            TemporalWorker(client, store=store_url, llm=llm, tools=[delete_file], task_queue=queue),
            TemporalEngine(client, store=store_url, task_queue=queue) as engine,
        ):
            cid = await engine.create_context()
            turn = await engine.send(cid, "delete /tmp/x")
            assert turn.state is State.AWAITING_TOOL_APPROVAL
            assert [c.id for c in turn.pending_tool_calls] == ["c1"]
        return cid

    async def approve(cid: str) -> Any:
        client = await Client.connect(own_temporal_server.address)
        llm = ScriptedLLM([{"text": "Deleted."}])
        async with (
            TemporalWorker(client, store=store_url, llm=llm, tools=[delete_file], task_queue=queue),
            TemporalEngine(client, store=store_url, task_queue=queue) as engine,
        ):
            turn = await engine.approve(cid, "c1")
            trace = [str(s) for s in await engine.trace(cid)]
            assert await _audit_ok(engine.store, cid)
        return turn, trace

    cid = anyio.run(ask)
    own_temporal_server.kill()
    own_temporal_server.start()
    turn, trace = anyio.run(approve, cid)
    assert ran == ["/tmp/x"]
    assert turn.state is State.IDLE and turn.text == "Deleted."
    assert trace == [
        "Idle",
        "ProcessingUserMessage",
        "AwaitingLLMResponse",
        "ProcessingLLMResponse",
        "AwaitingToolApproval",
        "ExecutingTools",
        "AwaitingLLMResponse",
        "ProcessingLLMResponse",
        "Idle",
    ]


def test_the_workflow_continues_as_new_before_its_history_grows_large(
    temporal_server: RunningServer,
) -> None:
    """With a small history limit, the workflow continues as new between
    turns; the next turn runs on the new run, from the store."""
    from temporalio.client import WorkflowExecutionStatus

    from turnfsm.temporal import TemporalEngine, TemporalWorker, workflow_id

    async def go() -> None:
        client = await Client.connect(temporal_server.address)
        store, queue = MemoryStore(), _queue()
        llm = ScriptedLLM([{"text": f"answer {i}"} for i in range(3)])
        async with (
            TemporalWorker(client, store=store, llm=llm, task_queue=queue, history_limit=12),
            TemporalEngine(client, store=store, task_queue=queue) as engine,
        ):
            cid = await engine.create_context()
            runs = []
            for i in range(3):
                turn = await engine.send(cid, f"question {i}")
                assert turn.text == f"answer {i}"
                handle = client.get_workflow_handle(workflow_id(cid))
                runs.append((await handle.describe()).run_id)
            # each turn took the history past the limit: the run that ran it
            # continued as new once the turn returned, so the next turn ran on
            # a new run (the one current after turn 1 ran turn 2, then went on)
            first = client.get_workflow_handle(workflow_id(cid), run_id=runs[0])
            assert (await first.describe()).status is WorkflowExecutionStatus.CONTINUED_AS_NEW
            assert len(set(runs)) == 3
            ctx = await engine.get_context(cid)
            assert len(ctx.history()) == 6
            assert [str(s) for s in await engine.trace(cid)] == ["Idle", *TEXT_TRACE * 3]
            assert await _audit_ok(store, cid)

    anyio.run(go)


class _Hangs:
    """An adapter that streams one delta, then waits (until cancelled)."""

    def __init__(self) -> None:
        self.calls = 0
        self.waiting = anyio.Event()

    async def stream(self, request: Any) -> Any:
        from turnfsm.model import LLMResponse, TextDelta

        self.calls += 1
        if self.calls > 1:
            yield LLMResponse(text="second answer")
            return
        yield TextDelta("Once upon ")
        self.waiting.set()
        await anyio.sleep_forever()


def test_cancel_stops_a_running_turn(temporal_server: RunningServer) -> None:
    """``cancel`` reaches the workflow while its LLM activity runs: the
    activity is cancelled and returns what had arrived, the context goes back
    to Idle through the cancel edge with the partial text kept, and the
    running send returns the cancelled turn."""
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    async def go() -> None:
        client = await Client.connect(temporal_server.address)
        store, log, queue, llm = MemoryStore(), _Recording(), _queue(), _Hangs()
        async with (
            TemporalWorker(
                client,
                store=store,
                llm=llm,
                task_queue=queue,
                event_log=log,
                heartbeat_timeout=timedelta(seconds=1),
            ),
            TemporalEngine(client, store=store, task_queue=queue) as engine,
        ):
            cid = await engine.create_context()
            sent: list[Any] = []
            async with anyio.create_task_group() as tg:

                async def send() -> None:
                    sent.append(await engine.send(cid, "a story"))

                tg.start_soon(send)
                with anyio.fail_after(20):
                    await llm.waiting.wait()
                with anyio.fail_after(30):
                    cancelled = await engine.cancel(cid)
            assert cancelled.state is State.IDLE
            assert str(cancelled.stop_reason) == "cancelled"
            assert sent[0].state is State.IDLE
            trace = [str(s) for s in await engine.trace(cid)]
            assert trace == [
                "Idle",
                "ProcessingUserMessage",
                "AwaitingLLMResponse",
                "StreamingLLMResponse",
                "Idle",
            ]
            # the partial text is kept, marked cancelled, as in-process
            partial = (await engine.get_context(cid)).history()[-1].message
            assert partial.text == "Once upon " and partial.metadata.cancelled
            again = await engine.send(cid, "again")
            assert again.text == "second answer"
            assert await _audit_ok(store, cid)

    anyio.run(go)


class _Toolset:
    """A toolset as MCP servers are one: started with the worker, its tools
    listed then, closed with it."""

    name = "demo"

    def __init__(self) -> None:
        self.started = self.closed = False
        self._tools: list[Any] = []

    async def start(self) -> None:
        from turnfsm import Tool

        self.started = True
        self._tools = [
            Tool.from_spec("echo", "Echo.", None, lambda: "echoed", idempotent=True),
        ]

    async def aclose(self) -> None:
        self.closed = True

    def tools(self) -> list[Any]:
        return self._tools

    def on_change(self, callback: Any) -> None:
        return None


def test_a_workers_toolsets_start_with_it_and_their_tools_run_as_activities(
    temporal_server: RunningServer,
) -> None:
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    toolset = _Toolset()

    async def go() -> Any:
        client = await Client.connect(temporal_server.address)
        store, queue = MemoryStore(), _queue()
        llm = ScriptedLLM(
            [{"tool_calls": [{"id": "e1", "name": "echo", "arguments": {}}]}, {"text": "ok"}]
        )
        async with (
            TemporalWorker(client, store=store, llm=llm, toolsets=[toolset], task_queue=queue),
            TemporalEngine(client, store=store, task_queue=queue) as engine,
        ):
            assert toolset.started
            cid = await engine.create_context()
            turn = await engine.send(cid, "echo")
            ctx = await engine.get_context(cid)
        return turn, ctx

    turn, ctx = anyio.run(go)
    assert toolset.closed
    assert turn.state is State.IDLE and turn.text == "ok"
    results = [n.message.tool_result for n in ctx.history() if n.message.tool_result]
    assert [(r.success, r.result) for r in results] == [(True, "echoed")]


def test_a_request_body_and_a_recovery_run_their_turns_on_temporal(
    temporal_server: RunningServer, tmp_path: Path
) -> None:
    """``send_request`` and ``recover`` are turn calls too: on a TemporalEngine
    their turns run in the workflows, never in the client's process (which
    has no LLM)."""
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    store_url = f"sqlite:///{tmp_path / 'requests.db'}"

    async def go() -> None:
        client = await Client.connect(temporal_server.address)
        queue = _queue()
        # a turn handed off and left for a worker: the context is away from rest
        async with Engine(store=store_url) as local:
            left = await local.create_context()
            await local.submit(left, "left behind")
        llm = ScriptedLLM([{"text": "from a body"}, {"text": "recovered"}])
        async with (
            TemporalWorker(client, store=store_url, llm=llm, task_queue=queue),
            TemporalEngine(client, store=store_url, task_queue=queue) as engine,
        ):
            turn = await engine.send_request({"messages": [{"role": "user", "content": "hi"}]})
            assert turn.state is State.IDLE and turn.text == "from a body"
            recovery = await engine.recover()
            assert list(recovery.resumed) == [left] and not recovery.failed
            assert recovery.resumed[left].text == "recovered"
            assert (await engine.get_context(left)).current_state == "Idle"

    anyio.run(go)


@pytest.mark.temporal  # seconds: with -m temporal (.ci/run)
def test_finish_with_the_llm_summary_runs_in_the_parents_workflow(
    temporal_server: RunningServer,
) -> None:
    """``finish`` with the LLM summary: the client has no LLM, so the parent's
    workflow makes it; it is read by nobody but the parent and rings nothing
    on the child's stream."""
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    store, log = MemoryStore(), _Recording()
    queue = _queue()
    llm = ScriptedLLM(
        [
            {"chunks": ["Paris ", "it is."]},  # the kept child's turn
            {"chunks": ["The capital ", "is Paris."]},  # its summary
            {"text": "Done."},  # the other child's turn
            {"text": "It said done."},  # its summary
            {"text": "One, two, three."},  # the third child's turn
        ]
    )

    async def go() -> tuple[str, int]:
        client = await Client.connect(temporal_server.address)
        async with (
            TemporalWorker(client, store=store, llm=llm, task_queue=queue, event_log=log),
            TemporalEngine(client, store=store, task_queue=queue) as engine,
        ):
            parent = await engine.create_context(system_prompt="Delegate.")
            kept = await engine.spawn(parent, "the capital of France?")
            assert kept.turn.state is State.IDLE and kept.turn.text == "Paris it is."

            done = await engine.finish(kept.context_id, keep=True)
            assert done.summary == "The capital is Paris." and done.kept
            assert done.context_id == parent and done.child_id == kept.context_id
            ctx = await engine.get_context(parent)
            assert ctx.message_pool[done.message_id].message.text == "The capital is Paris."
            child = await engine.get_context(kept.context_id)
            assert child.config.archived
            # the summary request went to the workers' LLM, as the in-process
            # engine sends it: the child's history, then the prompt
            asked = llm.requests[1]
            assert asked.context_id == kept.context_id
            assert asked.messages[-1]["content"] == LLMSummarizer().prompt

            other = await engine.spawn(parent, "say done")
            gone = await engine.finish(
                other.context_id, summarizer=LLMSummarizer("In one line?", model="m-2")
            )
            assert gone.summary == "It said done." and not gone.kept
            assert llm.requests[3].model == "m-2"
            assert llm.requests[3].messages[-1]["content"] == "In one line?"
            with pytest.raises(ContextNotFound):
                await engine.get_context(other.context_id)

            # another summarizer runs in the client, as on an in-process engine
            third = await engine.spawn(parent, "count to three")
            by_hand = await engine.finish(third.context_id, summarizer=lambda c: "Counted.")
            assert by_hand.summary == "Counted." and len(llm.requests) == 5
            with pytest.raises(SubContextError):
                await engine.finish(parent)  # not a sub-context: nothing sent
            return kept.context_id, child.event_seq

    kept_id, last = anyio.run(go)
    # what the kept child's readers were given is its turn's and its
    # archiving's, each seq once, up to its last: nothing of the summary (no
    # stream_started step, no delta)
    seqs = sorted(
        [s for c, s, *_ in log.rows if c == kept_id]
        + [n.seq for n in log.notes if n.event is not None and n.context_id == kept_id]
    )
    assert seqs == list(range(1, last + 1))


def test_a_deleted_contexts_workflow_ends(temporal_server: RunningServer) -> None:
    """``delete_context`` on a TemporalEngine ends the workflow of each context
    it deleted; a context whose workflow never started needs nothing."""
    from temporalio.client import WorkflowExecutionStatus

    from turnfsm.temporal import TemporalEngine, TemporalWorker, workflow_id

    async def go() -> None:
        client = await Client.connect(temporal_server.address)
        store, queue = MemoryStore(), _queue()
        llm = ScriptedLLM([{"text": "hi"}])
        async with (
            TemporalWorker(client, store=store, llm=llm, task_queue=queue),
            TemporalEngine(client, store=store, task_queue=queue) as engine,
        ):
            ran = await engine.create_context()
            await engine.send(ran, "hello")
            handle = client.get_workflow_handle(workflow_id(ran))
            assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
            assert await engine.delete_context(ran) == [ran]
            with anyio.fail_after(10):
                await handle.result()  # it ends
            assert (await handle.describe()).status is WorkflowExecutionStatus.COMPLETED
            never = await engine.create_context()
            assert await engine.delete_context(never) == [never]

    anyio.run(go)


@pytest.mark.temporal  # seconds: with -m temporal (.ci/run)
def test_a_call_right_after_the_store_shows_rest_is_taken(temporal_server: RunningServer) -> None:
    """The store shows a context at rest a moment before its workflow has
    ended the call (its last commit is in; the workflow has yet to hear of
    it). A call made in that moment, by a client that watches the store or
    the stream, runs: it is not refused as busy."""
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    async def go() -> list[str]:
        client = await Client.connect(temporal_server.address)
        store, queue = MemoryStore(), _queue()
        rounds = 4
        llm = ScriptedLLM([{"text": f"answer {i}"} for i in range(rounds + 1)])
        refused: list[str] = []
        async with (
            TemporalWorker(client, store=store, llm=llm, task_queue=queue),
            TemporalEngine(client, store=store, task_queue=queue) as engine,
        ):
            cid = await engine.create_context()
            async with anyio.create_task_group() as tg:
                for i in range(rounds):
                    tg.start_soon(engine.send, cid, f"question {i}")
                    with anyio.fail_after(20):
                        while True:  # what a client watching the store sees
                            await anyio.sleep(0.002)
                            ctx = await store.load(cid)
                            if ctx.current_state == "Idle" and len(ctx.history()) == 2 * i + 2:
                                break
            try:
                await engine.send(cid, "last")
            except ContextBusy as exc:
                refused.append(str(exc))
            history = [n.message.text for n in (await engine.get_context(cid)).history()]
        assert history[-1] == f"answer {rounds}"
        return refused

    assert anyio.run(go) == []


def test_a_resent_conversation_is_laid_over_the_branch_as_in_process(
    temporal_server: RunningServer,
) -> None:
    """``send(..., context=...)`` (what ``/v1/chat/completions`` does with a
    client's whole ``messages``): on Temporal the workflow's engine lays the
    resent conversation over the branch, as the in-process engine does; an
    empty one is a plain send."""
    from turnfsm.adapters.inbound import InboundMessage
    from turnfsm.model import Role
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    resent = [
        InboundMessage(role=Role.USER, content="my name is Ada", message_id="c-1"),
        InboundMessage(role=Role.ASSISTANT, content="Hello Ada", message_id="c-1-response"),
    ]
    answers = [{"text": "you are Ada"}, {"text": "still Ada"}, {"text": "plain answer"}]

    async def run(engine: Engine) -> list[str]:
        cid = await engine.create_context()
        turn = await engine.send(cid, "who am I?", context=resent)
        assert turn.state is State.IDLE
        await engine.send(cid, "and now?", context=resent)  # resent again: nothing doubled
        await engine.send(cid, "plain", context=[])
        ctx = await engine.get_context(cid)
        return [f"{n.message.role}: {n.message.text}" for n in ctx.history()]

    async def on_temporal() -> list[str]:
        client = await Client.connect(temporal_server.address)
        store, queue = MemoryStore(), _queue()
        async with (
            TemporalWorker(client, store=store, llm=ScriptedLLM(answers), task_queue=queue),
            TemporalEngine(client, store=store, task_queue=queue) as engine,
        ):
            with pytest.raises(InvalidInput) as info:
                await engine.send(await engine.create_context(), "x", context=["not one"])  # type: ignore[list-item]
            assert info.value.where == "context[0]"
            return await run(engine)

    async def in_process() -> list[str]:
        async with Engine(llm=ScriptedLLM(answers)) as engine:
            return await run(engine)

    there = anyio.run(on_temporal)
    assert there == anyio.run(in_process)
    assert there[:2] == ["user: my name is Ada", "assistant: Hello Ada"]
    assert there.count("user: my name is Ada") == 1 and there[-1] == "assistant: plain answer"
