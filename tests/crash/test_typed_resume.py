"""A process killed between a typed answer's commit and its validation: the
resume validates the stored answer and calls the model no second time.

The child process runs a typed turn on a SQLite file whose store SIGKILLs the
process right after the commit that holds the answer (the context is then in
ProcessingLLMResponse); this process resumes the context with a model that
has no answer to give and counts its calls.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from turnfsm import Engine, SQLiteStore, State
from turnfsm.testing import ScriptedLLM

pytestmark = pytest.mark.anyio

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import anyio
    from turnfsm import Engine, SQLiteStore

    CITY = {
        "title": "City", "type": "object", "required": ["name", "population"],
        "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
    }

    class DiesAfterTheAnswer(SQLiteStore):
        async def commit(self, commit):
            await super().commit(commit)
            if commit.state == "ProcessingLLMResponse":
                os.kill(os.getpid(), signal.SIGKILL)

    async def main():
        from turnfsm.testing import ScriptedLLM
        llm = ScriptedLLM([{"text": sys.argv[2]}])
        async with Engine(llm=llm, store=DiesAfterTheAnswer(sys.argv[1])) as engine:
            cid = await engine.create_context(context_id="typed")
            await engine.send(cid, "The capital of France?", output_type=CITY)
        print("the process was not killed", flush=True)

    anyio.run(main)
    """
)


def _killed_after_the_answer(path: Path, answer: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), answer],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr


@pytest.mark.parametrize("valid", [True, False], ids=["valid", "invalid"])
async def test_a_resume_after_the_answers_commit_calls_no_model(
    tmp_path: Path, valid: bool
) -> None:
    path = tmp_path / "chats.db"
    answer = '{"name": "Paris", "population": 2100000}' if valid else '{"name": "Paris"}'
    _killed_after_the_answer(path, answer)
    later = [] if valid else [{"text": '{"name": "Paris", "population": 2100000}'}]
    llm = ScriptedLLM(later)
    async with Engine(llm=llm, store=SQLiteStore(path)) as engine:
        stored = await engine.get_context("typed")
        assert stored.current_state == State.PROCESSING_LLM_RESPONSE
        turn = await engine.resume("typed")
        trace = await engine.trace("typed")
    assert turn.state is State.IDLE
    assert turn.output == {"name": "Paris", "population": 2100000}
    if valid:
        assert llm.requests == []  # the stored answer was validated, not asked again
        assert turn.states == (State.IDLE,)
    else:
        assert len(llm.requests) == 1  # once: the retry the table declares
        assert turn.states == (
            State.AWAITING_LLM_RESPONSE,
            State.PROCESSING_LLM_RESPONSE,
            State.IDLE,
        )
    head = ["Idle", "ProcessingUserMessage", "AwaitingLLMResponse", "ProcessingLLMResponse"]
    assert trace == [*head, *turn.states]
