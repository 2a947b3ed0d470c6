"""Fixtures of the OpenAI adapter tests: the loopback server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai_loopback import LoopbackServer


@pytest.fixture
def loopback() -> Iterator[LoopbackServer]:
    """An OpenAI-compatible server on 127.0.0.1 (ephemeral port), for one test."""
    with LoopbackServer() as server:
        yield server
    assert not server.errors, server.errors
