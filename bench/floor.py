"""The floor: the same work as turnfsm does, hand-written, no framework.

A plain asyncio loop over dicts and lists that keeps the provider-format
message list incrementally (one list per conversation, appended to, handed
as is to the fake LLM). This is the physical limit for Python on the machine
that the other systems are compared to (docs/benchmarks.md).

Imports nothing from turnfsm.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import _common
from _common import (
    BYTES_AT,
    BYTES_CHECKPOINT_EVERY,
    BYTES_TURNS,
    FLOOR_TOOLS,
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
    dumps,
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

# --------------------------------------------------------------------- the fake LLM and tool


class FakeLLM:
    """An async callable: gets the full message list and the tool definitions,
    reads ``len(messages)``, checks the last role, answers at once."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict:
        self.calls += 1
        n = len(messages)
        role = messages[-1]["role"]
        if role == "user":
            # call 1 of a turn: 4 messages per earlier turn, then the user message
            if n % 4 != 1 or not tools:
                raise CheckFailed(f"call 1 got {n} messages / {len(tools)} tools")
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{n // 4 + 1}",
                        "type": "function",
                        # the wire form: the provider sends the arguments as JSON text
                        "function": {"name": TOOL_NAME, "arguments": '{"city":"London"}'},
                    }
                ],
            }
        if role == "tool":
            if n % 4 != 3:
                raise CheckFailed(f"call 2 got {n} messages")
            return {"role": "assistant", "content": TEXT_ANSWER}
        raise CheckFailed(f"unexpected last role {role!r}")


def get_weather(city: str) -> dict[str, Any]:
    return {"city": city, "temp_c": TOOL_RESULT_TEMP}


TOOLS: dict[str, Callable[..., Any]] = {TOOL_NAME: get_weather}


# --------------------------------------------------------------------- the agent loop


class Conversation:
    __slots__ = ("messages", "pending", "state")

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.state = "idle"
        self.pending: dict[str, dict[str, Any]] = {}


def _run_tools(conv: Conversation, calls: list[dict[str, Any]]) -> None:
    messages = conv.messages
    for call in calls:
        fn = call["function"]
        result = TOOLS[fn["name"]](**json.loads(fn["arguments"]))
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": dumps(result)})


async def _drive(conv: Conversation, llm: FakeLLM, needs_approval: bool) -> str:
    messages = conv.messages
    for _ in range(20):  # max iterations, like any agent loop
        msg = await llm(messages, FLOOR_TOOLS)
        messages.append(msg)
        calls = msg.get("tool_calls")
        if not calls:
            conv.state = "idle"
            return "completed"
        if needs_approval:
            conv.pending = {c["id"]: c for c in calls}
            conv.state = "awaiting_approval"
            return "awaiting_approval"
        _run_tools(conv, calls)
    conv.state = "idle"
    return "max_iterations"


async def send(conv: Conversation, llm: FakeLLM, text: str, needs_approval: bool = False) -> str:
    if conv.state not in ("idle", "awaiting_approval"):
        raise RuntimeError(f"busy: {conv.state}")
    conv.messages.append({"role": "user", "content": text})
    conv.state = "running"
    return await _drive(conv, llm, needs_approval)


async def approve(conv: Conversation, llm: FakeLLM, call_id: str) -> str:
    if conv.state != "awaiting_approval" or call_id not in conv.pending:
        raise RuntimeError(f"no pending call {call_id!r}")
    call = conv.pending.pop(call_id)
    if conv.pending:
        return "awaiting_approval"
    conv.state = "running"
    _run_tools(conv, [call])
    return await _drive(conv, llm, True)


