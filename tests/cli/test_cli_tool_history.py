"""``turnfsm chat --tool-history N``: older tool calls shown by name only."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import Cli, stored_views


def test_tool_history_shows_older_calls_by_name_only(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    args = ("--demo", "--approve", "all", "--tool-history", "1", "--json", "--store", url)
    ran = cli("chat", *args, "-m", "What is the weather in London?")
    assert ran.code == 0, ran.err
    cid = json.loads(ran.out)["context_id"]
    ran = cli("chat", *args, "--context", cid, "-m", "What is the weather in Paris?")
    assert ran.code == 0, ran.err
    views = [v for v in stored_views(url, cid) if v]
    # the last answer was made from a view with the London call by name only
    assert views[-1]["tool_history"] == {"calls": 2, "full": 1, "name_only": 1}


def test_tool_history_refuses_a_negative_count(cli: Cli) -> None:
    ran = cli("chat", "--demo", "--tool-history", "-1", "-m", "hi")
    assert ran.code != 0
    assert "tool-history" in ran.err
