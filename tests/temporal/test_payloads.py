"""Contexts of any size on Temporal: payloads over the threshold kept in the
store's database (turnfsm/temporal/_payloads.py), references in the histories."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import uuid
import zlib
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from storage.pg import pg_cluster, pg_url  # the PostgreSQL case's server

from temporal.compare import normal_messages
from temporal.devserver import DevServer, RunningServer

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import DataConverter, PayloadCodec

from turnfsm import Engine, MemoryStore, SQLiteStore, State, Tool, records, tool
from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log
from turnfsm.storage import Store
from turnfsm.temporal import (
    PAYLOAD_THRESHOLD,
    PayloadNotFound,
    Pruned,
    StoredPayloadCodec,
    TemporalEngine,
    TemporalWorker,
    prune_payloads,
    replayer,
    workflow_id,
)
from turnfsm.temporal._payloads import (
    ENCODING,
    TABLE,
    MemoryPayloads,
    SQLitePayloads,
    payload_table,
    with_payloads,
)
from turnfsm.testing import ScriptedLLM

__all__ = ["pg_cluster", "pg_url"]

MB = 1_000_000


def _payload(size: int) -> Payload:
    """A JSON payload of about ``size`` bytes that no compression shrinks much."""
    text = os.urandom(size // 2).hex()
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


def _rows(path: Path) -> list[tuple[str, int]]:
    """The moved payloads of a SQLite file: (sha256, bytes), none if no table."""
    with sqlite3.connect(path) as db:
        try:
            return db.execute(f"SELECT sha256, length(data) FROM {TABLE} ORDER BY 1").fetchall()
        except sqlite3.OperationalError:
            return []


# ------------------------------------------------------------ the codec alone


def test_only_a_payload_over_the_threshold_moves_and_the_same_bytes_are_kept_once(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        store = SQLiteStore(tmp_path / "s.db")
        try:
            codec = StoredPayloadCodec(payload_table(store))
            small = _payload(PAYLOAD_THRESHOLD // 2)
            assert await codec.encode([small]) == [small]
            assert _rows(tmp_path / "s.db") == []  # nothing written, no table made

            big = _payload(PAYLOAD_THRESHOLD + 1000)
            [ref] = await codec.encode([big])
            assert ref.metadata["encoding"] == ENCODING and ref.ByteSize() < 300
            [again] = await codec.encode([big])  # the same bytes again: the same row
            assert again == ref
            rows = _rows(tmp_path / "s.db")
            assert rows == [(ref.metadata["sha256"].decode(), big.ByteSize())]
            # and back, with the payloads that were not moved left in their places
            assert await codec.decode([small, ref, small]) == [small, big, small]
            # the store's own tables are not touched: the table is beside them
            with sqlite3.connect(tmp_path / "s.db") as db:
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
            assert TABLE in tables
            assert await codec.decode([ref]) == [big]  # read again, by another codec too
            assert await StoredPayloadCodec(SQLitePayloads(store)).decode([ref]) == [big]
        finally:
            await store.aclose()

    anyio.run(go)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_each_table_keeps_a_key_once_and_deletes_only_what_is_still_old(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from datetime import UTC, datetime

    from turnfsm.storage import open_store

    url = {
        "memory": "memory://",
        "sqlite": f"sqlite:///{tmp_path}/t.db",
        "postgres": request.getfixturevalue("pg_url") if kind == "postgres" else "",
    }[kind]

    async def go() -> None:
        store = open_store(url)
        try:
            table = payload_table(store)
            assert await table.get(["a" * 64]) == {}  # no table yet: nothing, no error
            assert await table.written_before(datetime.now(UTC)) == []
            t0 = datetime(2026, 1, 1, tzinfo=UTC)
            t1, t2 = t0 + timedelta(days=1), t0 + timedelta(days=2)
            await table.put({"a" * 64: b"one", "b" * 64: b"two"}, t0)
            await table.put({"a" * 64: b"one"}, t2)  # written again: its time only
            assert await table.get(["a" * 64, "b" * 64, "c" * 64]) == {
                "a" * 64: b"one",
                "b" * 64: b"two",
            }
            assert await table.written_before(t1) == ["b" * 64]
            # deleted only while still older than the cutoff
            assert await table.delete(["a" * 64, "b" * 64], t1) == 1
            assert await table.get(["a" * 64, "b" * 64]) == {"a" * 64: b"one"}
        finally:
            await store.aclose()

    anyio.run(go)


def test_a_reference_without_its_bytes_fails_clearly() -> None:
    """A process without turnfsm's codec, or with another store, or a replay
    without one, is told what is missing: never given the reference as a value."""

    async def go() -> None:
        store = MemoryStore()
        [ref] = await StoredPayloadCodec(payload_table(store)).encode([_payload(300_000)])
        # the SDK's default converter does not read it as JSON: it names the encoding
        with pytest.raises(KeyError, match="binary/turnfsm-stored-payload"):
            await DataConverter.default.decode([ref])
        other = StoredPayloadCodec(payload_table(MemoryStore()))
        with pytest.raises(PayloadNotFound, match=f"not in the {TABLE} table of MemoryStore"):
            await other.decode([ref])
        with pytest.raises(PayloadNotFound, match=r"replayer\(store=\.\.\.\)"):
            await StoredPayloadCodec(None).decode([ref])
        # a damaged row is refused, not parsed
        table = payload_table(store)
        assert isinstance(table, MemoryPayloads)
        key = ref.metadata["sha256"].decode()
        at, data = table.rows[key]
        table.rows[key] = (at, data[:-1] + b"!")
        with pytest.raises(PayloadNotFound, match="does not match its hash"):
            await StoredPayloadCodec(table).decode([ref])

    anyio.run(go)


def test_stores_of_one_process_share_the_table_as_they_share_the_data(tmp_path: Path) -> None:
    """A memory store's table is its object's; a files store's is its folder's
    (a worker and a client of one process open the folder each)."""
    from turnfsm.storage import FilesStore

    one, two = FilesStore(tmp_path / "f"), FilesStore(tmp_path / "f")
    assert payload_table(one) is payload_table(two)
    assert payload_table(one) is not payload_table(FilesStore(tmp_path / "g"))
    memory = MemoryStore()
    assert payload_table(memory) is payload_table(memory)
    assert payload_table(memory) is not payload_table(MemoryStore())


class _Zlib(PayloadCodec):
    """A user's codec: compresses every payload."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(
                metadata={"encoding": b"binary/zlib"}, data=zlib.compress(p.SerializeToString())
            )
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            assert p.metadata["encoding"] == b"binary/zlib", "decoded out of order"
            q = Payload()
            q.ParseFromString(zlib.decompress(p.data))
            out.append(q)
        return out


