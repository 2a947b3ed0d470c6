"""``turnfsm chat`` on a real terminal (a pty) and stopped by real signals:
Ctrl-C at the prompt ends it at once, SIGTERM stops the MCP servers it
started."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from kit import READY_WITHIN  # tests/ is on sys.path

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("TURNFSM_", "OPENAI_"))}
TURNFSM = str(Path(sys.executable).parent / "turnfsm")
# the pty becomes the process's controlling terminal, as a shell's is: the
# terminal itself then turns a typed Ctrl-C into SIGINT
AS_ON_A_TERMINAL = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


class Terminal:
    """A ``turnfsm`` process whose stdin, stdout and stderr are a pty."""

    def __init__(self, *argv: str, cwd: Path) -> None:
        self.leader, follower = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", AS_ON_A_TERMINAL, TURNFSM, *argv],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env=ENV,
            cwd=cwd,
            start_new_session=True,
        )
        os.close(follower)
        self.seen = b""

    def read_until(self, marker: bytes, *, after: int = 0) -> bytes:
        """What the terminal showed, up to ``marker`` (found past ``after``)."""
        while marker not in self.seen[after:]:
            ready, _, _ = select.select([self.leader], [], [], 60)
            assert ready, self.seen
            chunk = os.read(self.leader, 4096)
            assert chunk, self.seen
            self.seen += chunk
        return self.seen

    def wait_idle(self) -> None:
        """Until every thread of the process sleeps (Linux's /proc): what it
        does at a prompt, once the read of the line has begun."""
        tasks = Path(f"/proc/{self.proc.pid}/task")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = [
                (t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()
            ]
            if all(state == "S" for state in states):
                return
            time.sleep(0.02)
        raise AssertionError(f"the process never waited at its prompt: {self.seen!r}")

    def type(self, text: str) -> None:
        os.write(self.leader, text.encode())

    def exit_code(self, within: float) -> int | None:
        """The exit code once the process has ended, None if it runs on past ``within`` s."""
        try:
            return self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.leader)


def test_ctrl_c_at_the_prompt_exits_130_at_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/chat.db"
    term = Terminal("chat", "--demo", "--store", url, cwd=tmp_path)
    try:
        term.read_until(b"you> ")
        term.type("hello\n")
        mark = len(term.seen)
        term.read_until(b"you> ", after=mark)  # a turn ran; it waits at the prompt again
        term.wait_idle()
        term.type("\x03")  # Ctrl-C
        # generous for a loaded machine, far short of forever: nothing is typed after it
        code = term.exit_code(within=30)
        assert code == 130, term.seen
        term.read_until(b"turnfsm chat: interrupted")
    finally:
        term.close()


# an MCP server whose call runs until it is stopped: the fault server of
# tests/mcp_tools (on the standard library: it starts without importing an SDK)
# with one more tool
SLOW_SERVER = f"""\
import os
import sys
import time

sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / "mcp_tools")!r})
from fault_server import FaultServer, Tool, serve_stdio

server = FaultServer()


def slow(call):
    \"\"\"Say the server's process id in a file, then take ten minutes.\"\"\"
    with open(sys.argv[1], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
    return "done"


server.tools["slow"] = Tool("slow", slow.__doc__, slow)
serve_stdio(server)
"""

CALLS_SLOW = """\
from turnfsm.adapters.llm.scripted import ScriptedLLM

llm = ScriptedLLM(
    [
        {"tool_calls": [{"id": "call_1", "name": "s__slow", "arguments": {}}]},
        {"text": "done"},
    ]
)
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, waiting to be reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_sigterm_during_an_mcp_call_stops_the_server_and_exits_143(tmp_path: Path) -> None:
    (tmp_path / "slow_server.py").write_text(SLOW_SERVER)
    (tmp_path / "calls_slow.py").write_text(CALLS_SLOW)
    marker = tmp_path / "server.pid"
    server = f"s={sys.executable} {tmp_path / 'slow_server.py'} {marker}"
    argv = ["chat", "--llm", "calls_slow:llm", "--mcp", server, "--mcp-approval", "auto"]
    proc = subprocess.Popen(
        [TURNFSM, *argv, "-m", "go", "--store", f"sqlite:///{tmp_path}/chat.db"],
        cwd=tmp_path,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # two interpreters start (turnfsm, the MCP server) and shake hands before
        # the call: a start-up, bounded as the suite bounds a server's (a bound
        # against one that never comes, which a loaded machine's start-up stretches)
        deadline = time.monotonic() + READY_WITHIN
        while not marker.exists() or not marker.read_text():  # the call is running
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the MCP call never started"
            time.sleep(0.05)
        server_pid = int(marker.read_text())
        assert _alive(server_pid)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert (
        err.decode() == "turnfsm chat: stopped by SIGTERM; the MCP server it started is stopped\n"
    )
    assert not _alive(server_pid)  # not left behind, reparented to PID 1
