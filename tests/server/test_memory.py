"""The server's memory does not grow with the contexts it ever touched: a
context's channel goes once no stream and no running call needs it."""

from __future__ import annotations

import functools

import pytest
from kit import make_engine  # tests/ is on sys.path (no tests/__init__.py)

pytestmark = pytest.mark.anyio

CONTEXTS = 10_000
MAX_LOADED = 64


async def test_ten_thousand_contexts_touched_leave_bounded_state() -> None:
    from turnfsm.server import Hub, ServerConfig
    from turnfsm.server._hub import IDLE_CHANNELS, KNOWN_OWNERS

    made = make_engine(lambda request: {"text": "ok"}, max_loaded=MAX_LOADED)
    hub = Hub(lambda: made.engine, ServerConfig(recover_on_start=False))
    async with hub.lifespan():
        engine = hub.engine
        ids = [await engine.create_context() for _ in range(CONTEXTS)]
        for n, cid in enumerate(ids):
            await hub.check(cid, "default")  # what every endpoint on a context does
            if n % 50 == 0:  # a turn, with a stream on its context meanwhile
                ch = hub.hold(cid)
                job = await hub.launch(cid, functools.partial(engine.send, cid, "hi"), wait=True)
                assert job.turn is not None and job.turn.state == "Idle"
                assert [getattr(ev, "kind", "Gap") for ev in ch.ring][-1] == "TurnCompleted"
                hub.release(ch)
        assert not hub.running  # each launch waited for its turn
        assert not hub.channels  # nobody streams, nothing runs
        assert len(hub.idle) <= IDLE_CHANNELS
        assert len(hub.owners) <= KNOWN_OWNERS
        # the engine keeps subscriber lists for loaded contexts only
        subscribed = engine._d.loaded.subscribers
        assert len(subscribed) <= MAX_LOADED
        assert len(engine._d.loaded.everywhere) == 2  # the relay and the hub


async def test_a_channel_comes_back_with_its_recent_events() -> None:
    from turnfsm.server import Hub, ServerConfig
    from turnfsm.server._channels import last_seq
    from turnfsm.server._hub import IDLE_CHANNELS

    made = make_engine(lambda request: {"chunks": ["a", "b"]})
    hub = Hub(lambda: made.engine, ServerConfig(recover_on_start=False))
    async with hub.lifespan():
        engine = hub.engine
        cid = await engine.create_context()
        ch = hub.hold(cid)
        await hub.launch(cid, lambda: engine.send(cid, "hi"), wait=True)
        hub.release(ch)
        assert cid in hub.idle and cid not in hub.channels
        again = hub.hold(cid)
        assert again is ch and [last_seq(ev) for ev in again.ring] == list(
            range(1, len(ch.ring) + 1)
        )
        hub.release(again)
        others = [await engine.create_context() for _ in range(IDLE_CHANNELS)]
        for other in others:
            hub.release(hub.hold(other))
        assert cid not in hub.idle  # the least recently used goes first
