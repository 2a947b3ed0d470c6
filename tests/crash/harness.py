"""The crash harness: kill a worker at every persistence boundary, resume it in
a fresh process, and check that nothing acknowledged was lost.

    python tests/crash/harness.py --store sqlite            # every commit, before and after
    python tests/crash/harness.py --store files             # ... and between its file operations
    python tests/crash/harness.py --store files-tail        # ... with commits.jsonl at any size
    python tests/crash/harness.py --store sqlite --random 200 --seed 7   # longer: random points
    python tests/crash/harness.py --store sqlite --plant early-ack       # the control: must FAIL
    python tests/crash/harness.py --store files --timed 9     # SIGKILLs at random moments

Kill points: by default the worker kills itself before or after commit N (and,
on the file store, before its N-th file operation), for every N a clean run
reaches; a case whose worker finishes without reaching its kill point fails,
since it proved nothing. ``--timed N``: N cases in which the harness SIGKILLs
the worker from outside, at a random moment of its conversation: each kill
comes a delay drawn from ``--window LO:HI`` times the measured turn (0.75:2.75
by default: the three turns of a conversation take about three) after the
worker is ready. A turn is measured on this machine and store as the cases
run, as a killed run meets it: each run that finishes (the clean run first,
then every case's resumed run) gives its turns' mean seconds, its first turn
in a fresh process included, and the turn is the median of the last
:data:`RECENT` of those (so that the window follows the machine's load). A
single warm turn would not do: the first turn of a fresh process also builds
what the process builds once, and a killed run must finish that one to make
progress. The timed cases must make progress: the
killed runs together must have acknowledged at least :data:`PROGRESS_FLOOR`
turns per timed case, else the run fails naming the floor (a window too short
for any turn to finish would kill and resume forever and prove nothing).

Checks after each kill and resume (docs/storage.md, "Crashes and resuming"):
- no acknowledged message is lost (every message id the engine announced, and
  every message of a turn that returned, is stored);
- no message is duplicated (each user turn once, ids unique);
- the recorded trace uses only declared edges, is continuous, and starts at Idle;
- every tool call has exactly one result, and the conversation finished;
- a non-idempotent tool never ran twice for one call without that call having
  been marked ``outcome_unknown`` (and decided by a human);
- SQLite's ``integrity_check`` passes.
Exit 0 when every case passes, 1 with the failures listed.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from worker import TURNS  # noqa: E402

from turnfsm.states import TRANSITIONS  # noqa: E402
from turnfsm.storage import open_store  # noqa: E402

EDGES = {(s.value, t.trigger.value, t.dest.value) for t in TRANSITIONS for s in t.sources}

PROGRESS_FLOOR = 1 / 3
"""Turns the killed runs of ``--timed`` cases must have acknowledged, per case,
at the least: one for every three cases. At the default window a killed run
acknowledges about one turn on average, and none only when it is killed
within its first turn."""
WINDOW = (0.75, 2.75)
"""The default ``--window``: kill delays, in measured turns after the worker is ready."""
RECENT = 9
"""Runs whose mean turn the measured turn is the median of (the latest ones)."""
WORKER_SECONDS = 120.0
"""How long one worker run may take (a hang, not a speed)."""


def _store_url(kind: str, workdir: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{workdir / 'store.db'}"
    return f"files:///{workdir / 'files'}"


def _store_args(kind: str) -> list[str]:
    """The worker's options for a store: ``files-tail`` uses ``commits.jsonl``
    at any size (most commits append a record, every few fold it)."""
    return ["--files-tail"] if kind == "files-tail" else []


def _worker(url: str, workdir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HERE / "worker.py"), "--store", url, "--dir", str(workdir), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with suppress(ValueError):  # a line torn by the kill was never acknowledged
            out.append(json.loads(line))
    return out


async def verify(kind: str, workdir: Path) -> list[str]:
    """Every problem found with the finished conversation in ``workdir``."""
    problems: list[str] = []
    store = open_store(_store_url(kind, workdir))
    try:
        cid = (workdir / "context.txt").read_text().strip()
        ctx = await store.load(cid)
        steps = await store.steps(cid)
        if kind == "sqlite":
            bad = await store.integrity_check()  # type: ignore[attr-defined]
            if bad:
                problems.append(f"integrity_check: {bad}")
    finally:
        await store.aclose()
    stored = set(ctx.message_pool)
    acks = _lines(workdir / "acks.jsonl")
    acked = {a["message"] for a in acks if "message" in a}
    acked |= {m for a in acks for m in a.get("messages", [])}
    lost = acked - stored
    if lost:
        problems.append(f"acknowledged messages lost: {sorted(lost)}")
    history = ctx.history()
    ids = [n.id for n in history]
    if len(ids) != len(set(ids)):
        problems.append("a message id appears twice in the history")
    users = Counter(n.message.text for n in history if n.message.role == "user")
    want = {f"turn {i}": 1 for i in range(1, TURNS + 1)}
    if dict(users) != want:
        problems.append(f"user turns stored {dict(users)}, expected each once: {want}")
    if ctx.current_state != "Idle":
        problems.append(f"the conversation did not finish: state {ctx.current_state}")
    prev = "Idle"
    for s in steps:
        if (s.from_state, s.trigger, s.to_state) not in EDGES:
            problems.append(f"undeclared edge {s.from_state} -{s.trigger}-> {s.to_state}")
        if s.from_state != prev:
            problems.append(f"trace jumps: step from {s.from_state} after {prev}")
        prev = s.to_state
    if steps and prev != ctx.current_state:
        problems.append(f"trace ends at {prev}, state is {ctx.current_state}")
    results = Counter(
        n.message.tool_result.request_id for n in history if n.message.tool_result is not None
    )
    calls = {c.id: c for n in history for c in n.message.tool_calls or ()}
    for call_id in calls:
        if results[call_id] != 1:
            problems.append(f"tool call {call_id} has {results[call_id]} results")
    runs = Counter(r["call"] for r in _lines(workdir / "runs.jsonl") if r["tool"] == "book")
    for call_id, n in runs.items():
        if n > 1 and not (call_id in calls and calls[call_id].outcome_unknown):
            problems.append(f"non-idempotent call {call_id} ran {n} times, never marked")
    return problems


def run_case(kind: str, phase: str, at: int, plant: str | None, keep: bool) -> list[str]:
    workdir = Path(tempfile.mkdtemp(prefix=f"crash-{kind}-{phase}-{at}-"))
    url = _store_url(kind, workdir)
    extra = (["--plant", plant] if plant else []) + _store_args(kind)
    try:
        first = _worker(url, workdir, "--crash-at", str(at), "--crash-phase", phase, *extra)
        if first.returncode == 0:
            return [f"the worker finished without reaching kill point {phase} #{at}: no kill"]
        if first.returncode != -signal.SIGKILL:
            return [f"worker failed ({first.returncode}): {first.stderr[-2000:]}"]
        second = _worker(url, workdir, *extra)
        if second.returncode != 0:
            return [f"resumed worker failed ({second.returncode}): {second.stderr[-2000:]}"]
        return anyio.run(verify, kind, workdir)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _turns_acked(workdir: Path) -> list[float]:
    """The seconds of each turn the worker runs so far acknowledged as finished."""
    return [a["seconds"] for a in _lines(workdir / "acks.jsonl") if "state" in a]


def count_boundaries(kind: str) -> tuple[int, int, list[float]]:
    """(commits, file operations, the seconds of each turn) of one clean run."""
    workdir = Path(tempfile.mkdtemp(prefix=f"crash-{kind}-count-"))
    try:
        done = _worker(_store_url(kind, workdir), workdir, *_store_args(kind))
        if done.returncode != 0:
            raise SystemExit(f"clean run failed: {done.stderr[-2000:]}")
        commits = int((workdir / "commits.txt").read_text())
        return commits, int((workdir / "file_ops.txt").read_text()), _turns_acked(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _until_ready(proc: subprocess.Popen[bytes], acks: Path) -> bool:
    """Wait until the worker writes its ``ready`` line (False: it exited first)."""
    end = time.monotonic() + WORKER_SECONDS
    while not any("ready" in a for a in _lines(acks)):
        if proc.poll() is not None:
            return False
        if time.monotonic() > end:
            raise SystemExit(f"the worker was not ready after {WORKER_SECONDS:g}s")
        time.sleep(0.005)
    return True


@dataclass
class Timed:
    """What one timed case found."""

    problems: list[str]
    acked: int = 0
    """Turns the killed run acknowledged as finished."""
    killed: bool = False
    turn: float | None = None
    """The resumed run's mean turn in seconds (see ``mean_turn``)."""


