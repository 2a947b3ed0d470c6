"""Fixtures of the Gemini adapter tests: the loopback server.

This folder has no ``__init__.py`` on purpose (a package here would be
imported by a name of its own and could hide the SDK), so the helper modules
have names of their own (``gemini_loopback``, ``gemini_corpus``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# tests/kit.py and tests/canonical.py are imported by name
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gemini_loopback import LoopbackServer
from loopback import serving


@pytest.fixture
def loopback() -> Iterator[LoopbackServer]:
    """A Gemini API server on 127.0.0.1 (ephemeral port), for one test."""
    yield from serving(LoopbackServer())
