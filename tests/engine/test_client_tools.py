"""Client tools: ``send(..., client_tools=[...])``, the rest in
``AwaitingToolApproval`` (``client_calls``) and ``Engine.submit_results``
(docs/client-tools.md).

End to end with ``ScriptedLLM`` on a memory store and a real SQLite file: the
tools the model is offered and the parameters it is sent, a batch that mixes
the engine's calls with the client's, each refused call, supersession and
cancel, and a rest that survives an unload and a process that exits.
"""

from __future__ import annotations

import functools
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import kit
import pytest
from canonical import ALR, ATA, EXT, IDLE, PLR, PUM

from turnfsm import Engine, InvalidInput, State, StopReason, tool
from turnfsm.errors import (
    NotAClientCall,
    ToolCallNotPending,
    ToolNameClash,
    UnknownToolCall,
)
from turnfsm.model import ChatContext
from turnfsm.records import ClientTool, ClientTools
from turnfsm.storage import SQLiteStore
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

pytestmark = pytest.mark.anyio

RUNS: list[str] = []


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    RUNS.append("add")
    return a + b


@tool(approval="required")
def book(city: str) -> str:
    """Book a trip."""
    RUNS.append("book")
    return f"booked {city}"


WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather where the user is.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CLOCK_TOOL = ClientTool(name="local_time", description="The user's local time.")


def call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": args}


make_engine = functools.partial(kit.make_engine, tools=[add, book])


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RUNS.clear()


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return None if request.param == "memory" else SQLiteStore(tmp_path / "c.db")


def results_of(ctx: ChatContext) -> list[tuple[str, Any]]:
    return [
        (n.message.tool_result.request_id, n.message.tool_result.result)
        for n in ctx.history()
        if n.message.tool_result is not None
    ]


def assert_one_result_per_call(ctx: ChatContext) -> None:
    calls = [c.id for n in ctx.history() for c in n.message.tool_calls or ()]
    answered = [rid for rid, _ in results_of(ctx)]
    assert sorted(answered) == sorted(calls)
    assert len(set(answered)) == len(answered)


# --------------------------------------------------------------------------- the round trip


async def test_a_client_call_rests_and_its_result_goes_to_the_model(store: Any) -> None:
    made = make_engine(
        [{"tool_calls": [call("w1", "weather", city="Oslo")]}, {"text": "It is 3 C in Oslo."}],
        store=store,
    )
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Weather?", client_tools=[WEATHER])
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert turn.stop_reason is StopReason.CLIENT_TOOLS
        assert [(c.id, c.tool_name, c.arguments) for c in turn.client_tool_calls] == [
            ("w1", "weather", {"city": "Oslo"})
        ]
        assert turn.pending_tool_calls == ()  # nothing for a human
        assert [str(s) for s in turn.states] == [PUM, ALR, PLR, ATA]
        assert (await engine.steps(cid))[-1].trigger == "client_calls"
        # the model was offered the engine's tools, then the client's
        offered = [t["function"]["name"] for t in made.llm.requests[0].tools]
        assert offered == ["add", "book", "weather"]

        turn = await engine.submit_results(cid, {"w1": "3 C"})
        assert turn.state is State.IDLE and turn.text == "It is 3 C in Oslo."
        assert [str(s) for s in turn.states] == [EXT, ALR, PLR, IDLE]
        last = made.llm.requests[1].messages[-1]
        assert (last["role"], last["tool_call_id"], last["content"]) == ("tool", "w1", "3 C")
        ctx = await engine.get_context(cid)
        assert results_of(ctx) == [("w1", "3 C")]
        assert_one_result_per_call(ctx)
    assert RUNS == []


async def test_the_engines_calls_run_first_then_the_clients_are_handed_back() -> None:
    made = make_engine(
        [
            {"tool_calls": [call("a1", "add", a=2, b=3), call("w1", "weather", city="Rome")]},
            {"text": "5, and sunny."},
        ]
    )
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Both", client_tools=[WEATHER])
        assert RUNS == ["add"]
        assert [str(s) for s in turn.states] == [PUM, ALR, PLR, EXT, ATA]
        assert [c.id for c in turn.client_tool_calls] == ["w1"]
        ctx = await engine.get_context(cid)
        assert results_of(ctx) == [("a1", 5)]  # the engine's result is stored already
        assert ctx.progress.started_call_ids == ()
        turn = await engine.submit_results(cid, {"w1": {"sky": "sunny"}})
        assert turn.state is State.IDLE
        ctx = await engine.get_context(cid)
        assert results_of(ctx) == [("a1", 5), ("w1", {"sky": "sunny"})]
        assert_one_result_per_call(ctx)
    assert RUNS == ["add"]  # run once


