"""Fixtures of the OpenAI adapter tests: the loopback server."""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# tests/canonical.py (what the canonical-trace tests share) is imported by name
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from loopback import serving
from openai_loopback import LoopbackServer


@pytest.fixture
def loopback() -> Iterator[LoopbackServer]:
    """An OpenAI-compatible server on 127.0.0.1 (ephemeral port), for one test."""
    yield from serving(LoopbackServer())


@pytest.fixture(scope="session", autouse=True)
def _one_ssl_context() -> Iterator[None]:
    """Every OpenAI client of these tests shares one SSL context, as each new
    client would load the system's CA certificates again and these tests make
    one or two a test; the loopback is plain HTTP, where none is used."""
    import httpcore2  # the SDK's transport, imported with it

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            httpcore2, "default_ssl_context", functools.cache(httpcore2.default_ssl_context)
        )
        yield