def test_the_clients_own_codec_runs_first_and_ours_moves_what_it_made(
    temporal_server: RunningServer,
) -> None:
    async def go() -> None:
        client = await Client.connect(
            temporal_server.address, data_converter=DataConverter(payload_codec=_Zlib())
        )
        store = MemoryStore()
        made = with_payloads(client, store)
        assert made.namespace == client.namespace
        assert made.service_client is client.service_client  # the same connection
        converter = made.data_converter
        # compressible: the user's codec brings it under the threshold, nothing moves
        [kept] = await converter.encode([{"text": "a" * MB}])
        assert kept.metadata["encoding"] == b"binary/zlib"
        # not compressible: ours moves the compressed bytes (what is kept is the
        # user's encoding: a user's encryption covers the table too)
        value = {"text": os.urandom(400_000).hex()}
        [ref] = await converter.encode([value])
        assert ref.metadata["encoding"] == ENCODING
        table = payload_table(store)
        assert isinstance(table, MemoryPayloads)
        stored = Payload()
        stored.ParseFromString(next(iter(table.rows.values()))[1])
        assert stored.metadata["encoding"] == b"binary/zlib"
        assert await converter.decode([ref]) == [value]
        # given a client that has ours already, ours is replaced, not chained twice
        again = with_payloads(made, store, threshold=10)
        [moved] = await again.data_converter.encode([{"text": "a" * 1000}])
        assert moved.metadata["encoding"] == ENCODING
        assert await again.data_converter.decode([moved]) == [{"text": "a" * 1000}]

    anyio.run(go)


# ------------------------------------------------------------ on the server

_SEED = 7


