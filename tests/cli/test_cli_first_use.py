"""What a new user meets first on the command line: where the store is (its
absolute path), which model is called, a server that cannot start, a Ctrl-C
while the command loads."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import turnfsm_entry
from turnfsm.cli import build_parser
from turnfsm.cli._chat_model import DEFAULT_MODEL
from turnfsm.cli._demo import run_demo
from turnfsm.cli._serve import model_name, model_of
from turnfsm.cli._store import open_cli_store
from turnfsm.storage._url import absolute_url, store_location
from turnfsm.tools import tool

from .conftest import Cli, contexts

ROOT = Path(__file__).resolve().parents[2]


@tool
def get_weather(city: str) -> str:
    """The application's own weather tool."""
    return f"sunny in {city}"


TOOLS = [get_weather]


def _serve_args(*argv: str) -> object:
    return build_parser().parse_args(["serve", *argv])


def test_the_model_of_new_contexts_is_the_one_sent_upstream() -> None:
    args = _serve_args("--base-url", "http://127.0.0.1:9/v1")
    llm, tools = model_of(args)
    # no model of the adapter's own: each context's model is what is sent
    assert getattr(llm, "model", None) is None
    assert model_name(args, llm) == DEFAULT_MODEL
    args = _serve_args("--base-url", "http://127.0.0.1:9/v1", "--model", "llama3.2")
    llm, _ = model_of(args)
    assert getattr(llm, "model", None) is None and model_name(args, llm) == "llama3.2"
    args = _serve_args()
    llm, tools = model_of(args)
    assert model_name(args, llm) == "demo" and [t.name for t in tools] == ["get_weather"]


def test_the_applications_tools_replace_the_demo_models() -> None:
    args = _serve_args("--tools", f"{__name__}:TOOLS")
    _, tools = model_of(args)
    assert tools == []  # the demo's get_weather is not offered beside the application's


APP = """
from turnfsm.tools import tool

@tool
def get_weather(city: str) -> str:
    \"\"\"The application's own weather tool.\"\"\"
    return "sunny"

TWICE = [get_weather, get_weather]
"""


