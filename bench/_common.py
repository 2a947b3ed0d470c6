"""What both sides of the benchmark share: sizes, the fake LLM's answers, helpers.

Nothing here imports turnfsm, so the floor's process never loads it (its peak
RSS is the floor's own).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

# --------------------------------------------------------------------- sizes (docs/benchmarks.md)

W1_TURNS = 200
W2_TURNS = 50
W2_CHUNKS_PER_ANSWER = 100
W2_CHUNK_CHARS = 4
W3_CONVERSATIONS = 1_000
W3_TURNS = 5
W6_TURNS = 50
W4_TURNS = W1_TURNS
W5_TURNS = 1_250
"""W5's stored conversation: 1,250 W1 turns, 5,000 messages; the timed turn is the 1,251st."""
W8_CONVERSATIONS = 1_000
W8_TURNS = 5
"""W8: 1,000 conversations of 5 W1 turns, all at once, on one SQLite file."""
BYTES_AT = (25, W5_TURNS)
"""The ``bytes`` measurement: bytes written per turn with 100 and with 5,000 stored messages."""
BYTES_TURNS = 100
"""Turns measured at each size (after one turn, not counted, that loads the context)."""
BYTES_CHECKPOINT_EVERY = 25
"""The measured turns are checkpointed every 25 turns, about as often as SQLite's
default (every 1,000 WAL pages) does it here."""
SYNCHRONOUS = ("FULL", "NORMAL")
"""SQLite's ``synchronous`` settings run.py offers for W4, W5 and ``bytes`` (FULL by default)."""

# --------------------------------------------------------------------- the fake LLM's answers

TOOL_NAME = "get_weather"
TEXT_ANSWER = "The weather in London is 15 C."
TOOL_RESULT_TEMP = 15

# W2: 100 chunks of exactly 4 characters ("000 ", "001 ", ...): 400 characters per answer.
W2_CHUNKS: tuple[str, ...] = tuple(f"{k:03d} " for k in range(W2_CHUNKS_PER_ANSWER))
W2_TEXT = "".join(W2_CHUNKS)
assert all(len(c) == W2_CHUNK_CHARS for c in W2_CHUNKS)
assert len(W2_TEXT) == W2_CHUNKS_PER_ANSWER * W2_CHUNK_CHARS

# The tool definition the floor offers (the same shape as turnfsm's @tool output).
FLOOR_TOOLS: list[dict] = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


def dumps(value: object) -> str:
    """Compact JSON, as turnfsm writes tool arguments and tool results."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def expected_w1_history(turns: int) -> list[dict]:
    """The provider-format list after ``turns`` W1 turns, built from scratch.

    Used only after the timed region, to check both systems end with exactly it.
    """
    out: list[dict] = []
    for i in range(1, turns + 1):
        call_id = f"call_{i}"
        out.append({"role": "user", "content": f"turn {i}"})
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": TOOL_NAME, "arguments": dumps({"city": "London"})},
                    }
                ],
            }
        )
        out.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": dumps({"city": "London", "temp_c": TOOL_RESULT_TEMP}),
            }
        )
        out.append({"role": "assistant", "content": TEXT_ANSWER})
    return out


def expected_w2_history(turns: int) -> list[dict]:
    out: list[dict] = []
    for i in range(1, turns + 1):
        out.append({"role": "user", "content": f"turn {i}"})
        out.append({"role": "assistant", "content": W2_TEXT})
    return out


# --------------------------------------------------------------------- memory


def peak_rss_mib() -> float:
    """The process's peak resident set size so far, in MiB.

    ``ru_maxrss`` (KiB on Linux), or VmRSS now if that is higher (the kernel
    updates the high-water mark lazily).
    """
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return max(peak, _vm_rss_mib() or 0.0)


def _vm_rss_mib() -> float | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def current_rss_mib() -> float:
    """The process's resident set size now (VmRSS), or the peak if /proc is missing."""
    now = _vm_rss_mib()
    return now if now is not None else peak_rss_mib()


