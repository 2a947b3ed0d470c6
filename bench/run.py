"""Run the benchmark workloads (shared/bench/WORKLOADS.md) on turnfsm and on the floor.

::

    python bench/run.py --workload W1                 # both systems, median of 5 runs
    python bench/run.py --workload all --runs 3 --json
    python bench/run.py --one W1 --system turnfsm     # one measurement, this process

Each measurement runs in a fresh subprocess (``--one``); the figure is the
median of ``--runs`` runs, and turnfsm's ratio is its median divided by the
floor's median measured in the same invocation. Runs of the two systems are
interleaved (floor, turnfsm, floor, ...) so that drift on a shared machine
hits both alike. One JSON line per (system, workload) goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

IMPLEMENTED = ("W1", "W2", "W3", "W6")
NOT_YET = {
    "W4": "W4 (durable: every step persisted to the system's own SQLite store)",
    "W5": "W5 (resume long: load 5,000 stored messages from SQLite, run one more turn)",
}
SYSTEMS = ("floor", "turnfsm")
TARGETS = {"W1": 10.0, "W2": 4.0, "W3": 10.0, "W6": 10.0}
"""The issue's targets, as ratios to the floor (W3: wall; peak RSS <= 2x)."""
W3_RSS_TARGET = 2.0


def _one(workload: str, system: str) -> dict[str, Any]:
    """One measurement in this process (imports only the system measured)."""
    if system == "floor":
        import floor as side
    else:
        import turnfsm_side as side  # type: ignore[no-redef]
    result = side.run(workload)
    return {"system": system, "workload": workload, **result}


def _turnfsm_fingerprint() -> str | None:
    """A short hash of turnfsm's source files (found without importing it), so that
    a run can tell when the engine changed under it (e.g. an edit mid-run)."""
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("turnfsm")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = next(iter(spec.submodule_search_locations))
    h = hashlib.sha1()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()[:12]


