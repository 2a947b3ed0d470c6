"""The event relay and the engine-wide subscription it reads (``turnfsm.relay``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest
from kit import make_engine  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm.events import EVENT_ADAPTER, ContentDelta, Event, EventsMissed, StateChanged
from turnfsm.relay import EventRelay, split_events
from turnfsm.storage._eventlog import MemoryEventLog, SQLiteEventLog

pytestmark = pytest.mark.anyio

CHUNKS = {"chunks": ["The ", "answer ", "is ", "42."]}


async def test_every_contexts_durable_events_are_kept_at_their_seq() -> None:
    engine = make_engine(lambda request: CHUNKS).engine
    log = MemoryEventLog()
    async with engine:
        ids = [await engine.create_context() for _ in range(3)]
        with anyio.fail_after(10):
            async with engine.subscribe_all() as everything, EventRelay(engine, log) as relay:
                for cid in ids:
                    await engine.send(cid, "hi")
                sent = everything.drain()
    assert {ev.context_id for ev in sent} == set(ids)
    assert relay.dropped == 0
    assert relay.written == sum(ev.kind != "ContentDelta" for ev in sent)
    for cid in ids:
        mine = [ev for ev in sent if ev.context_id == cid]
        assert [ev.seq for ev in mine] == list(range(1, len(mine) + 1))
        kept = await log.after(cid, 0)
        durable = [ev for ev in mine if ev.kind != "ContentDelta"]
        assert [(s, k) for s, k, _ in kept] == [(ev.seq, ev.kind) for ev in durable]
        assert [EVENT_ADAPTER.validate_json(d) for _, _, d in kept] == durable
        assert len(durable) < len(mine)  # the deltas are not kept


def test_deltas_travel_in_the_notes_and_durable_events_in_the_log() -> None:
    events: list[Event] = [
        StateChanged(
            context_id="c", seq=1, timestamp=0.0, from_state="Idle", to_state="X", trigger="t"
        ),
        ContentDelta(
            context_id="c", seq=2, timestamp=0.0, message_id="m", delta="hi", index=0, attempt=1
        ),
        EventsMissed(context_id="d", seq=9, timestamp=0.0, count=3, first_seq=7),
    ]
    rows, notes = split_events(events)
    assert [(r[0], r[1], r[2]) for r in rows] == [("c", 1, "StateChanged")]
    # a log that rings nothing (SQLite: other processes poll it) gets the rows only
    assert split_events(events, rings=False) == (rows, [])
    assert [(n.context_id, n.seq, n.event is not None) for n in notes] == [
        ("c", 1, False),
        ("c", 2, True),
        ("d", 9, False),  # listeners read the log up to 9 and find 7..9 missing
    ]
    delta = notes[1].event
    assert delta is not None and EVENT_ADAPTER.validate_json(delta) == events[1]


async def test_a_locked_database_never_slows_a_turn(tmp_path: Path) -> None:
    """The log's database is locked by another writer while turns run: the turns
    end all the same; the relay drops what its buffer cannot hold (and says so
    with a note per context), and writes the rest once the lock goes."""
    db = tmp_path / "log.db"
    log = SQLiteEventLog(db)
    await log.open()
    engine = make_engine(lambda request: CHUNKS).engine
    blocker = sqlite3.connect(db, timeout=30, check_same_thread=False)
    async with engine:
        ids = [await engine.create_context() for _ in range(4)]
        async with EventRelay(engine, log, buffer=8, batch=4, grace=30) as relay:
            blocker.execute("BEGIN EXCLUSIVE")
            try:
                with anyio.fail_after(10):  # a write would wait 30 s for the lock
                    for cid in ids:
                        turn = await engine.send(cid, "hi")
                        assert turn.state == "Idle"
            finally:
                blocker.rollback()
                blocker.close()
    assert relay.dropped > 0
    kept = {cid: [s for s, _, _ in await log.after(cid, 0)] for cid in ids}
    assert kept[ids[0]][:2] == [1, 2]  # the first batch waited for the lock, then went in
    assert any(not seqs for seqs in kept.values())  # the later ones were dropped
    assert relay.written == sum(len(s) for s in kept.values())


def test_a_batch_rings_few_notifications_and_keeps_every_delta() -> None:
    from turnfsm.relay import event_json
    from turnfsm.storage._pg_events import MAX_PAYLOAD, parse_payload, payloads

    def delta(cid: str, seq: int, text: str) -> ContentDelta:
        return ContentDelta(
            context_id=cid, seq=seq, timestamp=0.0, message_id="m", delta=text, index=0, attempt=1
        )

    changed = StateChanged(
        context_id="a", seq=1, timestamp=0.0, from_state="Idle", to_state="X", trigger="t"
    )
    events: list[Event] = [changed, *[delta("a", s, "tok " * 10) for s in range(2, 300)]]
    events += [delta("b", 5, "x"), delta("a", 300, "y" * MAX_PAYLOAD)]  # too long to ring
    _, notes = split_events(events)
    texts = payloads(notes)
    assert len(texts) < 20 and all(len(t.encode()) <= MAX_PAYLOAD for t in texts)
    heard = [n for t in texts for n in parse_payload(t)]
    got = {(n.context_id, n.seq): n.event for n in heard if n.event is not None}
    sent = {(ev.context_id, ev.seq): ev for ev in events if ev.kind == "ContentDelta"}
    del sent[("a", 300)]  # left out: a listener sees a gap there and sends a Resync
    assert {k: EVENT_ADAPTER.validate_python(v) for k, v in got.items()} == sent
    bells = [(n.context_id, n.seq) for n in heard if n.event is None]
    assert ("a", 300) in bells and ("b", 5) in bells  # every event's seq is rung
    assert heard[0].first == 1  # a listener new to "a" starts at its first event
    a_seqs = [n.seq for n in heard if n.context_id == "a"]
    assert a_seqs == sorted(a_seqs)  # in order
    assert parse_payload("not ours") == [] and parse_payload('{"c": 1}') == []
    assert event_json(changed) not in "".join(texts)  # durable events are read from the log


async def test_a_stores_event_log_runs_on_threads_of_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log beside a SQLite store opens no connection per call and uses no
    worker thread of anyio's: its writes go to the store's writer thread, its
    reads to one reader thread of the log's own, not the store's reader
    (docs/benchmarks.md, "Memory under steady load": the connections a busy
    server opened per call, on up to 40 threads, were what its memory grew
    with)."""
    import threading

    import turnfsm.storage._eventlog as eventlog_module
    from turnfsm.storage import SQLiteStore
    from turnfsm.storage._eventlog import open_event_log

    store = SQLiteStore(tmp_path / "store.db")
    await store.list_ids()  # the store's reader thread started
    log = open_event_log(store)
    await log.open()
    assert await log.tenant("c0") is None  # the log's reader opened its connection
    ran: dict[str, set[int]] = {"read": set(), "write": set()}
    real = eventlog_module._statement

    def statement(
        conn: sqlite3.Connection, sql: str, args: object, many: bool
    ) -> list[tuple[object, ...]]:
        kind = "read" if sql.lstrip().startswith("SELECT") else "write"
        ran[kind].add(threading.get_ident())
        return real(conn, sql, args, many)  # type: ignore[arg-type]

    def no_connection(*args: object, **kwargs: object) -> None:
        raise AssertionError("the event log opened a connection")

    async def no_worker_thread(*args: object, **kwargs: object) -> None:
        raise AssertionError("the event log used a worker thread of anyio's")

    monkeypatch.setattr(eventlog_module, "_statement", statement)
    monkeypatch.setattr(eventlog_module.sqlite3, "connect", no_connection)
    monkeypatch.setattr(eventlog_module.anyio.to_thread, "run_sync", no_worker_thread)
    try:
        for _ in range(3):
            await log.set_tenant("c1", "alice")
            await log.add([("c1", 1, "StateChanged", "{}"), ("c1", 2, "TurnCompleted", "{}")], [])
            assert await log.tenant("c1") == "alice"
            assert await log.tenants() == {"c1": "alice"}
            assert [s for s, _, _ in await log.after("c1", 0)] == [1, 2]
            assert await log.newest(["c1", "c2"]) == {"c1": 2}
            await log.forget(["c1"])
            assert await log.after("c1", 0) == [] and await log.tenant("c1") is None
    finally:
        monkeypatch.undo()
        store_threads = {
            "reader": store._readq.thread.ident if store._readq else None,
            "writer": store._writeq.thread.ident if store._writeq else None,
        }
        await log.aclose()
        await store.aclose()
    assert ran["write"] == {store_threads["writer"]}
    assert len(ran["read"]) == 1
    assert ran["read"].isdisjoint({store_threads["reader"], store_threads["writer"]})
    assert threading.get_ident() not in ran["read"]
    db = sqlite3.connect(tmp_path / "store.db")
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        db.close()
    assert {"server_events", "server_context_tenants", "contexts"} <= tables
