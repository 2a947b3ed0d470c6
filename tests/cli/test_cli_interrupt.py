"""Ctrl-C, closed pipes and terminals: a real ``turnfsm`` process for each
signal or closed pipe, then this process checking that the store holds a
conversation that can be continued; a terminal's refusal in this process,
its standard output a pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from kit import first_by_default  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.cli._demo import get_weather
from turnfsm.engine import Engine
from turnfsm.events import ContentDelta
from turnfsm.storage import open_store

from .conftest import Cli, contexts

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("TURNFSM_", "OPENAI_"))}


def _start(*argv: str, stdin: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "turnfsm", *argv],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )


def _read_until(proc: subprocess.Popen[bytes], marker: bytes) -> bytes:
    assert proc.stdout is not None
    seen = b""
    while marker not in seen:
        chunk = os.read(proc.stdout.fileno(), 4096)
        assert chunk, (seen, proc.stderr.read() if proc.stderr else b"")
        seen += chunk
    return seen


def test_ctrl_c_while_the_demo_streams_then_resume_finishes_it(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/demo.db"
    proc = _start("demo", "--yes", "--delay", "0.2", "--store", url)
    _read_until(proc, b"assistant> The")  # the answer is streaming, one chunk each 0.2 s
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.decode() == "turnfsm demo: interrupted\n"

    (row,) = contexts(cli, url)
    assert row["state"] == "StreamingLLMResponse"  # kept as it was when stopped
    # the interrupted process is gone: what it left is read and resumed here
    shown = cli("contexts", "show", row["id"], "--store", url)
    assert shown.code == 0 and json.loads(shown.out)["id"] == row["id"]

    resumed = cli("resume", row["id"], "--demo", "--store", url)
    assert resumed.code == 0, resumed.err
    assert "The weather in London is 15 C and cloudy." in resumed.out
    assert resumed.out.rstrip().endswith("ProcessingLLMResponse -> Idle")
    again = cli("resume", row["id"], "--demo", "--store", url)
    assert again.code == 0 and "nothing to resume" in again.out


def test_ctrl_c_at_the_chat_prompt_keeps_the_conversation(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/chat.db"
    proc = _start("chat", "--demo", "--store", url, stdin=subprocess.PIPE)
    _read_until(proc, b"(resume with --context ")  # the context exists; chat reads input
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.decode() == "turnfsm chat: interrupted\n"
    (row,) = contexts(cli, url)
    assert row["state"] == "Idle"
    more = cli("chat", "--demo", "--store", url, "--context", row["id"], "-m", "thanks", "--json")
    assert more.code == 0, more.err
    assert json.loads(more.out)["state"] == "Idle"


def test_recover_resumes_every_interrupted_context(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/r.db"

    async def interrupt_one() -> str:
        async with Engine(llm=DemoLLM(delay=0.3), tools=[get_weather], store=open_store(url)) as e:
            cid = await e.create_context(system_prompt="weather", model="demo")
            async with e.subscribe(cid) as events, anyio.create_task_group() as tg:
                tg.start_soon(e.send, cid, "Who are you?")
                async for ev in events:
                    if isinstance(ev, ContentDelta):
                        tg.cancel_scope.cancel()  # as Ctrl-C does, mid-stream
                        break
        return cid

    first, second = anyio.run(interrupt_one), anyio.run(interrupt_one)
    assert {c["state"] for c in contexts(cli, url)} == {"StreamingLLMResponse"}
    ran = cli("recover", "--demo", "--store", url)
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert sorted(line.split(":")[0] for line in lines) == sorted([first, second])
    assert all(line.split(", now ")[1].startswith("Idle (") for line in lines)
    assert {c["state"] for c in contexts(cli, url)} == {"Idle"}
    ran = cli("recover", "--demo", "--store", url)
    assert ran.code == 0 and ran.out.startswith("nothing to recover")


@pytest.mark.parametrize(
    "argv",
    # the same end through another command's output: with -m sweep
    first_by_default(
        [["diagram"], ["replay", "--json", str(Path(__file__).parent.parent / "scripts")]],
        ["diagram", "replay"],
    ),
)
def test_a_reader_that_goes_away_ends_quietly(argv: list[str]) -> None:
    proc = _start(*argv)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head` does once it has enough
    with proc.stderr:
        err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert err == b""


def test_a_png_is_not_written_to_a_terminal(cli: Cli) -> None:
    # in this process, its standard output a real terminal (a pseudo-terminal's)
    leader, follower = pty.openpty()
    stdout = sys.stdout
    try:
        with open(follower, "w", closefd=False) as terminal:
            sys.stdout = terminal
            try:
                ran = cli("diagram", "--format", "png")
            finally:
                sys.stdout = stdout
    finally:
        os.close(follower)
        os.close(leader)
    assert ran.code == 2
    assert ran.err.count("\n") == 1 and "Traceback" not in ran.err
    assert ran.err.startswith("turnfsm diagram: a PNG is binary: give --out FILE")
