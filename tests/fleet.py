"""The processes of the kill tests (``tests/scale/kill.py``,
``tests/temporal/kill.py``): each started again after a kill, its output
appended to one log; and, before the final SIGTERM, the wait until each is
past its start, so that an exit code tells how a running process stops.

A server starts on ``--port 0`` every time and is reached where it says it
listens: the clients send to ``http://NAME/...`` (the server's name) with
:func:`to_servers`' hooks, which send the request to the port that start of
the server took. A port picked free and let go of could be another
process's by the time the server (or its restart) binds it."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["Proc", "all_started", "keep_or_remove", "started_lines", "to_servers"]

LISTENING = re.compile(rb"listening on http://127\.0\.0\.1:([0-9]+)")


@dataclass
class Proc:
    """One process of a kill test, started again after each kill."""

    name: str
    argv: list[str]
    kind: str  # "worker" or "server"
    port: int | None = None
    """The port this start of a server said it listens on (None until it has)."""
    popen: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    log_from: int = 0
    """Where this start's lines begin in ``log``."""
    starts: int = 0
    kills: int = 0
    pauses: int = 0

    def start(self, env: dict[str, str], folder: Path) -> None:
        self.starts += 1
        self.log = folder / f"{self.name}.log"
        self.port = None
        self.log_from = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                self.argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def listening_port(self) -> int | None:
        """The port the running start of this server listens on, once its
        log says so (``turnfsm serve: listening on ...``); None while it is
        down or starting."""
        if self.popen is None or self.popen.poll() is not None or self.log is None:
            return None
        if self.port is None:
            with open(self.log, "rb") as f:
                f.seek(self.log_from)
                found = LISTENING.search(f.read())
            self.port = int(found.group(1)) if found else None
        return self.port


def to_servers(servers: Sequence[Proc], *, wait: float = 0.5) -> dict[str, list[Any]]:
    """httpx ``event_hooks`` that send a request for ``http://NAME/...`` to
    the server of that name, where its running start listens. A server down
    or not yet listening (after ``wait`` seconds) fails the request as a
    refused connection would (``httpx.ConnectError``)."""
    by_name = {proc.name: proc for proc in servers}

    async def route(request: httpx.Request) -> None:
        proc = by_name[request.url.host]
        end = time.monotonic() + wait
        while (port := proc.listening_port()) is None:
            if time.monotonic() > end:
                raise httpx.ConnectError(f"{proc.name} is not listening", request=request)
            await asyncio.sleep(0.05)
        request.url = request.url.copy_with(host="127.0.0.1", port=port)
        request.headers["Host"] = f"127.0.0.1:{port}"

    return {"request": [route]}


def started_lines(log: Path, start_line: tuple[str, str], since: int = 0) -> int:
    """How many times a worker's log says it started (from byte ``since``
    on): its lines that begin with ``start_line[0]`` and hold
    ``start_line[1]`` (a worker writes that line once it handles SIGTERM)."""
    first, marker = start_line
    with open(log, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
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
        # the newest start's line: a start killed before it wrote one never will
        while started_lines(proc.log, start_line, since=proc.log_from) < 1:
            if time.monotonic() > end:
                break
            await asyncio.sleep(0.1)


def keep_or_remove(
    folder: Path,
    *,
    failed: bool,
    remove: bool,
    procs: Sequence[Proc],
    logs: dict[str, Path] | None = None,
) -> None:
    """After a run, its processes stopped: a failed run's folder (the
    processes' logs and effects) is kept, its path and the ends of the logs
    (the processes', then ``logs``: other logs by what wrote them) printed; a
    run that passed leaves nothing unless ``remove`` is false (``--logs``)."""
    if not failed:
        if remove:
            shutil.rmtree(folder, ignore_errors=True)
        return
    for proc in procs:
        if proc.log is not None and proc.log.exists():
            tail = proc.log.read_text(errors="replace")[-2000:]
            print(f"--- {proc.name} ---\n{tail}", file=sys.stderr)
    for name, log in (logs or {}).items():
        said = log.read_text(errors="replace")[-3000:] if log.exists() else "(none)"
        print(f"--- {name} ({log}) ---\n{said}", file=sys.stderr)
    print(f"the failed run's folder is kept: {folder}", file=sys.stderr)
