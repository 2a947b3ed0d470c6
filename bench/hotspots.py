"""Profile one workload's timed region (turnfsm side by default).

::

    python bench/hotspots.py W1                       # cProfile, 20 repeats, top 30
    python bench/hotspots.py W2 --tool pyinstrument   # sampling profile (needs pyinstrument)
    python bench/hotspots.py W1 --out /tmp/w1.prof    # keep the cProfile stats (snakeviz, pstats)

The workload runs ``--repeat`` times in this one process (a fresh engine each
time) and only the timed region is profiled (``_common.Timed``), so setup and
the correctness checks are left out. cProfile inflates code that makes many
small calls; use its numbers for *where* the time goes and the benchmark
itself (run.py) for *how much*. pyinstrument samples, so its shares are closer
to the truth but it cannot see sub-millisecond regions: raise ``--repeat``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _common  # noqa: E402


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


def _cprofile(workload: str, side, repeat: int, top: int, out: str | None) -> None:
    prof = cProfile.Profile()
    _common.profiler = prof
    for _ in range(repeat):
        side.run(workload)
    _common.profiler = None
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
    print(f"\ntop {top} turnfsm functions by cumulative time (includes what they call)")
    print(f"  {'cum':>6} {'self':>6} {'calls/rep':>10}  function")
    for func, (_cc, nc, tt, ct, _callers) in sorted(own, key=lambda kv: -kv[1][3])[:top]:
        print(f"  {ct / total:6.1%} {tt / total:6.1%} {nc / repeat:10.0f}  {_label(func)}")


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


def _pyinstrument(workload: str, side, repeat: int, out: str | None, interval: float) -> None:
    try:
        from pyinstrument import Profiler
        from pyinstrument.session import Session
    except ImportError:
        sys.exit("pyinstrument is not installed: pip install pyinstrument")
    sessions = []
    for _ in range(repeat):
        adapter = _PyinstrumentAdapter(interval)
        _common.profiler = adapter
        side.run(workload)
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
    p.add_argument("workload", choices=("W1", "W2", "W3", "W6"))
    p.add_argument("--system", choices=("turnfsm", "floor"), default="turnfsm")
    p.add_argument("--tool", choices=("cprofile", "pyinstrument"), default="cprofile")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--interval", type=float, default=0.0001, help="pyinstrument sampling interval")
    p.add_argument("--out", help="cProfile: .prof stats file; pyinstrument: HTML file")
    args = p.parse_args()
    if args.system == "floor":
        import floor as side
    else:
        import turnfsm_side as side  # type: ignore[no-redef]
    if args.tool == "cprofile":
        _cprofile(args.workload, side, args.repeat, args.top, args.out)
    else:
        _pyinstrument(args.workload, side, args.repeat, args.out, args.interval)


if __name__ == "__main__":
    main()
