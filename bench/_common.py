"""What both sides of the benchmark share: sizes, the fake LLM's answers, helpers.

Nothing here imports turnfsm, so the floor's process never loads it (its peak
RSS is the floor's own).
"""

from __future__ import annotations

import json
import resource
import time

# --------------------------------------------------------------------- sizes (WORKLOADS.md)

W1_TURNS = 200
W2_TURNS = 50
W2_CHUNKS_PER_ANSWER = 100
W2_CHUNK_CHARS = 4
W3_CONVERSATIONS = 1_000
W3_TURNS = 5
W6_TURNS = 50

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
    a shared machine). The region is profiled when :data:`profiler` is set."""

    __slots__ = ("_c0", "_t0", "cpu")

    def __init__(self) -> None:
        self._t0 = self._c0 = self.cpu = 0.0

    @classmethod
    def start(cls) -> Timed:
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
    microseconds for ``us/...`` units, else wall seconds), and the same from CPU time."""
    scale = 1e6 / count if unit.startswith("us/") else 1.0
    return {
        "value": wall * scale,
        "cpu_value": tm.cpu * scale,
        "unit": unit,
        "wall_s": wall,
        "cpu_s": tm.cpu,
        "peak_rss_mib": peak,
        "rss_start_mib": rss0,
    }
