"""Fixtures for the tests on a real Temporal server (tests/temporal/devserver.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# tests/ is on sys.path (no tests/__init__.py)
from temporal.devserver import NO_CLI, DevServer, find_cli


@pytest.fixture(scope="module")
def temporal_server() -> Iterator[DevServer]:
    """A running Temporal dev server, one per test module, stopped by its PID."""
    pytest.importorskip("temporalio", reason="the temporal extra is not installed")
    cli = find_cli()
    if cli is None:
        pytest.skip(NO_CLI)
    server = DevServer(cli)
    try:
        server.start()
        yield server
    finally:
        server.stop()
