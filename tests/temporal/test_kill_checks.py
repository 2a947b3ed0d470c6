"""The Temporal kill test's own checks of a run (``kill_checks.py``): they
find what they are there to find."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx

# tests/ is on sys.path (no tests/__init__.py)
from temporal.kill_checks import Requests, check_logs, check_progress


def test_a_traceback_in_any_processs_log_is_a_problem(tmp_path: Path) -> None:
    clean = tmp_path / "server0.log"
    clean.write_text("turnfsm serve: http://127.0.0.1:1\nlevel='info' event='request'\n")
    asgi = tmp_path / "server1.log"
    asgi.write_text('ok\nERROR:    Exception in ASGI application\n  File "x.py", line 1\n')
    worker = tmp_path / "worker0.log"
    worker.write_text('Traceback (most recent call last):\n  File "y.py"\nRPCError: boom\n')
    assert check_logs([clean, tmp_path / "never-started.log"]) == []
    found = check_logs([clean, asgi, worker])
    assert [p.split(":")[0] for p in found] == ["server1.log", "worker0.log"]
    assert "RPCError: boom" in found[1]


def test_too_little_progress_is_a_problem() -> None:
    assert check_progress(24, 5, floor=24) == []
    assert any("too little progress" in p for p in check_progress(3, 3, floor=24))
    assert any("while the faults ran" in p for p in check_progress(30, 0, floor=24))
    assert len(check_progress(0, 0, floor=24)) == 2


def test_a_slow_request_and_a_server_error_are_problems() -> None:
    async def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slow":
            await anyio.sleep(0.3)
            return httpx.Response(202, json={})
        if request.url.path == "/down":
            error = {"code": "temporal_unavailable", "message": "down"}
            return httpx.Response(503, json={"error": error})
        return httpx.Response(500, json={"error": {"code": "internal_error", "message": "x"}})

    async def go() -> list[str]:
        requests = Requests(bound=0.2)
        transport = httpx.MockTransport(answer)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            for path in ("/slow", "/down", "/broken"):
                await requests.send(http, "POST", path)
        assert requests.count == 3 and requests.longest >= 0.3
        return requests.problems()

    problems = anyio.run(go)
    assert len(problems) == 2, problems
    assert "longer than 0.2s: POST /slow: 202" in problems[0]
    assert "server error: POST /broken: 500" in problems[1]