async def test_a_call_that_needs_approval_is_decided_before_the_client_gets_its_calls() -> None:
    made = make_engine(
        [
            {"tool_calls": [call("b1", "book", city="Oslo"), call("w1", "weather", city="Oslo")]},
            {"text": "Booked, and it is cold."},
        ]
    )
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Book", client_tools=[WEATHER])
        assert turn.stop_reason is StopReason.AWAITING_APPROVAL
        assert [c.id for c in turn.pending_tool_calls] == ["b1"]
        turn = await engine.approve(cid, "b1")
        assert RUNS == ["book"]
        assert turn.stop_reason is StopReason.CLIENT_TOOLS
        assert [str(s) for s in turn.states] == [EXT, ATA]
        assert [c.id for c in turn.client_tool_calls] == ["w1"]
        turn = await engine.submit_results(cid, {"w1": "cold"})
        assert turn.state is State.IDLE and turn.text == "Booked, and it is cold."
        assert_one_result_per_call(await engine.get_context(cid))


async def test_each_call_needs_its_result_before_the_turn_goes_on() -> None:
    made = make_engine(
        [
            {"tool_calls": [call("w1", "weather", city="A"), call("t1", "local_time")]},
            {"text": "Done."},
        ]
    )
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "Two", client_tools=[WEATHER, CLOCK_TOOL])
        turn = await engine.submit_results(cid, {"t1": "09:00"})
        assert turn.state is State.AWAITING_TOOL_APPROVAL and turn.states == ()
        assert turn.stop_reason is StopReason.CLIENT_TOOLS
        assert [c.id for c in turn.client_tool_calls] == ["w1"]
        assert len(made.llm.requests) == 1  # not called again yet
        turn = await engine.submit_results(cid, {"w1": "rain"})
        assert turn.state is State.IDLE
        # the results stand in the order they were given, each once
        assert results_of(await engine.get_context(cid)) == [("t1", "09:00"), ("w1", "rain")]


async def test_tool_choice_and_parallel_calls_go_with_the_turns_requests() -> None:
    made = make_engine([{"tool_calls": [call("w1", "weather")]}, {"text": "ok"}, {"text": "plain"}])
    async with made.engine as engine:
        cid = await engine.create_context(parameters={"temperature": 0.5})
        forced = ClientTools(
            tools=(ClientTool(name="weather"),),
            tool_choice={"type": "function", "function": {"name": "weather"}},
            parallel_tool_calls=False,
        )
        await engine.send(cid, "Go", client_tools=forced)
        await engine.submit_results(cid, {"w1": "dry"})
        first, second = made.llm.requests[0].parameters, made.llm.requests[1].parameters
        for params in (first, second):  # every request of the turn
            assert params["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
            assert params["parallel_tool_calls"] is False
            assert params["temperature"] == 0.5
        await engine.send(cid, "Again")  # a turn without client tools
        third = made.llm.requests[2]
        assert "tool_choice" not in third.parameters
        assert [t["function"]["name"] for t in third.tools] == ["add", "book"]
        assert (await engine.get_context(cid)).config.parameters == {"temperature": 0.5}


# --------------------------------------------------------------------------- refused


async def test_a_client_tool_named_like_an_engine_tool_is_refused() -> None:
    made = make_engine([{"text": "never"}])
    async with made.engine as engine:
        cid = await engine.create_context()
        clash = {"type": "function", "function": {"name": "add", "parameters": {}}}
        with pytest.raises(ToolNameClash) as caught:
            await engine.send(cid, "hi", client_tools=[WEATHER, clash])
        assert caught.value.tool_name == "add"
        assert caught.value.where == "client_tools[1].function.name"
        assert "'add'" in str(caught.value)
        assert isinstance(caught.value, InvalidInput)
        ctx = await engine.get_context(cid)
        assert ctx.current_state == "Idle" and ctx.history() == []
    assert made.llm.requests == []


@pytest.mark.parametrize(
    ("tools", "where"),
    [
        ([{"type": "retrieval"}], "client_tools[0].type"),
        ([{"type": "function"}], "client_tools[0].function"),
        ([{"type": "function", "function": {"name": "a b"}}], "client_tools[0].function.name"),
        (
            [{"type": "function", "function": {"name": "x", "parameters": [1]}}],
            "client_tools[0].function.parameters",
        ),
        (
            [{"type": "function", "function": {"name": "x", "strict": "yes"}}],
            "client_tools[0].function.strict",
        ),
        ([WEATHER, WEATHER], "client_tools[1].function.name"),
        ([CLOCK_TOOL, CLOCK_TOOL], "client_tools[1].name"),
        ("weather", "client_tools"),
    ],
)
async def test_a_malformed_client_tool_is_refused_naming_where(tools: Any, where: str) -> None:
    made = make_engine([{"text": "never"}])
    async with made.engine as engine:
        cid = await engine.create_context()
        with pytest.raises(InvalidInput) as caught:
            await engine.send(cid, "hi", client_tools=tools)
        assert caught.value.where == where
    assert made.llm.requests == []


async def test_a_named_tool_choice_must_name_a_tool_of_the_turn() -> None:
    made = make_engine([{"text": "never"}])
    async with made.engine as engine:
        cid = await engine.create_context()
        bad = ClientTools(
            tools=(CLOCK_TOOL,), tool_choice={"type": "function", "function": {"name": "nope"}}
        )
        with pytest.raises(InvalidInput) as caught:
            await engine.send(cid, "hi", client_tools=bad)
        assert caught.value.where == "client_tools.tool_choice.function.name"


async def test_submit_results_refuses_what_is_not_a_waiting_client_call() -> None:
    made = make_engine(
        [
            {"tool_calls": [call("b1", "book", city="X"), call("w1", "weather")]},
            {"text": "done"},
        ]
    )
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "go", client_tools=[WEATHER])
        with pytest.raises(NotAClientCall) as caught:
            await engine.submit_results(cid, {"b1": "fake"})
        assert caught.value.tool_name == "book"
        with pytest.raises(UnknownToolCall):
            await engine.submit_results(cid, {"zz": "x"})
        with pytest.raises(InvalidInput):
            await engine.submit_results(cid, {})
        with pytest.raises(ToolCallNotPending):  # the client's call is not a human's
            await engine.approve(cid, "w1")
        assert results_of(await engine.get_context(cid)) == []  # nothing was stored
        await engine.submit_results(cid, {"w1": "sun"})
        with pytest.raises(ToolCallNotPending):  # its result is in
            await engine.submit_results(cid, {"w1": "again"})
        await engine.deny(cid, "b1")
        with pytest.raises(ToolCallNotPending):
            await engine.submit_results(cid, {"w1": "late"})
        ctx = await engine.get_context(cid)
        assert ctx.current_state == "Idle"
        assert_one_result_per_call(ctx)


