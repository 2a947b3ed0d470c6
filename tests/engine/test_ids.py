"""The engine's default ids: UUIDv7 (RFC 9562) in the canonical form, unique and
in the order they were made, in one thread or many, across a clock that steps
back and a forked child; the compact ids of earlier versions on request."""

from __future__ import annotations

import itertools
import os
import re
import threading
import uuid

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit import examples  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm import Engine
from turnfsm.engine import _ids
from turnfsm.engine._ids import CompactIds, Uuid7, uuid7
from turnfsm.errors import InvalidInput
from turnfsm.testing import ScriptedLLM

CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
COMPACT = re.compile(r"[0-9a-f]{16}-[0-9a-f]+")


def _valid(text: str) -> uuid.UUID:
    assert CANONICAL.fullmatch(text), text
    made = uuid.UUID(text)
    assert made.version == 7 and made.variant == uuid.RFC_4122
    assert str(made) == text  # the canonical form, as uuid renders it
    return made


def test_many_ids_are_valid_unique_and_in_order() -> None:
    made = [uuid7() for _ in range(50_000)]
    parsed = [_valid(m) for m in made]
    assert len(set(made)) == len(made)
    assert made == sorted(made)  # as text
    assert parsed == sorted(parsed)  # as 128-bit numbers


def test_the_timestamp_is_the_time_in_milliseconds() -> None:
    import time

    before = time.time_ns() // 1_000_000
    made = _valid(uuid7())
    after = time.time_ns() // 1_000_000
    assert before <= made.int >> 80 <= after


@settings(max_examples=examples(50), deadline=None)
@given(steps=st.lists(st.integers(min_value=-5_000, max_value=5_000), min_size=1, max_size=200))
def test_ids_keep_their_order_whatever_the_clock_does(
    steps: list[int],
) -> None:
    """A clock that stands still, steps back or jumps: every id is greater
    than the one before."""
    now = [1_700_000_000_000_000_000]

    def clock() -> int:
        return now[0]

    ids = Uuid7()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_ids, "_time_ns", clock)
        made = [ids()]
        for step in steps:
            now[0] += step * 1_000_000 // 7  # whole, part and no milliseconds
            made.append(ids())
    parsed = [_valid(m) for m in made]
    assert all(a.int < b.int for a, b in itertools.pairwise(parsed))


def _laid_out(ms: int, count: int, random: int) -> str:
    """The id RFC 9562's layout gives for these fields, as ``uuid`` writes the
    128-bit number: the milliseconds, the version, the counter's high 12 bits
    (``rand_a``), the variant, its low 14 bits, the random 48."""
    value = ms << 80 | 7 << 76 | (count >> 14) << 64 | 0b10 << 62 | (count & 0x3FFF) << 48
    return str(uuid.UUID(int=value | random))


@settings(max_examples=examples(40), deadline=None)
@given(
    start=st.integers(min_value=0, max_value=(1 << 48) - 100_000),
    runs=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=70_000),  # a step of the clock, in thirds of a ms
            st.integers(min_value=1, max_value=400),  # the ids made then
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_each_id_is_its_fields_laid_out(start: int, runs: list[tuple[int, int]]) -> None:
    """Runs of ids on a clock that moves forward (by nothing, by part of a
    millisecond, by many, across the first group's change): each id is the
    one its millisecond, its count in that millisecond and the process's
    random bits make, whichever way the generator builds the text; so they
    are valid, unique and in order, within one millisecond too."""
    now = [start * 1_000_000]
    ids = Uuid7()
    random = int(ids._tail[1:], 16)
    made: list[str] = []
    expected: list[str] = []
    last, count = -1, 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_ids, "_time_ns", lambda: now[0])
        for step, n in runs:
            now[0] += step * 1_000_000 // 3
            ms = now[0] // 1_000_000
            for _ in range(n):
                count = 0 if ms > last else count + 1
                last = ms
                made.append(ids())
                expected.append(_laid_out(ms, count, random))
    assert made == expected
    parsed = [_valid(m) for m in made]
    assert all(a.int < b.int for a, b in itertools.pairwise(parsed))


