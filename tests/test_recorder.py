"""A recorded conversation replays to the same trace and messages."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from turnfsm import Engine, State, records, tool
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.replay import Recorder, replay
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds


@tool(approval="required")
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "temp_c": 15}


@tool
def flaky(x: int) -> int:
    """Fails for negative numbers."""
    if x < 0:
        raise ValueError("negative")
    return x


def _shape(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must match between a live run and its replay (ids and times aside)."""
    out = []
    for node in messages:
        m = node["message"]
        calls = [
            (c["id"], c["tool_name"], c["arguments"], c["approval_status"])
            for c in m["tool_calls"] or []
        ]
        out.append(
            (
                m["role"],
                m["content"],
                calls,
                m["tool_result"],
                m["thinking"],
                m["metadata"]["cancelled"],
            )
        )
    return out


async def _live(recorder: Recorder, drive: Any) -> tuple[dict[str, Any], list[Any]]:
    async with Engine(
        llm=recorder.llm, tools=recorder.tools, clock=FakeClock(), ids=SequentialIds()
    ) as engine:
        cid = await recorder.start(engine, system_prompt="Be brief.")
        await drive(recorder)
        script = await recorder.script()
        ctx = await engine.get_context(cid)
        return script, [records.to_python(n) for n in ctx.history()]


@pytest.mark.anyio
async def test_demo_conversation_round_trips() -> None:
    async def drive(rec: Recorder) -> None:
        turn = await rec.send("What's the weather in Paris?")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        await rec.approve(turn.pending_tool_calls[0].id)
        turn = await rec.send("And the weather in Oslo?")
        await rec.deny(turn.pending_tool_calls[0].id, reason="not now")

    script, live = await _live(Recorder(DemoLLM(), tools=[get_weather]), drive)
    result = await replay(script)
    assert result.ok, result.report()
    assert result.trace == script["expect"]["trace"]
    assert _shape(result.messages) == _shape(live)


@pytest.mark.anyio
async def test_errors_thinking_and_tool_failures_round_trip() -> None:
    llm = ScriptedLLM(
        [
            {"error": {"status": 503, "retry_after": 0.25}},
            {
                "chunks": ["Let ", "me see"],
                "thinking": "use the tool",
                "tool_calls": [{"id": "c1", "name": "flaky", "arguments": {"x": -1}}],
            },
            {"chunks": ["par", "tial"], "fail_after": 1, "error": {"kind": "timeout"}},
            {
                "text": "It failed.",
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            },
        ]
    )

    async def drive(rec: Recorder) -> None:
        turn = await rec.send("go")
        assert turn.state is State.IDLE

    script, live = await _live(Recorder(llm, tools=[flaky]), drive)
    kinds = [next(iter(s)) for s in script["steps"]]
    assert kinds == ["user", "llm_error", "llm", "tool", "llm", "llm"]
    result = await replay(script)
    assert result.ok, result.report()
    assert _shape(result.messages) == _shape(live)


@pytest.mark.anyio
async def test_cancel_mid_stream_round_trips() -> None:
    async def handler(request: Any) -> dict[str, Any]:
        return {"chunks": ["one ", "two ", "three"], "cancel_after": 2}

    async def drive(rec: Recorder) -> None:
        turn = await rec.send("count")
        assert turn.stop_reason == "cancelled"

    script, live = await _live(Recorder(ScriptedLLM(handler)), drive)
    result = await replay(script)
    assert result.ok, result.report()
    assert _shape(result.messages) == _shape(live)
    assert live[-1]["message"]["metadata"]["cancelled"] is True


def test_record_command_writes_a_script_that_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the commands' entry (``turnfsm.cli.main``) in this process, no terminal
    # to ask: what is checked is the script they write and replay
    from turnfsm.cli import main

    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "rec.json"
    code = main(
        [
            "record",
            "--out",
            str(out),
            "--message",
            "What's the weather in Rome?",
            "--message",
            "thanks",
        ]
    )
    assert code == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["expect"]["final_state"] == "Idle"
    code = main(["replay", str(out)])
    assert code == 0, capsys.readouterr()


