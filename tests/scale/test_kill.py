"""The kill test and its planted bug (behind the ``scale`` marker; see ``kill.py``).

pytest -m scale tests/scale
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kill
from storage.pg import Cluster

pytestmark = pytest.mark.scale


def test_workers_and_servers_killed_and_paused_lose_and_repeat_nothing(
    pg_cluster: Cluster,
) -> None:
    """3 workers and 2 servers (one handing posted messages to the workers,
    one running them itself) under SIGKILLs and pauses: every acknowledged
    message is stored and answered once, no tool result is duplicated, the
    non-idempotent tool ran twice only where its outcome was marked unknown,
    and no two processes ever committed for the same context."""
    report = kill.run(pg_cluster.new_database(), seconds=20, seed=None)
    assert report.problems == [], report
    assert report.contexts == 12
    assert report.acked >= 12 * 3
    assert report.kills >= 3
    assert report.stale_wakeups >= 1  # the fence was needed: a worker woke with stale leases
    assert report.turns_under_faults >= kill.PROGRESS_FLOOR * report.contexts, report
    assert report.seconds < 110


def test_faults_that_let_no_turn_finish_fail_the_run(pg_cluster: Cluster) -> None:
    """The progress floor's control: faults forced to come every hundredth of
    a measured turn (kills only) leave the processes no time to finish a
    turn; the clients finish theirs once the faults end, so only the floor
    can tell that the faults proved nothing, and it must fail the run."""
    report = kill.run(pg_cluster.new_database(), seconds=2, min_stale=0, window=(0.01, 0.02))
    floor = [p for p in report.problems if "below the progress floor" in p]
    assert floor, report
    assert report.turns_under_faults < kill.PROGRESS_FLOOR * report.contexts, report
    assert report.kills >= kill.MIN_KILLS, report


def test_the_checker_catches_a_worker_whose_commits_skip_the_fence(pg_cluster: Cluster) -> None:
    """The control: workers whose commit skips the fencing check
    (``planted_worker.py``) commit under a lease another worker has claimed,
    and the checker says so."""
    report = kill.run(pg_cluster.new_database(), seconds=10, planted=True, min_stale=3)
    assert report.stale_wakeups >= 1, report
    fencing = [p for p in report.problems if p.startswith("fencing:")]
    assert fencing, report