def run_timed_case(kind: str, delay: float, keep: bool) -> Timed:
    """A worker SIGKILLed ``delay`` seconds after it is ready, then resumed."""
    workdir = Path(tempfile.mkdtemp(prefix=f"crash-{kind}-timed-"))
    url = _store_url(kind, workdir)
    argv = [sys.executable, str(HERE / "worker.py"), "--store", url, "--dir", str(workdir)]
    log = workdir / "first.log"  # a file, not a pipe: a full pipe would stall the worker
    try:
        with (
            log.open("w") as out,
            subprocess.Popen([*argv, *_store_args(kind)], stdout=out, stderr=out) as first,
        ):
            if _until_ready(first, workdir / "acks.jsonl"):
                time.sleep(delay)  # the kill's moment (not a wait for anything)
                with suppress(ProcessLookupError):
                    first.send_signal(signal.SIGKILL)
            first.wait(timeout=WORKER_SECONDS)
        if first.returncode not in (0, -signal.SIGKILL):
            err = log.read_text(errors="replace")[-2000:]
            return Timed([f"worker failed ({first.returncode}): {err}"])
        acked = len(_turns_acked(workdir))
        killed = first.returncode != 0
        second = _worker(url, workdir, *_store_args(kind))
        if second.returncode != 0:
            problems = [f"resumed worker failed ({second.returncode}): {second.stderr[-2000:]}"]
            return Timed(problems, acked, killed)
        problems = anyio.run(verify, kind, workdir)
        return Timed(problems, acked, killed, mean_turn(_turns_acked(workdir)[acked:]))
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def mean_turn(seconds: list[float]) -> float | None:
    """The mean of one run's turns (seconds), its first in a fresh process
    among them; None for a run that finished none."""
    return statistics.fmean(seconds) if seconds else None