def test_a_server_that_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "first_use_app.py").write_text(APP)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
        "TURNFSM_STORE": "",
        "OPENAI_API_KEY": "",
        "OPENAI_BASE_URL": "",
    }
    ran = subprocess.run(
        [sys.executable, "-m", "turnfsm", "serve", "--port", "0", "--store", "memory://",
         "--tools", "first_use_app:TWICE"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr and "Application startup failed" not in ran.stderr
    lines = ran.stderr.splitlines()
    assert lines[0].startswith("turnfsm serve: http://127.0.0.1:0, model demo, store memory://")
    assert lines[1:] == [
        "turnfsm serve: the server did not start: ToolDefinitionError: two tools are "
        "named 'get_weather'; names must be unique"
    ]
    assert ran.stdout == ""  # log lines go to standard error


def test_a_store_is_shown_by_its_absolute_path(
    cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert absolute_url("sqlite:///chats.db?busy_timeout=2") == (
        f"sqlite:///{tmp_path}/chats.db?busy_timeout=2"
    )
    assert absolute_url("files:////srv/chats") == "files:////srv/chats"
    assert absolute_url("memory://") == "memory://"
    assert store_location("files:///chats") == f"{tmp_path}/chats"
    assert store_location("memory://").startswith("memory://")
    _, shown = open_cli_store("sqlite:///data/chats.db")
    assert shown == f"sqlite:///{tmp_path}/data/chats.db"
    # an error about a path gives it whole, its leading slash kept
    ran = cli("contexts", "list", "--store", "sqlite:///nonexistent/dir/x.db")
    assert ran.code == 2
    assert f"no SQLite store at {tmp_path}/nonexistent/dir/x.db" in ran.one_line()
    ran = cli("demo", "--delay", "0", "--store", "sqlite:///d.db")
    assert ran.code == 0, ran.err
    assert f"kept in sqlite:///{tmp_path}/d.db" in ran.out


@pytest.mark.anyio
async def test_the_demo_in_memory_says_nothing_is_kept() -> None:
    buf = io.StringIO()
    assert await run_demo(False, 0.0, False, buf, "memory://") == 0
    last = buf.getvalue().rstrip().splitlines()[-1]
    assert "nothing is kept" in last and "kept in" not in last


def test_ctrl_c_while_the_command_loads_is_one_line_and_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Loading(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            raise KeyboardInterrupt  # as a Ctrl-C in the middle of the package's imports

    monkeypatch.setitem(sys.modules, "turnfsm.cli", Loading("turnfsm.cli"))
    assert turnfsm_entry.main() == 130
    out, err = capsys.readouterr()
    assert err == "turnfsm: interrupted\n" and out == ""


def test_the_command_is_the_entry_module() -> None:
    """The installed ``turnfsm`` script starts in :mod:`turnfsm_entry`, not in
    the package (whose import a Ctrl-C could interrupt)."""
    text = (ROOT / "pyproject.toml").read_text()
    assert 'turnfsm = "turnfsm_entry:main"' in text


def test_chat_on_a_context_with_another_model_records_it(cli: Cli, tmp_path: Path) -> None:
    """``chat --context ID --model X`` sends X: the context says so too (a
    ``config_updated`` step), as ``--mode`` does for the mode."""
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    assert cli("chat", "--demo", "-m", "hi", "--store", url).code == 0
    (row,) = contexts(cli, url)
    shown = cli("contexts", "show", row["id"], "--store", url)
    assert json.loads(shown.out)["config"]["model_id"] == "demo"
    ran = cli(
        "chat", "--demo", "--context", row["id"], "--model", "other-1", "-m", "hi", "--store", url
    )
    assert ran.code == 0, ran.err
    shown = cli("contexts", "show", row["id"], "--store", url)
    assert json.loads(shown.out)["config"]["model_id"] == "other-1"


@pytest.mark.parametrize("command", ["chat", "record"])
def test_a_call_denied_for_want_of_a_terminal_says_the_policy_and_the_way_out(
    cli: Cli, command: str
) -> None:
    argv = ["--demo", "--store", "memory://"] if command == "chat" else ["--out", "w.json"]
    ran = cli(command, *argv, "-m", "What's the weather in Rome?")
    assert ran.code == 0, ran.err
    denied = next(line for line in ran.out.splitlines() if line.startswith("denied "))
    assert "--approve none" not in ran.out  # no such option was given
    assert "stdin is not a terminal" in denied and "denied by default" in denied
    assert "--approve all approves them" in denied and "--approve ask" in denied
    ran = cli(command, *argv, "-m", "What's the weather in Rome?", "--approve", "none")
    assert "denied: --approve none" in ran.out  # the option given is named as given


def test_a_chat_in_memory_says_it_is_gone_at_exit(cli: Cli) -> None:
    ran = cli("chat", "--demo", "-m", "hi", "--store", "memory://")
    assert ran.code == 0, ran.err
    first = ran.out.splitlines()[0]
    assert "a memory:// store is gone at exit" in first
    assert "resume with --context" not in first  # there is nothing to resume
    ran = cli("chat", "--demo", "-m", "hi", "--store", "sqlite:///kept.db")
    assert "(resume with --context " in ran.out.splitlines()[0]


def test_chat_lists_the_tools_the_model_is_offered(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("/tools\n"))
    ran = cli("chat", "--demo", "--store", "memory://")
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert lines[1] == "4 tools offered in mode chat:"
    assert lines[2:] == [
        "  clock (auto): The current date and time in a timezone.",
        "  calculator (auto): Evaluate an arithmetic expression exactly (no variables or "
        "functions).",
        "  read_file (required): Read a text file in the user's working directory.",
        "  get_weather (required): Current weather for a city.",
    ]
