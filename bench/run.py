"""Run the benchmark workloads (docs/benchmarks.md) on turnfsm and on the floor.

::

    python bench/run.py --workload W1                 # both systems, median of 5 runs
    python bench/run.py --workload all --runs 3 --json
    python bench/run.py --one W1 --system turnfsm     # one measurement, this process
    python bench/run.py --workload W4 --synchronous NORMAL   # SQLite's setting (default FULL)
    python bench/run.py --workload bytes              # bytes written per turn, 100 vs 5,000
    python bench/run.py --workload W8 --baseline /tmp/old-checkout --baseline-python PY
    python bench/run.py --workload prepare            # building one request, 100 vs 5,000
    python bench/run.py --workload files              # a turn and a page on files://, 100 .. 5,000
    python bench/run.py --workload W7                 # a W1 turn over HTTP + SSE vs in-process
    python bench/run.py --workload W9                 # 1, 2 and 4 workers on PostgreSQL
    python bench/run.py --workload W10 --runs 3       # turns on Temporal: overhead, 1, 2, 4 workers
    python bench/run.py --workload W12                # a turn's instructions, 100 vs 5,000 messages

Each measurement runs in a fresh subprocess (``--one``); the figure is the
median of ``--runs`` runs, and turnfsm's ratio is its median divided by the
floor's median measured in the same invocation. Runs of the two systems are
interleaved (floor, turnfsm, floor, ...) so that drift on a shared machine
hits both alike. One JSON line per (system, workload) goes to stdout.

W5 (and ``bytes``) run on a conversation of 5,000 stored messages, prepared
once by a setup process (``--prepare W5``) and cached under
``$TMPDIR/turnfsm-bench-cache`` per source version; see bench/README.md.
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

from _common import SYNCHRONOUS, ensure_prepared, turnfsm_fingerprint  # noqa: E402

IMPLEMENTED = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "BYTES")
DURABLE = ("W4", "W5", "W8", "BYTES")
"""On SQLite: they take ``--synchronous`` and report it."""
PREPARED = ("W5", "BYTES")
"""They run on W5's prepared file (built once per source version, then cached)."""
SYSTEMS = ("floor", "turnfsm")
TARGETS = {"W1": 15.0, "W2": 3.0, "W3": 15.0, "W4": 1.5, "W5": 2.0, "W6": 15.0}
"""The targets, as ratios to the floor (W3: wall; peak RSS <= 2x). W4 and W5 are
compared with the floor at the same ``synchronous`` setting."""
W3_RSS_TARGET = 2.0
W7_TARGET_MS = 3.0
"""W7's target: at most 3 ms per W1 turn over HTTP + SSE on top of the same turn
in-process (not a ratio to the floor: both sides are turnfsm)."""
W7_SYSTEMS = ("inprocess", "http", "httpx")
"""W7's measuring processes (bench/http_side.py), alternated like floor and turnfsm:
in-process, over HTTP with the lean client (the figure), and with httpx (beside it)."""
THROUGHPUT = ("W8",)
"""Figures in sends per second (higher is better): their ``ratio_to_floor`` is the
floor's figure divided by turnfsm's (how many times slower), like the others."""
W8_BASELINE_TARGET = 5.0
"""W8's target: at least 5x the sends per second of the engine at commit b7a6320,
measured in the same invocation with ``--baseline`` (a checkout of it)."""
BASELINE: dict[str, str] = {}
"""``--baseline`` / ``--baseline-python``: where the ``baseline`` system's turnfsm is."""


def _one(workload: str, system: str, synchronous: str) -> dict[str, Any]:
    """One measurement in this process (imports only the system measured)."""
    if workload == "PREPARE":
        import prepare_view

        return prepare_view.run()
    if workload == "FILES":
        import files_flat

        return files_flat.run()
    if workload == "COLD":
        import cold_reads

        return cold_reads.run()
    if workload == "W7":
        import http_side

        return {"system": system, "workload": workload, **http_side.run(system)}
    if system == "floor":
        import floor as side
    else:  # turnfsm, or the baseline (turnfsm_side on an older turnfsm)
        import turnfsm_side as side  # type: ignore[no-redef]
    result = side.run(workload, synchronous)
    return {"system": system, "workload": workload, **result}


def _prepare(name: str, system: str, dest: str | None) -> None:
    """Build the cached prepared file (a setup process, never the measuring one)."""
    if system == "floor":
        import floor as side
    else:
        import turnfsm_side as side  # type: ignore[no-redef]
    side.prepare(name, dest)


