"""Profile one workload's timed region (turnfsm side by default).

::

    python bench/hotspots.py W1                       # cProfile, 20 repeats, top 30
    python bench/hotspots.py W2 --tool pyinstrument   # sampling profile (needs pyinstrument)
    python bench/hotspots.py W1 --out /tmp/w1.prof    # keep the cProfile stats (snakeviz, pstats)
    python bench/hotspots.py W4 --synchronous NORMAL --repeat 3   # + the store's worker thread

The workload runs ``--repeat`` times in this one process (a fresh engine each
time) and only the timed region is profiled (``_common.Timed``), so setup and
the correctness checks are left out. cProfile inflates code that makes many
small calls; use its numbers for *where* the time goes and the benchmark
itself (run.py) for *how much*. pyinstrument samples, so its shares are closer
to the truth but it cannot see sub-millisecond regions: raise ``--repeat``.

W4 and W5 on turnfsm: ``SQLiteStore`` runs its calls in its writer and reader
threads, which the main thread's profile shows only as time waiting in
``select``. So with cProfile the store's ``_write_batch`` and ``_read_batch``
are wrapped (in this process only) to profile those threads too, and the report
adds where a commit's time goes: the work in the thread (``_apply_commit`` /
``_load_tx``), the rest of the awaited ``store.commit`` / ``store.load`` (the
hand-off), and the engine. W5
repeats run warm (the first run is the fresh-process case run.py measures).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from collections import defaultdict
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _common  # noqa: E402

OPS = {
    "W1": (_common.W1_TURNS, "turn"),
    "W2": (_common.W2_TURNS * _common.W2_CHUNKS_PER_ANSWER, "chunk"),
    "W3": (_common.W3_CONVERSATIONS * _common.W3_TURNS, "turn"),
    "W4": (_common.W4_TURNS, "turn"),
    "W5": (1, "resume"),
    "W6": (_common.W6_TURNS, "turn"),
    "W8": (_common.W8_CONVERSATIONS * _common.W8_TURNS, "send"),
}
"""Operations per repeat, to state times per operation (the workload's unit)."""


def _package(filename: str) -> str:
    """A coarse owner for a function: turnfsm, a third-party package, stdlib, builtins."""
    if filename.startswith("~"):
        return "builtins (C)"
    if filename.startswith("<"):
        return "generated code (dataclass __init__, ...)"
    norm = filename.replace("\\", "/")
    if "/turnfsm/" in norm and "site-packages" not in norm:
        return "turnfsm"
    if "/bench/" in norm:
        return "bench harness"
    if "site-packages/" in norm:
        return norm.split("site-packages/", 1)[1].split("/", 1)[0]
    return "stdlib"


def _label(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    if filename.startswith("<"):
        return f"{filename}:{line}:{name} (generated, e.g. a dataclass __init__)"
    norm = filename.replace("\\", "/")
    for marker in ("/turnfsm/", "site-packages/", "/bench/", "/lib/python3"):
        if marker in norm:
            norm = norm.split(marker, 1)[1]
            if marker == "/turnfsm/":
                norm = "turnfsm/" + norm
            break
    return f"{norm}:{line}:{name}"


class _StoreProbe:
    """Wraps ``SQLiteStore`` (class attributes, this process only) to time its calls
    from both sides of the thread hop and to profile the worker thread."""

    def __init__(self) -> None:
        from turnfsm.storage import SQLiteStore

        self.cls = SQLiteStore
        names = ("_write_batch", "_read_batch", "commit", "load")
        self.saved = {n: getattr(SQLiteStore, n) for n in names}
        self.worker = cProfile.Profile()
        self.on = False  # only inside the timed region
        self.t: dict[str, float] = defaultdict(float)
        self.n: dict[str, int] = defaultdict(int)
        probe = self
        commit, load = self.saved["commit"], self.saved["load"]

        def batch(orig: Any) -> Any:
            def run(store: Any, ops: list[Any]) -> Any:
                if not probe.on:
                    return orig(store, ops)
                probe.worker.enable()
                t0 = time.perf_counter()
                try:
                    return orig(store, ops)
                finally:
                    probe.t["tx"] += time.perf_counter() - t0
                    probe.n["tx"] += len(ops)
                    probe.worker.disable()

            return run

        async def timed(kind: str, orig: Any, store: Any, arg: Any) -> Any:
            if not probe.on:
                return await orig(store, arg)
            t0 = time.perf_counter()
            try:
                return await orig(store, arg)
            finally:
                probe.t[kind] += time.perf_counter() - t0
                probe.n[kind] += 1

        async def commit_(store: Any, c: Any) -> None:
            await timed("commit", commit, store, c)

        async def load_(store: Any, cid: str) -> Any:
            return await timed("load", load, store, cid)

        SQLiteStore._write_batch = batch(self.saved["_write_batch"])  # type: ignore[method-assign]
        SQLiteStore._read_batch = batch(self.saved["_read_batch"])  # type: ignore[method-assign]
        SQLiteStore.commit = commit_  # type: ignore[method-assign]
        SQLiteStore.load = load_  # type: ignore[method-assign]

    def restore(self) -> None:
        for name, fn in self.saved.items():
            setattr(self.cls, name, fn)


class _Both:
    """The profiler hook of ``_common``: the main thread's profile, and the probe."""

    def __init__(self, main: cProfile.Profile, probe: _StoreProbe) -> None:
        self.main, self.probe, self.wall, self.t0 = main, probe, 0.0, 0.0

    def enable(self) -> None:
        self.probe.on = True
        self.t0 = time.perf_counter()
        self.main.enable()

    def disable(self) -> None:
        self.main.disable()
        self.wall += time.perf_counter() - self.t0
        self.probe.on = False


def _store_report(probe: _StoreProbe, wall: float, repeat: int, top: int) -> None:
    t, n = probe.t, probe.n
    print(f"\nthe store (wall time, timed regions only: {wall / repeat * 1e3:.1f} ms per repeat)")
    awaited = t["commit"] + t["load"]
    for kind in ("commit", "load"):
        if n[kind]:
            print(
                f"  {kind:<7} {n[kind] / repeat:8.0f} calls/rep  {t[kind] / n[kind] * 1e6:8.0f} us "
                f"awaited per call  ({t[kind] / wall:.1%} of the wall)"
            )
    if n["tx"]:
        print(
            f"  in the store's threads (the work itself): "
            f"{t['tx'] / n['tx'] * 1e6:.0f} us per call, {t['tx'] / wall:.1%} of the wall"
        )
        print(
            f"  the hand-off (awaited - thread): {(awaited - t['tx']) / n['tx'] * 1e6:.0f} us per "
            f"call, {(awaited - t['tx']) / wall:.1%} of the wall"
        )
        print(f"  the rest (the engine, the fake LLM and tool): {(wall - awaited) / wall:.1%}")
    stats = pstats.Stats(probe.worker)
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_cc, _nc, tt, _ct, _callers) in raw.values()) or 1.0
    print(f"\ntop {top} functions of the worker thread by self time (cProfile)")
    print(f"  {'self':>6} {'cum':>6} {'calls/rep':>10}  function")
    for func, (_cc, nc, tt, ct, _callers) in sorted(raw.items(), key=lambda kv: -kv[1][2])[:top]:
        print(f"  {tt / total:6.1%} {ct / total:6.1%} {nc / repeat:10.0f}  {_label(func)}")