async def test_submit_results_at_idle_names_no_waiting_call() -> None:
    made = make_engine([{"text": "hi"}])
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "hello", client_tools=[WEATHER])
        with pytest.raises(UnknownToolCall):
            await engine.submit_results(cid, {"w1": "x"})


# --------------------------------------------------------------------------- other ways on


async def test_a_new_message_instead_of_the_results_supersedes_the_calls() -> None:
    made = make_engine([{"tool_calls": [call("w1", "weather")]}, {"text": "Fine, no weather."}])
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "Weather?", client_tools=[WEATHER])
        turn = await engine.send(cid, "Never mind")
        assert turn.state is State.IDLE and turn.text == "Fine, no weather."
        ctx = await engine.get_context(cid)
        assert [(rid, r["status"]) for rid, r in results_of(ctx)] == [("w1", "superseded")]
        assert_one_result_per_call(ctx)
        assert ctx.progress.client is None


async def test_cancel_closes_the_clients_calls() -> None:
    made = make_engine([{"tool_calls": [call("w1", "weather")]}])
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "Weather?", client_tools=[WEATHER])
        turn = await engine.cancel(cid)
        assert turn.state is State.IDLE
        ctx = await engine.get_context(cid)
        assert [(rid, r["status"]) for rid, r in results_of(ctx)] == [("w1", "cancelled")]


async def test_the_rest_survives_an_unload_with_its_tools(tmp_path: Path) -> None:
    made = make_engine(
        [{"tool_calls": [call("w1", "weather")]}, {"tool_calls": [call("w2", "weather")]}],
        store=SQLiteStore(tmp_path / "u.db"),
    )
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "Weather?", client_tools=[WEATHER])
        await engine.unload(cid)
        assert cid not in engine.loaded_contexts
        turn = await engine.submit_results(cid, {"w1": "fog"})
        # the next request still offers the client's tool: the model calls it again
        assert [t["function"]["name"] for t in made.llm.requests[1].tools][-1] == "weather"
        assert turn.stop_reason is StopReason.CLIENT_TOOLS
        assert [c.id for c in turn.client_tool_calls] == ["w2"]