@pytest.mark.anyio
async def test_questions_round_trip() -> None:
    from turnfsm import question_tool
    from turnfsm.errors import AnswerNotAChoice

    clarify = question_tool("clarify", "Ask the user when unsure.")
    llm = ScriptedLLM(
        [
            {
                "text": "Let me ask.",
                "tool_calls": [
                    {"id": "q1", "name": "clarify", "arguments": {"question": "City?"}},
                    {"id": "w1", "name": "get_weather", "arguments": {"city": "Paris"}},
                ],
            },
            {
                "tool_calls": [
                    {
                        "id": "q2",
                        "name": "clarify",
                        "arguments": {"question": "Units?", "choices": ["C", "F"]},
                    }
                ]
            },
            {"text": "15 C in Paris."},
        ]
    )

    async def drive(rec: Recorder) -> None:
        turn = await rec.send("Weather?")
        assert [q.call_id for q in turn.questions] == ["q1"]
        await rec.answer("q1", "Paris")
        turn = await rec.approve("w1")
        assert [q.choices for q in turn.questions] == [("C", "F")]
        with pytest.raises(AnswerNotAChoice):
            await rec.answer("q2", "Kelvin")  # refused: not written down
        await rec.answer("q2", "C")

    script, live = await _live(Recorder(llm, tools=[clarify, get_weather]), drive)
    assert script["tools"][0] == {
        "name": "clarify",
        "description": "Ask the user when unsure.",
        "question": True,
    }
    inputs = [s for s in script["steps"] if "answer" in s or "approve" in s]
    assert inputs == [
        {"answer": {"id": "q1", "text": "Paris"}},
        {"approve": "w1"},
        {"answer": {"id": "q2", "text": "C"}},
    ]
    result = await replay(script)
    assert result.ok, result.report()
    assert result.trace == script["expect"]["trace"]
    assert _shape(result.messages) == _shape(live)
    answers = [
        m["message"]["tool_result"]["result"]
        for m in result.messages
        if m["message"]["tool_result"] and m["message"]["tool_result"]["request_id"] != "w1"
    ]
    assert answers == ["Paris", "C"]


# ---------------------------------------------------------------------- sub-task tools


@tool(approval="required")
def publish(text: str) -> str:
    """Publish a note."""
    return f"published {text}"


@pytest.mark.anyio
@pytest.mark.parametrize("summarizer", ["llm", "final_answer"])
async def test_a_subtask_tool_and_its_child_round_trip(summarizer: str) -> None:
    """The child's answers, its tool's outcome, its approval through the parent
    and the summary are recorded where they happen; the script replays to the
    same trace and messages."""
    from turnfsm import FinalAnswer, subtask

    helper = subtask(
        "helper",
        "Hand a task to a helper.",
        system_prompt="You publish notes.",
        tools=["publish"],
        summarizer=FinalAnswer() if summarizer == "final_answer" else None,
        keep=True,
    )
    answers: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "h1", "name": "helper", "arguments": {"task": "Publish hi"}}]},
        {"tool_calls": [{"id": "p1", "name": "publish", "arguments": {"text": "hi"}}]},
        {"text": "Published 'hi'."},
    ]
    if summarizer == "llm":
        answers.append({"text": "The helper published the note."})
    answers.append({"text": "Done: the note is out."})

    async def drive(rec: Recorder) -> None:
        turn = await rec.send("Publish the note")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert [c.id for c in turn.pending_tool_calls] == ["p1"]  # the child's call
        turn = await rec.approve("p1")
        assert turn.state is State.IDLE

    script, live = await _live(Recorder(ScriptedLLM(answers), tools=[helper, publish]), drive)
    (declared,) = [t for t in script["tools"] if t["name"] == "helper"]
    assert declared["subtask"] == {
        "system_prompt": "You publish notes.",
        "tools": ["publish"],
        "summarizer": summarizer,
        "keep": True,
    }
    assert "parameters" not in declared
    kinds = [next(iter(s)) for s in script["steps"]]
    # no tool step for the sub-task call: its child's steps stand where it would be
    assert kinds == ["user", "llm", "llm", "approve", "tool", "llm"] + (
        ["llm"] if summarizer == "llm" else []
    ) + ["llm"]
    result = await replay(script)
    assert result.ok, result.report()
    assert result.trace == script["expect"]["trace"]
    assert _shape(result.messages) == _shape(live)
    summary = live[-2]["message"]["tool_result"]
    assert summary["result"] == (
        "The helper published the note." if summarizer == "llm" else "Published 'hi'."
    )


@pytest.mark.anyio
async def test_a_subtask_summarised_by_a_function_is_refused_by_name() -> None:
    from turnfsm import subtask
    from turnfsm.errors import ToolDefinitionError

    helper = subtask("helper", "Hand a task over.", summarizer=lambda child: "done")
    with pytest.raises(ToolDefinitionError, match=r"'helper'.*cannot be recorded"):
        Recorder(ScriptedLLM([]), tools=[helper])
