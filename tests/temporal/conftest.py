"""Fixtures for the tests on a real Temporal server (tests/temporal/devserver.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# tests/ is on sys.path (no tests/__init__.py)
from run_folder import run_folder_of, shared_record

from temporal.devserver import NO_CLI, DevServer, RunningServer, find_cli

_STARTED: list[DevServer] = []
"""The shared server this process started under xdist: held, as it runs on
after this process (the controller stops it), so that its ``Popen`` is never
collected while it runs (a ``ResourceWarning``, an error here)."""


def _cli() -> Path:
    pytest.importorskip("temporalio", reason="the temporal extra is not installed")
    cli = find_cli()
    if cli is None:
        pytest.skip(NO_CLI)
    return cli


def _started(server: DevServer) -> DevServer:
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="session")
def temporal_server(pytestconfig: pytest.Config) -> Iterator[RunningServer]:
    """The run's one Temporal dev server, shared by every test of every worker
    (tests/temporal/devserver.py); each test keeps to task queues and workflow
    ids of its own."""
    cli = _cli()
    folder = run_folder_of(pytestconfig)
    if folder is not None:

        def start(where: Path) -> dict[str, Any]:
            server = _started(DevServer(cli, folder=where))
            _STARTED.append(server)
            return server.record()

        yield RunningServer.of(shared_record(folder, "temporal", start))
        return
    server = _started(DevServer(cli))
    try:
        yield RunningServer.of(server.record())
    finally:
        server.stop()


@pytest.fixture
def own_temporal_server() -> Iterator[DevServer]:
    """A Temporal dev server of the test's own, stopped by its PID after it:
    for a test that kills, stops or restarts it, or reads a whole namespace."""
    server = _started(DevServer(_cli()))
    try:
        yield server
    finally:
        server.stop()
