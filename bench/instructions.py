"""Instructions per turn of W1, W2, W4 or W6, and of W5's resume, turnfsm and
the floor, counted by valgrind's cachegrind: the figure the machine's load does
not move.

Each side runs the workload in a process of its own under
``valgrind --tool=cachegrind --cache-sim=no`` twice, with ``LONG`` and with
``SHORT`` turns; a turn's figure is the difference of the two totals divided
by ``LONG - SHORT``, so that the interpreter's start, the imports and the
set-up cancel out. ``PYTHONHASHSEED=0`` keeps the runs alike. With
``--no-checks`` the harness's own result checks (the stored history read back
and compared) are left out of both runs, so that the figure is the turns'.

W5 has one resume, not a number of turns: its figure is the run that stops
when the clock stops (``Timed.stop``) minus the run that stops when it starts
(``Timed.start``), the same process up to there. That is exactly W5's timed
part: opening the store, loading the 5,000 messages and the turn; not the
prepared file's copy before it, nor the checks and the closing after it.

The bytecode of turnfsm and of the harness is compiled before the runs, so
that neither run pays for compiling what changed since the last.

::

    python bench/instructions.py W1                      # both sides, 120 and 20 turns
    python bench/instructions.py W6 --turns 60 10 --no-checks
    python bench/instructions.py W1 --side turnfsm
    python bench/instructions.py W5                      # the timed part of a resume
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, NoReturn

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ("W1", "W2", "W4", "W5", "W6")
_TURNS = ("W1_TURNS", "W2_TURNS", "W4_TURNS", "W6_TURNS")
_SUMMARY = re.compile(r"^summary:\s+(\d+)", re.MULTILINE)


def _stop_at_clock(at_start: bool) -> None:
    """W5's bounds: end the process (valgrind then writes its count) when the
    harness's clock starts (``at_start``) or when it stops."""
    import _common

    timed: Any = _common.Timed
    begin, end = timed.start.__func__, timed.stop

    def start(cls: Any) -> Any:
        tm = begin(cls)
        if at_start:
            os._exit(0)
        return tm

    def stop(self: Any) -> NoReturn:
        end(self)
        os._exit(0)

    timed.start = classmethod(start)
    timed.stop = stop


def _inner(side: str, workload: str, turns: int, checks: bool) -> None:
    """Run one workload in this process (what valgrind runs)."""
    sys.path.insert(0, HERE)
    if workload == "W5":
        _stop_at_clock(at_start=turns == 0)
    module: Any = __import__("turnfsm_side" if side == "turnfsm" else "floor")
    for name in _TURNS:
        if hasattr(module, name):
            setattr(module, name, turns)
    if not checks:

        async def _nothing(*_: object, **__: object) -> None:
            return None

        if hasattr(module, "check"):
            module.check = lambda *_, **__: None
        for name in ("_check_history", "_check_stored", "_check_approved"):
            if hasattr(module, name):
                setattr(module, name, _nothing)
        for name in ("expected_w1_history", "expected_w2_history"):
            if hasattr(module, name):
                setattr(module, name, lambda *_, **__: [])
    module.run(workload)


def _total(side: str, workload: str, turns: int, checks: bool) -> int:
    """The instructions of one whole run of ``turns`` turns."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "cachegrind.out")
        command = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            f"--cachegrind-out-file={out}",
            sys.executable,
            os.path.abspath(__file__),
            "--inner",
            side,
            workload,
            str(turns),
        ]
        if not checks:
            command.append("--no-checks")
        env = dict(os.environ, PYTHONHASHSEED="0")
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # the second run reads the bytecode
        subprocess.run(command, env=env, check=True, capture_output=True)
        with open(out, encoding="utf-8") as f:
            found = _SUMMARY.search(f.read())
        if found is None:
            raise SystemExit(f"no summary line in cachegrind's output for {side} {workload}")
        return int(found.group(1))


def per_turn(side: str, workload: str, long: int, short: int, checks: bool) -> int:
    """Instructions per turn: (run of ``long`` turns - run of ``short``) / the difference."""
    return (_total(side, workload, long, checks) - _total(side, workload, short, checks)) // (
        long - short
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", nargs="?", choices=WORKLOADS)
    parser.add_argument("--side", choices=("turnfsm", "floor", "both"), default="both")
    parser.add_argument("--turns", nargs=2, type=int, metavar=("LONG", "SHORT"), default=[120, 20])
    parser.add_argument("--no-checks", action="store_true", help="leave the harness's checks out")
    parser.add_argument(
        "--inner", nargs=3, metavar=("SIDE", "WORKLOAD", "TURNS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.inner:
        side, workload, turns = args.inner
        _inner(side, workload, int(turns), not args.no_checks)
        return 0
    if args.workload is None:
        parser.error("which workload? one of " + ", ".join(WORKLOADS))
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    long, short = args.turns
    if long <= short:
        parser.error("LONG must be more turns than SHORT")
    import turnfsm

    for folder in (os.path.dirname(turnfsm.__file__), HERE):
        compileall.compile_dir(folder, quiet=1)
    sides = ("turnfsm", "floor") if args.side == "both" else (args.side,)
    unit = "a turn"
    if args.workload == "W5":  # one resume: the runs end at the clock's stop and start
        long, short, unit = 1, 0, "for the resume (load and turn)"
        sys.path.insert(0, HERE)
        from _common import ensure_prepared

        for side in sides:  # built here, not under valgrind
            ensure_prepared(side, "W5")
    figures = {
        side: per_turn(side, args.workload, long, short, not args.no_checks) for side in sides
    }
    for side, figure in figures.items():
        print(f"{side} {args.workload}: {figure:,} instructions {unit}")
    if len(figures) == 2:
        print(f"ratio to the floor: {figures['turnfsm'] / figures['floor']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
