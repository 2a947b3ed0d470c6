"""``finish`` on Temporal: the LLM summary of a sub-context is made by the
parent's workflow (the client has no LLM), and is read by nobody but the
parent: it rings nothing on the child's stream."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from temporal.devserver import DevServer

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.client import Client

from turnfsm import MemoryStore, State
from turnfsm.engine import LLMSummarizer
from turnfsm.errors import ContextNotFound, SubContextError
from turnfsm.storage._logtypes import LogNote
from turnfsm.testing import ScriptedLLM


class _Log:
    """An event log that keeps what the workers give it: rows (a row already
    kept is left as it is, as the event log does) and rung notes."""

    shared = True
    rings = True

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, str]] = []
        self.notes: list[LogNote] = []

    async def open(self) -> None:
        return None

    async def add(self, rows: Sequence[Any], notes: Sequence[LogNote]) -> None:
        kept = {(c, s) for c, s, _ in self.rows}
        self.rows += [(r[0], r[1], r[2]) for r in rows if (r[0], r[1]) not in kept]
        self.notes += notes

    async def after(self, context_id: str, after: int, upto: int | None = None) -> list[Any]:
        return []


def test_finish_with_the_llm_summary_runs_in_the_parents_workflow(
    temporal_server: DevServer,
) -> None:
    from turnfsm.temporal import TemporalEngine, TemporalWorker

    store, log = MemoryStore(), _Log()
    queue = f"q-{uuid.uuid4().hex[:10]}"
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
        [s for c, s, _ in log.rows if c == kept_id]
        + [n.seq for n in log.notes if n.event is not None and n.context_id == kept_id]
    )
    assert seqs == list(range(1, last + 1))
