"""The crash harness in CI: a reduced matrix, and its planted-bug control.

The full matrix (every persistence boundary, before and after each commit,
and inside each file write of the file store) and random kill points run with
``python tests/crash/harness.py --store sqlite|files [--random N]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness


def test_sqlite_survives_a_kill_at_every_other_commit(capsys: pytest.CaptureFixture[str]) -> None:
    code = harness.main(["--store", "sqlite", "--every", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 failed" in out


def test_files_survive_kills_between_and_inside_commits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = harness.main(["--store", "files", "--every", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 failed" in out


@pytest.mark.parametrize("store", ["sqlite", "files"])
def test_the_planted_bug_is_caught(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A store that acknowledges a commit before writing it must fail the harness,
    and for the reason the harness exists: acknowledged work lost, or a side
    effect repeated unmarked."""
    code = harness.main(["--store", store, "--every", "5", "--plant", "early-ack"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "acknowledged messages lost" in out or "never marked" in out, out
