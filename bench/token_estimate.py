"""How far the token budget's estimate is from a real tokenizer's count
(docs/token-budget.md has the figures).

Needs a tokenizer that ships its vocabulary (no download at run time), which
turnfsm itself does not depend on::

    python -m venv /tmp/tok && /tmp/tok/bin/pip install bpe-openai -e .
    /tmp/tok/bin/python bench/token_estimate.py

The corpus is this repository's own text, cut into chat messages: prose (the
``docs/`` pages, by paragraph), code (``turnfsm/`` sources, as tool results of a
``read_file`` call, in blocks of 60 lines) and JSON (the replay scripts of
``tests/scripts/``, as tool results). Conversations of each kind, and one that
mixes the three, grow a message at a time; each step is one request. The real
count follows OpenAI's documented rule for chat messages (3 tokens per message,
plus its role's and content's tokens, plus 3 for the reply) with ``o200k_base``;
a tool call counts its name, its arguments and 3 more.

For each request it reports the raw estimate's error (``EstimatingCounter``)
and the calibrated one's: the raw estimate times the factor the token budget
would have learned from the requests before it (the ratio of the real counts to
the raw estimates of the last 8 requests).
"""

from __future__ import annotations

import glob
import json
import os
import statistics
from typing import Any

import bpe_openai

from turnfsm.enhancers import EstimatingCounter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENC = bpe_openai.get_encoding("o200k_base")
WINDOW = 8


def real(messages: list[dict[str, Any]]) -> int:
    total = 3
    for m in messages:
        total += 3 + len(ENC.encode(m["role"]))
        if m.get("content"):
            total += len(ENC.encode(m["content"]))
        for c in m.get("tool_calls") or ():
            fn = c["function"]
            total += 3 + len(ENC.encode(fn["name"])) + len(ENC.encode(fn["arguments"]))
    return total


def prose() -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(path, encoding="utf-8") as f:
            out += [p.strip() for p in f.read().split("\n\n") if len(p.strip()) > 80]
    return out


def code() -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "turnfsm", "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        out += ["\n".join(lines[i : i + 60]) for i in range(0, len(lines), 60)]
    return out


def json_docs() -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "scripts", "*.json"))):
        with open(path, encoding="utf-8") as f:
            out.append(json.dumps(json.load(f), ensure_ascii=False, separators=(",", ":")))
    return out


def conversation(kind: str, texts: list[str], limit: int = 300) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You help with turnfsm."}]
    for i, text in enumerate(texts[:limit]):
        if kind == "prose":
            msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
        else:
            call = {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{i}"})},
            }
            msgs.append({"role": "user", "content": f"Show me part {i}."})
            msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
            msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": text})
    return msgs


def measure(kind: str, msgs: list[dict[str, Any]]) -> dict[str, Any]:
    counter = EstimatingCounter()
    raw_sum = 0
    history: list[tuple[int, int]] = []
    raw_err, cal_err = [], []
    for n in range(2, len(msgs) + 1):
        view = msgs[:n]
        raw_sum += (
            counter.count_message(view[-1])
            if n > 2
            else sum(counter.count_message(m) for m in view)
        )
        r = real(view)
        last = history[-WINDOW:]
        factor = sum(a for a, _ in last) / sum(b for _, b in last) if last else 1.0
        raw_err.append((raw_sum - r) / r)
        cal_err.append((raw_sum * factor - r) / r)
        history.append((r, raw_sum))
    after = cal_err[WINDOW:]
    return {
        "corpus": kind,
        "requests": len(raw_err),
        "tokens_last": real(msgs),
        "raw_mean_error": round(statistics.mean(raw_err), 4),
        "raw_max_abs_error": round(max(abs(e) for e in raw_err), 4),
        "calibrated_mean_abs_error": round(statistics.mean(abs(e) for e in after), 4),
        "calibrated_max_abs_error": round(max(abs(e) for e in after), 4),
        "calibrated_max_under": round(max(0.0, -min(after)), 4),
    }


def main() -> None:
    p, c, j = prose(), code(), json_docs()
    mixed: list[str] = []
    for i in range(max(len(p), len(c), len(j))):
        mixed += [x[i] for x in (p, c, j) if i < len(x)]
    runs = [
        ("prose", conversation("prose", p)),
        ("code", conversation("code", c)),
        ("json", conversation("json", j)),
        ("mixed", conversation("mixed", mixed)),
    ]
    for kind, msgs in runs:
        print(json.dumps(measure(kind, msgs)))


if __name__ == "__main__":
    main()
