"""The debug line of each transition: written whenever the logger writes
debug lines, and not even called for the default logger below DEBUG."""

from __future__ import annotations

import io
import logging
from typing import Any

import pytest
from kit import make_engine

from turnfsm.engine._defaults import default_logger, ignore

pytestmark = pytest.mark.anyio


class _Recorder:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def bind(self, **_: Any) -> _Recorder:
        return self

    def debug(self, event: str, **kw: Any) -> None:
        self.lines.append((event, kw))

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


async def test_an_applications_logger_gets_one_line_per_step() -> None:
    log = _Recorder()
    engine, _, _ = make_engine([{"text": "hi"}], logger=log)
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "hello")
    steps = [kw for event, kw in log.lines if event == "transition"]
    assert [s["to_state"] for s in steps] == list(turn.states)
    assert steps[0]["trigger"] == "user_message"


async def test_the_default_logger_writes_steps_at_debug_only() -> None:
    out = io.StringIO()
    quiet = default_logger(logging.WARNING)
    assert quiet.debug is ignore  # the engine skips the call
    loud = default_logger(logging.DEBUG)
    loud._file = out
    engine, _, _ = make_engine([{"text": "hi"}], logger=loud)
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "hello")
    assert out.getvalue().count("event='transition'") == 4
    assert out.getvalue().count(f"context_id='{cid}'") == 4  # what the engine bound


@pytest.mark.parametrize("level", [logging.DEBUG, logging.WARNING])
def test_the_default_logger_binds_as_a_dict_merge(level: int) -> None:
    # new keys go after the bound ones; a key bound again keeps its place
    out = io.StringIO()
    log = default_logger(level)
    log._file = out
    first = log.bind(a=1).bind(b=2, c=3)
    again = first.bind(a=4, d=5)
    assert first._values() == {"a": 1, "b": 2, "c": 3}
    assert again._values() == {"a": 4, "b": 2, "c": 3, "d": 5}
    assert (first.debug is ignore) is (level > logging.DEBUG)
    first.debug("step")
    again.warning("seen")
    lines = out.getvalue().splitlines()
    if level <= logging.DEBUG:
        assert lines[0].endswith("event='step' a=1 b=2 c=3")
    assert lines[-1].endswith("event='seen' a=4 b=2 c=3 d=5")
    assert len(lines) == (2 if level <= logging.DEBUG else 1)
