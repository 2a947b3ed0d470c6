"""What the ``turnfsm`` command imports before it does what it was asked.

``turnfsm --help`` names every command but needs none of their modules; one
command needs its own module and what it uses, not the server, Temporal, the
model SDKs or the MCP client of the others. Each case runs in a fresh process,
as the command does.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from turnfsm.cli import COMMANDS, build_parser

HEAVY = (
    "fastapi",
    "starlette",
    "uvicorn",
    "temporalio",
    "opentelemetry.sdk",
    "openai",
    "anthropic",
    "google.genai",
    "mcp",
    "httpx",
    "structlog",
    "pygments",
    "prometheus_client",
    "psycopg",
    "jsonschema",
)
"""Packages none of the starts below uses."""

NAMES = [name for _, commands in COMMANDS for name, _ in commands]


def _modules_after(*runs: list[str]) -> set[str]:
    """The modules of a fresh process once ``turnfsm`` ran with each of ``runs``
    (stdin at its end)."""
    code = f"""
import contextlib, io, json, sys
from turnfsm.cli import main
codes = []
for argv in {list(runs)!r}:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        codes.append(main(argv))
print(json.dumps([codes, sorted(sys.modules)]))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], input="", capture_output=True, text=True, check=True
    )
    codes, modules = json.loads(out.stdout.splitlines()[-1])
    assert codes == [0] * len(runs), out.stderr
    return set(modules)


def _heavy(modules: set[str]) -> list[str]:
    return sorted(h for h in HEAVY if h in modules)


def test_help_imports_no_command() -> None:
    loaded = _modules_after(["--help"])
    assert _heavy(loaded) == []
    assert sorted(m for m in loaded if m.startswith("turnfsm.cli.")) == ["turnfsm.cli._errors"]


def test_no_commands_help_imports_what_only_running_it_needs() -> None:
    # one process for all of them: what none of them imports is not in it at the end
    loaded = _modules_after(*([name, "--help"] for name in NAMES))
    assert _heavy(loaded) == []
    assert sorted(m for m in loaded if m.startswith(("turnfsm.server", "turnfsm.temporal"))) == []
    assert "turnfsm.cli._chat_session" not in loaded


def test_the_help_of_chat_and_replay_builds_no_pydantic_schema() -> None:
    # the first schema built looks up pydantic's plugins (importlib.metadata and
    # email behind it): ask_user's arguments and the replay script's model are
    # built when a chat asks for the tool or a replay runs, not for the help
    loaded = _modules_after(["chat", "--help"], ["resume", "--help"], ["replay", "--help"])
    assert sorted(m for m in loaded if m.startswith("turnfsm.replay")) == []
    assert "pydantic.plugin._loader" not in loaded
    assert "importlib.metadata" not in loaded


def test_chat_with_the_demo_model_starts_without_what_it_does_not_use() -> None:
    # stdin at its end: the chat opens its store and context, reads, and ends
    loaded = _modules_after(["chat", "--demo", "--store", "memory://"])
    assert "turnfsm.cli._chat_session" in loaded
    assert _heavy(loaded) == []
    assert "turnfsm.server" not in loaded


def test_demo_starts_without_what_it_does_not_use() -> None:
    loaded = _modules_after(["demo", "--yes", "--store", "memory://", "--delay", "0"])
    assert "turnfsm.cli._demo" in loaded
    assert _heavy(loaded) == []


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_the_command_table_names_what_each_module_adds() -> None:
    sub = _subparsers(build_parser())
    assert list(sub.choices) == NAMES
    helps = {action.dest: action.help for action in sub._choices_actions}
    assert helps == {name: line for _, commands in COMMANDS for name, line in commands}


@pytest.mark.parametrize("command", [None, *NAMES])
def test_a_lazy_parser_shows_the_help_of_the_whole_one(command: str | None) -> None:
    argv = [] if command is None else [command]
    lazy = build_parser(argv)
    whole = build_parser()
    assert lazy.format_help() == whole.format_help()
    if command is not None:
        assert _subparsers(lazy).choices[command].format_help() == (
            _subparsers(whole).choices[command].format_help()
        )


def test_the_command_is_the_first_argument_that_is_not_an_option() -> None:
    sub = _subparsers(build_parser(["--", "chat", "--demo"]))
    assert sub.choices["chat"].get_default("run") is not None
    assert sub.choices["demo"].get_default("run") is None
