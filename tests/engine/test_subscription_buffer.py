"""A subscription's buffer, on its own: bounded, in order, a waiting reader
handed the next event, what was dropped told once there is room, ended and
closed as the engine and the reader say (docs/events.md)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from turnfsm.engine._subscribers import EngineSubscription, Subscription
from turnfsm.events import Event, EventsMissed, StateChanged

pytestmark = pytest.mark.anyio


def ev(seq: int, cid: str = "c") -> Event:
    return StateChanged(
        context_id=cid, seq=seq, timestamp=float(seq), from_state="a", to_state="b", trigger="t"
    )


def sub(buffer: int) -> Subscription:
    return Subscription("c", buffer, lambda s: None)


async def test_bounded_in_order_and_the_missed_told_when_there_is_room() -> None:
    s = sub(2)
    assert s.offer(ev(1)) is True  # half full: the engine gives the reader a turn
    assert s.offer(ev(2)) is True
    assert s.offer(ev(3)) is True and s.offer(ev(4)) is True  # dropped
    assert await s.__anext__() == ev(1)
    assert s.offer(ev(5)) is True  # the note takes the free place; 5 is dropped
    assert s.drain() == [
        ev(2),
        EventsMissed(context_id="c", seq=4, timestamp=4.0, count=2, first_seq=3),
        EventsMissed(context_id="c", seq=5, timestamp=5.0, count=1, first_seq=5),
    ]
    assert s.offer(ev(6)) is True
    assert await s.__anext__() == ev(6)


async def test_a_waiting_reader_is_handed_the_next_event_outside_the_buffer() -> None:
    s = sub(1)
    got: list[Event] = []

    async def reader() -> None:
        async for e in s:
            got.append(e)

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        assert s.offer(ev(1)) is True  # handed to the reader
        assert s.offer(ev(2)) is True  # in the buffer (size 1): nothing dropped
        assert s.offer(ev(3)) is True  # dropped
        await anyio.wait_all_tasks_blocked()
        assert s.offer(ev(4)) is True
        await anyio.wait_all_tasks_blocked()
        s.end()
    assert got == [
        ev(1),
        ev(2),
        EventsMissed(context_id="c", seq=3, timestamp=3.0, count=1, first_seq=3),
        ev(4),
    ]
    assert s.offer(ev(5)) is False  # ended


async def test_a_reader_cancelled_while_handed_an_event_loses_no_event() -> None:
    s = sub(4)
    got: list[Event] = []
    async with anyio.create_task_group() as tg:

        async def reader() -> None:
            got.append(await s.__anext__())

        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        s.offer(ev(1))  # handed; the reader is cancelled before it runs
        tg.cancel_scope.cancel()
    # read by the reader before the cancel reached it, or kept for the next read
    assert got + s.drain() == [ev(1)]
    s.offer(ev(2))
    assert s.drain() == [ev(2)]


async def test_end_wakes_the_reader_after_what_is_buffered() -> None:
    s = sub(4)
    s.offer(ev(1))
    s.end()
    assert [e async for e in s] == [ev(1)]
    waiting = sub(4)
    async with anyio.create_task_group() as tg:

        async def reader() -> None:
            assert [e async for e in waiting] == []

        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        waiting.end()


async def test_closed_by_the_reader() -> None:
    closed: list[Subscription] = []
    s = Subscription("c", 4, closed.append)
    s.offer(ev(1))
    async with s:
        pass
    assert closed == [s] and s.closed
    assert s.offer(ev(2)) is False
    assert s.drain() == []
    assert [e async for e in s] == []


async def test_every_context_subscription_counts_gaps_per_context() -> None:
    s = EngineSubscription(1, lambda s: None)
    assert s.offer(ev(1, "a")) is True
    s.offer(ev(2, "a"))
    s.offer(ev(7, "b"))
    s.offer(ev(3, "a"))
    assert s.drain() == [
        ev(1, "a"),
        EventsMissed(context_id="a", seq=3, timestamp=3.0, count=2, first_seq=2),
        EventsMissed(context_id="b", seq=7, timestamp=7.0, count=1, first_seq=7),
    ]


async def test_below_half_full_the_engine_is_not_asked_to_yield() -> None:
    # the common case of a streamed chunk: nobody waits, nothing was missed
    s = sub(4)
    assert s.offer(ev(1)) is False
    assert s.offer(ev(2)) is True  # half full
    assert s.offer(ev(3)) is True and s.offer(ev(4)) is True
    assert s.offer(ev(5)) is True  # full: dropped and counted
    read = [await s.__anext__() for _ in range(5)]
    assert [e.seq for e in read[:4]] == [1, 2, 3, 4]
    assert isinstance(read[4], EventsMissed) and read[4].first_seq == 5
    assert read[4].count == 1
    assert s.offer(ev(6)) is False  # room again, below half
