"""``--max-iterations N`` and ``--ids uuid7|compact`` where users run turns
(``chat``, ``serve``, ``worker``): checked as they are read, passed to the
engine, and seen in what a turn stores: the notice of a turn stopped at the
limit, the kind of the new ids."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import httpx
import pytest
from kit import serve_in_process  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm.cli import build_parser
from turnfsm.cli._turn_options import turn_settings

from .conftest import Cli
from .test_cli_providers import _start, _stop

LOOP_APP = '''\
from turnfsm import tool
from turnfsm.testing import ScriptedLLM


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return "found " + q


def _always(request):
    n = len(request.messages)
    return {"tool_calls": [{"id": f"c{n}", "name": "lookup", "arguments": {"q": str(n)}}]}


class Loop(ScriptedLLM):
    """A model that asks for a tool every time."""

    def __init__(self):
        super().__init__(_always)


loop = Loop()
'''
COMPACT = re.compile(r"[0-9a-f]{16}-[0-9a-f]+")


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "loopapp.py").write_text(LOOP_APP)
    return tmp_path


@pytest.mark.parametrize("command", ["chat", "serve", "worker", "resume x", "recover"])
def test_the_options_reach_the_engine(command: str) -> None:
    argv = command.split()
    parse = build_parser().parse_args
    assert turn_settings(parse(argv)) == {"max_iterations": 20, "ids": None}
    given = parse([*argv, "--max-iterations", "3", "--ids", "compact"])
    assert turn_settings(given) == {"max_iterations": 3, "ids": "compact"}


@pytest.mark.parametrize("command", ["chat", "serve", "worker"])
@pytest.mark.parametrize("bad", ["0", "-2", "2.5", "x", "1e3"])
def test_a_bad_max_iterations_is_one_clear_line(cli: Cli, command: str, bad: str) -> None:
    ran = cli(command, f"--max-iterations={bad}")
    assert ran.code == 2
    assert "argument --max-iterations: must be a whole number from 1 to 1000000" in ran.err
    assert repr(bad) in ran.err or bad in ran.err


def test_an_unknown_kind_of_ids_is_refused(cli: Cli) -> None:
    ran = cli("chat", "--ids", "uuid4")
    assert ran.code == 2 and "argument --ids: invalid choice: 'uuid4'" in ran.err


@pytest.mark.parametrize("turns", ["workers", "temporal"])
def test_serve_refuses_max_iterations_where_its_turns_run_elsewhere(cli: Cli, turns: str) -> None:
    extra = ["--temporal", "127.0.0.1:9"] if turns == "temporal" else []
    ran = cli("serve", "--turns", turns, *extra, "--max-iterations", "3", "--port", "0")
    assert ran.code == 2, ran.err
    runner = "worker" if turns == "workers" else "temporal-worker"
    assert ran.one_line() == (
        f"turnfsm serve: --max-iterations 3: with --turns {turns} the turns run on the "
        f"workers; give it to `turnfsm {runner}`"
    )


def test_chat_stops_at_the_limit_and_says_so(cli: Cli, app: Path) -> None:
    url = f"sqlite:///{app}/chat.db"
    common = ("--llm", "loopapp:loop", "--tools", "loopapp:lookup", "--approve", "all")
    ran = cli("chat", *common, "--max-iterations", "2", "-m", "go", "--json", "--store", url)
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)
    assert doc["stop_reason"] == "max_iterations"
    last = doc["messages"][-1]
    assert last["role"] == "assistant" and "the limit of 2 LLM calls" in last["text"]
    assert doc["text"] == last["text"]
    # on the terminal: the notice is a line of its own, not the model's
    shown = cli("chat", *common, "--max-iterations", "1", "-m", "go", "--store", url)
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    notice = [line for line in lines if line.startswith("notice> ")]
    assert notice == [
        "notice> Stopped: the limit of 1 LLM calls for one user message was reached; "
        "the last answer's tool call was not run. Send a message to go on."
    ]
    assert not any(line.startswith("assistant> Stopped") for line in lines)


@pytest.mark.parametrize(("flags", "compact"), [([], False), (["--ids", "compact"], True)])
def test_chat_makes_the_ids_it_is_told_to(cli: Cli, flags: list[str], compact: bool) -> None:
    ran = cli("chat", "--demo", "-m", "Hello", "--json", "--store", "memory://", *flags)
    assert ran.code == 0, ran.err
    cid = json.loads(ran.out)["context_id"]
    if compact:
        assert COMPACT.fullmatch(cid), cid
    else:
        assert uuid.UUID(cid).version == 7 and str(uuid.UUID(cid)) == cid


def test_serve_takes_both_options(app: Path) -> None:
    with serve_in_process(
        "--port", "0", "--store", "sqlite:///serve.db",
        "--llm", "loopapp:loop", "--tools", "loopapp:lookup",
        "--max-iterations", "3", "--ids", "compact",
    ) as served:  # fmt: skip
        url = served.url
        cid = httpx.post(f"{url}/api/contexts", json={}).json()["id"]
        turn = httpx.post(
            f"{url}/api/contexts/{cid}/messages?wait=true", json={"content": "go"}, timeout=60
        )
        page = httpx.get(f"{url}/contexts/{cid}", timeout=60)
    assert COMPACT.fullmatch(cid), cid
    assert turn.status_code == 200, turn.text
    body = turn.json()
    assert body["stop_reason"] == "max_iterations"
    assert "the limit of 3 LLM calls" in body["text"]
    # the web view shows it, marked as turnfsm's
    assert page.status_code == 200
    assert "the limit of 3 LLM calls" in page.text
    (item,) = [li for li in page.text.split("<li ") if "Stopped: the limit of 3" in li]
    assert "role-assistant" in item and " notice" in item.split(">", 1)[0]
    assert "written by turnfsm, not by the model" in item


def test_a_worker_runs_the_turn_with_its_own_limit_and_ids(app: Path) -> None:
    """``serve --turns workers`` commits the message; the ``worker`` runs the
    turn: its ``--max-iterations`` stops it, its ``--ids`` names what it adds.
    The worker is a process of its own; the server runs in this one."""
    model = ("--llm", "loopapp:loop", "--tools", "loopapp:lookup", "--store", "sqlite:///w.db")
    worker = _start(app, "worker", *model, "--max-iterations", "2", "--ids", "compact")
    try:
        with serve_in_process("--port", "0", "--turns", "workers", *model) as served:
            url = served.url
            cid = httpx.post(f"{url}/api/contexts", json={}).json()["id"]
            turn = httpx.post(
                f"{url}/api/contexts/{cid}/messages?wait=true", json={"content": "go"}, timeout=120
            )
            page = httpx.get(f"{url}/api/contexts/{cid}/messages", timeout=60).json()
    finally:
        _stop(worker)
    assert turn.status_code == 200, turn.text
    assert turn.json()["state"] == "Idle"
    assert uuid.UUID(cid).version == 7  # made by serve, with the default ids
    user, *added = page["messages"]
    assert user["message"]["role"] == "user"
    # two LLM calls (an answer asking for a tool, its result, each), then the notice
    assert [m["message"]["role"] for m in added] == ["assistant", "tool"] * 2 + ["assistant"]
    notice = added[-1]["message"]
    assert notice["metadata"]["extra"] == {"notice": "max_iterations", "max_iterations": 2}
    assert "the limit of 2 LLM calls" in notice["content"][0]["text"]
    assert all(COMPACT.fullmatch(m["id"]) for m in added), [m["id"] for m in added]
