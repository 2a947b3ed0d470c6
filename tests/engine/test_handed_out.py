"""What the engine hands out cannot change its state (docs/architecture.md, "Records").

What ``get_context``, ``messages``, ``Turn.messages``,
``Turn.pending_tool_calls``, ``update_config`` and the events hand out are
copies that share nothing that can change with the engine's loaded context
or with the store (the frozen records, content parts, system prompts and
progress, are shared). The test changes everything it was given, in place:
every text field of every record, every list and dict; setting a field of a
frozen record is refused. Then it finds the engine's context and the stored
one as they were.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest
from fixtures.records import make
from kit import make_engine

from turnfsm import Engine, SQLiteStore, records, tool
from turnfsm.model import ChatContext, detached
from turnfsm.storage import MemoryStore

pytestmark = pytest.mark.anyio


@tool
def weather(city: str) -> dict[str, Any]:
    """The weather."""
    return {"city": city, "sky": ["clear", {"wind": [1, 2]}]}


@tool(approval="required")
def booked(city: str) -> dict[str, Any]:
    """Book a trip."""
    return {"city": city, "seats": [{"n": 1}]}


ANSWERS: list[dict[str, Any]] = [
    {
        "tool_calls": [{"id": "c1", "name": "weather", "arguments": {"city": "Paris"}}],
        "usage": {"prompt_tokens": 3, "total_tokens": 5, "cached": {"n": [1]}},
    },
    {"text": "Sunny.", "usage": {"total_tokens": 2}},
    {
        "tool_calls": [{"id": "c2", "name": "booked", "arguments": {"city": "Oslo"}}],
    },
    {"text": "Cold.", "thinking": "brr"},
]


def _vandalise(value: Any, seen: set[int] | None = None) -> None:
    """Change, in place, every list and dict reachable from ``value`` (through
    records too), and try to set every field of every record."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, dict):
        for v in list(value.values()):
            _vandalise(v, seen)
        value["vandal"] = True
    elif isinstance(value, list):
        for v in list(value):
            _vandalise(v, seen)
        value.append("vandal")
    elif isinstance(value, tuple):
        for v in value:
            _vandalise(v, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _vandalise(getattr(value, f.name), seen)
        if type(value).__dataclass_params__.frozen:  # type: ignore[attr-defined]
            name = dataclasses.fields(value)[0].name
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(value, name, getattr(value, name))
            return
        for f in dataclasses.fields(value):
            if isinstance(getattr(value, f.name), str):
                setattr(value, f.name, "vandal")
        if isinstance(value, ChatContext):
            value.message_pool.clear()


async def _run(engine: Engine, store: Any) -> None:
    async with engine:
        cid = await engine.create_context()
        events: list[Any] = []
        async with engine.subscribe(cid) as sub:
            first = await engine.send(cid, "weather?")
            second = await engine.send(cid, "and Oslo?")
            assert second.pending_tool_calls
            third = await engine.approve(cid, "c2")
            with anyio.fail_after(5):
                async for ev in sub:
                    events.append(ev)
                    if sum(e.kind == "TurnCompleted" for e in events) == 3:
                        break
        kinds = {e.kind for e in events}
        assert {"MessageCompleted", "ToolCallsRequested", "ToolResult"} <= kinds
        assert "ToolApprovalRequested" in kinds
        before = records.to_json(await engine.get_context(cid))
        stored_before = records.to_json(await store.load(cid))
        assert before == stored_before
        assert b'"cached":{"n":[1]}' in before

        handed: list[Any] = [first, second, third, events]
        handed.append(await engine.get_context(cid))
        handed.append(await engine.messages(cid))
        handed.append(await engine.update_config(cid, parameters={"temperature": 0.5}))
        after_config = records.to_json(await engine.get_context(cid))
        for item in handed:
            _vandalise(item)
        assert records.to_json(await engine.get_context(cid)) == after_config
        assert records.to_json(await store.load(cid)) == after_config
        # unloaded: what get_context and messages read from the store
        await engine.unload(cid)
        unloaded = await engine.get_context(cid)  # from the store
        assert records.to_json(unloaded) == after_config
        _vandalise(unloaded)
        _vandalise(await engine.messages(cid))
        assert records.to_json(await store.load(cid)) == after_config
        assert records.to_json(await engine.get_context(cid)) == after_config


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_nothing_handed_out_reaches_the_engines_state(
    store_kind: str, tmp_path: Path
) -> None:
    store = MemoryStore() if store_kind == "memory" else SQLiteStore(tmp_path / "s.db")
    engine, _, _ = make_engine(ANSWERS, tools=[weather, booked], store=store)
    await _run(engine, store)


def test_detached_is_equal_and_shares_nothing_mutable() -> None:
    for ctx in (make.parent_created(), make.child_created()):
        copy = detached(ctx)
        assert copy == ctx
        assert records.to_json(copy) == records.to_json(ctx)
        assert not _mutables(copy) & _mutables(ctx)
    commit = make.parent_commit()
    for node in commit.replaced + [n for _, n in commit.appended]:
        assert detached(node) == node
        assert not _mutables(detached(node)) & _mutables(node)


def _mutables(value: Any, out: set[int] | None = None) -> set[int]:
    out = set() if out is None else out
    if isinstance(value, dict | list):
        out.add(id(value))
        for v in value.values() if isinstance(value, dict) else value:
            _mutables(v, out)
    elif isinstance(value, tuple):
        for v in value:
            _mutables(v, out)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        if not type(value).__dataclass_params__.frozen:
            out.add(id(value))
        for f in dataclasses.fields(value):
            _mutables(getattr(value, f.name), out)
    return out