def _spawn(workload: str, system: str) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", workload, "--system", system]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.stderr.strip():
        # the engine must print nothing per transition; anything here is worth seeing
        sys.stderr.write(f"[{system} {workload} stderr]\n{proc.stderr}")
    if proc.returncode != 0:
        raise RuntimeError(
            f"{system} {workload} failed (exit {proc.returncode}):\n{proc.stderr.strip()}"
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise RuntimeError(f"{system} {workload} printed no result")
    return json.loads(lines[-1])


def _round(x: float | None, digits: int = 3) -> float | None:
    if x is None:
        return None
    return float(f"{x:.{digits}g}") if abs(x) < 1 else round(x, digits)


def _measure(
    workload: str, systems: tuple[str, ...], runs: int, quiet: bool
) -> list[dict[str, Any]]:
    source_before = _turnfsm_fingerprint() if "turnfsm" in systems else None
    samples: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for r in range(runs):
        for system in systems:
            t0 = time.perf_counter()
            res = _spawn(workload, system)
            samples[system].append(res)
            if not quiet:
                print(
                    f"  {workload} {system:<7} run {r + 1}/{runs}: {res['value']:.4g} {res['unit']}"
                    f"  peak RSS {res['peak_rss_mib']:.1f} MiB  ({time.perf_counter() - t0:.1f}s)",
                    file=sys.stderr,
                )
    med: dict[str, dict[str, float]] = {}
    for system, rs in samples.items():
        med[system] = {
            "value": statistics.median(r["value"] for r in rs),
            "cpu": statistics.median(r["cpu_value"] for r in rs),
            "peak": statistics.median(r["peak_rss_mib"] for r in rs),
            "growth": statistics.median(r["peak_rss_mib"] - r["rss_start_mib"] for r in rs),
        }
    source_after = _turnfsm_fingerprint() if "turnfsm" in systems else None
    if source_before != source_after:
        print(
            f"warning: turnfsm's source changed while {workload} ran "
            f"({source_before} -> {source_after}); its runs mix two versions",
            file=sys.stderr,
        )
    floor = med.get("floor")
    out = []
    for system, rs in samples.items():
        m = med[system]
        line: dict[str, Any] = {
            "system": system,
            "workload": workload,
            "value": _round(m["value"], 4),
            "unit": rs[0]["unit"],
            "peak_rss_mib": round(m["peak"], 1),
            "ratio_to_floor": _round(m["value"] / floor["value"], 3) if floor else None,
        }
        if workload == "W3":
            line["peak_rss_ratio_to_floor"] = (
                _round(m["peak"] / floor["peak"], 3) if floor else None
            )
            line["rss_growth_mib"] = round(m["growth"], 1)
            line["rss_growth_ratio_to_floor"] = (
                _round(m["growth"] / floor["growth"], 3) if floor and floor["growth"] > 0 else None
            )
        # the same figure from process CPU time: steadier when the machine is shared
        line["cpu_value"] = _round(m["cpu"], 4)
        line["cpu_ratio_to_floor"] = _round(m["cpu"] / floor["cpu"], 3) if floor else None
        line["runs"] = [_round(r["value"], 4) for r in rs]
        if system == "turnfsm":
            line["turnfsm_src"] = source_after if source_before == source_after else "changed"
        out.append(line)
    return out


def _summary(lines: list[dict[str, Any]]) -> str:
    rows = [
        "",
        f"{'workload':<9}{'system':<9}{'median':>12} {'unit':<9}{'peak RSS':>10}"
        f"{'ratio':>9}{'target':>9}",
    ]
    for ln in lines:
        ratio = ln["ratio_to_floor"]
        target = TARGETS.get(ln["workload"]) if ln["system"] == "turnfsm" else None
        verdict = ""
        if target is not None and ratio is not None:
            verdict = f"<= {target:g}x " + ("ok" if ratio <= target else "MISSED")
        rows.append(
            f"{ln['workload']:<9}{ln['system']:<9}{ln['value']:>12.4g} {ln['unit']:<9}"
            f"{ln['peak_rss_mib']:>7.1f} MiB"
            f"{'' if ratio is None else f'{ratio:>8.2f}x'} {verdict}"
        )
        if ln["workload"] == "W3" and ln["system"] == "turnfsm" and ln["peak_rss_ratio_to_floor"]:
            pr = ln["peak_rss_ratio_to_floor"]
            gr = ln["rss_growth_ratio_to_floor"]
            rows.append(
                f"{'':<18}peak RSS {pr:.2f}x the floor's (<= {W3_RSS_TARGET:g}x "
                f"{'ok' if pr <= W3_RSS_TARGET else 'MISSED'}); growth during the run "
                f"{ln['rss_growth_mib']:.1f} MiB = {gr if gr is None else f'{gr:.2f}x'}"
            )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workload", help="W1, W2, W3, W6 or all (W4, W5: not implemented yet)")
    p.add_argument("--system", choices=("turnfsm", "floor", "both"), default="both")
    p.add_argument("--runs", type=int, default=5, help="fresh processes per figure (median)")
    p.add_argument("--json", action="store_true", help="only the JSON lines, nothing on stderr")
    p.add_argument("--one", metavar="W", help=argparse.SUPPRESS)  # internal: one measurement
    args = p.parse_args(argv)

    if args.one:
        if args.system == "both":
            p.error("--one needs --system turnfsm or --system floor")
        print(json.dumps(_one(args.one.upper(), args.system)))
        return 0

    if not args.workload:
        p.error("give --workload W1|W2|W3|W6|all")
    wanted = args.workload.upper()
    if wanted in NOT_YET:
        print(
            f"{NOT_YET[wanted]} is not implemented yet: it needs turnfsm's SQLite "
            "persistence, which does not exist yet.",
            file=sys.stderr,
        )
        return 2
    if wanted != "ALL" and wanted not in IMPLEMENTED:
        p.error(f"unknown workload {args.workload!r}: choose from {', '.join(IMPLEMENTED)}, all")
    if args.runs < 1:
        p.error("--runs must be >= 1")
    workloads = IMPLEMENTED if wanted == "ALL" else (wanted,)
    systems = SYSTEMS if args.system == "both" else (args.system,)

    all_lines: list[dict[str, Any]] = []
    for w in workloads:
        if not args.json:
            print(f"{w}: {args.runs} run(s) of {' + '.join(systems)}", file=sys.stderr)
        try:
            lines = _measure(w, systems, args.runs, quiet=args.json)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        for ln in lines:
            print(json.dumps(ln), flush=True)
        all_lines.extend(lines)
    if not args.json:
        print(_summary(all_lines), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
