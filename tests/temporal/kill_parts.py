"""The records of a Temporal kill test run (``kill.py``): what it did
(:class:`Report`), each client's attempts (:class:`Client`), each context's
stream as received (:class:`Follower`), and the model's and tools'
``begin``/``end`` marks that tell when to kill a worker (:class:`Marks`);
and what a failed run leaves to look into (:func:`keep_or_remove`)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet import Proc

__all__ = [
    "MOMENTS",
    "Client",
    "Follower",
    "Marks",
    "NoProgress",
    "Report",
    "summary",
]

MOMENTS = ("mid-stream", "mid-tool", "after-effect", "awaiting-approval", "any")
"""When a worker is killed (see the module docstring)."""


class NoProgress(RuntimeError):
    """The workers ran no turn at all: there is nothing to check."""


@dataclass
class Report:
    """What a run did and what the checker found."""

    problems: list[str] = field(default_factory=list)
    contexts: int = 0
    acked: int = 0
    attempts: int = 0
    worker_kills: Counter[str] = field(default_factory=Counter)
    """SIGKILLs of workers, by moment (``MOMENTS``)."""
    server_kills: int = 0
    """SIGKILLs of the Temporal dev server."""
    http_server_kills: int = 0
    """SIGKILLs of ``turnfsm serve`` processes."""
    outcome_unknown: int = 0
    """Calls of ``charge`` marked ``outcome_unknown`` (a lost attempt)."""
    charge_runs: int = 0
    reconnects: int = 0
    resyncs: int = 0
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    turn_time: float = 0.0
    """Seconds a turn (message, approval, answer) took before the faults."""
    answered: int = 0
    """Acknowledged messages whose answer is stored."""
    answered_during_faults: int = 0
    """Of those, the ones acknowledged while the faults ran."""
    requests: int = 0
    longest_request: float = 0.0


@dataclass
class Client:
    """One client: its server, its contexts, and per context the attempts
    (text, answer: "acked", "refused" or "unknown") in the order made."""

    server: Proc
    contexts: list[str] = field(default_factory=list)
    acked_at: dict[str, float] = field(default_factory=dict)
    """When each acknowledged attempt (by its text) was acknowledged."""
    attempts: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


@dataclass
class Follower:
    """One context's event stream, as received over every connection."""

    cid: str
    items: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    """(when the connection that gave it was asked for, the event)."""
    last: int = 0
    connections: int = 0


class Marks:
    """The model's and tools' ``begin``/``end`` lines, read as they grow."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.open: dict[tuple[str, str, int], int] = {}
        self.ended: list[tuple[float, str, int]] = []
        """(when read, kind, pid) of the ``end`` lines read so far."""

    def read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        cut = data.rfind(b"\n") + 1
        self.offset += cut
        now = time.monotonic()
        for line in data[:cut].decode().splitlines():
            edge, kind, ref, pid = line.split()
            key = (kind, ref, int(pid))
            if edge == "begin":
                self.open[key] = self.open.get(key, 0) + 1
            else:
                self.open[key] = self.open.get(key, 0) - 1
                self.ended.append((now, kind, int(pid)))

    def running(self, kinds: tuple[str, ...]) -> set[int]:
        """The pids with a call of one of ``kinds`` begun and not ended."""
        return {pid for (kind, _, pid), n in self.open.items() if n > 0 and kind in kinds}


def summary(report: Report, seed: int | None = None) -> str:
    kills = ", ".join(f"{k} {report.worker_kills[k]}" for k in MOMENTS)
    return (
        f"{report.contexts} contexts, {report.attempts} messages sent "
        f"({report.acked} acknowledged), {sum(report.worker_kills.values())} worker kills "
        f"({kills}), {report.server_kills} Temporal server kills, "
        f"{report.http_server_kills} turnfsm serve kills, "
        f"{report.charge_runs} charges ({report.outcome_unknown} outcome_unknown), "
        f"{report.reconnects} stream reconnects ({report.resyncs} Resync), "
        f"{report.answered} answered ({report.answered_during_faults} sent during the faults), "
        f"a turn {report.turn_time:.1f}s before the faults, {report.requests} requests "
        f"(the longest {report.longest_request:.1f}s), "
        f"{len(report.problems)} problems, {report.seconds:.1f}s "
        f"({', '.join(f'{k} {v:.1f}s' for k, v in report.phases.items())})"
        + (f", seed {seed}" if seed is not None else "")
    )
