"""The activities on their own (Temporal's ActivityEnvironment, no server)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from turnfsm import Engine, MemoryStore
from turnfsm.model import TurnProgress
from turnfsm.storage import Commit
from turnfsm.tools import ToolRegistry


def _activities(store: MemoryStore) -> Any:
    from turnfsm.temporal._activities import Activities

    return Activities(store=store, llm=None, tools=ToolRegistry([]), event_log=None)


def _env(attempt: int) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt)
    return env


def test_a_commit_run_again_after_its_reply_was_lost_is_applied_once() -> None:
    from turnfsm.temporal import _codec

    async def go() -> None:
        store = MemoryStore()
        async with Engine(store=store) as engine:
            cid = await engine.create_context()
        ctx = await store.load(cid)
        commit = Commit(
            context_id=cid,
            expected_version=ctx.version,
            version=ctx.version + 1,
            state="Idle",
            updated_at=datetime(2030, 1, 1, tzinfo=UTC),
            progress=TurnProgress(),
            event_seq=ctx.event_seq,
        )
        acts = _activities(store)
        data = _codec.commit_to(commit)
        await _env(1).run(acts.commit, data, [], [])
        assert (await store.load(cid)).version == ctx.version + 1
        # Temporal runs it again (the first reply was lost): taken as applied
        await _env(2).run(acts.commit, data, [], [])
        assert (await store.load(cid)).version == ctx.version + 1
        # a first attempt never finds itself applied: another writer's commit
        with pytest.raises(ApplicationError) as info:
            await _env(1).run(acts.commit, data, [], [])
        assert info.value.type == "VersionConflict" and info.value.non_retryable
        # nor does a retry whose version another writer took (another time)
        other = _codec.commit_to(
            dataclasses.replace(commit, updated_at=datetime(2031, 1, 1, tzinfo=UTC))
        )
        with pytest.raises(ApplicationError) as info:
            await _env(2).run(acts.commit, other, [], [])
        assert info.value.type == "VersionConflict"

    anyio.run(go)


def test_loading_an_unknown_context_fails_for_good_with_the_engines_error() -> None:
    from turnfsm.errors import ContextNotFound
    from turnfsm.temporal import _codec

    async def go() -> None:
        acts = _activities(MemoryStore())
        with pytest.raises(ApplicationError) as info:
            await _env(1).run(acts.load, "nope", [])
        assert info.value.non_retryable
        err = _codec.error_from(info.value.details[0])
        assert isinstance(err, ContextNotFound) and str(err) == str(ContextNotFound("nope"))

    anyio.run(go)