def _cprofile(
    workload: str, side, repeat: int, top: int, out: str | None, synchronous: str, system: str
) -> None:
    prof = cProfile.Profile()
    probe = None
    if system == "turnfsm" and workload in ("W4", "W5", "W8"):
        probe = _StoreProbe()
        _common.profiler = hook = _Both(prof, probe)
    else:
        _common.profiler = prof
    for _ in range(repeat):
        side.run(workload, synchronous)
    _common.profiler = None
    if probe is not None:
        probe.restore()
    if out:
        prof.dump_stats(out)
    stats = pstats.Stats(prof)
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_cc, _nc, tt, _ct, _callers) in raw.values())
    print(f"{workload}: {repeat} repeat(s), {total:.3f}s of self time under cProfile\n")

    by_pkg: dict[str, float] = defaultdict(float)
    for func, (_cc, _nc, tt, _ct, _callers) in raw.items():
        by_pkg[_package(func[0])] += tt
    print("self time by owner")
    for pkg, tt in sorted(by_pkg.items(), key=lambda kv: -kv[1]):
        print(f"  {tt / total:6.1%}  {pkg}")

    rows = sorted(raw.items(), key=lambda kv: -kv[1][2])
    print(f"\ntop {top} functions by self time (all code)")
    print(f"  {'self':>6} {'cum':>6} {'calls/rep':>10}  function")
    for func, (_cc, nc, tt, ct, _callers) in rows[:top]:
        print(f"  {tt / total:6.1%} {ct / total:6.1%} {nc / repeat:10.0f}  {_label(func)}")

    own = [kv for kv in raw.items() if _package(kv[0][0]) == "turnfsm"]
    ops, unit = OPS[workload]
    per = repeat * ops / 1e6  # seconds -> microseconds per operation
    print(f"\ntop {top} turnfsm functions by cumulative time (includes what they call)")
    print(f"  {'cum':>6} {'self':>6} {'us/' + unit:>10} {'calls/' + unit:>11}  function")
    for func, (_cc, nc, tt, ct, _callers) in sorted(own, key=lambda kv: -kv[1][3])[:top]:
        print(
            f"  {ct / total:6.1%} {tt / total:6.1%} {ct / per:10.1f} {nc / (repeat * ops):11.2f}"
            f"  {_label(func)}"
        )
    if probe is not None:
        _store_report(probe, hook.wall, repeat, top)


