"""Every example in examples/ runs and says what it should."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_durable_weather(tmp_path: Path) -> None:
    db = tmp_path / "weather.db"
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "durable_weather.py"), str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "stopped at AwaitingToolApproval: get_weather({'city': 'Oslo'})" in out.stdout
    assert "The weather in Oslo is 15 C and cloudy.\n[completed]" in out.stdout
    assert out.stdout.strip().endswith(
        "trace: Idle -> ProcessingUserMessage -> AwaitingLLMResponse -> ProcessingLLMResponse"
        " -> AwaitingToolApproval -> ExecutingTools -> AwaitingLLMResponse"
        " -> StreamingLLMResponse -> ProcessingLLMResponse -> Idle"
    )
    assert db.exists()


def test_every_example_is_tested() -> None:
    tested = {"durable_weather.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested
