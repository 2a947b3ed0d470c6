"""``ServerConfig(turns="temporal")``: the server only waits for calls whose
turns run on Temporal, so stopping it cancels none of them (with ``here`` it
cancels its running calls cleanly, as docs/server.md says)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from kit import make_engine  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm.errors import ContextBusy

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("turns", "cancelled"), [("temporal", False), ("here", True)])
async def test_stopping_cancels_the_running_calls_only_when_they_run_here(
    turns: Any, cancelled: bool
) -> None:
    from turnfsm.server import Hub, ServerConfig
    from turnfsm.server._hub import Job

    made = make_engine(lambda request: {"text": "ok"})
    asked: list[str] = []
    engine = made.engine

    async def cancel(context_id: str) -> Any:
        asked.append(context_id)
        raise ContextBusy(context_id, "elsewhere")  # logged, and the stop goes on

    config = ServerConfig(recover_on_start=False, turns=turns, shutdown_grace=0.2)
    hub = Hub(lambda: engine, config)
    async with hub.lifespan():
        cid = await engine.create_context()
        engine.cancel = cancel  # type: ignore[method-assign]
        hub.running[cid] = Job(cid)  # a call waiting for its turn (an Update on Temporal)
        with anyio.fail_after(5):
            await hub._stop_running()
        assert asked == ([cid] if cancelled else [])
        del hub.running[cid]