class _PyinstrumentAdapter:
    """One pyinstrument session per timed region (the sessions are combined after)."""

    def __init__(self, interval: float) -> None:
        from pyinstrument import Profiler

        self.profiler = Profiler(interval=interval, async_mode="disabled")
        self.running = False

    def enable(self) -> None:
        if not self.running:
            self.profiler.start()
            self.running = True

    def disable(self) -> None:
        if self.running:
            self.profiler.stop()
            self.running = False


def _pyinstrument(
    workload: str, side, repeat: int, out: str | None, interval: float, synchronous: str
) -> None:
    try:
        from pyinstrument import Profiler
        from pyinstrument.session import Session
    except ImportError:
        sys.exit("pyinstrument is not installed: pip install pyinstrument")
    sessions = []
    for _ in range(repeat):
        adapter = _PyinstrumentAdapter(interval)
        _common.profiler = adapter
        side.run(workload, synchronous)
        _common.profiler = None
        if adapter.profiler.last_session is not None:
            sessions.append(adapter.profiler.last_session)
    session = sessions[0]
    for s in sessions[1:]:
        session = Session.combine(session, s)
    prof = Profiler(interval=interval)
    prof._last_session = session  # render the combined session
    print(prof.output_text(unicode=False, color=False, show_all=False))
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(prof.output_html())
        print(f"HTML written to {out}")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("workload", type=str.upper, choices=("W1", "W2", "W3", "W4", "W5", "W6", "W8"))
    p.add_argument("--system", choices=("turnfsm", "floor"), default="turnfsm")
    p.add_argument("--tool", choices=("cprofile", "pyinstrument"), default="cprofile")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--interval", type=float, default=0.0001, help="pyinstrument sampling interval")
    p.add_argument("--out", help="cProfile: .prof stats file; pyinstrument: HTML file")
    p.add_argument(
        "--synchronous", type=str.upper, choices=_common.SYNCHRONOUS, default="FULL", help="W4, W5"
    )
    args = p.parse_args()
    if args.system == "floor":
        import floor as side
    else:
        import turnfsm_side as side  # type: ignore[no-redef]
    if args.tool == "cprofile":
        _cprofile(
            args.workload, side, args.repeat, args.top, args.out, args.synchronous, args.system
        )
    else:
        _pyinstrument(args.workload, side, args.repeat, args.out, args.interval, args.synchronous)


if __name__ == "__main__":
    main()
