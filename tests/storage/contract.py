"""The contract every :class:`~turnfsm.storage.Store` backend passes (docs/storage.md).

How a backend uses it
---------------------

Subclass :class:`StoreContract` in a ``test_*.py`` module, with a class name
pytest collects (``Test...``), and implement the hooks::

    from .contract import StoreContract      # tests/storage/ is a package

    class TestMyStore(StoreContract):
        persistent = True          # False: the tests that reopen stored data are skipped

        def make_store(self, tmp_path: Path) -> Store:          # may also be ``async def``
            return MyStore(tmp_path / "data")

        def reopen(self, store: Store, tmp_path: Path) -> Store:  # may also be ``async def``
            return MyStore(tmp_path / "data")     # a second, independent object on the same data

        def set_schema_version(
            self, store: Store, tmp_path: Path, context_id: str, version: int,
            message_id: str | None = None,
        ) -> str:                                               # may also be ``async def``
            # rewrite, at rest, the schema version stored with the context record
            # (message_id None) or with that one message record; return a text the
            # resulting error must contain (the file's path, say)
            ...

Hooks
~~~~~

``make_store(tmp_path)``
    A new, empty store whose data (if any) lives under ``tmp_path``. Required.
``reopen(store, tmp_path)``
    A second store object on the same data as ``store`` (a new connection, a new
    file handle): used for persistence (close, reopen, load) and for
    concurrent-writer tests. The base raises ``NotImplementedError``; a
    persistent backend must implement it.
``set_schema_version(store, tmp_path, context_id, version, message_id=None)``
    Plant a record of another schema version at rest. Same rule as ``reopen``.
    Called with ``SCHEMA_VERSION + 1`` (expected: ``SchemaVersionError``, on
    load and on commit), ``SCHEMA_VERSION + 5`` for one message, ``0`` (expected:
    a plain ``StoreError``, no upgrade path) and back to ``SCHEMA_VERSION``; the
    ``store`` given may still be open. ``turnfsm.storage._schema`` has the checks
    and upcasters (``check_version``, ``message_from_record``,
    ``context_from_document``, ``upcast_*``) for a backend to use.
``persistent``
    Class flag, default ``True``. ``False`` (the memory store) skips the tests
    marked as needing stored data: reopening, persistence, schema versions,
    two store objects.

Fixtures
~~~~~~~~

Every test is an ``anyio`` test (the ``anyio_backend`` fixture of
``tests/conftest.py`` picks asyncio). The ``store`` fixture calls
``make_store`` (awaiting it when it returns an awaitable) and closes the
store after the test; :meth:`StoreContract.open_again` calls ``reopen`` and
closes what it opened at the end of the test too. A test that needs a store
closed before reopening it calls ``await store.aclose()`` itself: closing twice
must be harmless (it is part of the contract).

What the suite requires beyond the docstrings of ``Store``
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~

* the message pool is lossless: a message on no branch (hand-built, or left
  by a branch stored whole) is kept and loaded;
* ``list_ids`` and ``list_contexts`` give the contexts oldest first (the tests
  create them in order, with increasing ``created_at``);
* ``load`` returns a copy: changing it, or the context given to ``create``,
  changes nothing stored;
* a refused commit (stale or future version, unknown branch, unknown replaced
  message, newer schema version) stores nothing: messages, steps, state,
  counters all as before;
* ``aclose`` twice is harmless;
* leases: ``acquire_lease`` gives token 1, then one more on every successful
  acquire (also the same owner's, also after a release); another owner gets
  ``None`` until ``now`` reaches the expiry (or it names the held token in
  ``take_over``); ``renew_lease`` and a commit naming an older token (or any
  token when the context has no lease) raise ``LeaseLost`` and store nothing;
  two store objects on the same data see one lease.

Every test asserts something that a wrong backend would fail; the helpers
below (``msg``, ``make_commit``, ``rich_context``, ``drive_engine``) are module
level so that a backend's own tests can reuse them.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import itertools
from collections.abc import AsyncIterator, Awaitable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import anyio
import pytest

from turnfsm import Engine, State, tool
from turnfsm.errors import (
    ContextNotFound,
    LeaseLost,
    SchemaVersionError,
    StoreError,
    VersionConflict,
)
from turnfsm.model import (
    SCHEMA_VERSION,
    ApprovalStatus,
    Branch,
    ChatConfig,
    ChatContext,
    FilePart,
    ImagePart,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    MessageType,
    ReasoningItem,
    Role,
    SystemPrompt,
    TextPart,
    TokenUsage,
    ToolCallRequest,
    ToolCallResult,
    TurnProgress,
)
from turnfsm.states import CHANGES
from turnfsm.storage import ChildSummaries, Commit, ContextSummary, Lease, StepLog, Store
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

__all__ = [
    "T0",
    "StoreContract",
    "drive_engine",
    "make_commit",
    "msg",
    "rich_context",
    "snapshot",
]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0.timestamp()
"""Lease times, in seconds since the epoch (stores never read a clock)."""
X = TypeVar("X")


async def resolve(value: X | Awaitable[X]) -> X:
    """``value``, awaited when a hook returned an awaitable."""
    if inspect.isawaitable(value):
        return await value
    return value


# --------------------------------------------------------------------------- builders


def msg(
    mid: str,
    role: Role = Role.USER,
    text: str = "",
    *,
    parent: str | None = None,
    at: datetime = T0,
    **fields: Any,
) -> MessageNode:
    """A message node with one text part (when ``text`` is given)."""
    content = fields.pop("content", [TextPart(text=text)] if text else [])
    meta = fields.pop("metadata", MessageMetadata(created_at=at))
    return MessageNode(
        id=mid,
        parent_id=parent,
        message=InternalMessage(role=role, content=content, metadata=meta, **fields),
    )


def empty_context(cid: str, *, at: datetime = T0, **fields: Any) -> ChatContext:
    """A context in Idle with an empty ``main`` branch."""
    fields.setdefault("branches", {"main": Branch(name="main")})
    return ChatContext(id=cid, created_at=at, updated_at=at, **fields)


def make_commit(
    context_id: str,
    version: int,
    *,
    state: str = "Idle",
    steps: Sequence[tuple[str, str, str]] = (),
    appended: Sequence[tuple[str, MessageNode]] = (),
    replaced: Sequence[MessageNode] = (),
    branches: Sequence[Branch] = (),
    active_branch: str | None = None,
    config: ChatConfig | None = None,
    progress: TurnProgress | None = None,
    event_seq: int | None = None,
    at: datetime | None = None,
) -> Commit:
    """The commit that moves a context from ``version`` to ``version + 1``.

    ``steps`` are (from, trigger, to) triples; their StepLogs get the new version.
    """
    new = version + 1
    when = at or T0 + timedelta(seconds=new)
    return Commit(
        context_id=context_id,
        expected_version=version,
        version=new,
        state=state,
        updated_at=when,
        progress=progress or TurnProgress(),
        event_seq=new * 10 if event_seq is None else event_seq,
        steps=[StepLog(new, a, t, b, when) for (a, t, b) in steps],
        appended=list(appended),
        replaced=list(replaced),
        branches=list(branches),
        active_branch=active_branch,
        config=config,
    )


def rich_context(cid: str = "rich") -> ChatContext:
    """A hand-built context using every field of the model: two branches sharing a
    prefix, tool calls in every approval status, results, images, files, thinking,
    token usage with extra keys, metadata extras, non-ASCII text, a message that is
    in the pool but on no branch, a non-default config, progress and counters."""
    at = T0
    prompt = SystemPrompt(id="sp-1", content="Be brief. Ünïcödé ✓")
    calls = [
        ToolCallRequest(
            id="call-a",
            tool_name="get_weather",
            arguments={"city": "Zürich", "days": 3, "opts": {"units": "metric", "x": [1, 2.5]}},
            approval_status=ApprovalStatus.APPROVED,
            decided_by="human",
        ),
        ToolCallRequest(
            id="call-b",
            tool_name="delete_all",
            arguments={},
            approval_status=ApprovalStatus.DENIED,
            decided_by="policy",
            reason="never",
        ),
        ToolCallRequest(
            id="call-c",
            tool_name="broken",
            raw_arguments="{not json",
            approval_status=ApprovalStatus.PENDING,
            outcome_unknown=True,
        ),
    ]
    m1 = msg(
        "m1",
        Role.USER,
        content=[
            TextPart(text='What\'s the weather? 日本語 \u2028 "quoted" \\ back'),
            ImagePart(url="data:image/png;base64,iVBORw0KGgo=", detail="low"),
            FilePart(name="notes.txt", mime_type="text/plain", data="aGVsbG8="),
        ],
        at=at,
    )
    m2 = msg(
        "m2",
        Role.ASSISTANT,
        "Checking.",
        parent="m1",
        at=at + timedelta(seconds=1),
        tool_calls=calls,
        message_type=MessageType.TOOL_CALL,
        thinking="The user wants weather.",
        metadata=MessageMetadata(
            created_at=at + timedelta(seconds=1),
            model="gpt-x",
            usage=TokenUsage(
                prompt_tokens=10, completion_tokens=5, total_tokens=15, cached_tokens=3
            ),
            attempt=2,
            iteration=1,
            finish_reason="tool_calls",
            extra={"trace": {"span": "abc"}, "n": 1.5},
        ),
    )
    m3 = msg(
        "m3",
        Role.TOOL,
        parent="m2",
        at=at + timedelta(seconds=2),
        tool_result=ToolCallResult(request_id="call-a", result={"temp": 21.5, "sky": "clear"}),
        message_type=MessageType.TOOL_RESULT,
    )
    m4 = msg(
        "m4",
        Role.TOOL,
        parent="m3",
        tool_result=ToolCallResult(request_id="call-b", result="denied: never", success=False),
        message_type=MessageType.TOOL_RESULT,
    )
    m5 = msg(
        "m5",
        Role.ASSISTANT,
        "Partial answ",
        parent="m1",
        metadata=MessageMetadata(created_at=at, cancelled=True, finish_reason="cancelled"),
    )
    m6 = msg("m6", Role.FRONTEND_OPERATOR, "operator note", parent="m5")
    orphan = msg("orphan", Role.SYSTEM, "not on any branch")
    return ChatContext(
        id=cid,
        parent_id="parent-ctx",
        config=ChatConfig(
            model_id="gpt-x",
            mode="agent",
            parameters={"temperature": 0.25, "stop": ["\n\n"], "nested": {"a": None}},
            system_prompt_id="sp-1",
            agent_role="planner",
            workspace_path="/tmp/ws",
        ),
        message_pool={n.id: n for n in (m1, m2, m3, m4, m5, m6, orphan)},
        branches={
            "main": Branch(
                name="main",
                message_ids=["m1", "m2", "m3", "m4"],
                system_prompt=prompt,
                user_prompt="be nice",
            ),
            "alt": Branch(
                name="alt",
                message_ids=["m1", "m5", "m6"],
                parent_message_id="m1",
                forked_from="main",
                system_prompt=prompt,
            ),
        },
        active_branch_name="alt",
        current_state="AwaitingToolApproval",
        created_at=at,
        updated_at=at + timedelta(minutes=5),
        version=7,
        event_seq=42,
        progress=TurnProgress(
            iteration=2,
            attempt=3,
            retry_at=1_767_225_600.125,
            last_error="HTTP 503: busy",
            started_call_ids=("call-a",),
        ),
    )


async def snapshot(store: Store, cid: str) -> tuple[ChatContext, list[StepLog], ContextSummary]:
    """Everything the store tells of one context."""
    summaries = [s for s in await store.list_contexts() if s.id == cid]
    assert len(summaries) == 1, summaries
    return await store.load(cid), await store.steps(cid), summaries[0]


# --------------------------------------------------------------------------- an engine run

WEATHER_ANSWERS: list[dict[str, Any]] = [
    {
        "text": "Let me check.",
        "tool_calls": [
            {"id": "call_w", "name": "get_weather", "arguments": {"city": "Paris"}},
            {"id": "call_t", "name": "get_time", "arguments": {}},
        ],
    },
    {"llm_error": {"status": 503}},
    {
        "chunks": ["Sunny ", "in Paris, ", "it is noon."],
        "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37},
    },
    {"text": "You're welcome.", "thinking": "be polite"},
    {"tool_calls": [{"id": "call_l", "name": "get_weather", "arguments": {"city": "London"}}]},
    {"text": "OK, I will not look it up."},
]


def weather_tools() -> list[Any]:
    def get_weather(city: str) -> dict[str, Any]:
        """The weather of a city."""
        return {"city": city, "sky": "sunny", "temp": 21}

    def get_time() -> str:
        """The time."""
        return "12:00"

    return [
        tool(get_weather, approval="required"),
        tool(get_time, approval="auto", idempotent=True),
    ]


def make_engine(store: Store, answers: list[dict[str, Any]] | None = None) -> Engine:
    import kit  # tests/kit.py; not at the top: a worker process imports this module alone

    answers = list(WEATHER_ANSWERS if answers is None else answers)
    return kit.make_engine(answers, tools=weather_tools(), store=store).engine


async def drive_engine(store: Store) -> tuple[Engine, str]:
    """Drive a real engine against ``store``: a tool call needing approval and one
    auto-approved, a transient failure and its retry, a streamed answer, a fork, a
    denied call on the new branch, a switch back. Returns the (open) engine and the
    context id; the caller closes the engine (which closes the store)."""
    engine = make_engine(store)
    cid = await engine.create_context(
        system_prompt="You are a weather bot.",
        parameters={"temperature": 0.2},
        workspace_path="/work",
        user_prompt="metric units",
    )
    turn = await engine.send(cid, "Weather in Paris, and the time?")
    assert turn.state is State.AWAITING_TOOL_APPROVAL, turn
    turn = await engine.approve(cid, "call_w")
    assert turn.state is State.IDLE, turn
    turn = await engine.send(cid, "Thanks!")
    assert turn.text == "You're welcome."
    turn = await engine.fork(cid, "alt", 0)
    turn = await engine.send(cid, "Actually, London?")
    assert turn.state is State.AWAITING_TOOL_APPROVAL, turn
    turn = await engine.deny(cid, "call_l", "not today")
    assert turn.state is State.IDLE, turn
    await engine.switch_branch(cid, "main")
    return engine, cid


# --------------------------------------------------------------------------- the suite


@pytest.mark.anyio
class StoreContract(abc.ABC):
    """The contract suite; see the module docstring for the hooks."""

    persistent: ClassVar[bool] = True

    # ------------------------------------------------------------------ hooks

    @abc.abstractmethod
    def make_store(self, tmp_path: Path) -> Store | Awaitable[Store]:
        """A new, empty store keeping its data under ``tmp_path``."""

    def reopen(self, store: Store, tmp_path: Path) -> Store | Awaitable[Store]:
        """A second store object on the same data as ``store``."""
        raise NotImplementedError(f"{type(self).__name__} must implement reopen()")

    def set_schema_version(
        self,
        store: Store,
        tmp_path: Path,
        context_id: str,
        version: int,
        message_id: str | None = None,
    ) -> str | Awaitable[str]:
        """Rewrite at rest the schema version of the context record (or of one
        message record); return a text the resulting error must contain."""
        raise NotImplementedError(f"{type(self).__name__} must implement set_schema_version()")

    # ------------------------------------------------------------------ fixtures

    @pytest.fixture
    async def store(self, tmp_path: Path, anyio_backend: str) -> AsyncIterator[Store]:
        self._opened: list[Store] = []
        s = await resolve(self.make_store(tmp_path))
        try:
            yield s
        finally:
            for other in self._opened:
                await other.aclose()
            await s.aclose()

    def need_persistence(self) -> None:
        if not self.persistent:
            pytest.skip(f"{type(self).__name__} keeps no data beyond the store object")

    async def open_again(self, store: Store, tmp_path: Path) -> Store:
        """``reopen``, closed at the end of the test."""
        self.need_persistence()
        other = await resolve(self.reopen(store, tmp_path))
        assert other is not store
        self._opened.append(other)
        return other

    # ------------------------------------------------------------------ the interface

    def test_is_a_store(self, store: Store) -> None:
        assert isinstance(store, Store)

    async def test_empty_store(self, store: Store) -> None:
        assert await store.list_ids() == []
        assert await store.list_contexts() == []
        with pytest.raises(ContextNotFound):
            await store.load("nope")
        with pytest.raises(ContextNotFound):
            await store.steps("nope")

    # ------------------------------------------------------------------ create / load

    async def test_create_load_round_trip_of_a_rich_context(self, store: Store) -> None:
        ctx = rich_context()
        await store.create(ctx)
        loaded = await store.load(ctx.id)
        assert loaded == ctx
        assert loaded is not ctx
        # the details equality could hide behind a loose __eq__
        assert loaded.branches["alt"].message_ids == ["m1", "m5", "m6"]
        assert loaded.message_pool["orphan"].message.text == "not on any branch"
        assert loaded.progress.started_call_ids == ("call-a",)
        usage = loaded.message_pool["m2"].message.metadata.usage
        assert usage is not None and usage.extras == {"cached_tokens": 3}
        assert (
            loaded.message_pool["m2"].message.tool_calls
            == ctx.message_pool["m2"].message.tool_calls
        )
        assert loaded.history() == ctx.history()
        assert loaded.history("main") == ctx.history("main")
        assert loaded.schema_version == SCHEMA_VERSION
        assert await store.steps(ctx.id) == []

    async def test_create_empty_context(self, store: Store) -> None:
        ctx = empty_context("c1")
        await store.create(ctx)
        assert await store.load("c1") == ctx
        (summary,) = await store.list_contexts()
        assert summary == ContextSummary("c1", "Idle", 0, T0, None, None, "scripted")

    async def test_the_summary_carries_the_title_and_model_as_committed(self, store: Store) -> None:
        ctx = empty_context("c1")
        ctx.config.title = 'A "quoted" trip'
        await store.create(ctx)
        (summary,) = await store.list_contexts()
        assert summary.title == 'A "quoted" trip'
        config = dataclasses.replace(ctx.config, title="Renamed")
        await store.commit(make_commit("c1", 0, config=config))
        (summary,) = await store.list_contexts()
        assert (summary.title, summary.version) == ("Renamed", 1)
        config = dataclasses.replace(config, model_id="m2")
        await store.commit(make_commit("c1", 1, config=config))
        (summary,) = await store.list_contexts()
        assert (summary.title, summary.model, summary.version) == ("Renamed", "m2", 2)
        await store.commit(make_commit("c1", 2, config=dataclasses.replace(config, title=None)))
        (summary,) = await store.list_contexts()
        assert summary.title is None

    async def test_list_children_reads_one_parents_children_and_their_finished_flag(
        self, store: Store
    ) -> None:
        assert isinstance(store, ChildSummaries)
        await store.create(empty_context("p"))
        await store.create(empty_context("other"))
        for cid, parent in [("a", "p"), ("x", "other"), ("b", "p")]:
            ctx = empty_context(cid, parent_id=parent)
            ctx.config.title = f"child {cid}"
            await store.create(ctx)
        found = await store.list_children("p")
        assert [(s.id, s.parent_id, s.title, s.archived) for s in found] == [
            ("a", "p", "child a", False),
            ("b", "p", "child b", False),
        ]
        assert found == [s for s in await store.list_contexts() if s.parent_id == "p"]
        kept = dataclasses.replace(empty_context("b").config, title="child b", archived=True)
        await store.commit(make_commit("b", 0, config=kept))
        assert [(s.id, s.archived, s.version) for s in await store.list_children("p")] == [
            ("a", False, 0),
            ("b", True, 1),
        ]
        assert [s.archived for s in await store.list_contexts() if s.id == "b"] == [True]
        assert await store.list_children("nobody") == []
        assert await store.list_children("a") == []

    async def test_load_returns_an_independent_copy(self, store: Store) -> None:
        ctx = rich_context()
        await store.create(ctx)
        # the caller's object is not the store's
        ctx.branches["main"].message_ids.append("m5")
        ctx.message_pool["extra"] = msg("extra")
        first = await store.load(ctx.id)
        assert first.branches["main"].message_ids == ["m1", "m2", "m3", "m4"]
        assert "extra" not in first.message_pool
        # and neither is what load returned
        first.branches["alt"].message_ids.clear()
        first.message_pool.clear()
        first.current_state = "Idle"
        again = await store.load(ctx.id)
        assert again.branches["alt"].message_ids == ["m1", "m5", "m6"]
        assert len(again.message_pool) == 7
        assert again.current_state == "AwaitingToolApproval"

    async def test_creating_an_existing_id_is_a_store_error(self, store: Store) -> None:
        await store.create(rich_context("dup"))
        before = await snapshot(store, "dup")
        with pytest.raises(StoreError) as info:
            await store.create(empty_context("dup"))
        assert not isinstance(info.value, VersionConflict | ContextNotFound)
        assert "dup" in str(info.value)
        assert await snapshot(store, "dup") == before
        assert await store.list_ids() == ["dup"]

    # ------------------------------------------------------------------ the engine

    async def test_engine_run_round_trip(self, store: Store) -> None:
        engine, cid = await drive_engine(store)
        held = await engine.get_context(cid)
        loaded = await store.load(cid)
        assert loaded == held
        # what the run must have produced, so that the equality above is not vacuous
        assert set(loaded.branches) == {"main", "alt"}
        assert loaded.active_branch_name == "main"
        main = [n.message for n in loaded.history("main")]
        assert [m.role for m in main] == [
            Role.USER,
            Role.ASSISTANT,
            Role.TOOL,
            Role.TOOL,
            Role.ASSISTANT,
            Role.USER,
            Role.ASSISTANT,
        ]
        assert main[4].text == "Sunny in Paris, it is noon."
        assert main[6].thinking == "be polite"
        calls = {c.id: c for c in main[1].tool_calls or ()}
        assert calls["call_w"].approval_status is ApprovalStatus.APPROVED
        assert calls["call_w"].decided_by == "human"
        assert calls["call_t"].decided_by == "policy"
        alt = loaded.history("alt")
        assert alt[0].id == loaded.history("main")[0].id
        assert loaded.branches["alt"].forked_from == "main"
        assert alt[1].message.text == "Actually, London?"
        (denied,) = alt[2].message.tool_calls or ()
        assert denied.approval_status is ApprovalStatus.DENIED
        assert denied.reason == "not today"
        assert alt[3].message.tool_result is not None
        assert alt[3].message.tool_result.success is False
        assert alt[4].message.text == "OK, I will not look it up."
        assert loaded.config.parameters == {"temperature": 0.2}
        assert loaded.current_state == "Idle"
        assert loaded.version == held.version > 10
        assert loaded.event_seq == held.event_seq > 0
        # the audit trail: every transition, in order, and the fork between them
        stored = await store.steps(cid)
        trace = [State.IDLE, *(State(s.to_state) for s in stored if s.trigger not in CHANGES)]
        fork = next(s for s in stored if s.trigger in CHANGES)
        assert fork.trigger == "branch_forked" and fork.detail is not None
        assert fork.detail["branch"] == "alt" and fork.from_state == fork.to_state == "Idle"
        assert all(s.detail and s.from_state == s.to_state for s in stored if s.trigger in CHANGES)
        assert trace == await engine.trace(cid)
        steps = await store.steps(cid)
        assert [s.version for s in steps] == sorted(s.version for s in steps)
        for prev, nxt in itertools.pairwise(steps):
            assert prev.to_state == nxt.from_state
        assert "retry" in [s.trigger for s in steps]
        await engine.aclose()

    async def test_engine_records_the_tool_attempt_before_the_tool_runs(self, store: Store) -> None:
        seen: list[tuple[str, tuple[str, ...], int]] = []
        cid_box: list[str] = []

        async def probe() -> str:
            """Reads its own context from the store while it runs."""
            ctx = await store.load(cid_box[0])
            results = sum(1 for n in ctx.message_pool.values() if n.message.tool_result)
            seen.append((ctx.current_state, ctx.progress.started_call_ids, results))
            return "probed"

        engine = Engine(
            llm=ScriptedLLM(
                [
                    {"tool_calls": [{"id": "call_p", "name": "probe", "arguments": {}}]},
                    {"text": "done"},
                ]
            ),
            tools=[tool(probe, approval="required")],
            store=store,
            clock=FakeClock(),
            ids=SequentialIds(),
        )
        cid = await engine.create_context()
        cid_box.append(cid)
        await engine.send(cid, "probe please")
        waiting = await store.load(cid)
        assert waiting.current_state == "AwaitingToolApproval"
        assert waiting.progress.started_call_ids == ()
        turn = await engine.approve(cid, "call_p")
        assert turn.text == "done"
        assert seen == [("ExecutingTools", ("call_p",), 0)]
        after = await store.load(cid)
        assert after.progress.started_call_ids == ()
        results = [n.message.tool_result for n in after.history() if n.message.tool_result]
        assert [(r.request_id, r.result) for r in results] == [("call_p", "probed")]
        assert after == await engine.get_context(cid)
        await engine.aclose()

    async def test_engine_continues_on_a_reopened_store(self, store: Store, tmp_path: Path) -> None:
        self.need_persistence()
        engine, cid = await drive_engine(store)
        held = await engine.get_context(cid)
        await engine.aclose()  # closes the store
        other = await self.open_again(store, tmp_path)
        assert await other.load(cid) == held
        second = make_engine(other, [{"text": "Still here."}])
        turn = await second.send(cid, "Are you there?")
        assert turn.text == "Still here."
        reloaded = await other.load(cid)
        assert reloaded == await second.get_context(cid)
        assert reloaded.version > held.version
        assert [n.message.text for n in reloaded.history()][-2:] == [
            "Are you there?",
            "Still here.",
        ]
        assert reloaded.history()[:-2] == held.history()
        assert reloaded.branches["alt"] == held.branches["alt"]

    # ------------------------------------------------------------------ commits

    async def test_append_messages_per_branch_in_order(self, store: Store) -> None:
        ctx = empty_context("c", branches={"main": Branch(name="main"), "b": Branch(name="b")})
        await store.create(ctx)
        a1, a2, a3 = msg("a1", text="one"), msg("a2", text="two"), msg("a3", text="three")
        b1, b2 = msg("b1", text="uno"), msg("b2", text="dos")
        await store.commit(
            make_commit("c", 0, appended=[("main", a1), ("b", b1), ("main", a2), ("b", b2)])
        )
        await store.commit(make_commit("c", 1, appended=[("main", a3)]))
        loaded = await store.load("c")
        assert loaded.branches["main"].message_ids == ["a1", "a2", "a3"]
        assert loaded.branches["b"].message_ids == ["b1", "b2"]
        assert [n.message.text for n in loaded.history("main")] == ["one", "two", "three"]
        assert loaded.message_pool["b2"] == b2
        assert loaded.version == 2

    async def test_reasoning_of_every_provider_round_trips(self, store: Store) -> None:
        """Reasoning items name their provider and keep its opaque data and
        their place in the answer; the provider's own stop reason is kept."""
        ctx = empty_context("c")
        await store.create(ctx)
        items = [
            ReasoningItem(id="rs_1", summary=["plan"], encrypted_content="gAAAA"),
            ReasoningItem(
                id="",
                summary=["Let me think ✓"],
                provider="anthropic",
                data={"type": "thinking", "signature": "EqQBCgIYAhIM"},
            ),
            ReasoningItem(
                id="",
                provider="anthropic",
                data={"type": "redacted_thinking", "data": "EmwKAhgBEgy3"},
                position=1,
            ),
        ]
        meta = MessageMetadata(created_at=T0, finish_reason="length", provider_reason="max_tokens")
        node = msg("a1", Role.ASSISTANT, "cut", reasoning=items, metadata=meta)
        await store.commit(make_commit("c", 0, appended=[("main", node)]))
        loaded = (await store.load("c")).message_pool["a1"].message
        assert loaded.reasoning == items
        assert [r.provider for r in loaded.reasoning] == ["openai", "anthropic", "anthropic"]
        assert loaded.metadata.provider_reason == "max_tokens"
        assert loaded.outcome == "length"

    async def test_many_commits_keep_order(self, store: Store) -> None:
        await store.create(empty_context("c"))
        ids = []
        for v in range(60):
            node = msg(f"n{v:03d}", Role.USER if v % 2 else Role.ASSISTANT, f"text {v}")
            ids.append(node.id)
            await store.commit(make_commit("c", v, appended=[("main", node)]))
        loaded = await store.load("c")
        assert loaded.branches["main"].message_ids == ids
        assert loaded.version == 60
        assert [n.message.text for n in loaded.history()] == [f"text {v}" for v in range(60)]

    async def test_the_pool_is_in_the_order_written(self, store: Store) -> None:
        """Message ids that do not sort in the order they were written, two
        contexts' commits interleaved: each loaded pool is in the order written
        (an export writes the pool in that order)."""
        await store.create(empty_context("c"))
        await store.create(empty_context("d"))
        names = ["z9", "a1", "m5", "b0", "y2", "c7", "x3", "d4"]
        for v, name in enumerate(names):
            for cid in ("c", "d"):
                node = msg(f"{cid}-{name}", text=f"{cid} {v}")
                await store.commit(make_commit(cid, v, appended=[("main", node)]))
        for cid in ("c", "d"):
            loaded = await store.load(cid)
            assert list(loaded.message_pool) == [f"{cid}-{n}" for n in names]
            assert loaded.branches["main"].message_ids == [f"{cid}-{n}" for n in names]

    async def test_the_same_message_on_two_branches(self, store: Store) -> None:
        """A node appended to a second branch later (as a fork shares its prefix)."""
        ctx = empty_context("c", branches={"main": Branch(name="main"), "b": Branch(name="b")})
        await store.create(ctx)
        shared = msg("s", text="shared")
        await store.commit(make_commit("c", 0, appended=[("main", shared)]))
        await store.commit(make_commit("c", 1, branches=[Branch(name="b", message_ids=["s"])]))
        loaded = await store.load("c")
        assert loaded.branches["b"].message_ids == ["s"]
        assert loaded.branches["main"].message_ids == ["s"]
        assert list(loaded.message_pool) == ["s"]

    async def test_replaced_nodes_are_updated(self, store: Store) -> None:
        ctx = empty_context("c")
        await store.create(ctx)
        pending = ToolCallRequest(id="k1", tool_name="t", arguments={"x": 1})
        ask = msg("q", Role.ASSISTANT, "may I?", tool_calls=[pending])
        other = msg("o", Role.USER, "before", parent=None)
        await store.commit(
            make_commit(
                "c", 0, state="AwaitingToolApproval", appended=[("main", other), ("main", ask)]
            )
        )
        decided = dataclasses.replace(
            ask,
            **{
                "message": dataclasses.replace(
                    ask.message,
                    **{
                        "tool_calls": [
                            dataclasses.replace(
                                pending,
                                **{
                                    "approval_status": ApprovalStatus.DENIED,
                                    "decided_by": "human",
                                    "reason": "no",
                                },
                            )
                        ]
                    },
                )
            },
        )
        await store.commit(make_commit("c", 1, state="Idle", replaced=[decided]))
        loaded = await store.load("c")
        (call,) = loaded.message_pool["q"].message.tool_calls or ()
        assert call.approval_status is ApprovalStatus.DENIED
        assert call.reason == "no"
        assert loaded.message_pool["q"] == decided
        assert loaded.message_pool["o"] == other
        assert loaded.branches["main"].message_ids == ["o", "q"]  # position kept
        assert len(loaded.message_pool) == 2

    async def test_replace_and_append_in_one_commit(self, store: Store) -> None:
        await store.create(empty_context("c"))
        first = msg("a", Role.USER, "v1")
        await store.commit(make_commit("c", 0, appended=[("main", first)]))
        second = msg("a", Role.USER, "v2")
        await store.commit(
            make_commit("c", 1, replaced=[second], appended=[("main", msg("b", text="b"))])
        )
        loaded = await store.load("c")
        assert [n.message.text for n in loaded.history()] == ["v2", "b"]

    async def test_record_state_changes(self, store: Store) -> None:
        await store.create(empty_context("c"))
        chain = [
            [("Idle", "user_message", "ProcessingUserMessage")],
            [("ProcessingUserMessage", "request_ready", "AwaitingLLMResponse")],
            [
                ("AwaitingLLMResponse", "first_chunk", "StreamingLLMResponse"),
                ("StreamingLLMResponse", "stream_done", "ProcessingLLMResponse"),
            ],
            [],  # a commit without a transition (a decision, a branch switch)
            [("ProcessingLLMResponse", "text_answer", "Idle")],
        ]
        expected: list[StepLog] = []
        for v, steps in enumerate(chain):
            c = make_commit(
                "c", v, state=steps[-1][2] if steps else "ProcessingLLMResponse", steps=steps
            )
            expected.extend(c.steps)
            await store.commit(c)
        got = await store.steps("c")
        assert got == expected
        assert [s.version for s in got] == [1, 2, 3, 3, 5]
        assert [s.trigger for s in got] == [
            "user_message",
            "request_ready",
            "first_chunk",
            "stream_done",
            "text_answer",
        ]
        assert got[2].at == T0 + timedelta(seconds=3)
        assert (await store.load("c")).current_state == "Idle"

    async def test_tool_attempt_and_outcome(self, store: Store) -> None:
        await store.create(empty_context("c"))
        calls = [
            ToolCallRequest(id="t1", tool_name="a", approval_status=ApprovalStatus.APPROVED),
            ToolCallRequest(id="t2", tool_name="b", approval_status=ApprovalStatus.APPROVED),
        ]
        ask = msg("ask", Role.ASSISTANT, tool_calls=calls, message_type=MessageType.TOOL_CALL)
        await store.commit(
            make_commit(
                "c",
                0,
                state="ExecutingTools",
                appended=[("main", ask)],
                progress=TurnProgress(iteration=1, attempt=1, started_call_ids=("t1", "t2")),
            )
        )
        attempt = await store.load("c")
        assert attempt.current_state == "ExecutingTools"
        assert attempt.progress.started_call_ids == ("t1", "t2")
        assert [c.id for c in attempt.open_tool_calls()] == ["t1", "t2"]
        results = [
            msg(
                f"r{i}",
                Role.TOOL,
                tool_result=ToolCallResult(request_id=cid, result={"i": i}, success=i == 1),
                message_type=MessageType.TOOL_RESULT,
            )
            for i, cid in ((1, "t1"), (2, "t2"))
        ]
        await store.commit(
            make_commit(
                "c",
                1,
                state="AwaitingLLMResponse",
                appended=[("main", r) for r in results],
                progress=TurnProgress(iteration=2, attempt=1),
            )
        )
        outcome = await store.load("c")
        assert outcome.progress.started_call_ids == ()
        assert outcome.progress.iteration == 2
        assert outcome.open_tool_calls() == []
        got = [n.message.tool_result for n in outcome.history()[1:]]
        assert [(r.request_id, r.success) for r in got if r] == [("t1", True), ("t2", False)]

    async def test_fork_appends_to_a_branch_created_in_the_same_commit(self, store: Store) -> None:
        await store.create(empty_context("c"))
        m1, m2 = msg("m1", text="hi"), msg("m2", Role.ASSISTANT, "hello", parent="m1")
        await store.commit(make_commit("c", 0, appended=[("main", m1), ("main", m2)]))
        alt = Branch(name="alt", message_ids=["m1"], parent_message_id="m1", forked_from="main")
        m3 = msg("m3", text="other question", parent="m1")
        await store.commit(
            make_commit("c", 1, branches=[alt], appended=[("alt", m3)], active_branch="alt")
        )
        loaded = await store.load("c")
        assert loaded.active_branch_name == "alt"
        assert loaded.branches["alt"].message_ids == ["m1", "m3"]
        assert loaded.branches["alt"].parent_message_id == "m1"
        assert loaded.branches["alt"].forked_from == "main"
        assert loaded.branches["main"].message_ids == ["m1", "m2"]
        assert [n.id for n in loaded.history()] == ["m1", "m3"]
        # and later appends go to the right one
        await store.commit(make_commit("c", 2, appended=[("main", msg("m4", text="x"))]))
        loaded = await store.load("c")
        assert loaded.branches["alt"].message_ids == ["m1", "m3"]
        assert loaded.branches["main"].message_ids == ["m1", "m2", "m4"]

    async def test_a_branch_stored_whole_replaces_the_old_one(self, store: Store) -> None:
        await store.create(empty_context("c"))
        nodes = [msg(f"m{i}", text=str(i)) for i in range(4)]
        await store.commit(make_commit("c", 0, appended=[("main", n) for n in nodes]))
        prompt = SystemPrompt(id="p2", content="new prompt")
        repointed = Branch(name="main", message_ids=["m0", "m1"], system_prompt=prompt)
        await store.commit(make_commit("c", 1, branches=[repointed]))
        loaded = await store.load("c")
        assert loaded.branches["main"] == repointed
        assert set(loaded.message_pool) == {"m0", "m1", "m2", "m3"}  # lossless pool
        await store.commit(make_commit("c", 2, appended=[("main", msg("m9", text="9"))]))
        assert (await store.load("c")).branches["main"].message_ids == ["m0", "m1", "m9"]

    async def test_event_seq_progress_active_branch_and_config_persist(self, store: Store) -> None:
        ctx = empty_context("c", branches={"main": Branch(name="main"), "b": Branch(name="b")})
        await store.create(ctx)
        config = ChatConfig(
            model_id="gpt-y", mode="plan", parameters={"top_p": 0.9}, workspace_path="/w"
        )
        progress = TurnProgress(
            iteration=3, attempt=2, retry_at=1234.5, last_error="HTTP 429", started_call_ids=()
        )
        await store.commit(
            make_commit(
                "c",
                0,
                state="TransientFailure",
                event_seq=77,
                progress=progress,
                active_branch="b",
                config=config,
                at=T0 + timedelta(hours=1),
            )
        )
        loaded = await store.load("c")
        assert loaded.event_seq == 77
        assert loaded.progress == progress
        assert loaded.active_branch_name == "b"
        assert loaded.config == config
        assert loaded.current_state == "TransientFailure"
        assert loaded.updated_at == T0 + timedelta(hours=1)
        assert loaded.created_at == T0
        # None means unchanged; the small fields always take the commit's value
        await store.commit(make_commit("c", 1, event_seq=80))
        loaded = await store.load("c")
        assert loaded.active_branch_name == "b"
        assert loaded.config == config
        assert loaded.event_seq == 80
        assert loaded.progress == TurnProgress()
        assert loaded.current_state == "Idle"
        assert loaded.version == 2

    # ------------------------------------------------------------------ listing, deleting

    async def test_list_ids_and_contexts(self, store: Store) -> None:
        for i, cid in enumerate(["zeta", "alpha", "mid"]):
            await store.create(
                empty_context(cid, at=T0 + timedelta(seconds=i), parent_id="alpha" if i else None)
            )
        await store.commit(
            make_commit("alpha", 0, state="AwaitingLLMResponse", at=T0 + timedelta(days=1))
        )
        await store.commit(make_commit("alpha", 1, state="PermanentFailure"))
        assert await store.list_ids() == ["zeta", "alpha", "mid"]  # oldest first
        summaries = await store.list_contexts()
        assert [s.id for s in summaries] == ["zeta", "alpha", "mid"]
        by_id = {s.id: s for s in summaries}
        assert by_id["alpha"].state == "PermanentFailure"
        assert by_id["alpha"].version == 2
        assert by_id["alpha"].updated_at == T0 + timedelta(seconds=2)
        assert by_id["zeta"] == ContextSummary("zeta", "Idle", 0, T0, None, None, "scripted")
        assert by_id["mid"].parent_id == "alpha"

    async def test_delete(self, store: Store) -> None:
        await store.create(rich_context("gone"))
        await store.create(empty_context("kept"))
        await store.commit(
            make_commit("gone", 7, steps=[("Idle", "user_message", "ProcessingUserMessage")])
        )
        await store.delete("gone")
        with pytest.raises(ContextNotFound):
            await store.load("gone")
        with pytest.raises(ContextNotFound):
            await store.steps("gone")
        with pytest.raises(ContextNotFound):
            await store.commit(make_commit("gone", 8))
        with pytest.raises(ContextNotFound):
            await store.delete("gone")
        assert await store.list_ids() == ["kept"]
        assert [s.id for s in await store.list_contexts()] == ["kept"]
        assert await store.load("kept") == empty_context("kept")

    async def test_delete_unknown_id(self, store: Store) -> None:
        with pytest.raises(ContextNotFound) as info:
            await store.delete("never-was")
        assert "never-was" in str(info.value)

    async def test_an_id_created_again_after_delete_starts_empty(self, store: Store) -> None:
        await store.create(rich_context("again"))
        await store.commit(
            make_commit(
                "again",
                7,
                steps=[("Idle", "user_message", "ProcessingUserMessage")],
                appended=[("main", msg("late", text="late"))],
            )
        )
        await store.delete("again")
        fresh = empty_context("again")
        await store.create(fresh)
        assert await store.load("again") == fresh
        assert await store.steps("again") == []
        await store.commit(make_commit("again", 0, appended=[("main", msg("m1", text="1"))]))
        loaded = await store.load("again")
        assert loaded.branches["main"].message_ids == ["m1"]
        assert set(loaded.message_pool) == {"m1"}

    # ------------------------------------------------------------------ refused commits

    async def test_stale_version_is_a_conflict_and_stores_nothing(self, store: Store) -> None:
        await store.create(rich_context("c"))
        await store.commit(
            make_commit(
                "c",
                7,
                state="ProcessingUserMessage",
                steps=[("AwaitingToolApproval", "user_message", "ProcessingUserMessage")],
                appended=[("alt", msg("ok", text="accepted"))],
            )
        )
        before = await snapshot(store, "c")
        stale = make_commit(
            "c",
            7,  # the store is at 8
            state="PermanentFailure",
            steps=[("AwaitingToolApproval", "fail", "PermanentFailure")],
            appended=[("main", msg("lost", text="never stored")), ("alt", msg("lost2"))],
            replaced=[msg("m1", text="rewritten")],
            branches=[Branch(name="new-branch")],
            active_branch="main",
            config=ChatConfig(model_id="other"),
            progress=TurnProgress(iteration=99),
            event_seq=999,
        )
        with pytest.raises(VersionConflict) as info:
            await store.commit(stale)
        assert (info.value.expected, info.value.found) == (7, 8)
        assert info.value.context_id == "c"
        after = await snapshot(store, "c")
        assert after == before
        ctx = after[0]
        assert "lost" not in ctx.message_pool and "lost2" not in ctx.message_pool
        assert "new-branch" not in ctx.branches
        assert ctx.message_pool["m1"].message.text != "rewritten"
        assert ctx.version == 8 and ctx.event_seq == 80

    async def test_future_version_is_a_conflict(self, store: Store) -> None:
        await store.create(empty_context("c"))
        before = await snapshot(store, "c")
        with pytest.raises(VersionConflict) as info:
            await store.commit(make_commit("c", 5, appended=[("main", msg("x"))]))
        assert (info.value.expected, info.value.found) == (5, 0)
        assert await snapshot(store, "c") == before

    async def test_commit_to_unknown_context(self, store: Store) -> None:
        with pytest.raises(ContextNotFound):
            await store.commit(make_commit("ghost", 0))
        assert await store.list_ids() == []

    async def test_append_to_unknown_branch_stores_nothing(self, store: Store) -> None:
        await store.create(empty_context("c"))
        await store.commit(make_commit("c", 0, appended=[("main", msg("a", text="a"))]))
        before = await snapshot(store, "c")
        bad = make_commit(
            "c",
            1,
            state="PermanentFailure",
            steps=[("Idle", "x", "PermanentFailure")],
            appended=[("main", msg("b", text="b")), ("nowhere", msg("c", text="c"))],
        )
        with pytest.raises(StoreError) as info:
            await store.commit(bad)
        assert not isinstance(info.value, VersionConflict)
        assert "nowhere" in str(info.value)
        assert await snapshot(store, "c") == before

    async def test_replacing_an_unknown_message_stores_nothing(self, store: Store) -> None:
        await store.create(empty_context("c"))
        before = await snapshot(store, "c")
        bad = make_commit(
            "c",
            0,
            state="ProcessingUserMessage",
            steps=[("Idle", "user_message", "ProcessingUserMessage")],
            appended=[("main", msg("a", text="a"))],
            replaced=[msg("zz", text="not stored")],
        )
        with pytest.raises(StoreError) as info:
            await store.commit(bad)
        assert "zz" in str(info.value)
        assert await snapshot(store, "c") == before
        # the store is still usable and the same version commits
        await store.commit(make_commit("c", 0, appended=[("main", msg("a", text="a"))]))
        assert (await store.load("c")).branches["main"].message_ids == ["a"]

    async def test_concurrent_commits_on_one_store_object(self, store: Store) -> None:
        await store.create(empty_context("c"))
        outcomes = await race(
            [
                (store, make_commit("c", 0, appended=[("main", msg(f"w{i}", text=str(i)))]))
                for i in range(4)
            ]
        )
        assert_one_winner(outcomes)
        loaded = await store.load("c")
        assert loaded.version == 1
        assert len(loaded.branches["main"].message_ids) == 1

    # ------------------------------------------------------------------ at rest

    async def test_persists_across_reopen(self, store: Store, tmp_path: Path) -> None:
        self.need_persistence()
        ctx = rich_context("p")
        await store.create(ctx)
        await store.create(empty_context("q", at=T0 + timedelta(seconds=1)))
        c1 = make_commit(
            "p",
            7,
            state="ExecutingTools",
            steps=[("AwaitingToolApproval", "approvals_resolved", "ExecutingTools")],
            appended=[("alt", msg("m7", Role.USER, "more", parent="m6"))],
            replaced=[msg("m4", Role.TOOL, "replaced", parent="m3")],
            branches=[Branch(name="third", message_ids=["m1"], forked_from="main")],
            active_branch="third",
            config=ChatConfig(model_id="reopened"),
            progress=TurnProgress(iteration=1, started_call_ids=("call-a",)),
            event_seq=50,
        )
        await store.commit(c1)
        expected = await snapshot(store, "p")
        ids = await store.list_ids()
        await store.aclose()
        await store.aclose()  # closing twice is harmless
        other = await self.open_again(store, tmp_path)
        assert await snapshot(other, "p") == expected
        assert await other.list_ids() == ids == ["p", "q"]
        assert expected[0].branches["third"].message_ids == ["m1"]
        assert expected[0].message_pool["m4"].message.text == "replaced"
        assert expected[1] == c1.steps
        # the reopened store takes the next commit
        await other.commit(make_commit("p", 8, appended=[("third", msg("m8", text="8"))]))
        assert (await other.load("p")).branches["third"].message_ids == ["m1", "m8"]

    async def test_two_store_objects_race_one_wins(self, store: Store, tmp_path: Path) -> None:
        other = await self.open_again(store, tmp_path)
        await store.create(empty_context("c"))
        for v in range(5):
            outcomes = await race(
                [
                    (
                        s,
                        make_commit(
                            "c",
                            v,
                            state=("ProcessingUserMessage", "Idle")[v % 2],  # a known state
                            steps=[("Idle", f"by{i}", "ProcessingUserMessage")],
                            appended=[("main", msg(f"v{v}-by{i}", text=f"{v}/{i}"))],
                        ),
                    )
                    for i, s in enumerate((store, other))
                ]
            )
            winner = assert_one_winner(outcomes)
            for s in (store, other):
                loaded = await s.load("c")
                assert loaded.version == v + 1
                assert loaded.branches["main"].message_ids[-1] == f"v{v}-by{winner}"
                assert f"v{v}-by{1 - winner}" not in loaded.message_pool
        steps = await other.steps("c")
        assert len(steps) == 5
        assert await store.steps("c") == steps

    async def test_writes_of_one_object_are_seen_by_the_other(
        self, store: Store, tmp_path: Path
    ) -> None:
        other = await self.open_again(store, tmp_path)
        await store.create(empty_context("c"))
        assert await other.list_ids() == ["c"]
        await other.commit(make_commit("c", 0, appended=[("main", msg("a", text="from other"))]))
        loaded = await store.load("c")
        assert loaded.version == 1
        assert loaded.history()[0].message.text == "from other"
        with pytest.raises(VersionConflict):
            await store.commit(make_commit("c", 0))
        await other.delete("c")
        with pytest.raises(ContextNotFound):
            await store.load("c")

    # ------------------------------------------------------------------ schema versions

    async def test_newer_context_record_is_refused(self, store: Store, tmp_path: Path) -> None:
        self.need_persistence()
        await store.create(rich_context("s"))
        where = await resolve(self.set_schema_version(store, tmp_path, "s", SCHEMA_VERSION + 1))
        other = await self.open_again(store, tmp_path)
        with pytest.raises(SchemaVersionError) as info:
            await other.load("s")
        assert info.value.found == SCHEMA_VERSION + 1
        assert info.value.supported == SCHEMA_VERSION
        assert where in str(info.value)
        assert where in info.value.where
        # a write onto it is refused too, and stores nothing
        with pytest.raises(SchemaVersionError):
            await other.commit(make_commit("s", 7, appended=[("main", msg("new"))]))
        await resolve(self.set_schema_version(store, tmp_path, "s", SCHEMA_VERSION))
        third = await self.open_again(store, tmp_path)
        assert await third.load("s") == rich_context("s")

    async def test_newer_message_record_is_refused(self, store: Store, tmp_path: Path) -> None:
        self.need_persistence()
        await store.create(rich_context("s"))
        where = await resolve(
            self.set_schema_version(store, tmp_path, "s", SCHEMA_VERSION + 5, message_id="m2")
        )
        other = await self.open_again(store, tmp_path)
        with pytest.raises(SchemaVersionError) as info:
            await other.load("s")
        assert info.value.found == SCHEMA_VERSION + 5
        assert where in str(info.value)

    async def test_unknown_old_schema_version_is_a_store_error(
        self, store: Store, tmp_path: Path
    ) -> None:
        self.need_persistence()
        await store.create(rich_context("s"))
        where = await resolve(self.set_schema_version(store, tmp_path, "s", 0))
        other = await self.open_again(store, tmp_path)
        with pytest.raises(StoreError) as info:
            await other.load("s")
        assert not isinstance(info.value, SchemaVersionError)
        assert where in str(info.value)

    # --------------------------------------------------------------------------- helpers

    # ------------------------------------------------------------------ leases

    async def test_acquire_gives_a_lease_and_the_store_tells_it(self, store: Store) -> None:
        await store.create(empty_context("c"))
        assert await store.lease("c") is None
        lease = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert lease == Lease("c", "engine-a", 1, NOW + 30.0)
        assert await store.lease("c") == lease
        assert not lease.expired(NOW + 29.9) and lease.expired(NOW + 30.0)

    async def test_acquire_on_an_unknown_context(self, store: Store) -> None:
        with pytest.raises(ContextNotFound):
            await store.acquire_lease("nope", "engine-a", 30.0, now=NOW)

    async def test_another_owner_cannot_acquire_an_unexpired_lease(self, store: Store) -> None:
        await store.create(empty_context("c"))
        held = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert await store.acquire_lease("c", "engine-b", 30.0, now=NOW + 29.0) is None
        assert await store.acquire_lease("c", "engine-b", 30.0, now=NOW, take_over=7) is None
        assert await store.lease("c") == held

    async def test_takeover_after_expiry_gets_a_larger_token(self, store: Store) -> None:
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert a is not None
        b = await store.acquire_lease("c", "engine-b", 10.0, now=NOW + 30.0)
        assert b is not None
        assert b.owner == "engine-b" and b.token > a.token and b.expires_at == NOW + 40.0
        assert await store.lease("c") == b
        with pytest.raises(LeaseLost) as info:
            await store.renew_lease(a, 30.0, now=NOW + 31.0)
        assert (info.value.token, info.value.current) == (a.token, b.token)

    async def test_take_over_names_the_lease_of_a_gone_owner(self, store: Store) -> None:
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert a is not None
        b = await store.acquire_lease("c", "engine-b", 30.0, now=NOW + 1.0, take_over=a.token)
        assert b is not None and b.token == a.token + 1

    async def test_the_same_owner_acquires_again_with_a_new_token(self, store: Store) -> None:
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        again = await store.acquire_lease("c", "engine-a", 30.0, now=NOW + 1.0)
        assert a is not None and again is not None and again.token == a.token + 1

    async def test_renew_extends_the_lease(self, store: Store) -> None:
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert a is not None
        renewed = await store.renew_lease(a, 30.0, now=NOW + 20.0)
        assert renewed == Lease("c", "engine-a", a.token, NOW + 50.0)
        assert await store.lease("c") == renewed
        # still held at NOW + 40 (past the first expiry)
        assert await store.acquire_lease("c", "engine-b", 30.0, now=NOW + 40.0) is None

    async def test_release_lets_another_owner_in(self, store: Store) -> None:
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert a is not None
        await store.release_lease(a)
        assert await store.lease("c") is None
        with pytest.raises(LeaseLost):
            await store.renew_lease(a, 30.0, now=NOW + 1.0)
        b = await store.acquire_lease("c", "engine-b", 30.0, now=NOW + 1.0)
        assert b is not None and b.token > a.token
        # releasing the old lease again does not release the new one
        await store.release_lease(a)
        assert await store.lease("c") == b

    async def test_a_stale_owners_commit_is_refused(self, store: Store) -> None:
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert a is not None
        first = make_commit("c", 0, appended=[("main", msg("m1", text="by a"))])
        first.lease_token = a.token
        await store.commit(first)
        b = await store.acquire_lease("c", "engine-b", 30.0, now=NOW + 31.0)
        assert b is not None
        before = await snapshot(store, "c")
        stale = make_commit(
            "c",
            1,
            state="ProcessingUserMessage",
            steps=[("Idle", "user_message", "ProcessingUserMessage")],
            appended=[("main", msg("m2", text="by a, too late"))],
        )
        stale.lease_token = a.token
        with pytest.raises(LeaseLost) as info:
            await store.commit(stale)
        assert info.value.context_id == "c"
        assert (info.value.token, info.value.current) == (a.token, b.token)
        assert await snapshot(store, "c") == before
        # the new owner's commit goes through
        fresh = make_commit("c", 1, appended=[("main", msg("m3", text="by b"))])
        fresh.lease_token = b.token
        await store.commit(fresh)
        assert (await store.load("c")).branches["main"].message_ids == ["m1", "m3"]

    async def test_a_commit_naming_a_token_needs_a_lease(self, store: Store) -> None:
        await store.create(empty_context("c"))
        fenced = make_commit("c", 0, appended=[("main", msg("m1"))])
        fenced.lease_token = 1
        with pytest.raises(LeaseLost) as info:
            await store.commit(fenced)
        assert info.value.current is None
        assert (await store.load("c")).version == 0

    async def test_leases_are_shared_by_store_objects(self, store: Store, tmp_path: Path) -> None:
        other = await self.open_again(store, tmp_path)
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert a is not None
        assert await other.lease("c") == a
        assert await other.acquire_lease("c", "engine-b", 30.0, now=NOW + 1.0) is None
        b = await other.acquire_lease("c", "engine-b", 30.0, now=NOW + 30.0)
        assert b is not None and b.token > a.token
        stale = make_commit("c", 0, appended=[("main", msg("m1"))])
        stale.lease_token = a.token
        with pytest.raises(LeaseLost):
            await store.commit(stale)

    async def test_a_commit_can_release_its_lease(self, store: Store) -> None:
        assert getattr(store, "leases_in_commits", False) is True
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert a is not None
        last = make_commit("c", 0, appended=[("main", msg("m1"))])
        last.lease_token, last.release_lease = a.token, True
        await store.commit(last)
        assert (await store.load("c")).version == 1
        assert await store.lease("c") is None  # released with the commit
        with pytest.raises(LeaseLost):
            await store.renew_lease(a, 30.0, now=NOW + 1.0)
        b = await store.acquire_lease("c", "engine-b", 30.0, now=NOW + 1.0)
        assert b is not None and b.token == a.token + 1

    async def test_a_refused_commit_releases_nothing(self, store: Store) -> None:
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert a is not None
        wrong = make_commit("c", 5, appended=[("main", msg("m1"))])  # version conflict
        wrong.lease_token, wrong.release_lease = a.token, True
        with pytest.raises(VersionConflict):
            await store.commit(wrong)
        assert await store.lease("c") == a
        b = await store.acquire_lease("c", "engine-b", 30.0, now=NOW + 31.0)
        assert b is not None
        stale = make_commit("c", 0, appended=[("main", msg("m1"))])
        stale.lease_token, stale.release_lease = a.token, True
        with pytest.raises(LeaseLost):
            await store.commit(stale)
        assert await store.lease("c") == b  # the new owner's lease is not touched

    async def test_a_commit_can_take_the_lease(self, store: Store) -> None:
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert a is not None
        await store.release_lease(a)
        take = Lease("c", "engine-a", a.token + 1, NOW + 40.0)
        first = make_commit("c", 0, appended=[("main", msg("m1"))])
        first.lease_token, first.take_lease = take.token, take
        await store.commit(first)
        assert await store.lease("c") == take
        assert await store.acquire_lease("c", "engine-b", 30.0, now=NOW + 10.0) is None
        # the next commit is fenced by the token taken; the last one releases it
        last = make_commit("c", 1, appended=[("main", msg("m2"))])
        last.lease_token, last.release_lease = take.token, True
        await store.commit(last)
        assert await store.lease("c") is None
        b = await store.acquire_lease("c", "engine-b", 30.0, now=NOW + 10.0)
        assert b is not None and b.token == take.token + 1

    async def test_a_commit_takes_no_lease_another_owner_had(self, store: Store) -> None:
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert a is not None
        await store.release_lease(a)
        b = await store.acquire_lease("c", "engine-b", 30.0, now=NOW + 1.0)
        assert b is not None
        before = await snapshot(store, "c")
        for held in (True, False):  # engine-b holds it, then released it
            if not held:
                await store.release_lease(b)
            late = make_commit("c", 0, appended=[("main", msg("m1"))])
            take = Lease("c", "engine-a", a.token + 1, NOW + 40.0)  # b has that token
            late.lease_token, late.take_lease = take.token, take
            with pytest.raises(LeaseLost) as info:
                await store.commit(late)
            assert (info.value.token, info.value.current) == (take.token, b.token)
            assert await snapshot(store, "c") == before
        # nor one whose token just before is held by another owner
        c = await store.acquire_lease("c", "engine-c", 30.0, now=NOW + 2.0)
        assert c is not None
        over = make_commit("c", 0, appended=[("main", msg("m1"))])
        take = Lease("c", "engine-a", c.token + 1, NOW + 40.0)
        over.lease_token, over.take_lease = take.token, take
        with pytest.raises(LeaseLost):
            await store.commit(over)
        assert await store.lease("c") == c
        assert await snapshot(store, "c") == before

    async def test_a_commit_takes_and_releases_at_once(self, store: Store) -> None:
        await store.create(empty_context("c"))
        take = Lease("c", "engine-a", 1, NOW + 30.0)  # no lease yet: token 1
        only = make_commit("c", 0, appended=[("main", msg("m1"))])
        only.lease_token, only.take_lease, only.release_lease = 1, take, True
        await store.commit(only)
        assert (await store.load("c")).version == 1
        assert await store.lease("c") is None
        b = await store.acquire_lease("c", "engine-b", 30.0, now=NOW)
        assert b is not None and b.token == 2

    async def test_delete_removes_the_lease(self, store: Store) -> None:
        await store.create(empty_context("c"))
        a = await store.acquire_lease("c", "engine-a", 30.0, now=NOW)
        assert a is not None
        await store.delete("c")
        await store.create(empty_context("c"))
        assert await store.lease("c") is None
        again = await store.acquire_lease("c", "engine-b", 30.0, now=NOW + 1.0)
        assert again == Lease("c", "engine-b", 1, NOW + 31.0)  # a new context, new tokens

    # --- load_messages -----------------------------------------------------------------

    async def test_load_messages_by_id_in_the_order_asked(self, store: Store) -> None:
        await store.create(empty_context("c"))
        nodes = [msg(f"m{i}", text=f"text {i}") for i in range(1200)]
        await store.commit(make_commit("c", 0, appended=[("main", n) for n in nodes]))
        got = await store.load_messages("c", ["m7", "m1100", "m0", "m7"])
        assert [n.id for n in got] == ["m7", "m1100", "m0", "m7"]
        assert got[1] == nodes[1100]
        many = await store.load_messages("c", [f"m{i}" for i in range(1199, -1, -1)])
        assert [n.message.text for n in many] == [f"text {i}" for i in range(1199, -1, -1)]
        assert await store.load_messages("c", []) == []

    async def test_load_messages_refuses_unknown_ids_and_contexts(self, store: Store) -> None:
        await store.create(empty_context("c"))
        await store.commit(make_commit("c", 0, appended=[("main", msg("m1"))]))
        with pytest.raises(StoreError, match="'nope'"):
            await store.load_messages("c", ["m1", "nope"])
        with pytest.raises(ContextNotFound):
            await store.load_messages("missing", ["m1"])


async def race(attempts: Sequence[tuple[Store, Commit]]) -> list[BaseException | None]:
    """Run the commits concurrently; the outcome of each (None: it was stored)."""
    outcomes: list[BaseException | None] = [None] * len(attempts)

    async def one(i: int, s: Store, c: Commit) -> None:
        try:
            await s.commit(c)
        except StoreError as exc:
            outcomes[i] = exc

    async with anyio.create_task_group() as tg:
        for i, (s, c) in enumerate(attempts):
            tg.start_soon(one, i, s, c)
    return outcomes


def assert_one_winner(outcomes: Sequence[BaseException | None]) -> int:
    """Exactly one commit was stored and every other got a VersionConflict; the winner."""
    winners = [i for i, o in enumerate(outcomes) if o is None]
    assert len(winners) == 1, outcomes
    losers = [o for o in outcomes if o is not None]
    assert all(isinstance(o, VersionConflict) for o in losers), losers
    return winners[0]
