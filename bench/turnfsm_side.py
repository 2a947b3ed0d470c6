"""The turnfsm side: the same workloads, driven by ``turnfsm.Engine``.

The engine runs with its defaults (in-memory store, system clock, UUIDv7 ids,
its default structlog logger at the stdlib ``turnfsm`` level, WARNING), the
``@tool`` decorator and ``ScriptedLLM`` with a handler that behaves exactly
like the floor's fake LLM. W2 uses a tiny adapter (an object with an async
generator ``stream``) so that the scripted LLM's answer parsing is not timed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
from _common import (
    BYTES_AT,
    BYTES_CHECKPOINT_EVERY,
    BYTES_TURNS,
    TEXT_ANSWER,
    TOOL_NAME,
    TOOL_RESULT_TEMP,
    W1_TURNS,
    W2_CHUNKS,
    W2_CHUNKS_PER_ANSWER,
    W2_TEXT,
    W2_TURNS,
    W3_CONVERSATIONS,
    W3_TURNS,
    W4_TURNS,
    W5_TURNS,
    W6_TURNS,
    W8_CONVERSATIONS,
    W8_TURNS,
    CheckFailed,
    Timed,
    WriteMeter,
    check,
    copy_prepared,
    current_rss_mib,
    ensure_prepared,
    expected_w1_history,
    expected_w2_history,
    figure,
    peak_rss_mib,
    prepared_path,
    publish_prepared,
    remove_dir,
    throughput,
    work_dir,
)

# Nothing per transition: the engine's default logger filters at this level
# (WARNING is also the default; it is set here so an environment cannot lower it).
logging.getLogger("turnfsm").setLevel(logging.WARNING)

from turnfsm import (  # noqa: E402
    ApprovalStatus,
    ContentDelta,
    Engine,
    State,
    StopReason,
    TurnCompleted,
    tool,
)
from turnfsm.events import EventsMissed  # noqa: E402

try:
    from turnfsm.adapters.llm import LLMRequest, LLMResponse, TextDelta, ToolCallData
except ImportError:  # an older turnfsm (W8's comparison with an earlier commit)
    from turnfsm import LLMRequest, LLMResponse, TextDelta, ToolCallData  # type: ignore[attr-defined,no-redef]
from turnfsm import storage  # noqa: E402  (SQLiteStore: imported by the workloads that open one)
from turnfsm.model import to_chat_messages  # noqa: E402
from turnfsm.testing import ScriptedLLM  # noqa: E402

IDLE = State.IDLE
AWAITING = State.AWAITING_TOOL_APPROVAL
COMPLETED = StopReason.COMPLETED


# --------------------------------------------------------------------- the fake LLM and tool


def _weather(city: str) -> dict[str, Any]:
    """Get the current weather in a city.

    Args:
        city: the city's name.
    """
    return {"city": city, "temp_c": TOOL_RESULT_TEMP}


# A pure function that answers at once: inline, as the floor calls it, without
# the hop to a worker thread a sync tool takes by default (docs/benchmarks.md).
get_weather = tool(_weather, name=TOOL_NAME, inline=True)
get_weather_approval = tool(_weather, name=TOOL_NAME, approval="required", inline=True)


class Handler:
    """The floor's fake LLM, as a ScriptedLLM handler: reads ``len(messages)`` of
    the provider-format list, checks the last role, answers at once.

    Like the floor's, it keeps no request: only the messages of call ``keep``
    (the run's last call, checked afterwards) are copied into ``last``; with
    ``keep=None`` every call's list is kept, as an adapter that logs requests
    would."""

    __slots__ = ("calls", "keep", "last")

    def __init__(self, keep: int | None = None) -> None:
        self.calls = 0
        self.keep = keep
        self.last: list[dict[str, Any]] | None = None

    def __call__(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        messages = request.messages
        if self.keep is None:
            self.last = messages
        elif self.calls == self.keep:
            self.last = list(messages)
        n = len(messages)
        role = messages[-1]["role"]
        if role == "user":
            if n % 4 != 1 or not request.tools:
                raise CheckFailed(f"call 1 got {n} messages / {len(request.tools)} tools")
            return LLMResponse(
                tool_calls=(ToolCallData(f"call_{n // 4 + 1}", TOOL_NAME, {"city": "London"}),),
                finish_reason="tool_calls",
            )
        if role == "tool":
            if n % 4 != 3:
                raise CheckFailed(f"call 2 got {n} messages")
            return LLMResponse(text=TEXT_ANSWER, finish_reason="stop")
        raise CheckFailed(f"unexpected last role {role!r}")


_DELTAS = tuple(TextDelta(c) for c in W2_CHUNKS)


class StreamingLLM:
    """W2's adapter: 100 deltas of 4 characters, then the whole response."""

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, request: LLMRequest) -> AsyncIterator[Any]:
        self.calls += 1
        messages = request.messages
        n = len(messages)
        if messages[-1]["role"] != "user" or n % 2 != 1:
            raise CheckFailed(f"stream call got {n} messages")
        for delta in _DELTAS:
            yield delta
        yield LLMResponse(text=W2_TEXT, finish_reason="stop")


