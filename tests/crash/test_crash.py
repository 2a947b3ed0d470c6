"""The crash harnesses in CI: reduced matrices by default, the whole of them
behind the ``crash_full`` marker, and their planted-bug controls.

    pytest -m crash_full tests/crash          # the full matrices (minutes)

Two harnesses: ``matrix.py`` kills a process between every two steps (file
operations, SQL statements) of each kind of change and checks the store a fresh
process finds; ``harness.py`` kills a whole conversation at commit boundaries,
or at random moments scaled to the measured turn, and checks that resuming it
loses and repeats nothing, and that the killed runs made progress. Both run by hand too
(``python tests/crash/matrix.py --help``, ``python tests/crash/harness.py --help``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness
import matrix

full = pytest.mark.crash_full

# ---------------------------------------------------------------------- matrix.py


def one_store_each(kinds: list[str], start: int = 0) -> list[tuple[str, str]]:
    """Each kind on one store, the stores taken in turn from ``start``: every
    kind and every store is in the default run, each pair of them in
    ``-m crash_full`` (``test_every_kill_point_of_every_kind_of_change``)."""
    stores = matrix.STORES
    return [(stores[(start + i) % len(stores)], kind) for i, kind in enumerate(kinds)]


def test_one_store_each_takes_every_kind_and_every_store() -> None:
    kinds = ["a", "b", "c", "d"]
    pairs = one_store_each(kinds)
    assert [k for _, k in pairs] == kinds
    assert {s for s, _ in pairs} == set(matrix.STORES)
    assert one_store_each(kinds, 2)[0] == (matrix.STORES[2], "a")


def test_every_kind_of_change_survives_a_few_kill_points_on_a_store() -> None:
    kinds = [k for k in matrix.KINDS if k not in (*matrix.SUB_KINDS, *matrix.MCP_KINDS)]
    pairs = one_store_each(kinds)
    result = matrix.run_matrix(pairs, matrix.a_few)
    assert result.failures == []
    assert result.cases >= 2 * len(pairs)


def test_spawn_and_finish_survive_a_kill_inside_and_between_their_commits() -> None:
    """A sub-context's spawn (the child created, the parent's child_spawned,
    the child's turn) and finish (the summary on the parent, the child deleted)
    are several commits on two contexts: a kill inside the first and after
    each leaves a tree that recovers, and finish completes when called again.
    So for a sub-task tool whose child waits for approval (the parent waits on
    it), and for approving that child's call on the parent: after a kill, the
    parent resumes, the surfaced calls can be approved, and the call completes."""
    between = one_store_each(["spawn", "finish"])  # every store and point: -m crash_full
    result = matrix.run_matrix(between, matrix.a_few_and_between)
    assert result.failures == []
    assert result.cases >= 4 * len(between)
    waits = one_store_each(["subtask_send", "subtask_approve"], start=len(between))
    result = matrix.run_matrix(waits, matrix.a_few)  # every point: -m crash_full
    assert result.failures == []
    assert result.cases >= 2 * len(waits)


def test_the_matrix_catches_a_torn_files_commit() -> None:
    """The control: a file store that writes a commit's files without the journal
    (as the store once did) leaves, when killed between two of them, a decided
    call in a context still waiting for it, with nothing pending."""
    result = matrix.run_matrix([("files-torn", "approve")], matrix.a_few)
    text = "\n".join(result.failures)
    assert "a state that no commit made" in text, text
    assert "AwaitingToolApproval with nothing pending" in text, text


@pytest.mark.mcp
def test_an_mcp_call_lost_to_a_kill_is_never_run_again_silently() -> None:
    """Approving a call of an MCP server's tool (the server a process over
    stdio, its tool not idempotent): a kill before a few steps of it, on both
    stores, leaves a store a fresh engine brings to rest, and a started call
    with no recorded outcome goes back to a human (``outcome_unknown``) rather
    than running again. Every point: ``-m crash_full``."""
    pairs = [(s, k) for s in matrix.STORES for k in matrix.MCP_KINDS]
    result = matrix.run_matrix(pairs, matrix.a_few)
    assert result.failures == []
    assert result.cases >= 2 * len(pairs)


@pytest.mark.mcp
def test_the_matrix_catches_an_mcp_call_run_again_after_a_kill() -> None:
    """The control: the same tool declared idempotent, so a resumed engine runs
    a started call again by itself; at the kill between the call's attempt and
    its outcome, the matrix must say so."""
    result = matrix.run_matrix([("sqlite", matrix.MCP_CONTROL)], matrix.between_attempt_and_outcome)
    text = "\n".join(result.failures)
    assert "recover ran a started MCP call with no outcome again" in text, text


@full
@pytest.mark.parametrize("store", matrix.STORES)
@pytest.mark.parametrize("kind", matrix.KINDS)
def test_every_kill_point_of_every_kind_of_change(store: str, kind: str) -> None:
    result = matrix.run_matrix([(store, kind)])
    assert result.failures == []
    assert result.cases >= 2


@full
@pytest.mark.parametrize("kind", ["approve", "deny", "cancel"])
def test_the_full_matrix_catches_a_torn_files_commit(kind: str) -> None:
    """The changes that rewrite a stored message (a decision, a cancelled
    call) are the ones a commit without its journal tears. A send, fork or
    switch only adds files the metadata does not name yet, so the control
    store cannot tear them and the matrix rightly finds nothing there."""
    result = matrix.run_matrix([("files-torn", kind)])
    assert any("a state that no commit made" in f for f in result.failures), result.failures


# ---------------------------------------------------------------------- PostgreSQL


@pytest.fixture
def postgres(pg_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The matrix's ``postgres`` store on the test run's throwaway server."""
    monkeypatch.setenv(matrix.PG_ENV, pg_cluster.url)


