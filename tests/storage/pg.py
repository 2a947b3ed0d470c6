"""A throwaway PostgreSQL cluster for the tests.

:func:`find_bin_dir` looks for ``initdb`` and ``pg_ctl`` on ``PATH``, then in
``/usr/lib/postgresql/*/bin`` (the newest version). :class:`Cluster` makes a
cluster in a temporary folder (data and unix socket both in it), listening on a
free TCP port of 127.0.0.1 and on the socket, started with ``fsync=off`` (the
tests kill processes, not the machine). When the tests run as root, the
cluster runs as an unprivileged user (``postgres`` if it exists, else
``nobody``), through ``runuser``; the folder is handed to that user. It is
stopped by the PID of its postmaster and the folder removed.

The ``pg_cluster`` fixture (session-wide, in ``tests/conftest.py``) yields one;
``pg_url`` gives each test a schema of its own (a URL whose
``search_path`` is it). Without PostgreSQL
binaries they skip, saying so.

Under xdist the run has one cluster for all its workers (:func:`shared_cluster`):
the first worker that needs it starts it and records it in the run's folder,
the others read the record, and the controller stops it by its PID when the
run ends, or the next run's controller when the run was killed
(``tests/run_folder.py``).

``python -m tests.storage.pg`` starts one and prints its URL until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from ports import PORT_TRIES, free_port, lost_the_port

__all__ = [
    "Cluster",
    "find_bin_dir",
    "pg_cluster",
    "pg_url",
    "shared_cluster",
    "unprivileged_user",
]

NO_BINARIES = (
    "no PostgreSQL binaries: initdb/pg_ctl are neither on PATH nor in "
    "/usr/lib/postgresql/*/bin (apt-get install postgresql)"
)


def find_bin_dir() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    found = shutil.which("initdb")
    candidates: list[Path] = []
    if found:
        candidates.append(Path(found).resolve().parent)
        candidates.append(Path(found).parent)
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates += [Path(p) for p in versions]
    for folder in candidates:
        if all((folder / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def unprivileged_user() -> str | None:
    """The user to run the server as: None when not root (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("running as root and no unprivileged user (postgres, nobody) exists")


class Cluster:
    """One running PostgreSQL server in a folder of its own (see the module)."""

    def __init__(self, bin_dir: Path, folder: Path | None = None) -> None:
        self.bin_dir = bin_dir
        self.user = unprivileged_user()
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="turnfsm-pg-"))
        else:
            folder.mkdir()
        self.folder = folder
        self.data = self.folder / "data"
        self.sockets = self.folder / "sockets"
        self.port = free_port()
        self.pid: int | None = None
        self._databases = 0
        os.chmod(self.folder, 0o755)
        self.sockets.mkdir()
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            for path in (self.folder, self.sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def _as_user(self, *argv: str) -> list[str]:
        if self.user is None:
            return list(argv)
        return ["runuser", "-u", self.user, "--", *argv]

    def start(self) -> None:
        subprocess.run(
            self._as_user(
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "turnfsm",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ),
            check=True,
            capture_output=True,
            cwd=self.folder,
        )
        # the port is a number PostgreSQL must be given: when another process
        # took it after free_port() (the log says the address is in use), the
        # start is tried again on another
        for attempt in range(1, PORT_TRIES + 1):
            log = self.folder / f"server-{attempt}.log"
            started = subprocess.run(
                self._as_user(
                    str(self.bin_dir / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-l",
                    str(log),
                    "-o",
                    self._options(),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ),
                capture_output=True,
                cwd=self.folder,
            )
            if started.returncode == 0:
                break
            said = log.read_text(errors="replace") if log.exists() else ""
            if attempt == PORT_TRIES or not lost_the_port(said):
                raise RuntimeError(
                    f"PostgreSQL did not start on port {self.port} (pg_ctl exited "
                    f"{started.returncode}):\n{started.stderr.decode(errors='replace')}{said}"
                )
            self.port = free_port()
        pid_file = self.data / "postmaster.pid"
        self.pid = int(pid_file.read_text().split("\n", 1)[0])
        self._wait()

    def _options(self) -> str:
        return (
            f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=400"  # the servers of every xdist worker of a run
        )

    def record(self) -> dict[str, Any]:
        """What another process needs to use (and stop) this running cluster."""
        return {
            "bin_dir": str(self.bin_dir),
            "folder": str(self.folder),
            "port": self.port,
            "pid": self.pid,
            # what tests/run_folder.py stops it by: the postmaster's command
            # line names its data folder; SIGINT is its fast shutdown
            "mark": str(self.data),
            "signal": int(signal.SIGINT),
        }

    @classmethod
    def attach(cls, record: dict[str, Any]) -> Cluster:
        """The cluster another process started (its :meth:`record`)."""
        cluster = cls.__new__(cls)
        cluster.bin_dir = Path(record["bin_dir"])
        cluster.user = unprivileged_user()
        cluster.folder = Path(record["folder"])
        cluster.data = cluster.folder / "data"
        cluster.sockets = cluster.folder / "sockets"
        cluster.port = int(record["port"])
        cluster.pid = int(record["pid"])
        cluster._databases = 0
        return cluster

    def _wait(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not listen on port {self.port}")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        """The URL of the ``postgres`` database (for making others)."""
        return self.url_of("postgres")

    def url_of(self, database: str) -> str:
        return f"postgresql://turnfsm@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A new, empty database: its URL."""
        import psycopg

        self._databases += 1
        name = f"t{os.getpid()}_{self._databases}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.url_of(name)

    def new_schema(self) -> str:
        """A new, empty schema in the cluster's ``tests`` database: a URL whose
        ``search_path`` is that schema (cheaper than a database per test)."""
        import psycopg

        self._databases += 1
        name = f"s{os.getpid()}_{self._databases}"
        self.make_tests_database()
        with psycopg.connect(self.url_of("tests"), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}".encode())
        return f"{self.url_of('tests')}?options=-csearch_path%3D{name}"

    def make_tests_database(self) -> None:
        """The ``tests`` database of :meth:`new_schema`, made if missing (a
        cluster shared by several processes makes it once, under their lock:
        two processes making it at once would collide)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            if not self._has_tests_database(conn):
                conn.execute("CREATE DATABASE tests TEMPLATE template0")

    @staticmethod
    def _has_tests_database(conn: Any) -> bool:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = 'tests'").fetchone()
        return found is not None

    def stop(self) -> None:
        """Stop the server by its PID (fast shutdown, then a kill) and remove the folder."""
        try:
            if self.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGINT)  # fast shutdown
                    deadline = time.monotonic() + 20
                    while time.monotonic() < deadline:
                        os.kill(self.pid, 0)
                        time.sleep(0.05)
                    os.kill(self.pid, signal.SIGKILL)
                self.pid = None
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


_SHARED: list[Cluster] = []


def shared_cluster(config: pytest.Config) -> Cluster:
    """The test run's one cluster, started on first use and stopped when the run
    ends; skips the test when there are no PostgreSQL binaries. On an xdist
    worker it is the run's cluster, which the first worker to need it starts
    (see the module)."""
    if _SHARED:
        return _SHARED[0]
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip(NO_BINARIES)
    # tests/ is on sys.path under pytest (imported here: ``python -m
    # tests.storage.pg`` runs without it)
    from run_folder import run_folder_of, shared_record

    folder = run_folder_of(config)
    if folder is not None:

        def start(where: Path) -> dict[str, Any]:
            cluster = _started(Cluster(bin_dir, where))
            try:
                cluster.make_tests_database()
            except BaseException:
                cluster.stop()
                raise
            return cluster.record()

        cluster = Cluster.attach(shared_record(folder, "cluster", start))
        _SHARED.append(cluster)
        return cluster
    cluster = _started(Cluster(bin_dir))
    _SHARED.append(cluster)

    def stop() -> None:
        _SHARED.clear()
        cluster.stop()

    config.add_cleanup(stop)
    return cluster


def _started(cluster: Cluster) -> Cluster:
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="session")
def pg_cluster(pytestconfig: pytest.Config) -> Cluster:
    """A running throwaway cluster (one per test run)."""
    return shared_cluster(pytestconfig)


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """The URL of a new, empty schema of the cluster (its own ``search_path``)."""
    return pg_cluster.new_schema()


if __name__ == "__main__":  # pragma: no cover - a manual helper
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL binaries (initdb, pg_ctl) found")
    cluster = Cluster(bin_dir)
    cluster.start()
    try:
        print(cluster.url, flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
