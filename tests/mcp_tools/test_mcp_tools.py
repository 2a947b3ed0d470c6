"""Tools from MCP servers (turnfsm.tools.mcp), against the fault server of
tests/mcp_tools (FastMCP's answers, written by hand) and a server that sends garbage: names,
approval and annotations, results, faults, list changes, lifecycle.

The reference servers from npm, MCP over HTTP and the CLI commands are in
test_mcp_servers.py (``-m mcp``). The faults and lifecycle of the server's
process (one that dies, hangs, is left or cancelled mid-call, each a second or
more of a process started and waited on) run with ``-m mcp`` too, CI's step of
its own; the names, approvals, results and list changes run by default.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from turnfsm import Engine
from turnfsm.errors import ToolDefinitionError, ToolsetError
from turnfsm.model import Role
from turnfsm.testing import ScriptedLLM
from turnfsm.tools import Approval, Tool, Toolset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcp_helpers import FAULT_SERVER, RAW_SERVER, alive, children, gone

if TYPE_CHECKING:
    from turnfsm.tools.mcp import MCPServer

pytestmark = pytest.mark.anyio


def fault(**kwargs: Any) -> MCPServer:
    from turnfsm.tools.mcp import MCPServer

    return MCPServer.stdio(FAULT_SERVER, **kwargs)


def calls(*items: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in items]}


def results(turn: Any) -> dict[str, tuple[bool, Any]]:
    out: dict[str, tuple[bool, Any]] = {}
    for message in turn.messages:
        if message.role is Role.TOOL and message.tool_result is not None:
            r = message.tool_result
            out[r.request_id] = (r.success, r.result)
    return out


async def pid_of(engine: Engine, cid: str, call_id: str) -> int:
    llm = engine.llm
    assert isinstance(llm, ScriptedLLM)
    turn = await engine.send(cid, "pid?")
    ok, value = results(turn)[call_id]
    assert ok, value
    return int(value["result"])


# ---------------------------------------------------------------------- names, approval


def test_the_naming_rule() -> None:
    from turnfsm.tools.mcp import tool_name

    assert tool_name("read_file") == "read_file"
    assert tool_name("read_file", "fs") == "fs__read_file"
    assert tool_name("get.weather/now", "w") == "w__get_weather_now"
    long = tool_name("x" * 80, "p")
    assert len(long) == 64 and long.startswith("p__xxx") and long[55] == "_"
    assert long != tool_name("x" * 81, "p")  # the digest tells them apart


async def test_tools_keep_their_schema_and_ask_for_approval_whatever_the_hints() -> None:
    from turnfsm.tools.mcp import MCPTool

    server = fault()
    assert isinstance(server, Toolset)
    async with Engine(toolsets=[server]) as engine:
        names = set(engine.tools.names)
        assert {"echo", "pid", "die", "hang", "fail", "image", "grow"} <= names
        echo = engine.tools.get("echo")
        assert isinstance(echo, MCPTool)
        assert echo.remote_name == "echo"
        # the server says read-only and idempotent: on its own that changes nothing
        assert echo.annotations == {"readOnlyHint": True, "idempotentHint": True}
        assert echo.approval is Approval.REQUIRED
        assert echo.idempotent is False
        schema = echo.parameters
        assert schema["properties"]["text"]["type"] == "string"
        assert schema["required"] == ["text"]
        assert echo.definition()["function"]["parameters"] is schema
    assert engine.tools.names == ()  # closed: its tools are gone with it


async def test_hints_change_approval_and_idempotence_only_through_an_opt_in() -> None:
    server = fault(prefix="f", read_only_approval="auto", trust_idempotent_hint=True)
    async with Engine(toolsets=[server]) as engine:
        tools = {t.name: t for t in engine.tools}
        assert tools["f__echo"].approval is Approval.AUTO  # readOnlyHint, opted in
        assert tools["f__echo"].idempotent is True  # idempotentHint, opted in
        assert tools["f__pid"].approval is Approval.AUTO
        assert tools["f__pid"].idempotent is True  # read-only: running it twice is harmless
        assert tools["f__die"].approval is Approval.REQUIRED  # destructiveHint
        assert tools["f__die"].idempotent is False
        assert tools["f__hang"].approval is Approval.REQUIRED  # no hints
        assert tools["f__hang"].idempotent is False


async def test_a_read_only_tool_that_also_says_destructive_is_not_read_only() -> None:
    import mcp_types as mt

    server = fault(read_only_approval="auto", trust_idempotent_hint=True)
    hints = mt.ToolAnnotations(read_only_hint=True, destructive_hint=True)
    listed = mt.Tool(
        name="odd", input_schema={"type": "object", "properties": {}}, annotations=hints
    )
    made = server._tool_of(listed)
    assert made is not None
    assert made.approval is Approval.REQUIRED


class FakeToolset:
    """A toolset with no process: its list is set by the test."""

    def __init__(self, name: str, *tools: Tool) -> None:
        self.name = name
        self.listed: tuple[Tool, ...] = tools
        self.started = False
        self.callbacks: list[Any] = []

    async def start(self) -> None:
        self.started = True

    async def aclose(self) -> None:
        self.started = False

    def tools(self) -> tuple[Tool, ...]:
        return self.listed if self.started else ()

    def on_change(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def change(self, *tools: Tool) -> None:
        self.listed = tools
        for callback in self.callbacks:
            callback()


def spec(name: str) -> Tool:
    return Tool.from_spec(name, f"the tool {name}")


async def test_a_name_is_used_once_across_the_engine_and_its_toolsets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = FakeToolset("a", spec("read")), FakeToolset("b", spec("read"))
    with pytest.raises(ToolDefinitionError, match="two tools are named 'read'"):
        async with Engine(toolsets=[a, b]):
            pass
    assert not a.started and not b.started  # both closed again
    mine = spec("own")
    a, b = FakeToolset("a", spec("read")), FakeToolset("b", spec("write"))
    async with Engine(tools=[mine], toolsets=[a, b]) as engine:
        assert engine.tools.names == ("own", "read", "write")  # own first, then in order
        b.change(spec("write"), spec("read"), spec("own"))  # later: both names are taken
        assert engine.tools.names == ("own", "read", "write")
        assert engine.tools.get("read") is a.listed[0]
        assert "two tools are named 'read'" in caplog.text
        a.change()  # the name is free again: the later toolset's tool takes it
        assert engine.tools.names == ("own", "write", "read")


def test_the_engine_refuses_what_is_not_a_toolset() -> None:
    from turnfsm.errors import InvalidInput

    with pytest.raises(InvalidInput, match=r"toolsets\[1\]"):
        Engine(toolsets=[FakeToolset("ok"), object()])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match="toolsets"):
        Engine(toolsets="npx server")  # type: ignore[arg-type]


async def test_an_engine_used_without_async_with_offers_no_toolset_tools() -> None:
    toolset = FakeToolset("a", spec("read"))
    engine = Engine(toolsets=[toolset])
    assert engine.toolsets == (toolset,)
    assert "read" not in engine.tools and not toolset.started
    await engine.aclose()


@pytest.mark.mcp  # two server processes
async def test_a_prefix_keeps_two_servers_apart(no_new_children: None) -> None:
    async with Engine(toolsets=[fault(prefix="a"), fault(prefix="b")]) as engine:
        assert {"a__echo", "b__echo"} <= set(engine.tools.names)
        assert "echo" not in engine.tools


async def test_a_server_that_cannot_start_stops_the_engine_from_starting() -> None:
    from turnfsm.tools.mcp import MCPServer

    with pytest.raises(ToolsetError, match="could not be started"):
        async with Engine(toolsets=[MCPServer.stdio("/nonexistent/mcp-server --flag")]):
            pass


# ---------------------------------------------------------------------- results


async def test_text_images_resources_structured_content_and_errors_become_results() -> None:
    llm = ScriptedLLM(
        [
            calls(
                ("t", "echo", {"text": "hi"}),
                ("i", "image", {}),
                ("r", "resource", {}),
                ("s", "weather", {"city": "Oslo"}),
                ("e", "fail", {"why": "no such city"}),
                ("a", "echo", {"wrong": 1}),
            ),
            {"text": "done"},
        ]
    )
    async with Engine(llm=llm, toolsets=[fault(approval="auto")]) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
    assert str(turn.state) == "Idle"
    got = results(turn)
    assert got["t"] == (True, {"result": "hi"})  # the structured form FastMCP gives a str
    ok, image = got["i"]
    assert ok
    [block] = image["content"]
    assert block["type"] == "image" and block["mimeType"] == "image/png"
    assert block["data"].startswith("iVBORw0KGgo")
    assert got["r"] == (
        True,
        {
            "content": [
                {
                    "type": "resource",
                    "resource": {"uri": "memo://one", "mimeType": "text/plain", "text": "the memo"},
                }
            ]
        },
    )
    assert got["s"] == (True, {"city": "Oslo", "celsius": 21.5})
    ok, error = got["e"]
    assert not ok and "no such city" in error["error"]
    ok, invalid = got["a"]
    assert not ok and invalid["error"].startswith("invalid arguments for tool 'echo'")
    # the model saw every result, errors included
    tool_messages = [m for m in llm.requests[1].messages if m["role"] == "tool"]
    assert len(tool_messages) == 6
    assert "no such city" in str(tool_messages[4]["content"])


# ---------------------------------------------------------------------- faults


@pytest.mark.mcp  # a server process's lifecycle
async def test_a_server_that_dies_mid_call_gives_an_error_and_is_started_again() -> None:
    llm = ScriptedLLM(
        [
            calls(("p1", "pid", {})),
            {"text": "ok"},
            calls(("d", "die", {})),
            {"text": "it died"},
            calls(("p2", "pid", {})),
            {"text": "ok"},
        ]
    )
    server = fault(approval="auto")
    async with Engine(llm=llm, toolsets=[server]) as engine:
        cid = await engine.create_context()
        first = await pid_of(engine, cid, "p1")
        turn = await engine.send(cid, "die")
        assert str(turn.state) == "Idle"
        ok, error = results(turn)["d"]
        assert not ok and "started again for the next call" in error["error"]
        assert await gone(first)
        second = await pid_of(engine, cid, "p2")
        assert second != first and alive(second)
        assert server.restarts == 1
    assert not alive(second)


@pytest.mark.mcp  # a server process's lifecycle
async def test_a_call_that_hangs_past_its_timeout_gives_an_error_and_a_new_server() -> None:
    llm = ScriptedLLM(
        [
            calls(("p1", "pid", {})),
            {"text": "ok"},
            calls(("h", "hang", {})),
            {"text": "it hung"},
            calls(("p2", "pid", {})),
            {"text": "ok"},
        ]
    )
    server = fault(approval="auto", timeout=1.5)
    async with Engine(llm=llm, toolsets=[server]) as engine:
        cid = await engine.create_context()
        first = await pid_of(engine, cid, "p1")
        with anyio.fail_after(30):
            turn = await engine.send(cid, "hang")
        assert str(turn.state) == "Idle"
        ok, error = results(turn)["h"]
        assert not ok and "no answer within 1.5s" in error["error"]
        second = await pid_of(engine, cid, "p2")
        assert second != first
        assert await gone(first)


async def test_a_server_that_sends_garbage_gives_an_error_and_is_started_again() -> None:
    from turnfsm.tools.mcp import MCPServer

    llm = ScriptedLLM(
        [
            calls(("g", "garbled", {})),
            {"text": "hm"},
            calls(("b", "bad_result", {})),
            {"text": "hm"},
        ]
    )
    server = MCPServer.stdio(RAW_SERVER, approval="auto", timeout=30)
    async with Engine(llm=llm, toolsets=[server]) as engine:
        cid = await engine.create_context()
        with anyio.fail_after(20):  # well before the timeout: the garbage ends the call
            turn = await engine.send(cid, "one")
        ok, error = results(turn)["g"]
        assert not ok and "not MCP" in error["error"], error
        assert str(turn.state) == "Idle"
        with anyio.fail_after(20):
            turn = await engine.send(cid, "two")
        ok, error = results(turn)["b"]
        assert not ok and "answer was not MCP" in error["error"], error
        assert server.restarts == 1  # the second call ran on a new process


# ---------------------------------------------------------------------- list changes


async def test_a_changed_tool_list_is_offered_in_the_next_request() -> None:
    llm = ScriptedLLM(
        [
            calls(("g", "grow", {"name": "newt"})),
            calls(("n", "newt", {"text": "hello"})),
            {"text": "done"},
        ]
    )
    async with Engine(llm=llm, toolsets=[fault(approval="auto")]) as engine:
        cid = await engine.create_context()
        assert "newt" not in engine.tools
        turn = await engine.send(cid, "grow a tool")
        offered = [[t["function"]["name"] for t in r.tools] for r in llm.requests]
        assert "newt" not in offered[0]
        assert "newt" in offered[1]  # the request right after the call that changed it
        assert results(turn)["n"] == (True, {"result": "newt: hello"})
        assert "newt" in engine.tools


# ---------------------------------------------------------------------- lifecycle


@pytest.mark.mcp  # a server process's lifecycle
async def test_leaving_the_engine_stops_the_server_process(no_new_children: None) -> None:
    llm = ScriptedLLM([calls(("p", "pid", {})), {"text": "ok"}])
    async with Engine(llm=llm, toolsets=[fault(approval="auto")]) as engine:
        cid = await engine.create_context()
        pid = await pid_of(engine, cid, "p")
        assert pid in children()
    assert not alive(pid)


@pytest.mark.mcp  # a server process's lifecycle
async def test_cancelling_the_engine_task_mid_call_stops_the_server(
    no_new_children: None,
) -> None:
    llm = ScriptedLLM([calls(("p", "pid", {})), {"text": "ok"}, calls(("h", "hang", {}))])
    seen: list[int] = []

    async def run(started: anyio.Event) -> None:
        async with Engine(llm=llm, toolsets=[fault(approval="auto")]) as engine:
            cid = await engine.create_context()
            seen.append(await pid_of(engine, cid, "p"))
            started.set()
            await engine.send(cid, "hang")  # hangs until cancelled

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            started = anyio.Event()
            tg.start_soon(run, started)
            await started.wait()
            await anyio.sleep(0.5)  # the hang call is running
            tg.cancel_scope.cancel()
    [pid] = seen
    assert not alive(pid)


# ---------------------------------------------------------------------- the golden script

GOLDEN = Path(__file__).resolve().parents[1] / "scripts" / "mcp_tools.json"


async def record_mcp_conversation() -> dict[str, Any]:
    """A conversation with tools of the fault server, recorded as a replay
    script: tests/scripts/mcp_tools.json is this, and replays to the same trace."""
    from turnfsm.replay import Recorder
    from turnfsm.testing import FakeClock, SequentialIds

    server = fault(prefix="fault")
    await server.start()
    try:
        used = [t for t in server.tools() if t.remote_name in ("weather", "image", "fail")]
        llm = ScriptedLLM(
            [
                calls(
                    ("w", "fault__weather", {"city": "Oslo"}),
                    ("i", "fault__image", {}),
                ),
                {"text": "It is 21.5 C in Oslo; here is a picture."},
                calls(("f", "fault__fail", {"why": "no forecast for Mars"})),
                {"text": "There is no forecast for Mars."},
            ]
        )
        recorder = Recorder(llm, tools=used, name="tools of an MCP server: results and an error")
        async with Engine(
            llm=recorder.llm, tools=recorder.tools, clock=FakeClock(), ids=SequentialIds()
        ) as engine:
            await recorder.start(engine, system_prompt="You report the weather.")
            turn = await recorder.send("Weather in Oslo, and a picture?")
            assert [c.id for c in turn.pending_tool_calls] == ["w", "i"]
            await recorder.approve(["w", "i"])
            turn = await recorder.send("And on Mars?")
            await recorder.approve("f")
            return await recorder.script()
    finally:
        await server.aclose()


async def test_the_golden_script_is_what_an_mcp_conversation_records() -> None:
    """An MCP tool's call and result are recorded like any tool's: the tool
    under its offered name (``fault__weather``) with the server's schema, the
    result as the conversion rules made it, an isError result as an error."""
    recorded = await record_mcp_conversation()
    golden = json.loads(GOLDEN.read_text())
    # the golden script is the recording plus the checks along the way
    steps = [s for s in golden["steps"] if "expect" not in s]
    assert recorded == {**golden, "steps": steps}
    assert len(steps) < len(golden["steps"])
    tools = {t["name"]: t for t in golden["tools"]}
    assert set(tools) == {"fault__weather", "fault__image", "fault__fail"}
    assert all(t["approval"] == "required" for t in tools.values())
    steps = [s["tool"] for s in golden["steps"] if "tool" in s]
    assert steps[0] == {"id": "w", "result": {"city": "Oslo", "celsius": 21.5}}
    assert steps[1]["result"]["content"][0]["type"] == "image"
    assert steps[2] == {"id": "f", "error": "Error executing tool fail: no forecast for Mars"}


def with_checks(script: dict[str, Any]) -> dict[str, Any]:
    """The recorded script with checks after each answer that asks for tools."""
    steps: list[dict[str, Any]] = []
    for step in script["steps"]:
        steps.append(step)
        calls = step.get("llm", {}).get("tool_calls")
        if calls:
            pending = [c["id"] for c in calls]
            steps.append({"expect": {"state": "AwaitingToolApproval", "pending": pending}})
    steps.append(
        {
            "expect": {
                "state": "Idle",
                "last_message": {"role": "assistant", "text": "There is no forecast for Mars."},
            }
        }
    )
    return {**script, "steps": steps}


if __name__ == "__main__":  # python tests/mcp_tools/test_mcp_tools.py: write the golden script
    data = with_checks(anyio.run(record_mcp_conversation))
    GOLDEN.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