# ---------------------------------------------------------------- the durable loop (W4, W5, W8)
#
# The same loop, with its state changes persisted to SQLite (stdlib sqlite3, WAL,
# the run's ``synchronous`` setting): each transaction holds the new state (with an
# optimistic version check), one row of the step log, and the messages it adds. A
# message is appended to the in-memory list only once its transaction has committed,
# so a crash after any step loses nothing that was acknowledged. The states are
# turnfsm's. ``send_durable_merged`` makes the fewest commits a careful loop needs, 4
# per W1 turn (the user message; the assistant's tool call together with "tools
# started"; the tool results; the answer together with "idle"), as turnfsm's engine
# does: it is the figure of W4, W5, W8 and bytes. ``send_durable`` commits once per
# state change (7 per W1 turn), reported beside W4's figure, not as it.

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    version INTEGER NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    conv TEXT NOT NULL,
    pos INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (conv, pos)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS steps (
    conv TEXT NOT NULL,
    version INTEGER NOT NULL,
    from_state TEXT NOT NULL,
    trigger TEXT NOT NULL,
    to_state TEXT NOT NULL,
    at REAL NOT NULL
);
"""


class Durable(Conversation):
    """A conversation whose every state change is committed to SQLite."""

    __slots__ = ("commits", "db", "id", "version")

    def __init__(self, db: sqlite3.Connection, cid: str) -> None:
        super().__init__()
        self.db = db
        self.id = cid
        self.version = 0
        self.commits = 0


def open_db(path: str, synchronous: str) -> sqlite3.Connection:
    # explicit BEGIN / COMMIT; one thread at a time (persist_thread hops to a worker)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {synchronous}")
    db.executescript(_SCHEMA)
    return db


def create(db: sqlite3.Connection, cid: str) -> Durable:
    db.execute(
        "INSERT INTO conversations (id, state, version, updated_at) VALUES (?, 'idle', 0, ?)",
        (cid, time.time()),
    )
    return Durable(db, cid)


def load(db: sqlite3.Connection, cid: str) -> Durable:
    """The conversation as last committed: its state and its whole message list."""
    conv = Durable(db, cid)
    db.execute("BEGIN")  # one snapshot
    row = db.execute("SELECT state, version FROM conversations WHERE id = ?", (cid,)).fetchone()
    if row is None:
        raise KeyError(cid)
    conv.state, conv.version = row
    loads = json.loads
    conv.messages = [
        loads(body)
        for (body,) in db.execute("SELECT body FROM messages WHERE conv = ? ORDER BY pos", (cid,))
    ]
    db.execute("COMMIT")
    return conv


def commit(conv: Durable, trigger: str, to_state: str, added: Sequence[dict] = ()) -> None:
    """One state change, and the messages it adds, as one transaction."""
    db = conv.db
    version = conv.version + 1
    now = time.time()
    db.execute("BEGIN IMMEDIATE")
    try:
        cur = db.execute(
            "UPDATE conversations SET state = ?, version = ?, updated_at = ? "
            "WHERE id = ? AND version = ?",
            (to_state, version, now, conv.id, conv.version),
        )
        if cur.rowcount != 1:
            raise RuntimeError(f"conversation {conv.id}: version conflict")
        db.execute(
            "INSERT INTO steps (conv, version, from_state, trigger, to_state, at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (conv.id, version, conv.state, trigger, to_state, now),
        )
        if added:
            pos = len(conv.messages)
            db.executemany(
                "INSERT INTO messages (conv, pos, body) VALUES (?, ?, ?)",
                [(conv.id, pos + k, dumps(m)) for k, m in enumerate(added)],
            )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    # acknowledged only now that it is durable
    conv.version = version
    conv.state = to_state
    conv.commits += 1
    if added:
        conv.messages.extend(added)


Persist = Callable[[Durable, str, str, Sequence[dict]], Awaitable[None]]


async def persist_inline(
    conv: Durable, trigger: str, to_state: str, added: Sequence[dict] = ()
) -> None:
    """The commit on the event loop's thread (the floor's figure)."""
    commit(conv, trigger, to_state, added)


async def persist_thread(
    conv: Durable, trigger: str, to_state: str, added: Sequence[dict] = ()
) -> None:
    """The commit in a worker thread, one hop per transaction (reported beside the figure)."""
    await asyncio.to_thread(commit, conv, trigger, to_state, added)


def _tool_results(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for call in calls:
        fn = call["function"]
        result = TOOLS[fn["name"]](**json.loads(fn["arguments"]))
        out.append({"role": "tool", "tool_call_id": call["id"], "content": dumps(result)})
    return out


async def send_durable(conv: Durable, llm: FakeLLM, text: str, persist: Persist) -> str:
    """A turn, one transaction per state change (7 per W1 turn, as turnfsm)."""
    if conv.state != "idle":
        raise RuntimeError(f"busy: {conv.state}")
    await persist(
        conv, "user_message", "processing_user_message", ({"role": "user", "content": text},)
    )
    await persist(conv, "prompt_ready", "awaiting_llm_response", ())
    messages = conv.messages
    for _ in range(20):
        msg = await llm(messages, FLOOR_TOOLS)
        await persist(conv, "response_received", "processing_llm_response", (msg,))
        calls = msg.get("tool_calls")
        if not calls:
            await persist(conv, "turn_complete", "idle", ())
            return "completed"
        await persist(conv, "tools_decided", "executing_tools", ())  # before any tool runs
        await persist(conv, "tools_done", "awaiting_llm_response", _tool_results(calls))
    await persist(conv, "max_iterations", "idle", ())
    return "max_iterations"


async def send_durable_merged(conv: Durable, llm: FakeLLM, text: str, persist: Persist) -> str:
    """A turn with the fewest transactions crash safety allows (4 per W1 turn)."""
    if conv.state != "idle":
        raise RuntimeError(f"busy: {conv.state}")
    await persist(
        conv, "user_message", "awaiting_llm_response", ({"role": "user", "content": text},)
    )
    messages = conv.messages
    for _ in range(20):
        msg = await llm(messages, FLOOR_TOOLS)
        calls = msg.get("tool_calls")
        if not calls:
            await persist(conv, "turn_complete", "idle", (msg,))
            return "completed"
        # the call and "started" land together: after a crash the call is known as
        # attempted, so it is not run again silently
        await persist(conv, "tools_decided", "executing_tools", (msg,))
        await persist(conv, "tools_done", "awaiting_llm_response", _tool_results(calls))
    await persist(conv, "max_iterations", "idle", ())
    return "max_iterations"


def _check_stored(path: str, cid: str, expected: list[dict], commits: int) -> None:
    """Reload from the file with a fresh connection: what was written is all there."""
    db = sqlite3.connect(path)
    try:
        conv = load(db, cid)
        check(conv.state == "idle", f"stored state {conv.state}")
        check(len(conv.messages) == len(expected), f"{len(conv.messages)} stored messages")
        check(conv.messages == expected, "the reloaded history differs from a fresh build")
        check(conv.version == commits, f"stored version {conv.version}, {commits} commits")
        (steps,) = db.execute("SELECT COUNT(*) FROM steps WHERE conv = ?", (cid,)).fetchone()
        check(steps == commits, f"{steps} steps stored, {commits} commits")
        check(db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "integrity_check")
    finally:
        db.close()


# --------------------------------------------------------------------- workloads


async def w1() -> dict[str, Any]:
    llm = FakeLLM()
    conv = Conversation()
    rss0 = current_rss_mib()
    tm = Timed.start()
    for i in range(1, W1_TURNS + 1):
        if await send(conv, llm, f"turn {i}") != "completed":
            raise CheckFailed(f"turn {i} did not complete")
    wall = tm.stop()
    peak = peak_rss_mib()
    check(llm.calls == 2 * W1_TURNS, f"{llm.calls} LLM calls")
    check(len(conv.messages) == 4 * W1_TURNS, f"{len(conv.messages)} messages")
    check(conv.state == "idle", conv.state)
    check(conv.messages == expected_w1_history(W1_TURNS), "history differs from a fresh build")
    return figure(tm, wall, W1_TURNS, "us/turn", peak, rss0)


async def _stream_llm(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> AsyncIterator[str]:
    n = len(messages)
    if messages[-1]["role"] != "user" or n % 2 != 1:
        raise CheckFailed(f"stream call got {n} messages")
    for chunk in W2_CHUNKS:
        yield chunk


async def w2() -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
    received: list[str] = []
    total = W2_TURNS * W2_CHUNKS_PER_ANSWER

    async def subscriber() -> None:
        get = queue.get
        append = received.append
        while len(received) < total:
            _seq, delta = await get()
            append(delta)

    sub = asyncio.create_task(subscriber())
    await asyncio.sleep(0)  # the subscriber is waiting before the clock starts
    rss0 = current_rss_mib()
    tm = Timed.start()
    seq = 0
    put = queue.put_nowait
    for i in range(1, W2_TURNS + 1):
        messages.append({"role": "user", "content": f"turn {i}"})
        parts: list[str] = []
        async for chunk in _stream_llm(messages, []):
            parts.append(chunk)
            seq += 1
            put((seq, chunk))
        messages.append({"role": "assistant", "content": "".join(parts)})
    await sub
    wall = tm.stop()
    peak = peak_rss_mib()
    check(len(received) == total, f"subscriber got {len(received)} chunks")
    check("".join(received) == W2_TEXT * W2_TURNS, "subscriber's chunks differ")
    check(messages == expected_w2_history(W2_TURNS), "history differs")
    return figure(tm, wall, total, "us/chunk", peak, rss0)


async def w3() -> dict[str, Any]:
    llm = FakeLLM()
    store: dict[int, Conversation] = {}  # the histories stay in memory, as in any system

    async def one(k: int) -> None:
        conv = store[k] = Conversation()
        for i in range(1, W3_TURNS + 1):
            if await send(conv, llm, f"turn {i}") != "completed":
                raise CheckFailed(f"conversation {k} turn {i} did not complete")

    rss0 = current_rss_mib()
    tm = Timed.start()
    async with asyncio.TaskGroup() as tg:
        for k in range(W3_CONVERSATIONS):
            tg.create_task(one(k))
    wall = tm.stop()
    peak = peak_rss_mib()
    check(len(store) == W3_CONVERSATIONS, f"{len(store)} conversations")
    check(llm.calls == 2 * W3_TURNS * W3_CONVERSATIONS, f"{llm.calls} LLM calls")
    expected = expected_w1_history(W3_TURNS)
    for conv in store.values():
        check(conv.state == "idle" and conv.messages == expected, "a conversation differs")
    return figure(tm, wall, W3_CONVERSATIONS, "s", peak, rss0)


async def w6() -> dict[str, Any]:
    llm = FakeLLM()
    conv = Conversation()
    rss0 = current_rss_mib()
    tm = Timed.start()
    for i in range(1, W6_TURNS + 1):
        if await send(conv, llm, f"turn {i}", needs_approval=True) != "awaiting_approval":
            raise CheckFailed(f"turn {i} did not stop for approval")
        (call_id,) = conv.pending  # what a UI would show
        if await approve(conv, llm, call_id) != "completed":
            raise CheckFailed(f"turn {i} did not complete after approval")
    wall = tm.stop()
    peak = peak_rss_mib()
    check(llm.calls == 2 * W6_TURNS, f"{llm.calls} LLM calls")
    check(conv.state == "idle", conv.state)
    check(conv.messages == expected_w1_history(W6_TURNS), "history differs")
    return figure(tm, wall, W6_TURNS, "us/turn", peak, rss0)


async def _w4_once(
    path: str, synchronous: str, send_fn: Callable[..., Awaitable[str]], persist: Persist
) -> tuple[Timed, float, float, float, int]:
    llm = FakeLLM()
    db = open_db(path, synchronous)
    try:
        conv = create(db, "c1")
        rss0 = current_rss_mib()
        tm = Timed.start()
        for i in range(1, W4_TURNS + 1):
            if await send_fn(conv, llm, f"turn {i}", persist) != "completed":
                raise CheckFailed(f"turn {i} did not complete")
        wall = tm.stop()
        peak = peak_rss_mib()
        check(llm.calls == 2 * W4_TURNS, f"{llm.calls} LLM calls")
        check(conv.state == "idle", conv.state)
        expected = expected_w1_history(W4_TURNS)
        check(conv.messages == expected, "history differs from a fresh build")
    finally:
        db.close()
    _check_stored(path, "c1", expected, conv.commits)
    return tm, wall, peak, rss0, conv.commits


async def w4(synchronous: str) -> dict[str, Any]:
    d = work_dir()
    try:
        # the figure: the fewest commits a careful loop needs (4 a turn: one before
        # each wait on the LLM or the tools, one at the end), as turnfsm makes
        tm, wall, peak, rss0, commits = await _w4_once(
            os.path.join(d, "w4-merged.db"), synchronous, send_durable_merged, persist_inline
        )
        result = figure(tm, wall, W4_TURNS, "us/turn", peak, rss0)
        # beside the figure: one commit per state change (7 a turn), and that loop
        # with each commit in a worker thread (as turnfsm keeps SQLite off the loop);
        # hotspots.py profiles the figure's run only
        profiler, _common.profiler = _common.profiler, None
        try:
            _, wall7, _, _, commits7 = await _w4_once(
                os.path.join(d, "w4.db"), synchronous, send_durable, persist_inline
            )
            _, wall_t, _, _, _ = await _w4_once(
                os.path.join(d, "w4-thread.db"), synchronous, send_durable, persist_thread
            )
        finally:
            _common.profiler = profiler
    finally:
        remove_dir(d)
    result["extra"] = {
        "commits_per_turn": commits / W4_TURNS,
        "value_7_commits": wall7 * 1e6 / W4_TURNS,
        "commits_per_turn_7_commits": commits7 / W4_TURNS,
        "value_thread_hop": wall_t * 1e6 / W4_TURNS,
    }
    return result


async def prepare_w5(path: str) -> dict[str, Any]:
    """W5's stored conversation, built by the durable loop itself (1,250 turns)."""
    llm = FakeLLM()
    db = open_db(path, "OFF")  # the file is the same at any setting; OFF builds it faster
    try:
        conv = create(db, "c1")
        for i in range(1, W5_TURNS + 1):
            if await send_durable_merged(conv, llm, f"turn {i}", persist_inline) != "completed":
                raise CheckFailed(f"turn {i} did not complete")
    finally:
        db.close()
    _check_stored(path, "c1", expected_w1_history(W5_TURNS), conv.commits)
    return {"context_id": "c1", "turns": W5_TURNS, "messages": 4 * W5_TURNS}