def _tools(result_size: int, ran: list[str]) -> list[Tool]:
    @tool(approval="auto", idempotent=True)
    def read_log(part: int) -> str:
        """Read one part of the log."""
        return f"part {part}: " + f"{part * _SEED:08x}" * (result_size // 8)

    @tool(approval="required")
    def delete_log(part: int) -> str:
        """Delete one part of the log."""
        ran.append(f"delete {part}")
        return f"deleted part {part}"

    return [read_log, delete_log]


def _answers(parts: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in range(1, parts + 1):
        out.append(
            {"tool_calls": [{"id": f"r{part}", "name": "read_log", "arguments": {"part": part}}]}
        )
        out.append({"text": f"read part {part}"})
    out.append({"tool_calls": [{"id": "d1", "name": "delete_log", "arguments": {"part": 1}}]})
    out.append({"chunks": ["Deleted ", "part 1."]})
    return out


async def _conversation(
    engine: Any, parts: int, restart: Any = None
) -> tuple[str, list[Any], list[str], list[dict[str, Any]]]:
    """``parts`` large tool results, then a tool that waits for approval (the
    worker restarted meanwhile, when ``restart``), approved."""
    cid = await engine.create_context(system_prompt="You read logs.")
    turns = [await engine.send(cid, f"read part {p}") for p in range(1, parts + 1)]
    turns.append(await engine.send(cid, "delete part 1"))
    assert turns[-1].state is State.AWAITING_TOOL_APPROVAL
    if restart is not None:
        await restart()
    turns.append(await engine.approve(cid, "d1"))
    ctx = await engine.get_context(cid)
    trace = [str(s) for s in await engine.trace(cid)]
    messages = [records.to_python(n) for n in ctx.history()]
    steps = await engine.store.steps(cid)
    lines = audit_jsonl(audit_records(cid, steps, ctx.message_pool.values())).splitlines()
    assert verify_audit_log(lines).ok
    return cid, turns, trace, messages


async def _in_process(parts: int, size: int) -> tuple[list[str], list[dict[str, Any]]]:
    ran: list[str] = []
    async with Engine(llm=ScriptedLLM(_answers(parts)), tools=_tools(size, ran)) as engine:
        _, _, trace, messages = await _conversation(engine, parts)
    assert ran == ["delete 1"]
    return trace, messages


async def _on_temporal(
    client: Client, store: Store | str, parts: int, size: int, *, restart: bool
) -> tuple[str, list[Any], list[str], list[dict[str, Any]], int]:
    """The conversation on Temporal; ``restart``: the worker is replaced while
    the approval waits (the new one replays the workflow's history, whose
    references it reads back from the store). Returns also the size of the
    context's stored JSON."""
    ran: list[str] = []
    queue = f"payloads-{uuid.uuid4().hex[:10]}"
    tools = _tools(size, ran)
    llm = ScriptedLLM(_answers(parts))
    options: dict[str, Any] = {"llm": llm, "tools": tools, "task_queue": queue}
    async with TemporalEngine(client, store=store, task_queue=queue, tools=tools) as engine:
        shared = engine.store if isinstance(store, str) else store
        worker = TemporalWorker(client, store=shared, **options)
        await worker.__aenter__()
        try:

            async def replace() -> None:
                nonlocal worker
                await worker.__aexit__(None, None, None)
                worker = TemporalWorker(client, store=shared, **options)
                await worker.__aenter__()

            # bounded: a payload Temporal refuses fails its task again and again
            with anyio.fail_after(120):
                cid, turns, trace, messages = await _conversation(
                    engine, parts, replace if restart else None
                )
        finally:
            await worker.__aexit__(None, None, None)
        size_of = len(json.dumps(records.to_python(await engine.get_context(cid))))
    assert ran == ["delete 1"]
    return cid, turns, trace, messages, size_of


async def _history(client: Client, cid: str) -> Any:
    return await client.get_workflow_handle(workflow_id(cid)).fetch_history()


def _refs(history: Any) -> list[bytes]:
    """The reference payloads in a history (as Temporal holds it)."""
    found: list[bytes] = []
    for event in history.events:
        for m in re.finditer(rb'"sha256":"([0-9a-f]{64})"', event.SerializeToString()):
            found.append(m.group(1))
    return found


@pytest.mark.temporal  # seconds: with -m temporal (.ci/run)
def test_a_large_tool_result_is_kept_in_the_store_and_the_turn_runs(
    own_temporal_server: DevServer, tmp_path: Path
) -> None:
    """One tool result over the threshold (the default 256 KiB): the turns run
    (the worker replaced while the approval waits), the history holds
    references and the table the bytes, as in-process; a replay reads them
    back; a small context's turns move nothing; pruning deletes what no
    history refers to, and only that."""
    size = 300_000

    async def go() -> None:
        client = await Client.connect(own_temporal_server.address)
        path = tmp_path / "big.db"
        cid, turns, trace, messages, _ = await _on_temporal(
            client, f"sqlite:///{path}", 1, size, restart=True
        )
        assert turns[-1].state is State.IDLE and turns[-1].text == "Deleted part 1."
        history = await _history(client, cid)
        refs = set(_refs(history))
        moved = _rows(path)
        assert refs and {k.encode() for k, _ in moved} >= refs
        assert all(n > PAYLOAD_THRESHOLD for _, n in moved)
        assert max(e.ByteSize() for e in history.events) < PAYLOAD_THRESHOLD
        # a client without turnfsm's codec is told what the reference is, never
        # given it as a value; the engine's client reads the context back
        results = [
            p
            for e in history.events
            if e.HasField("activity_task_completed_event_attributes")
            for p in e.activity_task_completed_event_attributes.result.payloads
        ]
        loaded = next(p for p in results if p.metadata["encoding"] == ENCODING)
        with pytest.raises(KeyError, match="binary/turnfsm-stored-payload"):
            await client.data_converter.decode([loaded])
        tools = _tools(size, [])
        store = SQLiteStore(path)
        try:
            [value] = await with_payloads(client, store).data_converter.decode([loaded])
            assert "part 1: " + f"{_SEED:08x}" * 100 in json.dumps(value)
            # the history replays from the store's table (a new worker would
            # too); without the store, the replay says what it lacks
            result = await replayer(tools=tools, store=store).replay_workflow(
                history, raise_on_replay_failure=False
            )
            assert result.replay_failure is None
            bare = await replayer(tools=tools).replay_workflow(
                history, raise_on_replay_failure=False
            )
            assert "replayer(store=...)" in str(bare.replay_failure)

            # pruning keeps what a history refers to and deletes the rest
            codec = StoredPayloadCodec(payload_table(store))
            [orphan] = await codec.encode([_payload(PAYLOAD_THRESHOLD + 1)])
            before = {k for k, _ in _rows(path)}
            pruned = await prune_payloads(store, client, older_than=timedelta(0))
            assert pruned.deleted == 1 and pruned.kept == len(before) - 1
            assert pruned.histories >= 1
            after = {k for k, _ in _rows(path)}
            assert after == before - {orphan.metadata["sha256"].decode()}
            # nothing old enough: no history is read
            nothing = Pruned(deleted=0, kept=0, histories=0)
            assert await prune_payloads(store, client, older_than=timedelta(hours=1)) == nothing
            again = await replayer(tools=tools, store=store).replay_workflow(
                history, raise_on_replay_failure=False
            )
            assert again.replay_failure is None
        finally:
            await store.aclose()

        # a small context: nothing moved, no table made
        small = tmp_path / "small.db"
        _, turns, _, _, _ = await _on_temporal(client, f"sqlite:///{small}", 1, 100, restart=False)
        assert turns[-1].state is State.IDLE
        assert _rows(small) == []

        here_trace, here_messages = await _in_process(1, size)
        assert trace == here_trace
        assert normal_messages(messages) == normal_messages(here_messages)

    anyio.run(go)


@pytest.mark.temporal
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_context_over_temporals_limit_runs_its_turns(
    kind: str, temporal_server: RunningServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A context whose stored JSON is over 2 MB (Temporal's payload limit):
    three large tool results, then a tool that waits for approval across a
    worker restart. Its stored messages and trace are those of the same
    conversation in-process."""
    size, parts = 900_000, 3
    url = (
        f"sqlite:///{tmp_path / 'big.db'}"
        if kind == "sqlite"
        else request.getfixturevalue("pg_url")
    )

    async def go() -> tuple[Any, ...]:
        client = await Client.connect(temporal_server.address)
        cid, turns, trace, messages, stored = await _on_temporal(
            client, url, parts, size, restart=True
        )
        history = await _history(client, cid)
        return turns, trace, messages, stored, history

    turns, trace, messages, stored, history = anyio.run(go)
    assert stored > 2 * MB + 500_000
    assert turns[-1].state is State.IDLE and turns[-1].text == "Deleted part 1."
    assert _refs(history)
    assert max(e.ByteSize() for e in history.events) < PAYLOAD_THRESHOLD
    here_trace, here_messages = anyio.run(_in_process, parts, size)
    assert trace == here_trace
    assert normal_messages(messages) == normal_messages(here_messages)
