"""The processes of the kill tests (``tests/scale/kill.py``,
``tests/temporal/kill.py``): each started again after a kill, its output
appended to one log; and, before the final SIGTERM, the wait until each is
past its start, so that an exit code tells how a running process stops."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["Proc", "all_started", "started_lines"]


@dataclass
class Proc:
    """One process of a kill test, started again after each kill."""

    name: str
    argv: list[str]
    kind: str  # "worker" or "server"
    port: int | None = None
    popen: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    starts: int = 0
    kills: int = 0
    pauses: int = 0

    def start(self, env: dict[str, str], folder: Path) -> None:
        self.starts += 1
        self.log = folder / f"{self.name}.log"
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                self.argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid


def started_lines(log: Path, start_line: tuple[str, str]) -> int:
    """How many times a worker's log says it started: its lines that begin with
    ``start_line[0]`` and hold ``start_line[1]`` (a worker writes that line
    once it handles SIGTERM)."""
    first, marker = start_line
    text = log.read_text(errors="replace")
    return sum(1 for line in text.splitlines() if line.startswith(first) and marker in line)


async def all_started(
    procs: Sequence[Proc],
    env: dict[str, str],
    folder: Path,
    *,
    ready: Callable[[Proc], Awaitable[None]],
    start_line: tuple[str, str],
    deadline: float,
) -> None:
    """Every process running (one that a fault cut short between its kill and
    its start is started again) and past its start: a server ``ready``, a
    worker's start line written for its newest start. Not a SIGTERM that comes
    while Python still imports, which ends a process before it can stop.
    Never raises (it runs before the processes are stopped): past
    ``deadline``, the exit codes tell what did not start."""
    for proc in procs:
        assert proc.popen is not None
        if proc.popen.poll() is not None:
            proc.start(env, folder)
    await asyncio.gather(*(ready(p) for p in procs if p.kind == "server"), return_exceptions=True)
    end = time.monotonic() + deadline
    for proc in procs:
        if proc.kind != "worker":
            continue
        assert proc.log is not None
        while started_lines(proc.log, start_line) < proc.starts:
            if time.monotonic() > end:
                break
            await asyncio.sleep(0.1)