async def w5(synchronous: str) -> dict[str, Any]:
    src, meta = ensure_prepared("floor", "W5")
    cid = meta["context_id"]
    d = work_dir()
    try:
        path = copy_prepared(src, d)
        llm = FakeLLM()
        rss0 = current_rss_mib()
        tm = Timed.start()
        t0 = time.perf_counter()
        db = open_db(path, synchronous)
        conv = load(db, cid)
        t1 = time.perf_counter()
        status = await send_durable_merged(conv, llm, f"turn {W5_TURNS + 1}", persist_inline)
        t2 = time.perf_counter()
        wall = tm.stop()
        peak = peak_rss_mib()
        db.close()
        check(status == "completed", f"the turn ended {status}")
        check(llm.calls == 2, f"{llm.calls} LLM calls")
        expected = expected_w1_history(W5_TURNS + 1)
        check(conv.state == "idle" and conv.messages == expected, "history differs")
        check(conv.commits == 4, f"{conv.commits} commits in the turn")
        _check_stored(path, cid, expected, conv.version)
    finally:
        remove_dir(d)
    result = figure(tm, wall, 1, "ms", peak, rss0)
    result["extra"] = {"load_ms": (t1 - t0) * 1e3, "turn_ms": (t2 - t1) * 1e3}
    return result


# --------------------------------------------------------------------- W8: group commit
#
# Many conversations on one event loop and one file: a writer thread takes every
# commit waiting in its queue, applies them in one transaction (each with its own
# version check, made first, so a refused commit writes nothing) and one COMMIT (one
# sync), then wakes their waiters with one ``call_soon_threadsafe`` per group. A
# commit is acknowledged (its messages join the conversation's list) only after the
# COMMIT returned. The event loop goes on with other conversations meanwhile.


class GroupCommitter:
    __slots__ = ("db", "groups", "loop", "queue", "thread")

    def __init__(self, db: sqlite3.Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.db = db
        self.loop = loop
        self.groups = 0
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    async def persist(
        self, conv: Durable, trigger: str, to_state: str, added: Sequence[dict] = ()
    ) -> None:
        fut = self.loop.create_future()
        self.queue.put((conv, trigger, to_state, added, fut))
        await fut
        # acknowledged only now that it is durable
        conv.version += 1
        conv.state = to_state
        conv.commits += 1
        if added:
            conv.messages.extend(added)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()

    def _main(self) -> None:
        q = self.queue
        db = self.db
        while True:
            items = [q.get()]
            while True:
                try:
                    items.append(q.get_nowait())
                except queue.Empty:
                    break
            stop = items[-1] is None
            work = [it for it in items if it is not None]
            if work:
                outcomes: list[BaseException | None] = []
                now = time.time()
                try:
                    db.execute("BEGIN IMMEDIATE")
                    for conv, trigger, to_state, added, _fut in work:
                        version = conv.version + 1
                        cur = db.execute(
                            "UPDATE conversations SET state = ?, version = ?, updated_at = ? "
                            "WHERE id = ? AND version = ?",
                            (to_state, version, now, conv.id, conv.version),
                        )
                        if cur.rowcount != 1:
                            outcomes.append(RuntimeError(f"{conv.id}: version conflict"))
                            continue
                        db.execute(
                            "INSERT INTO steps (conv, version, from_state, trigger, to_state, at) "
                            "VALUES (?, ?, ?, ?, ?, ?)",
                            (conv.id, version, conv.state, trigger, to_state, now),
                        )
                        if added:
                            pos = len(conv.messages)
                            db.executemany(
                                "INSERT INTO messages (conv, pos, body) VALUES (?, ?, ?)",
                                [(conv.id, pos + k, dumps(m)) for k, m in enumerate(added)],
                            )
                        outcomes.append(None)
                    db.execute("COMMIT")
                    self.groups += 1
                except BaseException as exc:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    outcomes = [exc] * len(work)
                self.loop.call_soon_threadsafe(_wake, work, outcomes)
            if stop:
                return


def _wake(work: list[Any], outcomes: list[BaseException | None]) -> None:
    for (_conv, _t, _s, _a, fut), exc in zip(work, outcomes, strict=True):
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)


