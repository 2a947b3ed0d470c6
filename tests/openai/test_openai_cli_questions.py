"""``turnfsm chat --ask-user``: the model's questions asked and answered on the
terminal (turnfsm/cli/_chat.py), against the loopback server, in-process."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from openai_loopback import LoopbackServer, Reply
from openai_samples import text_stream, tool_call_stream
from test_openai_cli_chat import _env, loop_args, parse  # noqa: F401 - the fixture

from turnfsm import Engine, SQLiteStore, State, ask_user
from turnfsm.cli._chat import run_chat
from turnfsm.testing import ScriptedLLM

pytestmark = pytest.mark.anyio


class _Terminal(io.StringIO):
    """Typed lines on a terminal."""

    def isatty(self) -> bool:
        return True


async def chat(*argv: str, stdin: io.StringIO) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await run_chat(parse(*argv), stdin=stdin, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _ask(question: str, choices: list[str] | None = None) -> Reply:
    args: dict[str, Any] = {"question": question}
    if choices is not None:
        args["choices"] = choices
    return Reply(events=tool_call_stream([("call_q", "ask_user", args)]))


def _sent_answer(loopback: LoopbackServer) -> Any:
    message = loopback.bodies[1]["messages"][-1]
    assert message["role"] == "tool" and message["tool_call_id"] == "call_q"
    return message["content"]


async def test_a_question_is_asked_on_the_terminal(loopback: LoopbackServer) -> None:
    loopback.script(_ask("Which city?"), Reply(events=text_stream(["Paris it is."])))
    code, out, err = await chat(
        *loop_args(loopback, "--ask-user", "-m", "Plan a trip"), stdin=_Terminal("Paris\n")
    )
    assert code == 0, err
    assert "question> Which city?" in err and "answer> " in err
    assert "answered 'Which city?': Paris" in out
    assert "tool call> ask_user" not in out  # shown as the question, not as a call
    assert "assistant> Paris it is." in out
    assert _sent_answer(loopback) == "Paris"
    offered = [t["function"]["name"] for t in loopback.bodies[0]["tools"]]
    assert offered[-1] == "ask_user"


async def test_choices_by_number_text_or_case_and_a_wrong_pick_asks_again(
    loopback: LoopbackServer,
) -> None:
    loopback.script(
        _ask("Window or aisle?", ["window", "aisle"]), Reply(events=text_stream(["Booked."]))
    )
    code, _, err = await chat(
        *loop_args(loopback, "--ask-user", "-m", "Book a seat"),
        stdin=_Terminal("middle\n2\n"),
    )
    assert code == 0, err
    assert "  1. window\n  2. aisle\n" in err
    assert "pick one of: window, aisle (1 to 2), or an empty line" in err
    assert _sent_answer(loopback) == "aisle"


async def test_a_choice_typed_in_another_case(loopback: LoopbackServer) -> None:
    loopback.script(
        _ask("Window or aisle?", ["window", "aisle"]), Reply(events=text_stream(["Ok"]))
    )
    code, _, err = await chat(
        *loop_args(loopback, "--ask-user", "-m", "Book"), stdin=_Terminal("WINDOW\n")
    )
    assert code == 0, err
    assert _sent_answer(loopback) == "window"


async def test_an_empty_line_declines(loopback: LoopbackServer) -> None:
    loopback.script(_ask("Budget?"), Reply(events=text_stream(["Fine."])))
    code, out, _ = await chat(
        *loop_args(loopback, "--ask-user", "-m", "Dinner?"), stdin=_Terminal("\n")
    )
    assert code == 0
    assert "declined 'Budget?'" in out
    result = json.loads(_sent_answer(loopback))
    assert result == {"error": "denied: the user declined to answer", "status": "denied"}


async def test_without_a_terminal_the_question_is_denied(loopback: LoopbackServer) -> None:
    loopback.script(_ask("Which city?"), Reply(events=text_stream(["I'll pick Rome."])))
    code, out, err = await chat(
        *loop_args(loopback, "--ask-user", "--json", "-m", "Plan a trip"),
        stdin=io.StringIO("Paris\n"),  # not a terminal: never read for the question
    )
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["state"] == "Idle" and doc["text"] == "I'll pick Rome."
    result = json.loads(_sent_answer(loopback))
    assert result["status"] == "denied"
    assert "stdin is not a terminal" in result["error"]


async def test_approve_ask_reads_the_answer_from_a_pipe(loopback: LoopbackServer) -> None:
    loopback.script(_ask("Which city?"), Reply(events=text_stream(["Oslo."])))
    code, out, err = await chat(
        *loop_args(loopback, "--ask-user", "--approve", "ask", "--json", "-m", "Trip"),
        stdin=io.StringIO("Oslo\n"),
    )
    assert code == 0
    assert "question> Which city?" in err
    assert json.loads(out)["text"] == "Oslo."  # stdout holds only the JSON
    assert _sent_answer(loopback) == "Oslo"


async def test_the_end_of_input_declines(loopback: LoopbackServer) -> None:
    loopback.script(_ask("Which city?"), Reply(events=text_stream(["Ok."])))
    code, _, _ = await chat(*loop_args(loopback, "--ask-user", "-m", "Trip"), stdin=_Terminal(""))
    assert code == 0
    assert "no answer (the input ended)" in json.loads(_sent_answer(loopback))["error"]


async def test_ask_user_is_offered_only_with_the_option(loopback: LoopbackServer) -> None:
    loopback.script(Reply(events=text_stream(["Hi."])))
    code, _, _ = await chat(*loop_args(loopback, "-m", "Hi"), stdin=io.StringIO(""))
    assert code == 0
    assert "ask_user" not in [t["function"]["name"] for t in loopback.bodies[0]["tools"]]


async def test_a_stored_question_is_asked_when_the_chat_resumes(
    loopback: LoopbackServer, tmp_path: Path
) -> None:
    db = tmp_path / "chat.db"
    asked = {"id": "call_q", "name": "ask_user", "arguments": {"question": "Which city?"}}
    # another process left the conversation resting on the question
    async with Engine(
        llm=ScriptedLLM([{"tool_calls": [asked]}]), tools=[ask_user], store=SQLiteStore(db)
    ) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Plan a trip")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
    loopback.script(Reply(events=text_stream(["Lisbon, then."])))
    args = ["--base-url", loopback.url, "--store", f"sqlite:///{db}", "--ask-user"]
    code, out, err = await chat(*args, "--context", cid, stdin=_Terminal("Lisbon\n/exit\n"))
    assert code == 0, err
    assert "question> Which city?" in err
    assert "assistant> Lisbon, then." in out
    assert loopback.bodies[0]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_q",
        "content": "Lisbon",
    }
