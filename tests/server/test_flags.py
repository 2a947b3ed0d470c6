"""A call's flags and a stream's wait (``turnfsm.server._flags``,
``Listener.wait``): under asyncio on futures, under another async library on
anyio's events, with the same behaviour. The other library's path is taken
here on asyncio by making the running loop unknown to them. A waiting stream
is woken by its stop signals, and by nothing else but its heartbeat."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from turnfsm import Engine
from turnfsm.server import Hub, ServerConfig, _channels, _flags
from turnfsm.server._channels import Gap, Listener
from turnfsm.server._events import _batches, _Stop
from turnfsm.server._flags import Flag

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "another library"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param != "asyncio":
        monkeypatch.setattr(_flags, "running_loop", lambda: None)
        monkeypatch.setattr(_channels, "running_loop", lambda: None)
    yield request.param


async def test_a_flag_wakes_every_waiter_once_set(path: str) -> None:
    flag = Flag()
    woken: list[int] = []

    async def waiter(n: int) -> None:
        await flag.wait()
        woken.append(n)

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(waiter, n)
        await anyio.wait_all_tasks_blocked()
        assert woken == [] and not flag.is_set()
        flag.set()
        assert flag.is_set()
    assert sorted(woken) == [0, 1, 2]
    flag.set()  # a second set changes nothing
    with anyio.fail_after(1):
        await flag.wait()  # set: returns at once


async def test_a_wait_on_a_flag_can_be_cancelled(path: str) -> None:
    flag = Flag()
    with anyio.move_on_after(0.05) as scope:
        await flag.wait()
    assert scope.cancelled_caught
    flag.set()  # the cancelled waiter is skipped
    assert flag.is_set()


async def test_a_listener_wakes_on_an_item(path: str) -> None:
    listener = Listener()
    got: list[int] = []

    async def reader() -> None:
        await listener.wait(10)
        got.extend(item.last for item in listener.ready() if isinstance(item, Gap))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        listener.put(Gap("c", 1, 4))
    assert got == [4]


async def test_a_listener_wait_ends_after_its_time_with_nothing(path: str) -> None:
    listener = Listener()
    start = time.monotonic()
    with anyio.fail_after(5):
        await listener.wait(0.05)
    assert time.monotonic() - start >= 0.04
    assert listener.ready() == []


async def test_a_closed_listener_wakes_its_reader(path: str) -> None:
    listener = Listener()

    async def closer() -> None:
        await anyio.wait_all_tasks_blocked()
        listener.close()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(closer)
            await listener.wait(10)
    assert listener.closed
    await listener.wait(10)  # closed: returns at once


async def test_a_listener_with_items_does_not_wait(path: str) -> None:
    listener = Listener()
    listener.put(Gap("c", 1, 1))
    with anyio.fail_after(1):
        await listener.wait(10)
    assert [item.last for item in listener.ready() if isinstance(item, Gap)] == [1]


def _stream_hub(heartbeat: float) -> Hub:
    return Hub(lambda: Engine(llm=None), ServerConfig(heartbeat=heartbeat))


async def _ends_within(stream: AsyncIterator[object], seconds: float) -> list[object]:
    got: list[object] = []
    with anyio.fail_after(seconds):
        async for batch in stream:
            got.append(batch)
    return got


async def test_a_waiting_stream_ends_at_once_when_its_shutdown_signal_is_set(path: str) -> None:
    hub = _stream_hub(heartbeat=60)
    listener = Listener()
    stop = _Stop(listener)
    got: list[object] = []

    async def read() -> None:
        got.extend(await _ends_within(_batches(listener, hub, stop), 5))

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        assert not stop.is_set()
        stop.set()
    assert stop.is_set()
    assert got == []  # no heartbeat due, nothing queued: it ended


async def test_a_waiting_stream_ends_at_once_when_the_hub_closes(path: str) -> None:
    hub = _stream_hub(heartbeat=60)
    listener = Listener()
    hub.listeners.setdefault("tenant", set()).add(listener)
    got: list[object] = []

    async def read() -> None:
        got.extend(await _ends_within(_batches(listener, hub, _Stop(listener)), 5))

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        hub.closing.set()
        hub._wake_streams()
    assert got == []


async def test_a_waiting_stream_beats_when_nothing_came(path: str) -> None:
    hub = _stream_hub(heartbeat=0.05)
    listener = Listener()
    stream = _batches(listener, hub, _Stop(listener))
    with anyio.fail_after(5):
        assert await anext(stream) is None  # a heartbeat
        listener.put(Gap("c", 1, 2))
        batch = await anext(stream)
    assert batch is not None and [item.last for item in batch if isinstance(item, Gap)] == [2]
    await stream.aclose()  # type: ignore[attr-defined]