async def w8(synchronous: str) -> dict[str, Any]:
    d = work_dir()
    try:
        path = os.path.join(d, "w8.db")
        llm = FakeLLM()
        db = open_db(path, synchronous)
        convs = [create(db, f"c{k}") for k in range(W8_CONVERSATIONS)]
        committer = GroupCommitter(db, asyncio.get_running_loop())
        latencies: list[float] = []
        clock = time.perf_counter

        async def one(conv: Durable) -> None:
            for i in range(1, W8_TURNS + 1):
                t0 = clock()
                status = await send_durable_merged(conv, llm, f"turn {i}", committer.persist)
                latencies.append(clock() - t0)
                if status != "completed":
                    raise CheckFailed(f"{conv.id} turn {i} did not complete")

        rss0 = current_rss_mib()
        tm = Timed.start()
        async with asyncio.TaskGroup() as tg:
            for conv in convs:
                tg.create_task(one(conv))
        wall = tm.stop()
        peak = peak_rss_mib()
        committer.close()
        db.close()
        sends = W8_CONVERSATIONS * W8_TURNS
        check(len(latencies) == sends, f"{len(latencies)} sends")
        check(llm.calls == 2 * sends, f"{llm.calls} LLM calls")
        expected = expected_w1_history(W8_TURNS)
        for conv in convs:
            check(conv.state == "idle" and conv.messages == expected, f"{conv.id} differs")
            check(conv.commits == 4 * W8_TURNS, f"{conv.id}: {conv.commits} commits")
        for conv in convs[:: W8_CONVERSATIONS // 10]:
            _check_stored(path, conv.id, expected, conv.commits)
        groups = committer.groups
    finally:
        remove_dir(d)
    result = throughput(tm, wall, sends, latencies, peak, rss0)
    result["extra"]["commits_per_send"] = 4.0
    result["extra"]["commits_per_transaction"] = 4 * sends / groups
    return result


async def _bytes_at(path: str, cid: str, turns_done: int, synchronous: str) -> dict[str, Any]:
    llm = FakeLLM()
    db = open_db(path, synchronous)
    try:
        db.execute("PRAGMA wal_autocheckpoint = 0")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conv = load(db, cid)
        turn = turns_done + 1
        await send_durable_merged(conv, llm, f"turn {turn}", persist_inline)  # not measured
        c0 = conv.commits
        meter = WriteMeter(path)
        for _span in range(BYTES_TURNS // BYTES_CHECKPOINT_EVERY):
            meter.start()
            for _ in range(BYTES_CHECKPOINT_EVERY):
                turn += 1
                if (
                    await send_durable_merged(conv, llm, f"turn {turn}", persist_inline)
                    != "completed"
                ):
                    raise CheckFailed(f"turn {turn} did not complete")
            meter.stop()
            meter.checkpointed(lambda: db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
    finally:
        db.close()
    check(conv.messages == expected_w1_history(turn), "history differs")
    out = meter.per_turn(BYTES_TURNS, 4 * (turns_done + 1))
    out["commits_per_turn"] = (conv.commits - c0) / BYTES_TURNS
    return out


async def bytes_per_turn(synchronous: str) -> dict[str, Any]:
    d = work_dir()
    try:
        out: dict[str, Any] = {}
        for turns in BYTES_AT:
            if turns == W5_TURNS:
                src, meta = ensure_prepared("floor", "W5")
                path, cid = copy_prepared(src, d, f"bytes-{turns}.db"), meta["context_id"]
            else:
                path, cid = os.path.join(d, f"bytes-{turns}.db"), "c1"
                db = open_db(path, "OFF")
                conv = create(db, cid)
                llm = FakeLLM()
                for i in range(1, turns + 1):
                    await send_durable_merged(conv, llm, f"turn {i}", persist_inline)
                db.close()
            out[f"at_{4 * turns}"] = await _bytes_at(path, cid, turns, synchronous)
    finally:
        remove_dir(d)
    return out


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3, "W6": w6}
DURABLE = {"W4": w4, "W5": w5, "W8": w8, "BYTES": bytes_per_turn}


def run(workload: str, synchronous: str = "FULL") -> dict[str, Any]:
    if workload in DURABLE:
        return asyncio.run(DURABLE[workload](synchronous))
    return asyncio.run(WORKLOADS[workload]())


def prepare(name: str, dest: str | None = None) -> None:
    """Build the cached file of ``name`` (W5) for ``ensure_prepared`` (a setup process)."""
    dest = dest or prepared_path("floor", name)
    built = f"{dest}.{os.getpid()}.building"
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    meta = asyncio.run(prepare_w5(built))
    publish_prepared(built, dest, meta)
