"""W12's benchmark module (bench/history_flat.py) runs, with tiny sizes and
without valgrind: the stored W1 history it starts from is what the engine
expects, and its turns pass the checks on both stores."""

from __future__ import annotations

import logging
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


@pytest.fixture()
def history_flat():  # type: ignore[no-untyped-def]
    logger = logging.getLogger("turnfsm")
    level = logger.level  # the benchmark sets it, as its runs do
    sys.path.insert(0, BENCH)
    try:
        import history_flat

        yield history_flat
    finally:
        sys.path.remove(BENCH)
        logger.setLevel(level)


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_stretch_runs_on_a_stored_history(history_flat, store: str) -> None:  # type: ignore[no-untyped-def]
    assert history_flat.stretch(store, 8, 1) == 8 + 4 * (history_flat.WARMUP + 1)


def test_the_history_is_whole_w1_turns(history_flat) -> None:  # type: ignore[no-untyped-def]
    ctx = history_flat.history_context("c", 8)
    assert len(ctx.history()) == 8
    with pytest.raises(ValueError):
        history_flat.history_context("c", 6)