# --------------------------------------------------------------------- checks


async def _check_history(engine: Engine, cid: str, expected: list[dict[str, Any]]) -> None:
    ctx = await engine.get_context(cid)
    check(ctx.current_state == IDLE, f"final state {ctx.current_state}")
    history = ctx.history()
    check(len(history) == len(expected), f"{len(history)} messages, expected {len(expected)}")
    check(
        to_chat_messages(n.message for n in history) == expected,
        "history differs from a fresh build",
    )


async def _check_approved(engine: Engine, cid: str) -> None:
    """Every call of the history was approved by the human (W6). A check of
    the harness: the history's copy it reads grows with the turns run, and
    ``bench/instructions.py --no-checks`` leaves it out as it does the
    other checks, as the floor reads nothing back here."""
    ctx = await engine.get_context(cid)
    for node in ctx.history():
        for c in node.message.tool_calls or ():
            check(
                c.approval_status is ApprovalStatus.APPROVED and c.decided_by == "human",
                f"call {c.id}: {c.approval_status} by {c.decided_by}",
            )


# --------------------------------------------------------------------- workloads


async def w1() -> dict[str, Any]:
    handler = Handler(keep=2 * W1_TURNS)
    async with Engine(llm=ScriptedLLM(handler, record=False), tools=[get_weather]) as engine:
        cid = await engine.create_context()
        send = engine.send
        rss0 = current_rss_mib()
        tm = Timed.start()
        for i in range(1, W1_TURNS + 1):
            turn = await send(cid, f"turn {i}")
            if turn.state is not IDLE or turn.stop_reason is not COMPLETED:
                raise CheckFailed(f"turn {i}: {turn.state} {turn.stop_reason} {turn.error}")
        wall = tm.stop()
        peak = peak_rss_mib()
        check(len(turn.messages) == 4 and turn.text == TEXT_ANSWER, "last turn's messages")
        check(handler.calls == 2 * W1_TURNS, f"{handler.calls} LLM calls")
        expected = expected_w1_history(W1_TURNS)
        check(handler.last == expected[:-1], "the last request's messages differ")
        await _check_history(engine, cid, expected)
    return figure(tm, wall, W1_TURNS, "us/turn", peak, rss0)


async def w2() -> dict[str, Any]:
    llm = StreamingLLM()
    total = W2_TURNS * W2_CHUNKS_PER_ANSWER
    received: list[str] = []
    missed = 0
    # room for every event of the run: the driver never waits for a subscriber
    async with Engine(llm=llm, subscriber_buffer=4 * total) as engine:
        cid = await engine.create_context()
        sub = engine.subscribe(cid)

        async def subscriber() -> None:
            nonlocal missed
            turns = 0
            append = received.append
            async with sub:
                async for ev in sub:
                    kind = type(ev)
                    if kind is ContentDelta:
                        append(ev.delta)
                    elif kind is TurnCompleted:
                        turns += 1
                        if turns == W2_TURNS:
                            break
                    elif kind is EventsMissed:
                        missed += ev.count

        async with anyio.create_task_group() as tg:
            tg.start_soon(subscriber)
            await anyio.lowlevel.checkpoint()  # the subscriber waits before the clock starts
            rss0 = current_rss_mib()
            tm = Timed.start()
            for i in range(1, W2_TURNS + 1):
                turn = await engine.send(cid, f"turn {i}")
                if turn.state is not IDLE or turn.stop_reason is not COMPLETED:
                    raise CheckFailed(f"turn {i}: {turn.state} {turn.stop_reason} {turn.error}")
        wall = tm.stop()  # the subscriber has had every event
        peak = peak_rss_mib()
        check(missed == 0, f"the subscriber missed {missed} events")
        check(len(received) == total, f"subscriber got {len(received)} chunks, expected {total}")
        check("".join(received) == W2_TEXT * W2_TURNS, "subscriber's chunks differ")
        check(llm.calls == W2_TURNS, f"{llm.calls} LLM calls")
        await _check_history(engine, cid, expected_w2_history(W2_TURNS))
    return figure(tm, wall, total, "us/chunk", peak, rss0)


