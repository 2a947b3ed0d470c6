"""MCP servers nobody here wrote, MCP over Streamable HTTP, and ``turnfsm serve``
and ``turnfsm worker`` with MCP servers stopped by SIGTERM (``-m mcp``; .ci/run
runs them as a step of their own).

The reference servers are ``@modelcontextprotocol/server-everything`` and
``@modelcontextprotocol/server-filesystem`` from the npm registry, installed
into ``.cache/mcp-servers`` (``npm_servers``; never skipped).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from turnfsm import Engine
from turnfsm.testing import ScriptedLLM
from turnfsm.tools import Approval

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit  # tests/ is on sys.path (no tests/__init__.py)
from mcp_helpers import FAULT_SERVER, alive, children, gone

pytestmark = pytest.mark.mcp


def calls(*items: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in items]}


def results(turn: Any) -> dict[str, tuple[bool, Any]]:
    return {
        m.tool_result.request_id: (m.tool_result.success, m.tool_result.result)
        for m in turn.messages
        if m.tool_result is not None
    }


def held_port(port: int) -> socket.socket:
    """``port`` bound (not listened on) with ``SO_REUSEPORT``: connections are
    refused, and no process but a fault server (which binds the same way) can
    take it until the socket is closed."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    return sock


# ---------------------------------------------------------------------- the reference servers


@pytest.mark.anyio
async def test_the_everything_server_text_image_resource_and_structured_results(
    npm_servers: dict[str, Path], no_new_children: None
) -> None:
    from turnfsm.tools.mcp import MCPServer

    llm = ScriptedLLM(
        [
            calls(
                ("e", "echo", {"message": "hi"}),
                ("i", "get-tiny-image", {}),
                ("r", "get-resource-reference", {"resourceType": "Text", "resourceId": 1}),
                ("s", "get-structured-content", {"location": "New York"}),
                ("n", "get-sum", {"a": 2, "b": "three"}),
            ),
            {"text": "done"},
        ]
    )
    server = MCPServer.stdio([str(npm_servers["everything"])])
    async with Engine(llm=llm, toolsets=[server]) as engine:
        echo = engine.tools.get("echo")
        assert echo is not None
        # the server's hints are kept, and change nothing without an opt-in
        assert echo.annotations["readOnlyHint"] is True  # type: ignore[attr-defined]
        assert echo.approval is Approval.REQUIRED and not echo.idempotent
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
        assert str(turn.state) == "AwaitingToolApproval"
        assert {c.id for c in turn.pending_tool_calls} == {"e", "i", "r", "s", "n"}
        turn = await engine.approve(cid, ["e", "i", "r", "s", "n"])
    assert str(turn.state) == "Idle"
    got = results(turn)
    assert got["e"] == (True, "Echo: hi")
    ok, image = got["i"]
    kinds = [b["type"] for b in image["content"]]
    assert ok and "image" in kinds
    [picture] = [b for b in image["content"] if b["type"] == "image"]
    assert picture["mimeType"] == "image/png" and len(picture["data"]) > 100
    ok, ref = got["r"]
    [embedded] = [b for b in ref["content"] if b["type"] == "resource"]
    assert ok and embedded["resource"]["uri"] == "demo://resource/dynamic/text/1"
    ok, weather = got["s"]
    assert ok and set(weather) == {"temperature", "conditions", "humidity"}
    ok, invalid = got["n"]  # 'three' is not a number: refused before the server is asked
    assert not ok and "invalid arguments for tool 'get-sum'" in invalid["error"]


@pytest.mark.anyio
async def test_the_filesystem_server_under_approval(
    npm_servers: dict[str, Path], tmp_path: Path, no_new_children: None
) -> None:
    from turnfsm.tools.mcp import MCPServer

    (tmp_path / "notes.txt").write_text("first line\n")
    llm = ScriptedLLM(
        [
            calls(("r", "fs__read_text_file", {"path": str(tmp_path / "notes.txt")})),
            calls(("w", "fs__write_file", {"path": str(tmp_path / "new.txt"), "content": "x"})),
            {"text": "denied, fine"},
            calls(("x", "fs__read_text_file", {"path": "/etc/hostname"})),
            {"text": "not allowed"},
        ]
    )
    # the application trusts read-only hints of this server; writes still ask
    server = MCPServer.stdio(
        [str(npm_servers["filesystem"]), str(tmp_path)], prefix="fs", read_only_approval="auto"
    )
    async with Engine(llm=llm, toolsets=[server]) as engine:
        assert engine.tools.get("fs__read_text_file").approval is Approval.AUTO  # type: ignore[union-attr]
        assert engine.tools.get("fs__write_file").approval is Approval.REQUIRED  # type: ignore[union-attr]
        cid = await engine.create_context()
        turn = await engine.send(cid, "read then write")
        # the server's structuredContent is the result (its text block says the same)
        assert results(turn)["r"] == (True, {"content": "first line\n"})
        assert [c.id for c in turn.pending_tool_calls] == ["w"]
        turn = await engine.deny(cid, "w", "no writing")
        assert str(turn.state) == "Idle"
        assert not (tmp_path / "new.txt").exists()  # a denied call is not run
        turn = await engine.send(cid, "read outside")
        ok, error = results(turn)["x"]
        assert not ok and "outside allowed directories" in error["error"]


# ---------------------------------------------------------------------- Streamable HTTP


class HttpServer:
    """The fault server over Streamable HTTP, in a process of its own."""

    def __init__(self, port: int = 0) -> None:
        self.proc = subprocess.Popen(
            [*FAULT_SERVER, "--http", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        # the port it bound (the one port 0 took): its first line, or nothing if it died
        bound = self.proc.stdout.readline()
        assert bound.startswith("fault server: bound to "), f"the HTTP fault server: {bound!r}"
        self.url = bound.removeprefix("fault server: bound to ").strip()
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])
        deadline = time.monotonic() + 30
        # one client for every try: each new one (httpx.get makes one)
        # loads the CA certificates again
        with httpx.Client() as client:
            while True:
                assert self.proc.poll() is None, "the HTTP fault server exited"
                try:
                    client.get(self.url, timeout=1)
                    return
                except httpx.HTTPError:
                    assert time.monotonic() < deadline, "the HTTP fault server did not start"
                    time.sleep(0.1)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.mark.anyio
async def test_http_with_headers_and_a_reconnect_after_the_server_went_away() -> None:
    from turnfsm.tools.mcp import MCPServer

    first = HttpServer()
    # the port is held from here on, so that the second server gets it back
    # (the client reconnects to the same URL) and nothing else takes it meanwhile
    hold = held_port(first.port)
    try:
        llm = ScriptedLLM(
            [
                calls(("a", "whoami", {})),
                {"text": "ok"},
                calls(("b", "pid", {})),
                {"text": "gone"},
                calls(("c", "whoami", {})),
                {"text": "back"},
            ]
        )
        server = MCPServer.http(
            first.url, headers={"Authorization": "Bearer s3cret"}, approval="auto", timeout=10
        )
        async with Engine(llm=llm, toolsets=[server]) as engine:
            cid = await engine.create_context()
            turn = await engine.send(cid, "who am I?")
            assert results(turn)["a"] == (True, {"result": "Bearer s3cret"})
            first.stop()
            turn = await engine.send(cid, "and now?")
            ok, error = results(turn)["b"]
            assert not ok and "MCP server" in error["error"], error
            assert str(turn.state) == "Idle"
            second = HttpServer(first.port)
            hold.close()
            try:
                turn = await engine.send(cid, "again")
                assert results(turn)["c"] == (True, {"result": "Bearer s3cret"})
                assert server.restarts >= 1
            finally:
                second.stop()
    finally:
        hold.close()
        if first.proc.poll() is None:
            first.stop()


# ---------------------------------------------------------------------- serve and worker


def mcp_children(pid: int) -> set[int]:
    """The fault-server processes whose parent is ``pid``."""
    out: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"fault_server.py" in cmdline:
            out.add(int(entry.name))
    return out


def wait_for_children(proc: subprocess.Popen[bytes], log: Path) -> set[int]:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()
        found = {p for p in mcp_children(proc.pid) if alive(p)}
        if found:
            return found
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    kit.wait_ready(url, process=proc, log=log)


def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        raise


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_sigterm_stops_the_command_and_its_mcp_servers(command: str, tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    store = f"sqlite:///{tmp_path / 'store.db'}"
    argv = [sys.executable, "-m", "turnfsm", command, "--store", store]
    if command == "serve":
        argv += ["--port", "0"]
    mcp = ["--mcp", f"a={shlex.join(FAULT_SERVER)}", "--mcp", f"b={shlex.join(FAULT_SERVER)}"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*argv, *mcp],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""},
        )
        try:
            servers = wait_for_children(proc, log)
            while len(servers) < 2:  # the second one starts after the first
                time.sleep(0.1)
                servers = wait_for_children(proc, log)
            if command == "serve":
                wait_ready(kit.listening_url(proc, log), proc, log)
            # uvicorn raises the signal again once it has shut down: -SIGTERM
            assert stop(proc) in (0, -signal.SIGTERM), log.read_text()
            assert b"Traceback" not in log.read_bytes(), log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
    for pid in servers:
        assert anyio.run(gone, pid), f"MCP server {pid} outlived turnfsm {command}"
        assert pid not in children()
