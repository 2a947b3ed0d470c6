"""Fixtures of the Anthropic adapter tests: the loopback server.

This folder has no ``__init__.py`` on purpose: with pytest's default
``prepend`` import mode a package here would be imported as ``anthropic`` and
hide the SDK. So the helper modules have names of their own
(``anthropic_loopback``, ``anthropic_corpus``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# tests/kit.py and tests/canonical.py are imported by name
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from anthropic_loopback import LoopbackServer
from loopback import one_ssl_context, serving  # noqa: F401 (a fixture, applied to this folder)


@pytest.fixture
def loopback() -> Iterator[LoopbackServer]:
    """A Messages API server on 127.0.0.1 (ephemeral port), for one test."""
    yield from serving(LoopbackServer())