def _spawn(workload: str, system: str, synchronous: str) -> dict[str, Any]:
    python, env = sys.executable, None
    if system == "baseline":
        # the turnfsm side on another checkout: a Python whose turnfsm is not this
        # worktree's (an editable install would win over PYTHONPATH)
        python = BASELINE.get("python", python)
        env = {**os.environ, "PYTHONPATH": BASELINE["path"]}
    cmd = [python, os.path.abspath(__file__), "--one", workload, "--system", system]
    cmd += ["--synchronous", synchronous]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, env=env)
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


def _prepare_files(workload: str, systems: tuple[str, ...], quiet: bool) -> None:
    """Make sure W5's prepared files exist before any measurement (built by a setup
    process the first time for a given source; cached under $TMPDIR after that)."""
    if workload not in PREPARED:
        return
    for system in systems:
        t0 = time.perf_counter()
        try:
            path, meta = ensure_prepared(system, "W5")
        except AssertionError as exc:
            raise RuntimeError(str(exc)) from exc
        if not quiet:
            print(
                f"  {workload} {system:<7} prepared file: {meta['messages']} messages, "
                f"{os.path.getsize(path) / 2**20:.1f} MiB ({time.perf_counter() - t0:.1f}s) "
                f"{path}",
                file=sys.stderr,
            )


def _measure(
    workload: str, systems: tuple[str, ...], runs: int, quiet: bool, synchronous: str
) -> list[dict[str, Any]]:
    source_before = turnfsm_fingerprint() if "turnfsm" in systems else None
    _prepare_files(workload, systems, quiet)
    if workload == "BYTES":
        return _measure_bytes(systems, quiet, synchronous, source_before)
    samples: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for r in range(runs):
        for system in systems:
            t0 = time.perf_counter()
            res = _spawn(workload, system, synchronous)
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
    source_after = _source_after(workload, systems, source_before)
    floor = med.get("floor")
    base = med.get("baseline")
    higher = workload in THROUGHPUT

    def ratio(mine: float, floors: float) -> float | None:
        return _round(floors / mine if higher else mine / floors, 3)

    out = []
    for system, rs in samples.items():
        m = med[system]
        line: dict[str, Any] = {
            "system": system,
            "workload": workload,
            "value": _round(m["value"], 4),
            "unit": rs[0]["unit"],
            "peak_rss_mib": round(m["peak"], 1),
            "ratio_to_floor": ratio(m["value"], floor["value"]) if floor else None,
        }
        if base and system == "turnfsm":
            line["speedup_vs_baseline"] = _round(m["value"] / base["value"], 3)
        if workload in DURABLE:
            line["synchronous"] = synchronous
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
        line["cpu_ratio_to_floor"] = ratio(m["cpu"], floor["cpu"]) if floor else None
        line["runs"] = [_round(r["value"], 4) for r in rs]
        # W4, W5: what each side reports beside its figure (medians over the runs)
        for key in rs[0].get("extra", {}):
            line[key] = _round(statistics.median(r["extra"][key] for r in rs), 4)
        if higher and floor and "p99_ms" in line:
            fp99 = statistics.median(r["extra"]["p99_ms"] for r in samples["floor"])
            line["p99_ratio_to_floor"] = _round(line["p99_ms"] / fp99, 3)
        if system == "baseline":
            line["baseline"] = BASELINE["path"]
        if system == "turnfsm":
            line["turnfsm_src"] = source_after if source_before == source_after else "changed"
        out.append(line)
    return out