@pytest.mark.parametrize("start", [0xFFFF, 0x1FFFF, 0x0192E4C37A5B, (1 << 48) - 3])
def test_the_timestamp_is_right_across_the_first_groups_change(
    monkeypatch: pytest.MonkeyPatch, start: int
) -> None:
    """The first group is made once per 65,536 ms: the ids on both sides of
    its change carry their own milliseconds."""
    now = [start]
    monkeypatch.setattr(_ids, "_time_ns", lambda: now[0] * 1_000_000)
    ids = Uuid7()
    for ms in range(start, start + 3):
        now[0] = ms
        made = _valid(ids())
        assert made.int >> 80 == ms


def test_a_full_counter_moves_to_the_next_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ids, "_time_ns", lambda: 1_000 * 1_000_000)
    ids = Uuid7()
    first = _valid(ids())
    for _ in range(_ids._LOW_MASK):  # the low 14 bits run out: rand_a counts on
        ids()
    wrapped = _valid(ids())
    assert wrapped.int >> 80 == 1_000 and (wrapped.int >> 64) & 0xFFF == 1
    ids._counter = _ids._COUNTER_MAX - 1  # what 2**26 - 1 ids in that millisecond leave
    ids._head = _ids._head(1_000, ids._counter)
    last_of_ms = _valid(ids())
    overflowed = _valid(ids())
    assert first.int >> 80 == last_of_ms.int >> 80 == 1_000
    assert overflowed.int >> 80 == 1_001 and overflowed.int > last_of_ms.int


def test_threads_get_unique_ids_each_in_order() -> None:
    made: dict[int, list[str]] = {}

    def work(n: int) -> None:
        made[n] = [uuid7() for _ in range(5_000)]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for ids in made.values() for i in ids]
    assert len(set(everything)) == len(everything) == 20_000
    assert all(ids == sorted(ids) for ids in made.values())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_has_random_bits_of_its_own() -> None:
    read, write = os.pipe()
    parent = uuid7()
    pid = os.fork()
    if pid == 0:  # the child: its id, then out without pytest's cleanup
        os.close(read)
        os.write(write, uuid7().encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    _valid(child)
    assert child.rsplit("-", 1)[1] != parent.rsplit("-", 1)[1]


def test_an_engine_makes_uuid7_ids_by_default() -> None:
    async def main() -> tuple[str, list[str]]:
        async with Engine(llm=ScriptedLLM([{"text": "Hi!"}])) as engine:
            cid = await engine.create_context(system_prompt="Be brief.")
            await engine.send(cid, "Hello")
            return cid, [n.id for n in (await engine.get_context(cid)).history()]

    cid, messages = anyio.run(main)
    ids = [_valid(i) for i in [cid, *messages]]
    assert ids == sorted(ids) and len(set(ids)) == 3


def test_compact_ids_stay_available() -> None:
    async def main() -> list[str]:
        async with Engine(llm=ScriptedLLM([{"text": "Hi!"}]), ids="compact") as engine:
            cid = await engine.create_context()
            await engine.send(cid, "Hello")
            return [cid, *(n.id for n in (await engine.get_context(cid)).history())]

    made = anyio.run(main)
    assert all(COMPACT.fullmatch(i) for i in made), made
    assert len({i.split("-")[0] for i in made}) == 1  # one prefix per engine
    assert COMPACT.fullmatch(CompactIds()())


@pytest.mark.parametrize("bad", ["uuid4", "", 7])
def test_an_unknown_kind_of_ids_is_refused(bad: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        Engine(ids=bad)  # type: ignore[arg-type]
    assert caught.value.where == "ids"
    assert "'uuid7', 'compact'" in str(caught.value) and repr(bad) in str(caught.value)