PG_KINDS = matrix.KINDS  # every kind: 307 kill points


def test_postgres_survives_a_few_kill_points_of_an_approval(postgres: None) -> None:
    """A kill before a statement inside the first commit and before the last
    one (each case on a copy of the prepared database) leaves the store exactly
    before or after the commit; a fresh engine brings it to rest. Approving
    rewrites a stored message and runs a tool; every kind, every point:
    ``-m crash_full``."""
    pairs = [("postgres", "approve")]
    result = matrix.run_matrix(pairs, matrix.a_few)
    assert result.failures == []
    assert result.cases >= 2 * len(pairs)


def test_the_matrix_catches_a_postgres_commit_without_a_transaction(postgres: None) -> None:
    """The control: each statement of a commit committed on its own, so a kill
    between two leaves half a commit, which the matrix must find."""
    result = matrix.run_matrix([("postgres-torn", "approve")], matrix.a_few)
    text = "\n".join(result.failures)
    assert "a state that no commit made" in text, text


@full
@pytest.mark.parametrize("kind", PG_KINDS)
def test_postgres_survives_every_kill_point(postgres: None, kind: str) -> None:
    result = matrix.run_matrix([("postgres", kind)])
    assert result.failures == []
    assert result.cases >= 3  # a statement, the COMMIT, completed


# ---------------------------------------------------------------------- harness.py


@full
def test_a_conversation_survives_a_kill_after_a_commit_and_inside_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = harness.main(["--store", "sqlite", "--case", "after:4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1 passed, 0 failed" in out
    code = harness.main(["--store", "files", "--case", "write:30"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1 passed, 0 failed" in out


def test_the_planted_bug_is_caught_at_one_kill_point(capsys: pytest.CaptureFixture[str]) -> None:
    """The harness's control, reduced: a store that acknowledges a commit before
    writing it loses acknowledged work when killed after that commit."""
    code = harness.main(["--store", "sqlite", "--case", "before:13", "--plant", "early-ack"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "acknowledged messages lost" in out or "never marked" in out, out


@full
def test_sqlite_survives_a_kill_at_every_other_commit(capsys: pytest.CaptureFixture[str]) -> None:
    code = harness.main(["--store", "sqlite", "--every", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 failed" in out


@full
@pytest.mark.parametrize("store", ["files", "files-tail"])
def test_files_survive_kills_between_and_inside_commits(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``files-tail``: with commits.jsonl used at any size, so that the kills
    fall between and inside appends of its records and the commits that
    write the whole files again and empty it."""
    code = harness.main(["--store", store, "--every", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 failed" in out


@full
@pytest.mark.parametrize("store", ["sqlite", "files"])
def test_the_planted_bug_is_caught(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A store that acknowledges a commit before writing it must fail the harness,
    and for the reason the harness exists: acknowledged work lost, or a side
    effect repeated unmarked."""
    code = harness.main(["--store", store, "--every", "5", "--plant", "early-ack"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "acknowledged messages lost" in out or "never marked" in out, out


@full
@pytest.mark.parametrize("store", ["sqlite", "files"])
def test_kills_at_random_moments_lose_nothing_and_let_turns_finish(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILLs from outside at any moment of a turn (not only at a commit),
    their delays scaled to the turn measured on this machine: resuming loses
    and repeats nothing, and the killed runs acknowledged turns (the floor)."""
    code = harness.main(["--store", store, "--timed", "9"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "9 timed cases, 0 failed" in out, out


@full  # a control of the harness's own checks, its runs killed
def test_kills_that_never_let_a_turn_finish_fail_the_harness(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The progress floor's control: a kill window forced far below the
    measured turn (a hundredth of it) kills every run before its first turn
    finishes; every resumed conversation checks out, so only the floor can
    tell that the kills proved nothing, and it must fail the run."""
    code = harness.main(["--store", "files", "--timed", "2", "--window", "0.005:0.01"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "below the progress floor" in out, out
    assert "2 were killed" in out, out  # the runs were killed, not finished
    assert "FAIL files timed kill" not in out, out  # each case itself passed


@full  # a control of the harness's own checks, its runs killed
def test_a_kill_point_never_reached_fails_the_case(capsys: pytest.CaptureFixture[str]) -> None:
    """A case whose worker finishes before its kill point killed nothing and
    proved nothing: it fails rather than counting as passed."""
    code = harness.main(["--store", "sqlite", "--case", "after:999"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "without reaching kill point after #999" in out, out