def _measure_w7(runs: int, quiet: bool) -> list[dict[str, Any]]:
    """W7: the W1 turn in-process and over HTTP + SSE, in fresh processes run
    alternately; the figure is the difference of the two medians, in ms per turn."""
    source_before = turnfsm_fingerprint()
    samples: dict[str, list[dict[str, Any]]] = {s: [] for s in W7_SYSTEMS}
    for r in range(runs):
        for system in W7_SYSTEMS:
            t0 = time.perf_counter()
            res = _spawn("W7", system, "FULL")
            samples[system].append(res)
            if not quiet:
                print(
                    f"  W7 {system:<9} run {r + 1}/{runs}: {res['value']:.4g} us/turn, "
                    f"{res['extra']['deltas_per_s']:.4g} deltas/s  "
                    f"({time.perf_counter() - t0:.1f}s)",
                    file=sys.stderr,
                )
    source_after = _source_after("W7", ("turnfsm",), source_before)

    def med(system: str, key: str) -> float:
        return statistics.median(r[key] if key in r else r["extra"][key] for r in samples[system])

    inproc, http = med("inprocess", "value"), med("http", "value")
    line: dict[str, Any] = {
        "system": "turnfsm",
        "workload": "W7",
        "value": _round((http - inproc) / 1000, 4),
        "unit": "ms/turn",
        "target_ms": W7_TARGET_MS,
        "http_us_per_turn": _round(http, 4),
        "inprocess_us_per_turn": _round(inproc, 4),
        "server_cpu_us_per_turn": _round(med("http", "server_cpu_us"), 4),
        "client_cpu_us_per_turn": _round(med("http", "client_cpu_us"), 4),
        "inprocess_cpu_us_per_turn": _round(med("inprocess", "cpu_value"), 4),
        "sse_deltas_per_s": _round(med("http", "deltas_per_s"), 4),
        "httpx_extra_ms_per_turn": _round((med("httpx", "value") - inproc) / 1000, 4),
        "httpx_client_cpu_us_per_turn": _round(med("httpx", "client_cpu_us"), 4),
        "inprocess_deltas_per_s": _round(med("inprocess", "deltas_per_s"), 4),
        "peak_rss_mib": round(med("http", "peak_rss_mib"), 1),
        "ratio_to_floor": None,
        "runs": [
            _round((h["value"] - i["value"]) / 1000, 4)
            for h, i in zip(samples["http"], samples["inprocess"], strict=True)
        ],
        "turnfsm_src": source_after if source_before == source_after else "changed",
    }
    return [line]


def _source_after(workload: str, systems: tuple[str, ...], before: str | None) -> str | None:
    after = turnfsm_fingerprint() if "turnfsm" in systems else None
    if before != after:
        print(
            f"warning: turnfsm's source changed while {workload} ran "
            f"({before} -> {after}); its runs mix two versions",
            file=sys.stderr,
        )
    return after