class CheckFailed(AssertionError):
    """A correctness check failed: the run's figure is not valid."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


# --------------------------------------------------------------------- the timed region

profiler = None
"""Set by bench/hotspots.py: an object with ``enable()`` and ``disable()`` (cProfile, or
an adapter over pyinstrument) switched on for the timed region only."""


class Timed:
    """``tm = Timed.start()`` ... ``wall = tm.stop()`` (seconds of wall time); ``tm.cpu``
    is then the process CPU time of the region (less sensitive to other processes on
    a shared machine). The region is profiled when :data:`profiler` is set.

    ``start`` runs a full garbage collection first, on both sides alike: the
    objects left by imports and set-up are then counted as old, and a full
    pass they would have triggered does not land inside one side's timed region
    and not the other's (measured: such a pass moved W6 by 20 ms, a factor of
    two, with no change in the code)."""

    __slots__ = ("_c0", "_t0", "cpu")

    def __init__(self) -> None:
        self._t0 = self._c0 = self.cpu = 0.0

    @classmethod
    def start(cls) -> Timed:
        gc.collect()
        tm = cls()
        if profiler is not None:
            profiler.enable()
        tm._c0 = time.process_time()
        tm._t0 = time.perf_counter()
        return tm

    def stop(self) -> float:
        wall = time.perf_counter() - self._t0
        self.cpu = time.process_time() - self._c0
        if profiler is not None:
            profiler.disable()
        return wall


def figure(tm: Timed, wall: float, count: int, unit: str, peak: float, rss0: float) -> dict:
    """One measurement's result: ``value`` in ``unit`` (wall time per ``count`` items in
    microseconds for ``us/...`` units, milliseconds for ``ms``, else wall seconds), and
    the same from CPU time."""
    if unit.startswith("us/"):
        scale = 1e6 / count
    elif unit == "ms":
        scale = 1e3 / count
    else:
        scale = 1.0
    return {
        "value": wall * scale,
        "cpu_value": tm.cpu * scale,
        "unit": unit,
        "wall_s": wall,
        "cpu_s": tm.cpu,
        "peak_rss_mib": peak,
        "rss_start_mib": rss0,
    }


# --------------------------------------------------------------------- SQLite files (W4, W5, bytes)

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_PY = os.path.join(HERE, "run.py")


def throughput(
    tm: Timed, wall: float, sends: int, latencies: list[float], peak: float, rss0: float
) -> dict:
    """W8's result: ``value`` in sends per second of wall time (higher is better), the
    same from CPU time, and the latency of ``send`` (p50, p99, max) in milliseconds."""
    lat = sorted(latencies)
    n = len(lat)

    def pct(p: float) -> float:
        return lat[min(n - 1, max(0, int(p * n + 0.5) - 1))] * 1e3

    return {
        "value": sends / wall,
        "cpu_value": sends / tm.cpu if tm.cpu else 0.0,
        "unit": "sends/s",
        "wall_s": wall,
        "cpu_s": tm.cpu,
        "peak_rss_mib": peak,
        "rss_start_mib": rss0,
        "extra": {"p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": lat[-1] * 1e3},
    }


def work_dir() -> str:
    """A fresh directory for one run's database files (under ``$TMPDIR``, which must
    be a real disk, not a tmpfs, for ``synchronous=FULL`` to cost what it costs)."""
    return tempfile.mkdtemp(prefix="turnfsm-bench-")


def remove_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def turnfsm_fingerprint() -> str | None:
    """A short hash of turnfsm's source files (found without importing it), so that
    a run can tell when the engine changed under it (e.g. an edit mid-run)."""
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


PREPARED_FORMAT = "1"
"""Bumped when what a prepared file holds changes in a way the hashes below miss."""


def prepared_path(system: str, name: str) -> str:
    """Where the prepared database ``name`` (``W5``) of ``system`` is cached: a file
    under ``$TMPDIR/turnfsm-bench-cache`` whose name carries a hash of everything
    that decides its content (turnfsm's source for turnfsm, the bench's own files,
    the sizes), so that a changed engine or bench never reuses a stale file."""
    h = hashlib.sha1(f"{PREPARED_FORMAT}/{name}/{W5_TURNS}/{system}".encode())
    if system == "turnfsm":
        h.update(str(turnfsm_fingerprint()).encode())
    own = "turnfsm_side.py" if system == "turnfsm" else "floor.py"
    for fname in ("_common.py", own):
        with open(os.path.join(HERE, fname), "rb") as f:
            h.update(f.read())
    cache = os.path.join(tempfile.gettempdir(), "turnfsm-bench-cache")
    return os.path.join(cache, f"{name.lower()}-{system}-{h.hexdigest()[:12]}.db")


def ensure_prepared(system: str, name: str) -> tuple[str, dict]:
    """The cached prepared file and its metadata; when missing it is built by a setup
    process (``run.py --prepare``), so the measuring process stays fresh."""
    path = prepared_path(system, name)
    if not (os.path.exists(path) and os.path.exists(path + ".json")):
        cmd = [sys.executable, RUN_PY, "--prepare", name, "--system", system, "--dest", path]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        if proc.returncode != 0 or not os.path.exists(path + ".json"):
            raise CheckFailed(f"preparing {name} for {system} failed:\n{proc.stderr.strip()}")
    with open(path + ".json", encoding="utf-8") as f:
        return path, json.load(f)


def publish_prepared(built: str, dest: str, meta: dict) -> None:
    """Move a finished database into the cache, then its metadata (the marker that
    the file is complete). ``built`` must be closed, with no ``-wal`` left."""
    check(not os.path.exists(built + "-wal"), f"{built}: a WAL file is left beside it")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    os.replace(built, dest)
    tmp = f"{dest}.json.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(meta, f)
    os.replace(tmp, dest + ".json")


def copy_prepared(src: str, directory: str, name: str = "resume.db") -> str:
    """A private copy of a prepared file to run on (the cached one stays untouched)."""
    dest = os.path.join(directory, name)
    shutil.copyfile(src, dest)
    return dest


# --------------------------------------------------------------------- bytes written


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def bytes_written() -> int | None:
    """Bytes this process has passed to write() so far (``wchar`` of /proc/self/io,
    all threads), or None where that is not available."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class WriteMeter:
    """Bytes written to one WAL-mode database over spans of turns.

    The owner turns automatic checkpoints off on its connection and checkpoints
    (``TRUNCATE``) before the first :meth:`start`. For each span,
    :meth:`start` ... :meth:`stop` adds to ``wal`` the growth of the ``-wal`` file
    (every page each commit changed, as SQLite appends it) and to
    ``write_calls`` the bytes the process passed to write() meanwhile (the same
    WAL frames, cross-checked); :meth:`checkpointed` then adds to ``checkpoint``
    what a ``TRUNCATE`` checkpoint of that span writes into the database file
    (which also empties the WAL for the next span).
    """

    def __init__(self, db_path: str) -> None:
        self.wal_path = db_path + "-wal"
        self.wal0 = self.wchar0 = 0
        self.wal = 0
        self.write_calls: int | None = 0 if bytes_written() is not None else None
        self.checkpoint: int | None = 0 if self.write_calls is not None else None

    def start(self) -> None:
        self.wal0 = file_size(self.wal_path)
        self.wchar0 = bytes_written() or 0

    def stop(self) -> None:
        self.wal += file_size(self.wal_path) - self.wal0
        w = bytes_written()
        if self.write_calls is not None and w is not None:
            self.write_calls += w - self.wchar0

    def checkpointed(self, run_checkpoint) -> None:  # type: ignore[no-untyped-def]
        w0 = bytes_written()
        run_checkpoint()
        w1 = bytes_written()
        if self.checkpoint is not None and w0 is not None and w1 is not None:
            self.checkpoint += w1 - w0

    def per_turn(self, turns: int, messages: int) -> dict:
        total = (self.write_calls if self.write_calls is not None else self.wal) + (
            self.checkpoint or 0
        )
        return {
            "messages": messages,
            "turns": turns,
            "wal": self.wal / turns,
            "write_calls": None if self.write_calls is None else self.write_calls / turns,
            "checkpoint": None if self.checkpoint is None else self.checkpoint / turns,
            "total": total / turns,
        }
