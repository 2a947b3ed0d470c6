"""``--tool-history``, ``--token-budget`` and ``--compaction`` where users run turns:
``serve`` and ``worker`` show the last 10 tool calls in full unless told otherwise,
``chat`` every call; the options reach the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turnfsm.cli import build_parser
from turnfsm.cli._history_options import history_settings
from turnfsm.enhancers import Compaction, TokenBudget

from .conftest import Cli, stored_views


def _settings(*argv: str) -> dict[str, object]:
    return history_settings(build_parser().parse_args(list(argv)))


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_serve_and_worker_show_ten_calls_by_default(command: str) -> None:
    assert _settings(command) == {
        "tool_history_rounds": 10,
        "token_budget": None,
        "compaction": None,
    }
    given = _settings(
        command, "--tool-history", "3", "--token-budget", "8000", "--compaction", "6000"
    )
    assert given["tool_history_rounds"] == 3
    budget, compaction = given["token_budget"], given["compaction"]
    assert isinstance(budget, TokenBudget) and budget.max_input_tokens == 8000
    assert isinstance(compaction, Compaction) and compaction.threshold_tokens == 6000


@pytest.mark.parametrize("command", ["chat", "resume x", "recover"])
def test_chat_shows_every_call_by_default(command: str) -> None:
    settings = _settings(*command.split())
    assert settings == {"tool_history_rounds": None, "token_budget": None, "compaction": None}


@pytest.mark.parametrize("flag", ["--token-budget", "--compaction", "--tool-history"])
def test_a_bad_count_is_refused(cli: Cli, flag: str) -> None:
    ran = cli("serve", flag, "-5")
    assert ran.code != 0 and flag.removeprefix("--") in ran.err


def test_chat_takes_a_token_budget(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    args = ("--demo", "--approve", "all", "--token-budget", "100000", "--json", "--store", url)
    ran = cli("chat", *args, "-m", "What is the weather in London?")
    assert ran.code == 0, ran.err
    cid = json.loads(ran.out)["context_id"]
    views = [v for v in stored_views(url, cid) if v]
    assert views and all("token_budget" in v for v in views)
    assert all("tool_history" not in v for v in views)  # chat: every call in full