FIRST_PROCESS = """
import sys, anyio
from turnfsm import Engine
from turnfsm.storage import SQLiteStore
from turnfsm.testing import ScriptedLLM

async def main():
    llm = ScriptedLLM([{"tool_calls": [{"id": "w1", "name": "weather", "arguments": {}}]}])
    async with Engine(llm=llm, store=SQLiteStore(sys.argv[1])) as engine:
        cid = await engine.create_context(context_id="trip")
        tools = [{"type": "function", "function": {"name": "weather"}}]
        turn = await engine.send(cid, "Weather?", client_tools=tools)
        print(turn.state, [c.id for c in turn.client_tool_calls])

anyio.run(main)
"""


async def test_the_rest_survives_a_process_that_exits(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    done = await anyio.run_process(
        [sys.executable, "-c", textwrap.dedent(FIRST_PROCESS), str(db)], check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["AwaitingToolApproval", "['w1']"]
    llm = ScriptedLLM([{"text": "Foggy."}])
    async with Engine(llm=llm, store=SQLiteStore(db), clock=FakeClock(), ids=SequentialIds()) as e:
        turn = await e.resume("trip")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert [c.id for c in turn.client_tool_calls] == ["w1"]
        turn = await e.submit_results("trip", {"w1": "fog"})
        assert turn.state is State.IDLE and turn.text == "Foggy."
        assert [t["function"]["name"] for t in llm.requests[0].tools] == ["weather"]
        assert_one_result_per_call(await e.get_context("trip"))


async def test_without_client_tools_nothing_changes() -> None:
    made = make_engine([{"tool_calls": [call("w1", "weather")]}, {"text": "unknown"}])
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Weather?")
        # a call of a tool nobody declared: the engine's "unknown tool" result
        assert turn.state is State.IDLE and turn.client_tool_calls == ()
        (result,) = results_of(await engine.get_context(cid))
        assert "unknown tool" in str(result[1]).lower()


async def test_a_client_call_after_the_iteration_limit_is_not_handed_out() -> None:
    made = make_engine([{"tool_calls": [call("w1", "weather")]}], max_iterations=1)
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Weather?", client_tools=[WEATHER])
        assert turn.stop_reason is StopReason.MAX_ITERATIONS
        assert turn.client_tool_calls == ()
        assert_one_result_per_call(await engine.get_context(cid))


async def test_the_audit_log_accounts_for_the_hand_out() -> None:
    from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log
    from turnfsm.render import sequence_diagram

    made = make_engine(
        [
            {"tool_calls": [call("a1", "add", a=1, b=1), call("w1", "weather")]},
            {"text": "2, and warm."},
        ]
    )
    async with made.engine as engine:
        cid = await engine.create_context()
        await engine.send(cid, "Both", client_tools=[WEATHER])
        await engine.submit_results(cid, {"w1": "warm"})
        ctx = await engine.get_context(cid)
        records = audit_records(cid, await engine.steps(cid), ctx.message_pool.values())
    result = verify_audit_log(audit_jsonl(records).splitlines())
    assert result.ok, (result.line, result.reason)
    assert {m for r in records for m in r.message_ids} == set(ctx.message_pool)
    handed = next(r for r in records if r.trigger == "client_calls")
    assert handed.tool_results == ("a1",) and handed.actor == "system"
    done = next(r for r in records if r.trigger == "tools_done")
    assert done.tool_results == ("w1",)
    assert "w1 handed to the client" in sequence_diagram(records, ctx.message_pool, turn=1)


async def test_a_typed_turn_keeps_its_client_tools_and_its_output_type_across_the_rest(
    store: Any,
) -> None:
    """Client tools and an output type in one turn: the rest for the client's
    result keeps the output type, and the request that follows an answer sent
    back for not matching it still offers the client's tools."""
    schema = {
        "type": "object",
        "properties": {"celsius": {"type": "integer"}},
        "required": ["celsius"],
    }
    made = make_engine(
        [
            {"tool_calls": [call("w1", "weather", city="Oslo")]},
            {"text": '{"celsius": "three"}'},
            {"text": '{"celsius": 3}'},
        ],
        store=store,
    )
    async with made.engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Weather?", client_tools=[WEATHER], output_type=schema)
        assert turn.state is State.AWAITING_TOOL_APPROVAL and turn.output is None
        await engine.unload(cid)
        turn = await engine.submit_results(cid, {"w1": "3 C"})
        assert turn.state is State.IDLE
        assert turn.output == {"celsius": 3}
        assert [str(s) for s in turn.states] == [EXT, ALR, PLR, ALR, PLR, IDLE]
    third = made.llm.requests[2]
    assert [t["function"]["name"] for t in third.tools] == ["add", "book", "weather"]
    assert third.output is not None and third.output.schema == schema
