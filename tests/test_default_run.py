"""What the README's test command leaves to CI's steps of their own still runs
there. The property tests draw a sample by default and their full count in
CI's step (``TURNFSM_EXAMPLES=full pytest -m hypothesis``): every
``max_examples`` goes through ``kit.examples``, and every test that runs
hypothesis is selected by ``-m hypothesis``. A sweep keeps its first case by
default and the others behind ``-m sweep``, CI's step too."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import kit  # tests/ is on sys.path (no tests/__init__.py)
import pytest

TESTS = Path(__file__).resolve().parent
CI = (TESTS.parent / ".ci" / "run").read_text()


def test_every_example_count_goes_through_kit_examples() -> None:
    literal = re.compile(r"max_examples\s*=\s*(?!examples\()")
    found = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in sorted(TESTS.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []


def test_the_default_run_draws_a_fifth_and_full_draws_all(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not kit.FULL_EXAMPLES  # the README's command does not set TURNFSM_EXAMPLES
    assert (kit.examples(300), kit.examples(40), kit.examples(5)) == (60, 10, 5)
    monkeypatch.setenv("TURNFSM_EXAMPLES", "full")
    try:
        assert importlib.reload(kit).examples(300) == 300
    finally:
        monkeypatch.delenv("TURNFSM_EXAMPLES")
        importlib.reload(kit)


def _decorators(node: ast.FunctionDef) -> str:
    return " ".join(ast.unparse(d) for d in node.decorator_list)


def test_a_test_that_draws_examples_inside_its_body_carries_the_hypothesis_marker() -> None:
    """hypothesis marks a test decorated with ``@given`` itself; a test that
    defines its ``@given`` functions inside its body is marked by hand, or
    ``-m hypothesis`` would leave it out of the full count."""
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        text = path.read_text()
        if "given(" not in text:
            continue
        tree = ast.parse(text)
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            inner = [n for n in ast.walk(node) if isinstance(n, ast.FunctionDef) and n is not node]
            draws = any("given(" in _decorators(n) for n in inner)
            if draws and "pytest.mark.hypothesis" not in _decorators(node):
                unmarked.append(f"{path.relative_to(TESTS)}::{node.name}")
    assert unmarked == []


def test_ci_runs_the_full_counts_and_every_sweep_in_steps_of_their_own() -> None:
    steps = [line for line in CI.splitlines() if not line.startswith("#")]
    assert 'TURNFSM_EXAMPLES=full .venv/bin/pytest -n "$CORES" -m hypothesis' in steps
    assert '.venv/bin/pytest -n "$CORES" -m sweep' in steps


def test_a_sweep_keeps_its_first_case_by_default_and_marks_the_others() -> None:
    cases = kit.first_by_default([("a", 1), ("b", 2), ("c", 3)], ["a", "b", "c"])
    assert [case.values for case in cases] == [("a", 1), ("b", 2), ("c", 3)]
    assert [case.id for case in cases] == ["a", "b", "c"]
    assert [[mark.name for mark in case.marks] for case in cases] == [[], ["sweep"], ["sweep"]]


def test_the_sweep_marker_is_skipped_unless_selected() -> None:
    conftest = (TESTS / "conftest.py").read_text()
    assert '"sweep",' in conftest


def test_auto_starts_three_workers_per_core(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    workers = pytestconfig.hook.pytest_xdist_auto_num_workers(config=pytestconfig)
    assert workers == 3 * len(os.sched_getaffinity(0))
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "5")  # still xdist's to read
    assert pytestconfig.hook.pytest_xdist_auto_num_workers(config=pytestconfig) == 5


def test_a_process_a_test_starts_can_be_interrupted() -> None:
    """Even when the run itself was started with SIGINT ignored (in the
    background, by a shell without job control): see tests/conftest.py."""
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout == "True\n"
