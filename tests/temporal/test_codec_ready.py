"""A worker builds the record adapters its workflow tasks use before any runs
(``_codec.warm``): a workflow task that built them itself could pass
Temporal's two-second bound on a loaded machine and be reported as a
deadlock."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).parents[1]

_CHILD = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from storage.contract import make_commit, msg, rich_context
    from turnfsm import records
    from turnfsm.model import LLMResponse, TextDelta, ThinkingDelta, ToolCallDelta
    from turnfsm.temporal import _codec

    _codec.warm()
    ready = set(map(repr, records._ADAPTERS))
    ctx = rich_context("c1")
    _codec.context_from(_codec.context_to(ctx))
    commit = make_commit("c1", 3, appended=[("main", msg("m1", text="hi"))])
    _codec.commit_from(_codec.commit_to(commit))
    for chunk in (
        TextDelta("a"), ThinkingDelta("b"), ToolCallDelta(0, "c", "f", "{}"),
        LLMResponse(text="done"),
    ):
        _codec.chunk_from(_codec.chunk_to(chunk))
    _codec.parts_from(_codec.parts_to(list(ctx.history("main")[-1].message.content)))
    print(json.dumps({"ready": sorted(ready),
                      "built_later": sorted(set(map(repr, records._ADAPTERS)) - ready)}))
    """
)


def test_the_workflows_record_adapters_are_built_before_any_task() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(TESTS)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = json.loads(out)
    assert len(found["ready"]) >= 8, found
    assert found["built_later"] == [], found