async def w3() -> dict[str, Any]:
    handler = Handler()
    cids: list[str] = []
    async with Engine(llm=ScriptedLLM(handler, record=False), tools=[get_weather]) as engine:

        async def one(k: int) -> None:
            cid = await engine.create_context()
            cids.append(cid)
            for i in range(1, W3_TURNS + 1):
                turn = await engine.send(cid, f"turn {i}")
                if turn.state is not IDLE or turn.stop_reason is not COMPLETED:
                    raise CheckFailed(f"conversation {k} turn {i}: {turn.state} {turn.error}")

        rss0 = current_rss_mib()
        tm = Timed.start()
        # the floor's task group (asyncio's): with nothing that waits, the
        # conversations run one after the other and the group holds every
        # finished task until the last one ends, so the peak counts both
        # sides' tasks the same way (an anyio group adds a handle, a cancel
        # scope and an event to each)
        async with asyncio.TaskGroup() as tg:
            for k in range(W3_CONVERSATIONS):
                tg.create_task(one(k))
        wall = tm.stop()
        peak = peak_rss_mib()  # before the checks, which copy contexts
        check(len(set(cids)) == W3_CONVERSATIONS, f"{len(set(cids))} conversations")
        check(handler.calls == 2 * W3_TURNS * W3_CONVERSATIONS, f"{handler.calls} LLM calls")
        expected = expected_w1_history(W3_TURNS)
        for cid in cids:
            await _check_history(engine, cid, expected)
    return figure(tm, wall, W3_CONVERSATIONS, "s", peak, rss0)


async def w6() -> dict[str, Any]:
    handler = Handler(keep=2 * W6_TURNS)
    llm = ScriptedLLM(handler, record=False)
    async with Engine(llm=llm, tools=[get_weather_approval]) as engine:
        cid = await engine.create_context()
        rss0 = current_rss_mib()
        tm = Timed.start()
        for i in range(1, W6_TURNS + 1):
            turn = await engine.send(cid, f"turn {i}")
            if turn.state is not AWAITING or len(turn.pending_tool_calls) != 1:
                raise CheckFailed(f"turn {i} did not stop for approval: {turn.state} {turn.error}")
            call_id = turn.pending_tool_calls[0].id  # what a UI would show
            turn = await engine.approve(cid, call_id)
            if turn.state is not IDLE or turn.stop_reason is not COMPLETED:
                raise CheckFailed(f"turn {i} after approval: {turn.state} {turn.error}")
        wall = tm.stop()
        peak = peak_rss_mib()
        check(handler.calls == 2 * W6_TURNS, f"{handler.calls} LLM calls")
        await _check_history(engine, cid, expected_w1_history(W6_TURNS))
        await _check_approved(engine, cid)
    return figure(tm, wall, W6_TURNS, "us/turn", peak, rss0)


# --------------------------------------------------------------------- durable (W4, W5, bytes)
#
# The engine on ``SQLiteStore(path, synchronous=S)``: one commit per state change
# (4 per W1 turn, counted below from the context's version: one before each
# wait on the LLM or the tools, and one at the end), each one transaction.


async def _check_stored(path: str, cid: str, expected: list[dict[str, Any]], version: int) -> None:
    """Reload from the file with a fresh store: what was written is all there."""
    store = storage.SQLiteStore(path)
    try:
        ctx = await store.load(cid)
        check(ctx.current_state == IDLE, f"stored state {ctx.current_state}")
        history = ctx.history()
        check(len(history) == len(expected), f"{len(history)} stored messages")
        check(
            to_chat_messages(n.message for n in history) == expected,
            "the reloaded history differs from a fresh build",
        )
        check(ctx.version == version, f"stored version {ctx.version}, expected {version}")
        steps = await store.steps(cid)
        # one audit step per transition (7 a turn); several may share a commit
        turns = len(expected) // 4
        check(len(steps) == 7 * turns, f"{len(steps)} steps stored for {turns} turns")
        check(steps[-1].version == version, f"last step at version {steps[-1].version}")
        check(steps[-1].to_state == IDLE, f"last step {steps[-1]}")
        problems = await store.integrity_check()
        check(not problems, f"integrity_check: {problems}")
    finally:
        await store.aclose()


