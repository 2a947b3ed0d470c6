"""The pytest integration: the plugin's fixture and the testing helpers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from turnfsm.testing import ReplayResult, assert_replays, replay_script

SCRIPTS = Path(__file__).parent / "scripts"

TEXT_SCRIPT: dict[str, Any] = {
    "format": "turnfsm-script/1",
    "steps": [{"user": "Hi"}, {"llm": {"text": "Hello!"}}],
    "expect": {"final_state": "Idle", "message_count": 2},
}


def test_fixture_from_the_plugin_replays_a_file(
    turnfsm_replay: Callable[..., ReplayResult],
) -> None:
    result = turnfsm_replay(SCRIPTS / "weather_with_approval.json")
    assert result.trace[-1] == "Idle"
    assert "AwaitingToolApproval" in result.trace


def test_a_script_built_in_code_with_a_trace() -> None:
    result = assert_replays(
        TEXT_SCRIPT,
        trace=[
            "Idle",
            "ProcessingUserMessage",
            "AwaitingLLMResponse",
            "ProcessingLLMResponse",
            "Idle",
        ],
    )
    assert result.messages[-1]["message"]["content"][0]["text"] == "Hello!"


def test_assert_replays_fails_with_the_readable_report() -> None:
    wrong = {**TEXT_SCRIPT, "expect": {"final_state": "PermanentFailure"}}
    with pytest.raises(AssertionError, match="final_state"):
        assert_replays(wrong)
    assert not replay_script(wrong).ok


def test_assert_replays_checks_the_given_trace() -> None:
    with pytest.raises(AssertionError, match="trace differs"):
        assert_replays(TEXT_SCRIPT, trace=["Idle"])
