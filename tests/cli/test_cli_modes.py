"""``turnfsm chat`` and modes: ``--mode``, ``/mode``, and the mode shown where
the conversation is introduced and in ``--json``."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from .conftest import Cli


def test_a_new_conversation_in_plan_mode(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    ran = cli("chat", "--demo", "--mode", "plan", "-m", "hi", "--json", "--store", url)
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)
    assert doc["mode"] == "plan"
    assert doc["messages"][-1]["type"] == "Plan"
    # resumed with another mode: switched, and the answer is a text again
    ran = cli(
        "chat",
        "--demo",
        "--context",
        doc["context_id"],
        "--mode",
        "chat",
        "-m",
        "hi",
        "--json",
        "--store",
        url,
    )
    assert ran.code == 0, ran.err
    again = json.loads(ran.out)
    assert again["mode"] == "chat"
    assert "type" not in again["messages"][-1]


def test_the_opening_line_names_a_mode_other_than_chat(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    ran = cli("chat", "--demo", "--mode", "plan", "-m", "hi", "--store", url)
    assert ran.code == 0, ran.err
    first = ran.out.splitlines()[0]
    assert "; the demo model; mode plan (resume with --context " in first
    ran = cli("chat", "--demo", "-m", "hi", "--store", url)
    assert "; mode " not in ran.out.splitlines()[0]


def test_mode_command_switches_in_the_chat(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    monkeypatch.setattr(sys, "stdin", io.StringIO("/mode\n/mode plan\n/mode nope\nhello\n"))
    ran = cli("chat", "--demo", "--store", url)
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert "mode chat (modes: chat, plan)" in lines
    assert "mode plan" in lines
    assert any("unknown mode 'nope'; the engine's modes: chat, plan" in line for line in lines)
    cid = lines[0].split()[1]
    ran = cli("chat", "--demo", "--context", cid, "-m", "again", "--json", "--store", url)
    doc = json.loads(ran.out)
    assert doc["mode"] == "plan"
    assert doc["messages"][-1]["type"] == "Plan"


def test_an_unknown_mode_option_is_a_usage_error(cli: Cli) -> None:
    ran = cli("chat", "--demo", "--mode", "act", "-m", "hi")
    assert ran.code == 2
    assert "invalid choice: 'act'" in ran.one_line()