async def w4(synchronous: str) -> dict[str, Any]:
    d = work_dir()
    try:
        path = os.path.join(d, "w4.db")
        handler = Handler(keep=2 * W4_TURNS)
        store = storage.SQLiteStore(path, synchronous=synchronous)
        llm = ScriptedLLM(handler, record=False)
        async with Engine(llm=llm, tools=[get_weather], store=store) as engine:
            cid = await engine.create_context()
            v0 = (await engine.get_context(cid)).version
            send = engine.send
            rss0 = current_rss_mib()
            tm = Timed.start()
            for i in range(1, W4_TURNS + 1):
                turn = await send(cid, f"turn {i}")
                if turn.state is not IDLE or turn.stop_reason is not COMPLETED:
                    raise CheckFailed(f"turn {i}: {turn.state} {turn.stop_reason} {turn.error}")
            wall = tm.stop()
            peak = peak_rss_mib()
            check(handler.calls == 2 * W4_TURNS, f"{handler.calls} LLM calls")
            expected = expected_w1_history(W4_TURNS)
            check(handler.last == expected[:-1], "the last request's messages differ")
            await _check_history(engine, cid, expected)
            version = (await engine.get_context(cid)).version
        await _check_stored(path, cid, expected, version)
    finally:
        remove_dir(d)
    result = figure(tm, wall, W4_TURNS, "us/turn", peak, rss0)
    result["extra"] = {"commits_per_turn": (version - v0) / W4_TURNS}
    return result


