"""The folder an xdist run's workers share their servers through.

The servers that cost seconds to start (the PostgreSQL cluster of
``tests/storage/pg.py``, the Temporal dev server of
``tests/temporal/devserver.py``) are started once per run, not once per
worker: the controller names the run (xdist's ``testrunuid``) and makes its
folder, ``RUN_PREFIX + testrunuid`` in the temporary folder, before the workers
start (:func:`begin_run`). The first worker to need a server starts it under
that server's lock in the folder and writes its record there
(:func:`shared_record`); the others read the record. No worker stops one: the
controller stops each recorded server by its PID when the run ends
(:func:`end_run`). A run killed before that leaves its servers behind, and the
next run's controller stops them: the folder of a dead run is known by its
owner's lock, which the controller holds while it runs.

A record is a JSON object with what its server's users need, and with
``pid``, ``mark`` (a string of the process's command line, by which a PID
taken by another process since is told apart), ``signal`` (the one that stops
it) and ``folder`` (removed once it is stopped).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

__all__ = [
    "RUN_PREFIX",
    "begin_run",
    "end_run",
    "run_folder_of",
    "shared_record",
    "stop_recorded",
]

RUN_PREFIX = "turnfsm-run-"
"""The runs' folders under xdist, in the temporary folder: ``RUN_PREFIX +
testrunuid``, holding ``owner.lock`` (the controller's) and, for each shared
server NAME, ``NAME.lock`` (the workers'), ``NAME.json`` (its record) and the
server's own folder."""


def _run_folder(testrunuid: str) -> Path:
    return Path(tempfile.gettempdir()) / f"{RUN_PREFIX}{testrunuid}"


def run_folder_of(config: pytest.Config) -> Path | None:
    """The run's folder on an xdist worker whose controller made one, else
    None (no xdist, the controller, or a run without a folder)."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None or not workerinput.get("testrunuid"):
        return None
    folder = _run_folder(str(workerinput["testrunuid"]))
    return folder if folder.is_dir() else None


def shared_record(
    folder: Path, name: str, start: Callable[[Path], dict[str, Any]]
) -> dict[str, Any]:
    """The record of the run's server ``name``: the one in ``folder``, or the
    one of a server started now by ``start`` (given the folder to start it in)
    and recorded, under the workers' lock of that server."""
    record = folder / f"{name}.json"
    with (folder / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.exists():
            found: dict[str, Any] = json.loads(record.read_text())
            return found
        started = start(folder / name)
        try:
            staged = folder / f"{name}.json.new"
            staged.write_text(json.dumps(started))
            staged.rename(record)
        except BaseException:
            stop_recorded(started)
            raise
        return started


def _is_recorded_process(record: dict[str, Any]) -> bool:
    """Whether the record's PID is still its process (its ``mark`` on the
    command line), not one that took the number since, nor one that has exited
    and waits to be reaped (an empty command line)."""
    try:
        argv = Path(f"/proc/{int(record['pid'])}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    mark = str(record["mark"]).encode()
    return any(mark in arg for arg in argv)


def stop_recorded(record: dict[str, Any]) -> None:
    """Stop a recorded server by its PID (its ``signal``, then SIGKILL after
    20 s) and remove its folder."""
    try:
        if _is_recorded_process(record):
            pid = int(record["pid"])
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, int(record["signal"]))
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and _is_recorded_process(record):
                    time.sleep(0.05)
                if _is_recorded_process(record):
                    os.kill(pid, signal.SIGKILL)
    finally:
        shutil.rmtree(record["folder"], ignore_errors=True)


_OWNER_LOCKS: list[IO[str]] = []


def begin_run(testrunuid: str) -> None:
    """On the xdist controller, before its workers start: make the run's folder,
    held by the controller's lock on ``owner.lock`` until it ends; stop the
    servers of runs whose controller died without :func:`end_run`."""
    _sweep_dead_runs()
    final = _run_folder(testrunuid)
    staging = Path(tempfile.mkdtemp(prefix=f"{RUN_PREFIX}new-"))
    os.chmod(staging, 0o755)
    lock = (staging / "owner.lock").open("a")
    fcntl.flock(lock, fcntl.LOCK_SH)
    # renamed only once locked, so that another run's sweep never takes it for dead
    staging.rename(final)
    _OWNER_LOCKS.append(lock)


def end_run(testrunuid: str) -> None:
    """On the xdist controller, once its workers are done: stop the run's
    servers (those a worker started) and remove the run's folder."""
    _end_folder(_run_folder(testrunuid))
    for lock in _OWNER_LOCKS:
        lock.close()
    _OWNER_LOCKS.clear()


def _end_folder(folder: Path) -> None:
    try:
        for record in sorted(folder.glob("*.json")):
            with contextlib.suppress(OSError, ValueError, KeyError):
                stop_recorded(json.loads(record.read_text()))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _sweep_dead_runs() -> None:
    for folder in Path(tempfile.gettempdir()).glob(f"{RUN_PREFIX}*"):
        if folder.name.startswith(f"{RUN_PREFIX}new-") or not folder.is_dir():
            continue
        try:
            lock = (folder / "owner.lock").open("a")
        except OSError:
            continue
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its controller still runs
            _end_folder(folder)
