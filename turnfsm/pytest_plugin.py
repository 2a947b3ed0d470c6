"""The pytest plugin (entry point ``pytest11``): replay fixtures for test suites.

::

    def test_weather(turnfsm_replay):
        result = turnfsm_replay("tests/scripts/weather.json")
        assert result.trace[-1] == "Idle"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .testing import ReplayResult, assert_replays

__all__ = ["turnfsm_replay"]


@pytest.fixture
def turnfsm_replay() -> Callable[..., ReplayResult]:
    """:func:`turnfsm.testing.assert_replays`: replay a script, fail on any check."""

    def run(script: Any, **kwargs: Any) -> ReplayResult:
        return assert_replays(script, **kwargs)

    return run
