"""Modes (docs/architecture.md, "Modes"): a plan mode with read-only tools whose
answer is stored as a Plan, a switch to an act mode with ``update_config``,
and the act mode's approvals; through the public API, with the real engine,
``ScriptedLLM`` and real SQLite files."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import kit
import pytest
from canonical import ALR, EXT, IDLE, PF, PLR, PUM

from turnfsm import (
    ApprovalStatus,
    ChatContext,
    ContextBusy,
    Engine,
    InvalidInput,
    Mode,
    NotAtRest,
    SQLiteStore,
    State,
    tool,
)
from turnfsm.adapters.llm import LLMRequest
from turnfsm.enhancers import SystemPromptEnhancer, ToolDefinitionsEnhancer
from turnfsm.model import ChatConfig
from turnfsm.records import Branch, MessageType
from turnfsm.testing import ScriptedLLM

pytestmark = pytest.mark.anyio

# --------------------------------------------------------------------------- the workspace

FILES: dict[str, str] = {}
WRITES: list[tuple[str, str]] = []


@pytest.fixture(autouse=True)
def _workspace() -> None:
    FILES.clear()
    FILES.update({"notes.txt": "buy milk\n"})
    WRITES.clear()


@tool(approval="required")
def read_file(path: str) -> str:
    """Read a file of the workspace.

    Args:
        path: the file's name.
    """
    return FILES[path]


@tool
def list_files() -> list[str]:
    """The files of the workspace."""
    return sorted(FILES)


@tool
def write_file(path: str, text: str) -> str:
    """Write a file of the workspace.

    Args:
        path: the file's name.
        text: the new content.
    """
    WRITES.append((path, text))
    FILES[path] = text
    return "written"


TOOLS = [read_file, list_files, write_file]

PLAN = Mode(
    name="plan",
    instructions="Plan only: read what you need, then answer with a numbered plan.",
    tools=["read_file", "list_files"],
    approval={"read_file": "auto"},
    answer_type=MessageType.PLAN,
)
ACT = Mode(
    name="act",
    instructions="Carry out the plan step by step.",
    approval={"read_file": "auto", "write_file": "required"},
)
MODES = [PLAN, ACT]

SYSTEM = "You edit the user's files."


def make(answers: Any, **kwargs: Any) -> kit.Made:
    return kit.make_engine(answers, tools=TOOLS, modes=MODES, **kwargs)


def call(cid: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": arguments}


def offered(request: LLMRequest) -> list[str]:
    return [t["function"]["name"] for t in request.tools]


def system_text(request: LLMRequest) -> str:
    first = request.messages[0]
    assert first["role"] == "system"
    return str(first["content"])


PLAN_TEXT = "1. Read notes.txt.\n2. Write notes.txt with 'buy oat milk'."
PLAN_ANSWERS: list[dict[str, Any]] = [
    # the model reaches for the write tool too early: it is not offered in plan
    {
        "tool_calls": [
            call("c1", "read_file", path="notes.txt"),
            call("c2", "write_file", path="notes.txt", text="x"),
        ]
    },
    {"text": PLAN_TEXT},
]
ACT_ANSWERS: list[dict[str, Any]] = [
    {"tool_calls": [call("c3", "write_file", path="notes.txt", text="buy oat milk\n")]},
    {"text": "Done: notes.txt now says to buy oat milk."},
]


# --------------------------------------------------------------------------- plan, then act


async def test_plan_then_act() -> None:
    engine, llm, _ = make([*PLAN_ANSWERS, *ACT_ANSWERS])
    async with engine:
        cid = await engine.create_context(system_prompt=SYSTEM, mode="plan")

        # plan: read-only tools, auto-approved there; the answer is a Plan
        turn = await engine.send(cid, "Change milk to oat milk in my notes.")
        assert turn.state is State.IDLE
        assert turn.states == (PUM, ALR, PLR, EXT, ALR, PLR, IDLE)
        assert WRITES == []  # the write tool was not offered, and did not run
        plan_request = llm.requests[0]
        assert offered(plan_request) == ["read_file", "list_files"]
        assert system_text(plan_request) == (
            f'{SYSTEM}\n\n<mode name="plan">\n{PLAN.instructions}\n</mode>'
        )
        results = {m.tool_result.request_id: m.tool_result for m in turn.messages if m.tool_result}
        assert results["c1"].success and results["c1"].result == "buy milk\n"
        assert not results["c2"].success
        assert results["c2"].result == {
            "error": "tool 'write_file' is not offered in mode 'plan'; available tools: "
            "read_file, list_files",
            "status": "not_offered",
        }
        # the model saw that result in its next request
        seen = [m for m in llm.requests[1].messages if m.get("tool_call_id") == "c2"]
        assert "not offered in mode 'plan'" in seen[0]["content"]
        answer = turn.messages[-1]
        assert answer.message_type is MessageType.PLAN
        assert answer.text == PLAN_TEXT

        # the switch, at rest: a config_updated record
        config = await engine.update_config(cid, mode="act")
        assert config.mode == "act"
        steps = await engine.steps(cid)
        assert steps[-1].trigger == "config_updated"
        assert steps[-1].detail == {"mode": "act"}
        assert steps[-1].from_state == steps[-1].to_state == IDLE

        # act: every tool; the write tool now needs a human
        turn = await engine.send(cid, "Go ahead.")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert [c.id for c in turn.pending_tool_calls] == ["c3"]
        act_request = llm.requests[2]
        assert offered(act_request) == ["read_file", "list_files", "write_file"]
        assert system_text(act_request) == (
            f'{SYSTEM}\n\n<mode name="act">\n{ACT.instructions}\n</mode>'
        )
        assert "Plan only" not in system_text(act_request)
        # the plan is in the history the act mode sees, as an assistant message
        assert {"role": "assistant", "content": PLAN_TEXT} in act_request.messages
        assert WRITES == []
        turn = await engine.approve(cid, "c3")
        assert turn.state is State.IDLE
        assert WRITES == [("notes.txt", "buy oat milk\n")]
        assert turn.messages[-1].message_type is MessageType.TEXT

        ctx = await engine.get_context(cid)
    types = [n.message.message_type for n in ctx.history()]
    assert types == [
        MessageType.TEXT,  # the user
        MessageType.TOOL_CALL,
        MessageType.TOOL_RESULT,
        MessageType.TOOL_RESULT,
        MessageType.PLAN,
        MessageType.TEXT,  # the user
        MessageType.TOOL_CALL,
        MessageType.TOOL_RESULT,
        MessageType.TEXT,
    ]
    decided = {c.id: c for n in ctx.history() for c in n.message.tool_calls or ()}
    assert (decided["c1"].approval_status, decided["c1"].decided_by) == (
        ApprovalStatus.APPROVED,
        "policy",
    )
    assert (decided["c3"].approval_status, decided["c3"].decided_by) == (
        ApprovalStatus.APPROVED,
        "human",
    )
    assert ctx.config.mode == "act"


async def test_chat_mode_is_the_default_and_unchanged() -> None:
    engine, llm, _ = make([{"tool_calls": [call("c1", "read_file", path="notes.txt")]}])
    async with engine:
        assert [m.name for m in engine.modes] == ["chat", "plan", "act"]
        cid = await engine.create_context(system_prompt=SYSTEM)
        assert (await engine.get_context(cid)).config.mode == "chat"
        turn = await engine.send(cid, "read my notes")
    # every tool, no instructions, the tool's own approval ("required")
    assert offered(llm.requests[0]) == ["read_file", "list_files", "write_file"]
    assert system_text(llm.requests[0]) == SYSTEM
    assert turn.state is State.AWAITING_TOOL_APPROVAL


async def test_a_mode_named_chat_replaces_the_default() -> None:
    quiet = Mode(name="chat", instructions="Be brief.", tools=[], answer_type="Plan")
    engine, llm, _ = kit.make_engine([{"text": "ok"}], tools=TOOLS, modes=[quiet])
    async with engine:
        assert engine.modes == (quiet,)
        cid = await engine.create_context()
        turn = await engine.send(cid, "hi")
    assert llm.requests[0].tools == []
    assert system_text(llm.requests[0]) == '<mode name="chat">\nBe brief.\n</mode>'
    assert turn.messages[-1].message_type is MessageType.PLAN


async def test_deny_override_and_unknown_tool_in_a_mode() -> None:
    careful = Mode(name="careful", approval={"write_file": "deny"})
    answers = [
        {
            "tool_calls": [
                call("c1", "write_file", path="a", text="b"),
                call("c2", "no_such_tool"),
            ]
        },
        {"text": "I could not."},
    ]
    engine, _, _ = kit.make_engine(answers, tools=TOOLS, modes=[careful])
    async with engine:
        cid = await engine.create_context(mode="careful")
        turn = await engine.send(cid, "write")
    assert turn.state is State.IDLE
    assert WRITES == []
    results = {
        m.tool_result.request_id: m.tool_result.result for m in turn.messages if m.tool_result
    }
    assert results["c1"] == {"error": "denied: denied by policy", "status": "denied"}
    assert results["c2"] == {
        "error": "unknown tool 'no_such_tool'; available tools: read_file, list_files, write_file"
    }


async def test_switching_to_a_mode_at_approval_applies_to_the_run() -> None:
    """The mode in force when a tool runs governs: a call approved after a
    switch to a mode that does not offer its tool is not run."""
    engine, _, _ = make([*ACT_ANSWERS[:1], {"text": "understood"}])
    async with engine:
        cid = await engine.create_context(mode="act")
        turn = await engine.send(cid, "write it")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        await engine.update_config(cid, mode="plan")  # AwaitingToolApproval is at rest
        turn = await engine.approve(cid, "c3")
    assert turn.state is State.IDLE
    assert WRITES == []
    result = next(m.tool_result for m in turn.messages if m.tool_result)
    assert result.result["status"] == "not_offered"
    assert turn.messages[-1].message_type is MessageType.PLAN


# --------------------------------------------------------------------------- errors


async def test_unknown_mode_is_refused_everywhere() -> None:
    engine, _, _ = make([])
    async with engine:
        with pytest.raises(InvalidInput) as info:
            await engine.create_context(mode="review")
        assert info.value.where == "mode"
        assert "unknown mode 'review'" in str(info.value)
        assert "chat, plan, act" in str(info.value)
        assert await engine.store.list_contexts() == []

        cid = await engine.create_context(mode="plan")
        before = await engine.get_context(cid)
        with pytest.raises(InvalidInput) as info:
            await engine.update_config(cid, mode="Plan")
        assert "chat, plan, act" in str(info.value)
        after = await engine.get_context(cid)
    assert after.version == before.version
    assert after.config.mode == "plan"


def test_modes_are_checked_when_the_engine_is_made() -> None:
    with pytest.raises(InvalidInput, match=r"modes\[1\]\.name.*two modes are named 'plan'"):
        Engine(tools=TOOLS, modes=[PLAN, PLAN])
    with pytest.raises(InvalidInput, match=r"modes\[0\]\.tools\[0\].*no tool 'rm'"):
        Engine(tools=TOOLS, modes=[Mode(name="x", tools=["rm"])])
    with pytest.raises(InvalidInput, match=r"does not offer the tool 'write_file'"):
        Engine(tools=TOOLS, modes=[Mode(name="x", tools=[], approval={"write_file": "auto"})])
    with pytest.raises(InvalidInput, match=r"no tool 'rm'"):
        Engine(tools=TOOLS, modes=[Mode(name="x", approval={"rm": "deny"})])
    with pytest.raises(InvalidInput, match=r"modes\[0\].*not str"):
        Engine(tools=TOOLS, modes=["plan"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match=r"Mode\.name"):
        Mode(name="")
    with pytest.raises(InvalidInput, match=r"Mode\.answer_type"):
        Mode(name="x", answer_type=MessageType.TOOL_CALL)
    with pytest.raises(InvalidInput, match=r"Mode\.tools"):
        Mode(name="x", tools="read_file")
    with pytest.raises(InvalidInput, match=r"Mode.tools\[1\].*named twice"):
        Mode(name="x", tools=["a", "a"])
    with pytest.raises(InvalidInput, match=r"Mode.approval\['a'\]"):
        Mode(name="x", approval={"a": "sometimes"})  # type: ignore[dict-item]


def test_mode_is_frozen_and_typed() -> None:
    mode = Mode(name="plan", tools=["a"], approval={"a": "auto"}, answer_type="Plan")  # type: ignore[arg-type]
    assert mode.tools == ("a",)
    assert mode.answer_type is MessageType.PLAN
    with pytest.raises(AttributeError):
        mode.name = "act"  # type: ignore[misc]
    with pytest.raises(TypeError):
        mode.approval["a"] = "deny"  # type: ignore[index]
    assert hash(mode) == hash(
        Mode(name="plan", tools=("a",), approval={"a": "auto"}, answer_type=MessageType.PLAN)
    )
    assert mode.to_json() == {
        "name": "plan",
        "tools": ["a"],
        "approval": {"a": "auto"},
        "answer_type": "Plan",
    }


async def test_mode_switch_while_a_turn_runs_is_refused() -> None:
    started = anyio.Event()
    release = anyio.Event()

    async def slow(request: LLMRequest) -> dict[str, Any]:
        started.set()
        await release.wait()
        return {"text": "ok"}

    engine, _, _ = make(None, llm=ScriptedLLM(slow))
    async with engine, anyio.create_task_group() as tg:
        cid = await engine.create_context(mode="plan")
        tg.start_soon(engine.send, cid, "hi")
        with anyio.fail_after(5):
            await started.wait()
        with pytest.raises(ContextBusy):
            await engine.update_config(cid, mode="act")
        release.set()
    ctx = await engine.get_context(cid)
    assert ctx.config.mode == "plan"
    assert ctx.history()[-1].message.message_type is MessageType.PLAN


async def test_mode_switch_on_a_context_left_mid_turn_is_refused(tmp_path: Path) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    store = SQLiteStore(tmp_path / "c.db")
    await store.create(
        ChatContext(
            id="left",
            config=ChatConfig(mode="plan"),
            branches={"main": Branch(name="main")},
            current_state=State.EXECUTING_TOOLS,
            created_at=now,
            updated_at=now,
        )
    )
    engine, _, _ = make([], store=store)
    async with engine:
        with pytest.raises(NotAtRest):
            await engine.update_config("left", mode="act")
        assert (await engine.get_context("left")).config.mode == "plan"


# --------------------------------------------------------------------------- storage


async def test_a_fresh_engine_on_the_same_sqlite_file_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "modes.db"
    engine, _, _ = make(PLAN_ANSWERS, store=SQLiteStore(path))
    async with engine:
        cid = await engine.create_context(system_prompt=SYSTEM, mode="plan")
        await engine.send(cid, "Change milk to oat milk in my notes.")
        await engine.update_config(cid, mode="act")

    again, llm, _ = make(ACT_ANSWERS, store=SQLiteStore(path))
    async with again:
        ctx = await again.get_context(cid)
        assert ctx.config.mode == "act"
        assert ctx.history()[4].message.message_type is MessageType.PLAN
        turn = await again.send(cid, "Go ahead.")
        assert [c.id for c in turn.pending_tool_calls] == ["c3"]
        assert "write_file" in offered(llm.requests[0])
        assert '<mode name="act">' in system_text(llm.requests[0])
        steps = await again.steps(cid)
    assert [s.detail for s in steps if s.trigger == "config_updated"] == [{"mode": "act"}]


async def test_a_stored_mode_this_engine_does_not_know_fails_the_turn(tmp_path: Path) -> None:
    """Another process, configured with a plan mode, made the context; this
    engine has no plan mode: the turn fails through prepare_failed with a
    clear error (nothing is offered meanwhile), and a switch then a retry
    continue it."""
    path = tmp_path / "shared.db"
    engine, _, _ = make([], store=SQLiteStore(path))
    async with engine:
        cid = await engine.create_context(mode="plan")

    other, llm, _ = kit.make_engine([{"text": "hello"}], tools=TOOLS, store=SQLiteStore(path))
    async with other:
        turn = await other.send(cid, "hi")
        assert turn.state is State.PERMANENT_FAILURE
        assert turn.states == (PUM, PF)
        assert turn.error is not None
        assert "the context's mode 'plan' is not a mode of this engine (its modes: chat)" in (
            turn.error
        )
        assert llm.requests == []
        await other.update_config(cid, mode="chat")
        turn = await other.retry(cid)
    assert turn.state is State.IDLE
    assert turn.text == "hello"


async def test_unknown_stored_mode_runs_no_tool_when_approved(tmp_path: Path) -> None:
    """A context waiting for approval in a mode this engine does not know:
    the approved call is not run, and the next request fails."""
    path = tmp_path / "shared.db"
    engine, _, _ = make(ACT_ANSWERS[:1], store=SQLiteStore(path))
    async with engine:
        cid = await engine.create_context(mode="act")
        turn = await engine.send(cid, "write it")
        assert turn.state is State.AWAITING_TOOL_APPROVAL

    other, llm, _ = kit.make_engine([], tools=TOOLS, store=SQLiteStore(path))
    async with other:
        turn = await other.approve(cid, "c3")
    assert WRITES == []
    assert turn.states == (EXT, ALR, PF)
    result = next(m.tool_result for m in turn.messages if m.tool_result)
    assert result.result == {
        "error": "tool 'write_file' is not offered: mode 'act' is unknown to this engine; "
        "available tools: (none)",
        "status": "not_offered",
    }
    assert turn.error is not None and "mode 'act' is not a mode of this engine" in turn.error
    assert llm.requests == []


# --------------------------------------------------------------------------- enhancers


def _bare(cid: str) -> ChatContext:
    now = datetime.now(UTC)
    return ChatContext(
        id=cid, branches={"main": Branch(name="main")}, created_at=now, updated_at=now
    )


def test_enhancers_without_modes_are_unchanged() -> None:
    ctx = _bare("c")
    request = LLMRequest(context_id="c", model="m", messages=[])
    assert SystemPromptEnhancer("base").enhance(request, ctx).messages == [
        {"role": "system", "content": "base"}
    ]
    defs = [{"type": "function", "function": {"name": "f"}}]
    assert ToolDefinitionsEnhancer(defs).enhance(request, ctx).tools == defs


def test_mode_block_escapes_the_name() -> None:
    ctx = _bare("c")
    request = LLMRequest(context_id="c", model="m", messages=[])
    enhancer = SystemPromptEnhancer(mode=lambda _: ('a"<b>', "do it"))
    assert enhancer.enhance(request, ctx).messages[0]["content"] == (
        '<mode name="a&quot;&lt;b&gt;">\ndo it\n</mode>'
    )


def test_a_context_allow_list_composes_with_the_mode() -> None:
    """The one view of the tools: a mode's tools, intersected with an
    allow-list when one is given; overrides applied; built once."""
    from turnfsm.engine._modes import Modes
    from turnfsm.tools import Approval, ToolRegistry

    modes = Modes(MODES, ToolRegistry(TOOLS))
    plan = modes.get("plan")
    view = modes.tools_for(plan, ["read_file", "write_file"])
    assert view.names == ("read_file",)  # write_file: not offered in plan
    read = view.get("read_file")
    assert read is not None and read.approval is Approval.AUTO
    assert read_file.approval is Approval.REQUIRED  # the tool itself is unchanged
    assert modes.tools_for(plan, ["read_file", "write_file"]) is view
    assert modes.tools_for(modes.get("act")).names == ("read_file", "list_files", "write_file")
    assert modes.tools_for(None).names == ()


# --------------------------------------------------------------------------- questions


async def test_questions_in_a_mode_that_offers_them_and_one_that_does_not() -> None:
    from turnfsm import ask_user

    asking = Mode(name="asking", tools=["ask_user", "read_file"])
    quiet = Mode(name="quiet", tools=["read_file"])
    question = {"tool_calls": [call("q1", "ask_user", question="Which file?")]}
    engine, llm, _ = kit.make_engine(
        [
            question,
            {"text": "reading it"},
            {**question, "tool_calls": [call("q2", "ask_user", question="Sure?")]},
            {"text": "ok"},
        ],
        tools=[*TOOLS, ask_user],
        modes=[asking, quiet],
    )
    async with engine:
        cid = await engine.create_context(mode="asking")
        turn = await engine.send(cid, "help")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert [q.call_id for q in turn.questions] == ["q1"]
        assert turn.messages[-1].message_type is MessageType.QUESTION
        turn = await engine.answer(cid, "q1", "notes.txt")
        assert turn.state is State.IDLE
        await engine.update_config(cid, mode="quiet")
        turn = await engine.send(cid, "go on")
    # not offered there: not a question, not asked, and the model is told
    assert turn.state is State.IDLE
    assert offered(llm.requests[2]) == ["read_file"]
    asked = turn.messages[1]
    assert asked.message_type is MessageType.TOOL_CALL
    result = next(m.tool_result for m in turn.messages if m.tool_result)
    assert result.result["status"] == "not_offered"
    assert "'ask_user' is not offered in mode 'quiet'" in result.result["error"]


def test_a_question_tool_approval_cannot_be_overridden() -> None:
    from turnfsm import ask_user

    with pytest.raises(InvalidInput, match="'ask_user' is a question tool"):
        Engine(tools=[ask_user], modes=[Mode(name="x", approval={"ask_user": "auto"})])


def test_an_override_keeps_the_tool_class() -> None:
    from turnfsm import ask_user
    from turnfsm.tools import QuestionTool

    copy = ask_user.with_approval("auto")
    assert isinstance(copy, QuestionTool)
    assert copy.definition() == ask_user.definition()
