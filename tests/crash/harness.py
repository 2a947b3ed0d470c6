"""The crash harness: kill a worker at every persistence boundary, resume it in
a fresh process, and check that nothing acknowledged was lost.

    python tests/crash/harness.py --store sqlite            # every commit, before and after
    python tests/crash/harness.py --store files             # ... and between its file operations
    python tests/crash/harness.py --store files-tail        # ... with commits.jsonl at any size
    python tests/crash/harness.py --store sqlite --random 200 --seed 7   # longer: random points
    python tests/crash/harness.py --store sqlite --plant early-ack       # the control: must FAIL

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
import subprocess
import sys
import tempfile
from collections import Counter
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from worker import TURNS  # noqa: E402

from turnfsm.states import TRANSITIONS  # noqa: E402
from turnfsm.storage import open_store  # noqa: E402

EDGES = {(s.value, t.trigger.value, t.dest.value) for t in TRANSITIONS for s in t.sources}


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
        if first.returncode not in (0, -signal.SIGKILL):
            return [f"worker failed ({first.returncode}): {first.stderr[-2000:]}"]
        second = _worker(url, workdir, *extra)
        if second.returncode != 0:
            return [f"resumed worker failed ({second.returncode}): {second.stderr[-2000:]}"]
        return anyio.run(verify, kind, workdir)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def count_boundaries(kind: str) -> tuple[int, int]:
    """(commits, file operations) of one clean run."""
    workdir = Path(tempfile.mkdtemp(prefix=f"crash-{kind}-count-"))
    try:
        done = _worker(_store_url(kind, workdir), workdir, *_store_args(kind))
        if done.returncode != 0:
            raise SystemExit(f"clean run failed: {done.stderr[-2000:]}")
        commits = int((workdir / "commits.txt").read_text())
        return commits, int((workdir / "file_ops.txt").read_text())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


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
        "--case",
        action="append",
        metavar="PHASE:N",
        help="only this kill point (before:3, after:3, write:17); repeatable",
    )
    args = p.parse_args(argv)
    commits, writes = count_boundaries(args.store)
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
