"""What ``loads_json``'s depth check costs next to ``json.loads`` (docs/benchmarks.md,
"The JSON depth check on wide texts").

One text decoded ``--reps`` times by one decoder::

    python bench/json_depth.py wide loads_json --reps 5
    python bench/json_depth.py wide json.loads --reps 5

Under cachegrind, the instructions of ``--reps N`` minus those of
``--reps 0`` (the same text built, nothing decoded) divided by N are one
decode's (``bench/run.py`` is not used: this is one function, not a turn).

The texts: ``wide``, an array of 8,000 small objects (1.1 MB, as a file or
a request body, read under the document's limit of 128 levels); ``escaped``,
an array of 14,000 tool calls whose arguments are JSON in a string (1.3 MB,
an escaped quote every 9 bytes); ``deep``, an object as deep as that limit
allows in an array of small ones; ``w1``, a W1 call's arguments
(``{"city": "London"}``, under a model text's 64).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from turnfsm.model._json import MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH, loads_json


def wide() -> str:
    items = [
        {
            "id": i,
            "name": f"item {i}",
            "price": round(i * 0.37, 2),
            "tags": ["red", "small"] if i % 2 else ["blue"],
            "note": 'a "quoted" [word] and a back\\slash' if i % 10 == 0 else "plain",
            "in_stock": i % 3 != 0,
            "dims": {"w": i % 7, "h": i % 11},
        }
        for i in range(8_000)
    ]
    return json.dumps(items)


def escaped() -> str:
    calls = [
        {"id": i, "arguments": json.dumps({"city": f"London {i}", "units": "c", "days": [1, 2]})}
        for i in range(14_000)
    ]
    return json.dumps(calls)


def deep() -> str:
    chain = '{"a":' * (MAX_DOCUMENT_DEPTH - 2) + '{"b":1}' + "}" * (MAX_DOCUMENT_DEPTH - 2)
    return "[" + ",".join([chain, *['{"c": [1, 2, {"d": ["x"]}]}'] * 200]) + "]"


TEXTS: dict[str, tuple[Callable[[], str], int]] = {  # each with the limit it is read under
    "wide": (wide, MAX_DOCUMENT_DEPTH),
    "escaped": (escaped, MAX_DOCUMENT_DEPTH),
    "deep": (deep, MAX_DOCUMENT_DEPTH),
    "w1": (lambda: '{"city": "London"}', MAX_JSON_DEPTH),
}

DECODERS: dict[str, Callable[[str, int], Any]] = {
    "loads_json": loads_json,
    "json.loads": lambda text, _: json.loads(text),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("text", choices=sorted(TEXTS))
    parser.add_argument("decoder", choices=sorted(DECODERS))
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    build, limit = TEXTS[args.text]
    text = build()
    decode = DECODERS[args.decoder]
    decode('{"warm": [1]}', limit)
    for _ in range(args.reps):
        decode(text, limit)
    print(f"{args.text}: {len(text.encode())} bytes, {args.reps} decodes by {args.decoder}")


if __name__ == "__main__":
    main()