def run_timed(
    kind: str, cases: int, window: tuple[float, float], turns: list[float], seed: int, keep: bool
) -> int:
    """``cases`` timed kills (see the module docstring), the window in multiples
    of the turn measured from ``turns`` (seconds, a clean run's) and each
    case's resumed run; the number of failures, the progress floor's included."""
    rng = random.Random(seed)
    failures = acked = killed = 0
    low, high = window
    first = mean_turn(turns)
    if first is None:
        raise SystemExit("the clean run finished no turn")
    measured = [first]
    for n in range(1, cases + 1):
        turn = statistics.median(measured[-RECENT:])
        delay = rng.uniform(low, high) * turn
        case = run_timed_case(kind, delay, keep)
        acked += case.acked
        killed += case.killed
        if case.turn is not None:
            measured.append(case.turn)
        if case.problems:
            failures += 1
            print(f"FAIL {kind} timed kill {n} at {delay:.3f}s (a turn: {turn:.3f}s):")
            for line in case.problems:
                print(f"  {line}")
    floor = PROGRESS_FLOOR * cases
    turn = statistics.median(measured[-RECENT:])
    where = (
        f"{cases} timed cases, kills {low:g}-{high:g} x a turn ({turn:.3f}s at the end) "
        f"after the worker is ready: the killed runs acknowledged {acked} turns"
    )
    print(f"{kind}: {where}, {killed} were killed before they finished")
    if acked < floor:
        failures += 1
        print(
            f"FAIL {kind}: no progress: {acked} turns acknowledged by the killed runs, below "
            f"the progress floor of {floor:g} ({PROGRESS_FLOOR:.2g} a case): the kill window "
            "is too short for turns to finish, so the kills proved nothing"
        )
    if killed == 0:
        failures += 1
        print(f"FAIL {kind}: every worker finished before its kill: nothing was killed")
    return failures


def _window(text: str) -> tuple[float, float]:
    low, sep, high = text.partition(":")
    try:
        window = (float(low), float(high))
    except ValueError:
        window = (-1.0, -1.0)
    if not sep or not 0 < window[0] <= window[1]:
        raise argparse.ArgumentTypeError(f"expected LO:HI with 0 < LO <= HI, not {text!r}")
    return window


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--store", choices=("sqlite", "files", "files-tail"), required=True)
    p.add_argument("--random", type=int, metavar="N", help="N random kill points instead")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--every", type=int, default=1, help="test every Nth boundary (default 1)")
    p.add_argument("--plant", choices=("early-ack",), help="run with a planted bug (control)")
    p.add_argument("--keep", action="store_true", help="keep the work folders")
    p.add_argument(
        "--timed", type=int, metavar="N", help="N kills at random moments instead (see above)"
    )
    p.add_argument(
        "--window",
        type=_window,
        default=WINDOW,
        metavar="LO:HI",
        help="--timed: kill delays in measured turns after the worker is ready (0.75:2.75)",
    )
    p.add_argument(
        "--case",
        action="append",
        metavar="PHASE:N",
        help="only this kill point (before:3, after:3, write:17); repeatable",
    )
    args = p.parse_args(argv)
    commits, writes, turns = count_boundaries(args.store)
    if args.timed:
        failures = run_timed(args.store, args.timed, args.window, turns, args.seed, args.keep)
        print(f"{args.store}: {args.timed} timed cases, {failures} failed")
        return 1 if failures else 0
    cases: list[tuple[str, int]] = []
    phases = ["before", "after"]
    for at in range(1, commits + 1, args.every):
        cases += [(ph, at) for ph in phases]
    if args.store.startswith("files"):
        cases += [("write", at) for at in range(1, writes + 1, args.every)]
    if args.case:
        cases = [(c.split(":")[0], int(c.split(":")[1])) for c in args.case]
    if args.random:
        rng = random.Random(args.seed)
        cases = [rng.choice(cases) for _ in range(args.random)]
    failures = 0
    for phase, at in cases:
        problems = run_case(args.store, phase, at, args.plant, args.keep)
        if problems:
            failures += 1
            print(f"FAIL {args.store} kill {phase} #{at}:")
            for line in problems:
                print(f"  {line}")
    print(
        f"{args.store}: {len(cases) - failures} passed, {failures} failed "
        f"({commits} commits a clean run)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
