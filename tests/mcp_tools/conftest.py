"""Fixtures of the MCP tests (the helpers are in mcp_helpers.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcp_helpers import children, npm_install


@pytest.fixture(scope="session")
def npm_servers() -> dict[str, Path]:
    return npm_install()


@pytest.fixture
def no_new_children() -> Iterator[None]:
    """Fails the test when it leaves a child process of this process running."""
    before = children()
    yield
    left = children() - before
    assert not left, f"child processes left running: {sorted(left)}"
