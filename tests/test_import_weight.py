"""What ``import turnfsm`` brings into a process.

Every object a module leaves behind is traversed by each full pass of the
garbage collector, and those passes run in the middle of turns: importing
structlog (with rich and pygments behind it) at ``import turnfsm`` once made a
streamed chunk about 2.5 times as slow and the process 5 MiB larger. The
engine imports these only when it first needs them (a log line that passes
its level, the server, the OpenAI adapters, a PostgreSQL store).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

LAZY = ("structlog", "rich", "pygments", "openai", "httpx", "fastapi", "starlette", "psycopg")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {name.split(".")[0] for name in json.loads(out.stdout.splitlines()[-1])}


def test_import_turnfsm_leaves_heavy_modules_out() -> None:
    loaded = _modules_after("import turnfsm")
    assert "turnfsm" in loaded
    assert sorted(loaded & set(LAZY)) == []


@pytest.mark.parametrize("module", ["turnfsm.engine", "turnfsm.events", "turnfsm.replay"])
def test_engine_modules_leave_heavy_modules_out(module: str) -> None:
    loaded = _modules_after(f"import {module}")
    assert sorted(loaded & set(LAZY)) == []


def test_a_failing_tap_still_logs() -> None:
    # the tap's failure path imports structlog when it runs, and logs
    code = """
import anyio, sys
from turnfsm import Engine

async def main():
    async with Engine() as engine:
        def boom(event):
            raise RuntimeError("tap broke")
        with engine.tap(boom):
            cid = await engine.create_context()
            await engine.send(cid, "hi")
anyio.run(main)
print("structlog" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "True"
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out.stderr)
    assert "event_tap_failed" in plain
    assert "tap broke" in out.stderr
