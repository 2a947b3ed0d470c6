"""What each commit of a call carries, field by field: the engine writes its
commits' slots one by one (``_steps.build_commit``), so a field left out or
out of place would store one fact under another's name, or none."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from kit import make_engine

from turnfsm.storage import Commit, Lease, MemoryStore

pytestmark = pytest.mark.anyio


class _Recording(MemoryStore):
    """Keeps every commit it is given (its own ``commit``: the engine awaits it)."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[Commit] = []

    async def commit(self, commit: Commit) -> None:
        self.commits.append(commit)
        await super().commit(commit)


def test_commit_fields_are_in_the_order_build_commit_passes_them() -> None:
    assert [f.name for f in dataclasses.fields(Commit)] == [
        "context_id",
        "expected_version",
        "version",
        "state",
        "updated_at",
        "progress",
        "event_seq",
        "steps",
        "appended",
        "replaced",
        "branches",
        "active_branch",
        "config",
        "lease_token",
        "take_lease",
        "lease_owner",
        "release_lease",
    ]


async def test_each_commit_carries_its_own_facts_under_their_names() -> None:
    store = _Recording()
    engine, _, clock = make_engine([{"text": "one"}, {"text": "two"}], store=store)
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "first")
        first_call = len(store.commits)
        clock.advance(5)
        await engine.send(cid, "second")
        ctx = await engine.get_context(cid)
    commits = store.commits
    assert first_call >= 2 and len(commits) > first_call
    owner = engine.owner
    for c in commits:
        assert c.context_id == cid
        assert c.version == c.expected_version + 1
        assert isinstance(c.state, str) and c.steps and c.steps[-1].to_state == c.state
        assert all(s.version == c.version and s.at == c.updated_at for s in c.steps)
        assert c.progress is not None and isinstance(c.event_seq, int)
        assert c.branches == [] and c.active_branch is None and c.config is None
        assert c.replaced == []
        assert isinstance(c.lease_token, int) and c.lease_owner == owner
    assert [c.version for c in commits] == list(range(1, len(commits) + 1))
    assert commits[0].updated_at == datetime.fromtimestamp(1_767_225_600.0, UTC)
    assert commits[-1].updated_at == datetime.fromtimestamp(1_767_225_605.0, UTC)
    # each call's last commit releases the lease; the second call's first
    # commit takes it again (the context stayed loaded)
    ends = [c.release_lease for c in commits]
    assert ends == [i in (first_call - 1, len(commits) - 1) for i in range(len(commits))]
    take = commits[first_call].take_lease
    assert isinstance(take, Lease) and take.token == commits[first_call].lease_token
    assert take.owner == owner and take.context_id == cid
    assert all(c.take_lease is None for i, c in enumerate(commits) if i != first_call)
    assert [len(c.appended) for c in commits].count(0) < len(commits)
    assert ctx.version == commits[-1].version and ctx.current_state == commits[-1].state


async def test_each_commit_is_the_record_the_class_makes_of_its_fields() -> None:
    store = _Recording()
    engine, _, _ = make_engine([{"text": "one"}], store=store)
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "first")
    assert store.commits
    names = [f.name for f in dataclasses.fields(Commit)]
    for c in store.commits:
        assert type(c) is Commit
        made = Commit(**{name: getattr(c, name) for name in names})  # every slot set
        assert made == c and repr(made) == repr(c)
