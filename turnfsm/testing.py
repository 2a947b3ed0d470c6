"""The public test kit: deterministic clock and ids, the scripted LLM, replay helpers.

::

    from turnfsm import Engine
    from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

    engine = Engine(llm=ScriptedLLM([{"text": "Hi!"}]), clock=FakeClock(), ids=SequentialIds())

    assert_replays("tests/scripts/weather.json")   # a replay script, checked

With pytest, the ``turnfsm_replay`` fixture (from the plugin this package
registers) is :func:`assert_replays`.

The replay runner and its script parser are imported when a script is first
replayed (or :class:`ReplayResult` first named), not with this module: a
process that only uses the scripted LLM does not load them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .adapters.llm import AnswerSpec, ScriptedLLM
from .engine import FakeClock, SequentialIds
from .storage import Store

if TYPE_CHECKING:
    from .replay import ReplayResult, Script

__all__ = [
    "AnswerSpec",
    "FakeClock",
    "ReplayResult",
    "ScriptedLLM",
    "SequentialIds",
    "assert_replays",
    "replay_script",
]


def replay_script(
    script: Script | Mapping[str, Any] | str | Path, *, store: Store | None = None
) -> ReplayResult:
    """Replay a script (a file path, a dict built in code, or a parsed script).

    From synchronous code; in async code, ``await turnfsm.replay.replay(...)``.
    """
    from .replay import run_script

    return run_script(script, store=store)


def assert_replays(
    script: Script | Mapping[str, Any] | str | Path,
    *,
    trace: Sequence[str] | None = None,
    store: Store | None = None,
) -> ReplayResult:
    """Replay and fail the test with the readable report unless every check holds
    (and the observed trace equals ``trace``, when given)."""
    from .replay import run_script

    result = run_script(script, store=store)
    if not result.ok:
        raise AssertionError(result.report())
    if trace is not None and list(trace) != result.trace:
        raise AssertionError(
            f"trace differs:\n  expected: {list(trace)}\n  observed: {result.trace}"
        )
    return result


def __getattr__(name: str) -> Any:
    if name == "ReplayResult":
        from .replay import ReplayResult

        return ReplayResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
