"""``--mcp`` on ``turnfsm chat``: the server runs for the chat and is gone after
it; options that cannot work are one line and exit 2. (``serve`` and
``worker`` with MCP servers, stopped by SIGTERM: tests/mcp_tools/test_mcp_servers.py.)
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from turnfsm.cli._mcp import add_mcp_options, mcp_toolsets

from .conftest import Cli

HERE = Path(__file__).parents[1] / "mcp_tools"
FAULT = shlex.join([sys.executable, str(HERE / "fault_server.py")])


def _children() -> set[int]:
    sys.path.insert(0, str(HERE))
    from mcp_helpers import children

    return children()


def test_chat_runs_the_server_for_the_chat_and_stops_it(cli: Cli, tmp_path: Path) -> None:
    before = _children()
    ran = cli("chat", "--demo", "--json", "-m", "hello", "--mcp", f"f={FAULT}")
    assert ran.code == 0, ran.err
    assert json.loads(ran.out.splitlines()[-1])["state"] == "Idle"
    assert _children() == before  # no server process outlives the chat


def test_a_server_that_cannot_start_is_one_line_and_exit_2(cli: Cli) -> None:
    ran = cli("chat", "--demo", "-m", "hello", "--mcp", "/nonexistent/server --stdio")
    assert ran.code == 2
    line = ran.one_line()
    assert "MCP server 'server' could not be started" in line, line


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_mcp_options(p)
    return p.parse_args(list(argv))


def test_the_options_make_servers_in_order_with_prefixes_and_headers() -> None:
    from turnfsm.tools.mcp import MCPServer

    args = parse(
        "--mcp",
        "fs=npx -y server /tmp",
        "--mcp-url",
        "https://a.example/mcp",
        "--mcp-header",
        "Authorization: Bearer one",
        "--mcp-url",
        "web=https://b.example/mcp?x=1",
        "--mcp-approval",
        "read-only",
        "--mcp-timeout",
        "5",
    )
    servers = mcp_toolsets(args)
    assert [type(s) for s in servers] == [MCPServer] * 3
    fs, a, web = servers
    assert isinstance(fs, MCPServer) and isinstance(a, MCPServer) and isinstance(web, MCPServer)
    assert fs.prefix == "fs" and fs.name == "fs"
    assert fs._target.command == "npx" and fs._target.args == ["-y", "server", "/tmp"]  # type: ignore[union-attr]
    assert a.prefix is None and a._target == (
        "https://a.example/mcp",
        {"Authorization": "Bearer one"},
    )
    assert web.prefix == "web" and web._target == (
        "https://b.example/mcp?x=1",
        {},
    )  # its own headers
    for s in servers:
        assert s.approval == "required" and s.read_only_approval == "auto" and s.timeout == 5.0


def test_a_header_needs_a_url_before_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--mcp", "x", "--mcp-header", "A: b")
    assert "give it after the --mcp-url it is for" in capsys.readouterr().err


def test_a_command_that_is_no_mcp_server_is_one_line_with_its_cause(tmp_path: Path) -> None:
    """``ls`` answers with file names: the SDK logs a traceback for each line;
    the command says it in one line of its own, the cause kept."""
    (tmp_path / "notes.txt").write_text("not a server\n")
    ran = subprocess.run(
        [sys.executable, "-m", "turnfsm", "chat", "--demo", "-m", "hi", "--store", "memory://",
         "--mcp", "ls"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert ran.returncode == 2
    assert "Traceback" not in ran.stderr
    assert ran.stderr.count("\n") == 1, ran.stderr
    assert ran.stderr.startswith("turnfsm chat: MCP server 'ls' could not be started: ")
    assert "it sent what is not MCP" in ran.stderr and "notes.txt" in ran.stderr
