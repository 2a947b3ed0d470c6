"""Fixtures of the OpenAI adapter tests: the loopback server."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# tests/canonical.py (what the canonical-trace tests share) is imported by name
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from loopback import one_ssl_context, serving  # noqa: F401 (a fixture, applied to this folder)
from openai_loopback import LoopbackServer


@pytest.fixture
def loopback() -> Iterator[LoopbackServer]:
    """An OpenAI-compatible server on 127.0.0.1 (ephemeral port), for one test."""
    yield from serving(LoopbackServer())
