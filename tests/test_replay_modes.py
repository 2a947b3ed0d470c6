"""Modes in replay scripts (docs/script-format.md, "Modes"): the ``modes`` key,
the checks made before anything runs, the ``mode`` and message ``type``
checks of ``expect`` steps, and a recorded session with modes that replays."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from turnfsm import Engine, Mode, State, tool
from turnfsm.records import MessageType
from turnfsm.replay import Recorder, ScriptError, parse_script, replay, run_script
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

SCRIPT: dict[str, Any] = json.loads(
    (Path(__file__).parent / "scripts" / "plan_then_act.json").read_text()
)


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ScriptError) as info:
        parse_script(data)
    return info.value.problems


def test_modes_are_parsed_into_the_engine_modes() -> None:
    script = parse_script(SCRIPT)
    assert [m.name for m in script.modes] == ["plan", "act"]
    plan = script.modes[0]
    assert plan.tools == ("read_file",)
    assert plan.answer_type is MessageType.PLAN
    assert dict(plan.approval) == {"read_file": "auto"}


def test_a_script_without_modes_has_none() -> None:
    data = {k: v for k, v in SCRIPT.items() if k != "modes"}
    data["config"] = {}
    data["steps"] = [{"user": "hi"}, {"llm": {"text": "hello"}}]
    assert parse_script(data).modes == ()


def test_mode_problems_are_reported_with_their_paths() -> None:
    data = copy.deepcopy(SCRIPT)
    data["modes"] = [
        {"name": "plan", "tools": ["rm"], "answer_type": "Plan"},
        {"name": "plan"},
        {"name": "act", "tools": ["read_file"], "approval": {"write_file": "required"}},
        {"name": "review", "answer_type": "ToolCall"},
        {"name": "x", "approval": {"read_file": "maybe"}},
    ]
    data["steps"].append({"expect": {"mode": "nope"}})
    found = dict(_problems(data))
    assert "no tool 'rm'" in found["$.modes[0].tools[0]"]
    assert "defined twice" in found["$.modes[1].name"]
    assert "does not offer 'write_file'" in found["$.modes[2].approval.write_file"]
    assert "$.modes[3].answer_type" in found
    assert "$.modes[4].approval.read_file" in found
    # a name declared with a problem is not reported again where it is used
    assert "$.config.mode" not in found
    assert "$.steps[5].config.mode" not in found
    last = len(data["steps"]) - 1
    assert found[f"$.steps[{last}].expect.mode"] == (
        "unknown mode 'nope'; the script's modes: act, chat, plan"
    )


def test_modes_must_be_a_list() -> None:
    data = copy.deepcopy(SCRIPT)
    data["modes"] = {"name": "plan"}
    found = dict(_problems(data))
    assert found["$.modes"] == "must be a list of modes"


def test_wrong_type_and_mode_checks_fail_the_replay() -> None:
    data = copy.deepcopy(SCRIPT)
    data["steps"][4] = {"expect": {"mode": "act", "last_message": {"type": "Text"}}}
    result = run_script(data)
    assert not result.ok
    got = {(f.step, f.message): (f.expected, f.observed) for f in result.failures}
    assert got == {
        (4, "expect mode"): ("act", "plan"),
        (4, "expect last_message"): ({"type": "Text"}, {"type": "Plan"}),
    }


def test_the_plan_is_stored_as_a_plan_message() -> None:
    result = run_script(SCRIPT)
    assert result.ok, result.report()
    types = [m["message"]["message_type"] for m in result.messages]
    assert types[4] == "Plan"
    assert types.count("Plan") == 1
    results = [m["message"]["tool_result"] for m in result.messages if m["message"]["tool_result"]]
    refused = next(r for r in results if r["request_id"] == "call_2")
    assert refused["success"] is False
    assert "not offered in mode 'plan'" in refused["result"]["error"]


@tool(approval="required")
def read_file(path: str) -> str:
    """Read a file."""
    return "buy milk"


@tool
def write_file(path: str, text: str) -> str:
    """Write a file."""
    return "written"


@pytest.mark.anyio
async def test_a_recorded_session_with_modes_replays() -> None:
    modes = [
        Mode(
            name="plan",
            instructions="Plan only.",
            tools=["read_file"],
            approval={"read_file": "auto"},
            answer_type=MessageType.PLAN,
        ),
        Mode(name="act", approval={"write_file": "required"}),
    ]
    llm = ScriptedLLM(
        [
            {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "n"}}]},
            {"text": "1. write n"},
            {
                "tool_calls": [
                    {"id": "c2", "name": "write_file", "arguments": {"path": "n", "text": "t"}}
                ]
            },
            {"text": "done"},
        ]
    )
    recorder = Recorder(llm, tools=[read_file, write_file])
    async with Engine(
        llm=recorder.llm,
        tools=recorder.tools,
        modes=modes,
        clock=FakeClock(),
        ids=SequentialIds(),
    ) as engine:
        await recorder.start(engine, system_prompt="Edit files.", mode="plan")
        await recorder.send("change n")
        await recorder.update_config(mode="act")
        turn = await recorder.send("go")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        await recorder.approve("c2")
        script = await recorder.script()
    assert script["config"]["mode"] == "plan"
    assert [m["name"] for m in script["modes"]] == ["chat", "plan", "act"]
    result = await replay(script)
    assert result.ok, result.report()
    assert [m["message"]["message_type"] for m in result.messages].count("Plan") == 1


def test_a_question_tool_approval_cannot_be_overridden_in_a_script() -> None:
    data = copy.deepcopy(SCRIPT)
    data["tools"].append({"name": "ask_user", "question": True})
    data["modes"][1]["approval"]["ask_user"] = "auto"
    found = dict(_problems(data))
    assert found["$.modes[1].approval.ask_user"] == (
        "'ask_user' is a question tool: its calls always wait for an answer"
    )
