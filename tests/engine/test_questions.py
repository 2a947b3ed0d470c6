"""Questions: the built-in question tool, ``Engine.answer`` and how a question
waits in ``AwaitingToolApproval`` (README.md, "Questions").

End to end with ``ScriptedLLM``, on a memory store and a real SQLite file; each
refused call; supersession, cancel, denial; and a context resting on a question
reloaded by a fresh engine on the same SQLite file.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import kit
import pytest
from canonical import ALR, ATA, EXT, IDLE, PLR, PUM

from turnfsm import (
    ApprovalStatus,
    Engine,
    IllegalTransition,
    InvalidInput,
    Question,
    QuestionAsked,
    State,
    StopReason,
    ToolApprovalRequested,
    ask_user,
    question_tool,
    records,
    tool,
)
from turnfsm.errors import (
    AnswerNotAChoice,
    NotAQuestion,
    QuestionNeedsAnswer,
    ToolCallNotPending,
    ToolDefinitionError,
    UnknownToolCall,
)
from turnfsm.events import ToolResult
from turnfsm.records import MessageType
from turnfsm.storage import SQLiteStore
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

pytestmark = pytest.mark.anyio


@tool(approval="required")
def send_email(to: str) -> dict[str, Any]:
    """Send an email."""
    return {"sent": to}


@tool
def lookup(who: str) -> str:
    """Look someone up."""
    return f"{who}@example.com"


make_engine = functools.partial(kit.make_engine, tools=[ask_user, send_email, lookup])


def ask(cid: str, question: str, choices: list[str] | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"question": question}
    if choices is not None:
        args["choices"] = choices
    return {"id": cid, "name": "ask_user", "arguments": args}


ASK_CITY = {"tool_calls": [ask("q1", "Which city?")]}
DONE = {"text": "Done."}


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return None if request.param == "memory" else SQLiteStore(tmp_path / "q.db")


async def _results(engine: Engine, cid: str) -> dict[str, Any]:
    ctx = await engine.get_context(cid)
    return {
        n.message.tool_result.request_id: n.message.tool_result
        for n in ctx.history()
        if n.message.tool_result is not None
    }


# --------------------------------------------------------------------------- the tool


def test_ask_user_offers_question_and_choices() -> None:
    fn = ask_user.definition()["function"]
    assert fn["name"] == "ask_user"
    assert set(fn["parameters"]["properties"]) == {"question", "choices"}
    assert fn["parameters"]["required"] == ["question"]


def test_question_tool_takes_a_name_and_a_description() -> None:
    t = question_tool("clarify", "Ask when unsure.")
    assert (t.name, t.description) == ("clarify", "Ask when unsure.")
    assert t.parameters == ask_user.parameters
    with pytest.raises(ToolDefinitionError, match="not a name"):
        question_tool("not a name")
    with pytest.raises(ToolDefinitionError, match="description"):
        question_tool("ok", description=3)  # type: ignore[arg-type]


async def test_the_tool_is_offered_only_when_added() -> None:
    without = kit.make_engine([DONE], tools=[lookup])
    with_it = make_engine([DONE])
    for made in (without, with_it):
        async with made.engine as engine:
            cid = await engine.create_context()
            await engine.send(cid, "hi")
    offered = [[t["function"]["name"] for t in m.llm.requests[0].tools] for m in (without, with_it)]
    assert offered == [["lookup"], ["ask_user", "send_email", "lookup"]]


# --------------------------------------------------------------------------- end to end


async def test_a_question_waits_then_the_answer_goes_to_the_model(store: Any) -> None:
    made = make_engine([ASK_CITY, {"text": "Paris it is."}], store=store)
    async with made.engine as engine:
        cid = await engine.create_context()
        seen = engine.subscribe(cid)
        turn = await engine.send(cid, "Plan my trip")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert turn.stop_reason is StopReason.AWAITING_APPROVAL
        assert turn.questions == (Question("q1", "ask_user", "Which city?", ()),)
        assert [c.id for c in turn.pending_tool_calls] == ["q1"]
        assert turn.messages[-1].message_type is MessageType.QUESTION
        events = seen.drain()
        asked = [e for e in events if isinstance(e, QuestionAsked)]
        assert [(e.call_id, e.question, e.choices) for e in asked] == [("q1", "Which city?", [])]
        assert not [e for e in events if isinstance(e, ToolApprovalRequested)]

        turn = await engine.answer(cid, "q1", "Paris")
        assert turn.state is State.IDLE
        assert turn.text == "Paris it is."
        assert turn.questions == ()
        assert turn.states == (EXT, ALR, PLR, IDLE)
        # the model saw the answer as the call's result
        sent = made.llm.requests[1].messages
        assert sent[-1] == {"role": "tool", "tool_call_id": "q1", "content": "Paris"}
        results = await _results(engine, cid)
        assert results["q1"].result == "Paris" and results["q1"].success is True
        ctx = await engine.get_context(cid)
        call = ctx.history()[1].message.tool_calls[0]  # type: ignore[index]
        assert (call.approval_status, call.decided_by) == (ApprovalStatus.APPROVED, "human")
        assert ctx.history()[1].message.message_type is MessageType.QUESTION
        assert await engine.trace(cid) == [IDLE, PUM, ALR, PLR, ATA, EXT, ALR, PLR, IDLE]
        await seen.aclose()


async def test_the_question_waits_even_when_every_tool_is_auto() -> None:
    auto_only = kit.make_engine([ASK_CITY, DONE], tools=[ask_user, lookup])
    async with auto_only.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert [q.call_id for q in turn.questions] == ["q1"]


async def test_choices_are_binding(store: Any) -> None:
    made = make_engine(
        [{"tool_calls": [ask("q1", "Window or aisle?", ["window", "aisle"])]}, DONE],
        store=store,
    )
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Book a seat")
        assert turn.questions[0].choices == ("window", "aisle")
        before = await engine.get_context(cid)
        with pytest.raises(AnswerNotAChoice) as info:
            await engine.answer(cid, "q1", "Window")  # exact match only
        assert info.value.choices == ("window", "aisle")
        assert "'window', 'aisle'" in str(info.value)
        assert records.to_python(
            (await engine.get_context(cid)), mode="python"
        ) == records.to_python(before, mode="python")
        turn = await engine.answer(cid, "q1", "aisle")
        assert turn.state is State.IDLE
        assert (await _results(engine, cid))["q1"].result == "aisle"


async def test_a_question_mixed_with_an_approval(store: Any) -> None:
    answer = {
        "text": "Let me check.",
        "tool_calls": [
            {"id": "e1", "name": "send_email", "arguments": {"to": "ann"}},
            ask("q1", "Subject?"),
            {"id": "l1", "name": "lookup", "arguments": {"who": "ann"}},
        ],
    }
    made = make_engine([answer, DONE], store=store)
    async with made.engine as engine:
        cid = await engine.create_context()
        seen = engine.subscribe(cid)
        turn = await engine.send(cid, "Email Ann")
        assert [c.id for c in turn.pending_tool_calls] == ["e1", "q1"]
        assert [q.call_id for q in turn.questions] == ["q1"]
        assert turn.messages[-1].message_type is MessageType.TOOL_CALL  # a mix stays ToolCall
        kinds = [type(e).__name__ for e in seen.drain()]
        assert kinds[-3:] == ["ToolApprovalRequested", "QuestionAsked", "TurnCompleted"]

        with pytest.raises(QuestionNeedsAnswer, match=r"engine\.answer"):
            await engine.approve(cid, ["e1", "q1"])  # refused whole: nothing changed
        assert [c.id for c in (await engine.get_context(cid)).pending_tool_calls()] == [
            "e1",
            "q1",
        ]

        turn = await engine.answer(cid, "q1", "Hello")  # the approval still waits
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert turn.states == ()
        assert [c.id for c in turn.pending_tool_calls] == ["e1"]
        assert turn.questions == ()
        assert [m.tool_result.request_id for m in turn.messages if m.tool_result] == ["q1"]
        events = seen.drain()
        assert [(type(e).__name__, getattr(e, "call_id", None)) for e in events] == [
            ("ToolResult", "q1")
        ]
        with pytest.raises(ToolCallNotPending, match="already answered"):
            await engine.answer(cid, "q1", "again")

        turn = await engine.approve(cid, "e1")
        assert turn.state is State.IDLE
        results = await _results(engine, cid)
        assert {k: r.result for k, r in results.items()} == {
            "q1": "Hello",
            "e1": {"sent": "ann"},
            "l1": "ann@example.com",
        }
        # the model got one result per call
        tool_msgs = [m for m in made.llm.requests[1].messages if m["role"] == "tool"]
        assert sorted(m["tool_call_id"] for m in tool_msgs) == ["e1", "l1", "q1"]
        await seen.aclose()


async def test_answering_last_runs_the_approved_calls() -> None:
    answer = {
        "tool_calls": [
            {"id": "e1", "name": "send_email", "arguments": {"to": "ann"}},
            ask("q1", "Subject?"),
        ]
    }
    made = make_engine([answer, DONE])
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "Email Ann")
        turn = await engine.approve(cid, "e1")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert turn.questions[0].call_id == "q1"
        turn = await engine.answer(cid, "q1", "Hi")
        assert turn.states == (EXT, ALR, PLR, IDLE)
        results = await _results(engine, cid)
        assert results["e1"].result == {"sent": "ann"} and results["q1"].result == "Hi"


async def test_two_questions_in_one_answer() -> None:
    made = make_engine([{"tool_calls": [ask("q1", "A?"), ask("q2", "B?", ["x", "y"])]}, DONE])
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
        assert [(q.call_id, q.choices) for q in turn.questions] == [("q1", ()), ("q2", ("x", "y"))]
        turn = await engine.answer(cid, "q2", "y")
        assert [q.call_id for q in turn.questions] == ["q1"]
        turn = await engine.answer(cid, "q1", "a")
        assert turn.state is State.IDLE


async def test_deny_a_question_tells_the_model_the_user_declined() -> None:
    made = make_engine([ASK_CITY, {"tool_calls": [ask("q2", "Why?")]}, DONE])
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "go")
        turn = await engine.deny(cid, "q1")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        results = await _results(engine, cid)
        assert results["q1"].success is False
        assert results["q1"].result == {
            "error": "denied: the user declined to answer",
            "status": "denied",
        }
        await engine.deny(cid, "q2", reason="not now")
        assert (await _results(engine, cid))["q2"].result["error"] == "denied: not now"


async def test_a_new_message_supersedes_a_waiting_question() -> None:
    made = make_engine([ASK_CITY, DONE])
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "go")
        turn = await engine.send(cid, "never mind")
        assert turn.state is State.IDLE
        result = (await _results(engine, cid))["q1"]
        assert result.success is False and result.result["status"] == "superseded"
        with pytest.raises(ToolCallNotPending):
            await engine.answer(cid, "q1", "Paris")


async def test_cancel_closes_a_waiting_question() -> None:
    made = make_engine([ASK_CITY])
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "go")
        turn = await engine.cancel(cid)
        assert turn.state is State.IDLE
        assert (await _results(engine, cid))["q1"].result["status"] == "cancelled"


async def test_a_malformed_question_is_answered_with_an_error_not_asked() -> None:
    bad = {"tool_calls": [{"id": "q1", "name": "ask_user", "arguments": {"question": ""}}]}
    made = make_engine([bad, DONE])
    async with made.engine as engine:
        cid = await engine.create_context()
        seen = engine.subscribe(cid)
        turn = await engine.send(cid, "go")
        assert turn.state is State.IDLE
        assert not [e for e in seen.drain() if isinstance(e, QuestionAsked)]
        result = (await _results(engine, cid))["q1"]
        assert result.success is False
        assert "invalid arguments for tool 'ask_user'" in result.result["error"]
        ctx = await engine.get_context(cid)
        assert ctx.history()[1].message.message_type is MessageType.TOOL_CALL
        await seen.aclose()


async def test_answer_emits_the_result_event() -> None:
    made = make_engine([ASK_CITY, DONE])
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "go")
        async with engine.subscribe(cid) as seen:
            await engine.answer(cid, "q1", "Rome")
            events = seen.drain()
        results = [e for e in events if isinstance(e, ToolResult)]
        assert [(e.call_id, e.success, e.result) for e in results] == [("q1", True, "Rome")]


# --------------------------------------------------------------------------- refusals


async def _resting_on_question(store: Any = None) -> tuple[kit.Made, str]:
    answer = {
        "tool_calls": [
            {"id": "e1", "name": "send_email", "arguments": {"to": "ann"}},
            ask("q1", "Subject?", ["hi", "hello"]),
        ]
    }
    made = make_engine([answer, DONE], store=store)
    cid = await made.engine.create_context()
    await made.engine.send(cid, "go")
    return made, cid


@pytest.mark.parametrize(
    ("call", "error", "where"),
    [
        (lambda e, c: e.answer(c, "q1", 5), InvalidInput, "text"),
        (lambda e, c: e.answer(c, "q1", ""), InvalidInput, "text"),
        (lambda e, c: e.answer(c, "q1", None), InvalidInput, "text"),
        (lambda e, c: e.answer(c, "q1", "\ud800"), InvalidInput, "text"),
        (lambda e, c: e.answer(c, 5, "hi"), InvalidInput, "call_id"),
        (lambda e, c: e.answer(c, "", "hi"), InvalidInput, "call_id"),
        (lambda e, c: e.answer(c, ["q1"], "hi"), InvalidInput, "call_id"),
        (lambda e, c: e.answer(None, "q1", "hi"), InvalidInput, "context_id"),
        (lambda e, c: e.answer(c, "nope", "hi"), UnknownToolCall, None),
        (lambda e, c: e.answer(c, "e1", "hi"), NotAQuestion, None),
        (lambda e, c: e.answer(c, "q1", "bye"), AnswerNotAChoice, None),
        (lambda e, c: e.approve(c, "q1"), QuestionNeedsAnswer, None),
    ],
)
async def test_refused_answers_change_nothing(
    call: Any, error: type[Exception], where: str | None, tmp_path: Path
) -> None:
    made, cid = await _resting_on_question(SQLiteStore(tmp_path / "r.db"))
    async with made.engine as engine:
        before = records.to_python((await engine.get_context(cid)), mode="python")
        with pytest.raises(error) as info:
            await call(engine, cid)
        if where is not None:
            assert isinstance(info.value, InvalidInput) and info.value.where == where
        assert records.to_python((await engine.get_context(cid)), mode="python") == before
        assert [q.call_id for q in (await engine.answer(cid, "q1", "hi")).questions] == []


async def test_answer_in_idle_is_refused() -> None:
    made = make_engine([ASK_CITY, DONE])
    async with made.engine as engine:
        cid = await engine.create_context()
        with pytest.raises(UnknownToolCall):
            await engine.answer(cid, "q1", "x")
        await engine.send(cid, "go")
        await engine.answer(cid, "q1", "x")
        with pytest.raises(ToolCallNotPending):
            await engine.answer(cid, "q1", "x")


async def test_not_a_question_error_names_the_tool() -> None:
    made, cid = await _resting_on_question()
    async with made.engine as engine:
        with pytest.raises(NotAQuestion) as info:
            await engine.answer(cid, "e1", "yes")
        assert info.value.tool_name == "send_email"
        assert "approve or deny" in str(info.value)
        # the error tree: every question error is a ToolCallError
        from turnfsm import ToolCallError

        assert issubclass(NotAQuestion, ToolCallError)
        assert issubclass(AnswerNotAChoice, ToolCallError)
        assert issubclass(QuestionNeedsAnswer, ToolCallError)
        assert not issubclass(IllegalTransition, ToolCallError)


# --------------------------------------------------------------------------- crash and resume


async def test_a_question_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    first = Engine(
        llm=ScriptedLLM([ASK_CITY]),
        tools=[ask_user],
        store=SQLiteStore(db),
        clock=FakeClock(),
        ids=SequentialIds(),
    )
    async with first:
        cid = await first.create_context()
        await first.send(cid, "Plan my trip")
    # a fresh process: a new engine on the same file
    llm = ScriptedLLM([{"text": "Paris it is."}])
    async with Engine(llm=llm, tools=[ask_user], store=SQLiteStore(db)) as second:
        ctx = await second.get_context(cid)
        assert ctx.current_state == "AwaitingToolApproval"
        turn = await second.resume(cid)
        assert turn.state is State.AWAITING_TOOL_APPROVAL and turn.states == ()
        assert turn.questions == (Question("q1", "ask_user", "Which city?", ()),)
        recovered = await second.recover()
        assert cid not in recovered.resumed  # resting: nothing to resume
        turn = await second.answer(cid, "q1", "Paris")
        assert turn.state is State.IDLE and turn.text == "Paris it is."
    async with Engine(store=SQLiteStore(db)) as third:
        ctx = await third.get_context(cid)
        assert ctx.current_state == "Idle"
        results = [n.message.tool_result for n in ctx.history() if n.message.tool_result]
        assert [(r.request_id, r.result) for r in results] == [("q1", "Paris")]


async def test_an_answer_is_committed_before_it_returns(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    made, cid = await _resting_on_question(SQLiteStore(db))
    async with made.engine as engine:
        await engine.answer(cid, "q1", "hello")  # e1 still waits
    async with Engine(tools=[ask_user, send_email], store=SQLiteStore(db)) as fresh:
        ctx = await fresh.get_context(cid)
        assert [c.id for c in ctx.pending_tool_calls()] == ["e1"]
        results = [n.message.tool_result for n in ctx.history() if n.message.tool_result]
        assert [(r.request_id, r.result) for r in results] == [("q1", "hello")]


# --------------------------------------------------------------------------- odds and ends


def test_question_asked_round_trips_through_the_event_adapter() -> None:
    from turnfsm.events import EVENT_ADAPTER

    ev = QuestionAsked(
        context_id="c",
        seq=3,
        timestamp=1.0,
        call_id="q1",
        tool_name="ask_user",
        question="Which city?",
        choices=["Paris", "Rome"],
    )
    data = EVENT_ADAPTER.dump_python(ev, mode="json")
    assert data["kind"] == "QuestionAsked"
    assert EVENT_ADAPTER.validate_python(data) == ev


async def test_no_policy_decides_a_question() -> None:
    """A question tool built with an auto policy still waits for the human."""
    from turnfsm.tools import QuestionTool

    auto = QuestionTool(
        name="ask_user",
        description="",
        parameters=ask_user.parameters,
        fn=None,
        bind=ask_user._bind,
        approval="auto",
    )
    made = kit.make_engine([ASK_CITY, DONE], tools=[auto])
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        ctx = await engine.get_context(cid)
        call = ctx.pending_tool_calls()[0]
        assert (call.approval_status, call.decided_by) == (ApprovalStatus.PENDING, None)
        assert [q.call_id for q in turn.questions] == ["q1"]


async def test_a_question_at_the_iteration_limit_is_not_asked() -> None:
    made = make_engine([ASK_CITY], max_iterations=1)
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
        assert turn.state is State.IDLE and turn.stop_reason is StopReason.MAX_ITERATIONS
        assert turn.questions == ()
        assert (await _results(engine, cid))["q1"].result["status"] == "max_iterations"


async def test_a_question_tool_under_another_name() -> None:
    clarify = question_tool("clarify", "Ask when the request is unclear.")
    llm = ScriptedLLM(
        [{"tool_calls": [{"id": "c1", "name": "clarify", "arguments": {"question": "Which?"}}]}]
    )
    async with Engine(llm=llm, tools=[clarify]) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "do it")
        assert turn.questions == (Question("c1", "clarify", "Which?", ()),)
        assert llm.requests[0].tools[0]["function"]["description"] == (
            "Ask when the request is unclear."
        )