def _measure_bytes(
    systems: tuple[str, ...], quiet: bool, synchronous: str, source_before: str | None
) -> list[dict[str, Any]]:
    """Bytes written per turn at 100 and at 5,000 stored messages: one run per system
    (the figure is a count of bytes, not a time: it does not vary between runs)."""
    results = {}
    for system in systems:
        t0 = time.perf_counter()
        results[system] = _spawn("BYTES", system, synchronous)
        if not quiet:
            print(f"  BYTES {system:<7} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    source_after = _source_after("BYTES", systems, source_before)
    out = []
    for system, res in results.items():
        small, large = res["at_100"], res["at_5000"]
        line: dict[str, Any] = {
            "system": system,
            "workload": "bytes",
            "value": round(large["total"]),
            "unit": "B/turn",
            "synchronous": synchronous,
            "bytes_per_turn_at_100": round(small["total"]),
            "bytes_per_turn_at_5000": round(large["total"]),
            "growth_100_to_5000": _round(large["total"] / small["total"], 3),
            "wal_bytes_per_turn_at_100": round(small["wal"]),
            "wal_bytes_per_turn_at_5000": round(large["wal"]),
            "checkpoint_bytes_per_turn_at_100": _round(small["checkpoint"], 5),
            "checkpoint_bytes_per_turn_at_5000": _round(large["checkpoint"], 5),
            "commits_per_turn": large["commits_per_turn"],
            "wal_bytes_per_commit_at_5000": round(large["wal"] / large["commits_per_turn"]),
            "turns_measured": large["turns"],
        }
        if "floor" in results and system != "floor":
            line["ratio_to_floor"] = _round(large["total"] / results["floor"]["at_5000"]["total"])
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
    floor_w4 = next((x for x in lines if x["workload"] == "W4" and x["system"] == "floor"), None)
    for ln in lines:
        if ln["workload"] == "W7":
            extra = ln["value"]
            ok = "ok" if extra <= ln["target_ms"] else "MISSED"
            rows.append(
                f"{'W7':<9}{ln['system']:<9}{extra:>12.4g} {'ms/turn':<9}"
                f"{ln['peak_rss_mib']:>7.1f} MiB{'':>9} <= {ln['target_ms']:g} ms over HTTP + SSE "
                + ok
            )
            rows.append(
                f"{'':<18}(over HTTP {ln['http_us_per_turn']:.4g} us/turn, in-process "
                f"{ln['inprocess_us_per_turn']:.4g}; CPU per turn: server "
                f"{ln['server_cpu_us_per_turn']:.4g} us, client "
                f"{ln['client_cpu_us_per_turn']:.4g} us; "
                f"SSE {ln['sse_deltas_per_s']:.4g} deltas/s, in-process "
                f"{ln['inprocess_deltas_per_s']:.4g}; with httpx as the client "
                f"{ln['httpx_extra_ms_per_turn']:.4g} ms/turn extra, its CPU "
                f"{ln['httpx_client_cpu_us_per_turn']:.4g} us/turn)"
            )
            continue
        if ln["workload"] == "bytes":
            rows.append(
                f"{'bytes':<9}{ln['system']:<9}{ln['bytes_per_turn_at_100']:>9} B/turn at 100 "
                f"messages, {ln['bytes_per_turn_at_5000']} at 5,000 "
                f"({ln['growth_100_to_5000']:.2f}x; {ln['commits_per_turn']:g} commits/turn, "
                f"WAL {ln['wal_bytes_per_turn_at_5000']} + checkpoint "
                f"{ln['checkpoint_bytes_per_turn_at_5000']:.0f})"
            )
            continue
        ratio = ln["ratio_to_floor"]
        target = TARGETS.get(ln["workload"]) if ln["system"] == "turnfsm" else None
        verdict = ""
        if target is not None and ratio is not None:
            verdict = f"<= {target:g}x " + ("ok" if ratio <= target else "MISSED")
        if ln["workload"] in THROUGHPUT and ln.get("speedup_vs_baseline") is not None:
            up = ln["speedup_vs_baseline"]
            verdict = f"{up:.2f}x the baseline's sends/s (>= {W8_BASELINE_TARGET:g}x " + (
                "ok)" if up >= W8_BASELINE_TARGET else "MISSED)"
            )
        rows.append(
            f"{ln['workload']:<9}{ln['system']:<9}{ln['value']:>12.4g} {ln['unit']:<9}"
            f"{ln['peak_rss_mib']:>7.1f} MiB"
            f"{'' if ratio is None else f'{ratio:>8.2f}x'} {verdict}"
        )
        if ln["workload"] in DURABLE:
            rows[-1] += f"  [synchronous={ln['synchronous']}]"
        if ln["workload"] in THROUGHPUT:
            rows[-1] += f"  p99 {ln['p99_ms']:.4g} ms"
        if ln["workload"] == "W4" and ln["system"] == "turnfsm" and floor_w4:
            f7, ft = floor_w4["value_7_commits"], floor_w4["value_thread_hop"]
            rows.append(
                f"{'':<18}(the floor with 7 commits/turn: {f7:.4g} us, turnfsm "
                f"{ln['value'] / f7:.2f}x that; those 7 commits each through a thread "
                f"hop: {ft:.4g} us, turnfsm {ln['value'] / ft:.2f}x that)"
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


def _run_prepare(runs: int, quiet: bool) -> int:
    """The prepare workload (bench/prepare_view.py): turnfsm only, its own figure
    at 100 and at 5,000 messages; the median ratio over ``runs`` processes."""
    results = []
    for r in range(runs):
        try:
            res = _spawn("PREPARE", "turnfsm", "FULL")
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        results.append(res)
        if not quiet:
            print(
                f"  prepare run {r + 1}/{runs}: {res['prepare_us_at_100']:.4g} us at 100, "
                f"{res['prepare_us_at_5000']:.4g} us at 5,000 ({res['ratio_5000_to_100']:.2f}x)",
                file=sys.stderr,
            )
    line = dict(results[0])
    for key in ("prepare_us_at_100", "prepare_us_at_5000", "ratio_5000_to_100", "value"):
        line[key] = _round(statistics.median(r[key] for r in results), 4)
    line["runs"] = [r["ratio_5000_to_100"] for r in results]
    print(json.dumps(line), flush=True)
    if not quiet:
        ok = "ok" if line["ratio_5000_to_100"] <= line["target"] else "MISSED"
        print(
            f"prepare: {line['prepare_us_at_100']:.4g} us at 100 messages, "
            f"{line['prepare_us_at_5000']:.4g} us at 5,000: {line['ratio_5000_to_100']:.2f}x "
            f"(<= {line['target']:g}x {ok})",
            file=sys.stderr,
        )
    return 0


def _run_cold(runs: int, quiet: bool) -> int:
    """The cold-reads workload (bench/cold_reads.py): turnfsm only, a context's
    outline, a page and (for reference) a whole load at 100 and 5,000 messages
    on each store that reads a part alone; the medians over ``runs`` processes."""
    results = []
    for r in range(runs):
        try:
            results.append(_spawn("COLD", "turnfsm", "FULL"))
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if not quiet:
            ratios = {k: v for k, v in results[-1].items() if k.endswith("_to_100")}
            print(f"  cold run {r + 1}/{runs}: {ratios}", file=sys.stderr)
    line = dict(results[0])
    for key in results[0]:
        if key.endswith(("_at_100", "_at_5000", "_to_100")):
            line[key] = _round(statistics.median(r[key] for r in results), 4)
    print(json.dumps(line), flush=True)
    if not quiet:
        for key, ratio in line.items():
            if key.endswith("_ratio_5000_to_100"):
                what = key.removesuffix("_ratio_5000_to_100")
                target = (
                    ""
                    if what.endswith("_load")
                    else (
                        " (<= {:g}x {})".format(
                            line["target"], "ok" if ratio <= line["target"] else "MISSED"
                        )
                    )
                )
                print(
                    f"cold {what}: {line[f'{what}_us_at_100']:.4g} us at 100 messages, "
                    f"{line[f'{what}_us_at_5000']:.4g} us at 5,000: {ratio:.2f}x{target}",
                    file=sys.stderr,
                )
    return 0


def _run_files(runs: int, quiet: bool) -> int:
    """The files workload (bench/files_flat.py): turnfsm only, a turn and a cold
    page on ``files://`` at 100, 1,000 and 5,000 messages; the medians over
    ``runs`` processes."""
    results = []
    for r in range(runs):
        try:
            res = _spawn("FILES", "turnfsm", "FULL")
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        results.append(res)
        if not quiet:
            print(
                f"  files run {r + 1}/{runs}: turn {res['turn_us_at_100']:.4g} / "
                f"{res['turn_us_at_1000']:.4g} / {res['turn_us_at_5000']:.4g} us, page "
                f"{res['page_us_at_100']:.4g} / {res['page_us_at_1000']:.4g} / "
                f"{res['page_us_at_5000']:.4g} us, written "
                f"{res['bytes_per_turn_at_100']:.4g} / {res['bytes_per_turn_at_1000']:.4g} / "
                f"{res['bytes_per_turn_at_5000']:.4g} bytes a turn at 100 / 1,000 / 5,000 "
                "messages",
                file=sys.stderr,
            )
    line = dict(results[0])
    for key in results[0]:
        if key.endswith(("_at_100", "_at_1000", "_at_5000", "_to_100")) or key == "value":
            line[key] = _round(statistics.median(r[key] for r in results), 4)
    line["runs"] = [[r["turn_ratio_5000_to_100"], r["page_ratio_5000_to_100"]] for r in results]
    print(json.dumps(line), flush=True)
    if not quiet:
        for what in ("turn", "page"):
            ratio = line[f"{what}_ratio_5000_to_100"]
            ok = "ok" if ratio <= line["target"] else "MISSED"
            print(
                f"files {what}: {line[f'{what}_us_at_100']:.4g} us at 100 messages, "
                f"{line[f'{what}_us_at_5000']:.4g} us at 5,000: {ratio:.2f}x "
                f"(<= {line['target']:g}x {ok})",
                file=sys.stderr,
            )
    return 0


def _run_w12(quiet: bool) -> int:
    """W12 (bench/history_flat.py): turnfsm only, a W1 turn's instructions under
    callgrind at 100 and 5,000 stored messages, memory and SQLite stores (one
    run: instruction counts do not drift with the machine's load)."""
    import history_flat  # each stretch is its own process under valgrind

    try:
        line = history_flat.run()
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(line), flush=True)
    if not quiet:
        for store in ("memory", "sqlite"):
            ratio = line[f"{store}_ratio_5000_to_100"]
            ok = "ok" if ratio <= line["target"] else "MISSED"
            print(
                f"W12 {store}: {line[f'{store}_instructions_at_100']:,} instructions a turn at "
                f"100 messages, {line[f'{store}_instructions_at_5000']:,} at 5,000: {ratio:.3f}x "
                f"(<= {line['target']:g}x {ok})",
                file=sys.stderr,
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--workload",
        help="W1, W2, W3, W4, W5, W6, W7, W8, W9, W10, bytes, prepare, files, cold or all",
    )
    p.add_argument(
        "--system",
        choices=("turnfsm", "floor", "baseline", "both", *W7_SYSTEMS),
        default="both",
        help="the system measured (W7 always runs both of its own: inprocess and http)",
    )
    p.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run the turnfsm side on the turnfsm in DIR (a checkout of an earlier "
        "commit), as the system 'baseline'; W8's target is a speed-up over it",
    )
    p.add_argument(
        "--baseline-python",
        metavar="PY",
        help="the Python for --baseline: one that has turnfsm's dependencies but does "
        "not import this worktree's turnfsm first (an editable install would)",
    )
    p.add_argument("--runs", type=int, default=5, help="fresh processes per figure (median)")
    p.add_argument("--json", action="store_true", help="only the JSON lines, nothing on stderr")
    p.add_argument(
        "--synchronous",
        type=str.upper,
        choices=SYNCHRONOUS,
        default="FULL",
        help="SQLite's synchronous setting for W4, W5 and bytes, on both sides (default FULL)",
    )
    p.add_argument(
        "--w9-concurrency",
        type=int,
        default=3,
        metavar="N",
        help="W9: turns each worker runs at once (3; see bench/w9.py)",
    )
    p.add_argument(
        "--w9-think", type=float, default=0.05, metavar="S", help="W9: the model's think time"
    )
    p.add_argument("--one", metavar="W", help=argparse.SUPPRESS)  # internal: one measurement
    p.add_argument("--prepare", metavar="W", help=argparse.SUPPRESS)  # internal: setup process
    p.add_argument("--dest", help=argparse.SUPPRESS)  # internal: where --prepare writes
    args = p.parse_args(argv)

    if args.baseline:
        BASELINE["path"] = os.path.abspath(args.baseline)
        if args.baseline_python:
            BASELINE["python"] = args.baseline_python
    if args.one or args.prepare:
        if args.system == "both":
            p.error("--one and --prepare need --system turnfsm or --system floor")
        if args.prepare:
            _prepare(args.prepare.upper(), args.system, args.dest)
            return 0
        print(json.dumps(_one(args.one.upper(), args.system, args.synchronous)))
        return 0

    if args.workload and args.workload.upper() == "PREPARE":
        return _run_prepare(args.runs, args.json)
    if args.workload and args.workload.upper() == "W12":
        return _run_w12(args.json)
    if args.workload and args.workload.upper() == "FILES":
        return _run_files(args.runs, args.json)
    if args.workload and args.workload.upper() == "COLD":
        return _run_cold(args.runs, args.json)
    if args.workload and args.workload.upper() == "W9":  # its own runner: bench/w9.py
        import w9

        w9_args = ["--concurrency", str(args.w9_concurrency), "--think", str(args.w9_think)]
        return w9.main([*w9_args, *(["--json"] if args.json else [])])
    if args.workload and args.workload.upper() == "W10":  # its own runner: bench/w10.py
        import w10

        return w10.main(["--rounds", str(args.runs), *(["--json"] if args.json else [])])
    if not args.workload:
        p.error("give --workload W1|W2|W3|W4|W5|W6|W7|W8|W9|W10|W12|bytes|prepare|files|cold|all")
    wanted = args.workload.upper()
    if wanted != "ALL" and wanted not in IMPLEMENTED:
        p.error(f"unknown workload {args.workload!r}: choose from {', '.join(IMPLEMENTED)}, all")
    if args.runs < 1:
        p.error("--runs must be >= 1")
    workloads = IMPLEMENTED if wanted == "ALL" else (wanted,)
    systems = SYSTEMS if args.system == "both" else (args.system,)
    if args.baseline and "baseline" not in systems:
        systems = (*systems, "baseline")
    if "baseline" in systems and not args.baseline:
        p.error("--system baseline needs --baseline DIR")

    all_lines: list[dict[str, Any]] = []
    for w in workloads:
        if not args.json:
            runs = 1 if w == "BYTES" else args.runs
            sync = f" (synchronous={args.synchronous})" if w in DURABLE else ""
            names = systems if w in THROUGHPUT else [s for s in systems if s != "baseline"]
            if w == "W7":
                names = list(W7_SYSTEMS)
            print(f"{w}: {runs} run(s) of {' + '.join(names)}{sync}", file=sys.stderr)
        # the baseline runs W8 only (what its target compares)
        sys_w = systems if w in THROUGHPUT else tuple(s for s in systems if s != "baseline")
        try:
            if w == "W7":
                lines = _measure_w7(args.runs, quiet=args.json)
            else:
                lines = _measure(w, sys_w, args.runs, args.json, args.synchronous)
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