async def w8(synchronous: str) -> dict[str, Any]:
    """1,000 conversations of 5 W1 turns, all at once on one event loop and one
    ``SQLiteStore`` file; each ``send`` timed on its own (p99)."""
    d = work_dir()
    try:
        path = os.path.join(d, "w8.db")
        handler = Handler()
        store = storage.SQLiteStore(path, synchronous=synchronous)
        llm = ScriptedLLM(handler, record=False)
        latencies: list[float] = []
        clock = time.perf_counter
        async with Engine(llm=llm, tools=[get_weather], store=store) as engine:
            cids = [await engine.create_context() for _ in range(W8_CONVERSATIONS)]
            send = engine.send

            async def one(cid: str) -> None:
                for i in range(1, W8_TURNS + 1):
                    t0 = clock()
                    turn = await send(cid, f"turn {i}")
                    latencies.append(clock() - t0)
                    if turn.state is not IDLE or turn.stop_reason is not COMPLETED:
                        raise CheckFailed(f"{cid} turn {i}: {turn.state} {turn.error}")

            rss0 = current_rss_mib()
            tm = Timed.start()
            async with anyio.create_task_group() as tg:
                for cid in cids:
                    tg.start_soon(one, cid)
            wall = tm.stop()
            peak = peak_rss_mib()
            sends = W8_CONVERSATIONS * W8_TURNS
            check(len(latencies) == sends, f"{len(latencies)} sends")
            check(handler.calls == 2 * sends, f"{handler.calls} LLM calls")
            expected = expected_w1_history(W8_TURNS)
            versions = {}
            for cid in cids:
                await _check_history(engine, cid, expected)
                versions[cid] = (await engine.get_context(cid)).version
        for cid in cids[:: W8_CONVERSATIONS // 10]:
            await _check_stored(path, cid, expected, versions[cid])
    finally:
        remove_dir(d)
    result = throughput(tm, wall, sends, latencies, peak, rss0)
    v = sorted(versions.values())
    result["extra"]["commits_per_send"] = v[len(v) // 2] / W8_TURNS
    return result


async def _build(path: str, turns: int) -> str:
    """A store holding one conversation of ``turns`` W1 turns, driven by the engine
    (synchronous OFF: the file is the same, it is built faster). Returns its id."""
    handler = Handler()
    store = storage.SQLiteStore(path, synchronous="OFF")
    async with Engine(
        llm=ScriptedLLM(handler, record=False), tools=[get_weather], store=store
    ) as engine:
        cid = await engine.create_context()
        for i in range(1, turns + 1):
            turn = await engine.send(cid, f"turn {i}")
            if turn.state is not IDLE or turn.stop_reason is not COMPLETED:
                raise CheckFailed(f"turn {i}: {turn.state} {turn.stop_reason} {turn.error}")
    return cid


async def prepare_w5(path: str) -> dict[str, Any]:
    cid = await _build(path, W5_TURNS)
    await _check_stored(path, cid, expected_w1_history(W5_TURNS), 4 * W5_TURNS)
    return {"context_id": cid, "turns": W5_TURNS, "messages": 4 * W5_TURNS}


async def w5(synchronous: str) -> dict[str, Any]:
    src, meta = ensure_prepared("turnfsm", "W5")
    cid = meta["context_id"]
    d = work_dir()
    try:
        path = copy_prepared(src, d)
        handler = Handler(keep=2)
        llm = ScriptedLLM(handler, record=False)
        tools = [get_weather]
        # the store's module is imported when first named (import turnfsm loads
        # no SQLite): named here, so that its import stays outside the timed
        # part, as every other import is (bench/README.md)
        sqlite_store = storage.SQLiteStore
        rss0 = current_rss_mib()
        tm = Timed.start()
        t0 = time.perf_counter()
        engine = Engine(llm=llm, tools=tools, store=sqlite_store(path, synchronous=synchronous))
        t1 = time.perf_counter()
        turn = await engine.send(cid, f"turn {W5_TURNS + 1}")  # loads the context first
        t2 = time.perf_counter()
        wall = tm.stop()
        peak = peak_rss_mib()
        try:
            if turn.state is not IDLE or turn.stop_reason is not COMPLETED:
                raise CheckFailed(f"the turn: {turn.state} {turn.stop_reason} {turn.error}")
            check(len(turn.messages) == 4 and turn.text == TEXT_ANSWER, "the turn's messages")
            check(handler.calls == 2, f"{handler.calls} LLM calls")
            expected = expected_w1_history(W5_TURNS + 1)
            check(handler.last == expected[:-1], "the last request's messages differ")
            await _check_history(engine, cid, expected)
        finally:
            await engine.aclose()
        await _check_stored(path, cid, expected, 4 * (W5_TURNS + 1))
    finally:
        remove_dir(d)
    result = figure(tm, wall, 1, "ms", peak, rss0)
    result["extra"] = {"open_ms": (t1 - t0) * 1e3, "load_and_turn_ms": (t2 - t1) * 1e3}
    return result


async def _bytes_at(path: str, cid: str, turns_done: int, synchronous: str) -> dict[str, Any]:
    handler = Handler()
    store = storage.SQLiteStore(path, synchronous=synchronous)
    # bench only: the store's own connection, to switch automatic checkpoints off
    conn = store._conn
    assert conn is not None
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    llm = ScriptedLLM(handler, record=False)
    async with Engine(llm=llm, tools=[get_weather], store=store) as engine:
        turn_no = turns_done + 1
        await engine.send(cid, f"turn {turn_no}")  # loads the context; not measured
        v0 = (await engine.get_context(cid)).version
        meter = WriteMeter(path)
        for _span in range(BYTES_TURNS // BYTES_CHECKPOINT_EVERY):
            meter.start()
            for _ in range(BYTES_CHECKPOINT_EVERY):
                turn_no += 1
                turn = await engine.send(cid, f"turn {turn_no}")
                if turn.state is not IDLE or turn.stop_reason is not COMPLETED:
                    raise CheckFailed(f"turn {turn_no}: {turn.state} {turn.error}")
            meter.stop()
            meter.checkpointed(lambda: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
        version = (await engine.get_context(cid)).version
        await _check_history(engine, cid, expected_w1_history(turn_no))
    out = meter.per_turn(BYTES_TURNS, 4 * (turns_done + 1))
    out["commits_per_turn"] = (version - v0) / BYTES_TURNS
    return out


async def bytes_per_turn(synchronous: str) -> dict[str, Any]:
    d = work_dir()
    try:
        out: dict[str, Any] = {}
        for turns in BYTES_AT:
            if turns == W5_TURNS:
                src, meta = ensure_prepared("turnfsm", "W5")
                path, cid = copy_prepared(src, d, f"bytes-{turns}.db"), meta["context_id"]
            else:
                path = os.path.join(d, f"bytes-{turns}.db")
                cid = await _build(path, turns)
            out[f"at_{4 * turns}"] = await _bytes_at(path, cid, turns, synchronous)
    finally:
        remove_dir(d)
    return out


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3, "W6": w6}
DURABLE = {"W4": w4, "W5": w5, "W8": w8, "BYTES": bytes_per_turn}


def run(workload: str, synchronous: str = "FULL") -> dict[str, Any]:
    if workload in DURABLE:
        return anyio.run(DURABLE[workload], synchronous)
    return anyio.run(WORKLOADS[workload])


def prepare(name: str, dest: str | None = None) -> None:
    """Build the cached file of ``name`` (W5) for ``ensure_prepared`` (a setup process)."""
    dest = dest or prepared_path("turnfsm", name)
    built = f"{dest}.{os.getpid()}.building"
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    meta = anyio.run(prepare_w5, built)
    publish_prepared(built, dest, meta)
