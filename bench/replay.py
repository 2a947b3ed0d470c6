"""Replay speed: a 1,000-turn script through ``turnfsm.replay`` (issue 3).

    python bench/replay.py [--turns 1000] [--runs 3]

Each turn is the W1 tool loop as a tape: a user message, an answer asking for
``get_weather``, the tool's outcome, a streamed text answer. Prints one JSON
line: seconds per 100 turns (median of ``--runs``, each in this process after
a warm-up), with the script's parse time shown apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import anyio

from turnfsm.replay import parse_script, replay


def make_script(turns: int) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for i in range(1, turns + 1):
        steps += [
            {"user": f"turn {i}"},
            {
                "llm": {
                    "tool_calls": [
                        {"id": f"call_{i}", "name": "get_weather", "arguments": {"city": "London"}}
                    ]
                }
            },
            {"tool": {"id": f"call_{i}", "result": {"city": "London", "temp_c": 15}}},
            {"llm": {"chunks": ["The weather in London ", "is 15 C."]}},
        ]
    return {
        "format": "turnfsm-script/1",
        "name": f"{turns} tool turns",
        "tools": [
            {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            }
        ],
        "steps": steps,
        "expect": {"final_state": "Idle", "message_count": 4 * turns},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--turns", type=int, default=1000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    data = make_script(args.turns)
    t0 = time.perf_counter()
    script = parse_script(data)
    parse_s = time.perf_counter() - t0
    anyio.run(replay, parse_script(make_script(10)))  # warm-up
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        result = anyio.run(replay, script)
        times.append(time.perf_counter() - t0)
        if not result.ok:
            raise SystemExit(result.report())
    wall = statistics.median(times)
    print(
        json.dumps(
            {
                "system": "turnfsm",
                "workload": "replay",
                "turns": args.turns,
                "value": round(wall / args.turns * 100, 4),
                "unit": "s/100 turns",
                "parse_s": round(parse_s, 4),
                "runs": [round(t, 3) for t in times],
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
