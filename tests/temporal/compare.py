"""What a turn on Temporal and the same turn in-process must agree on, for the
tests that run both (tests/ is on sys.path: ``from temporal.compare import ...``)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["normal_messages"]

_AN_ID = re.compile(r"\b(?:id-\d+|[0-9a-f]{32})\b")
"""An id of the in-process engine (``SequentialIds``) or of the workflow (``uuid4().hex``)."""


def normal_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored messages with their ids named by order of appearance, other ids
    in texts masked, and their times left out: what the two hosts must agree on."""
    names: dict[str, str] = {}
    for m in messages:
        names.setdefault(m["id"], f"m{len(names) + 1}")

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items() if k != "created_at"}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            if value in names:
                return names[value]
            # a context's id inside a text (a sub-task's child, named in a reason)
            return _AN_ID.sub("<id>", value)
        return value

    return [walk(m) for m in messages]
