"""The commit-kind crash matrix: kill a process between every two steps of each
kind of change, and check what a fresh process finds.

For each store (``files``: the file store's file operations; ``files-tail``:
the same with ``commits.jsonl`` used at any size, so that most commits append
a record to it and every few write the whole files again and empty it, the
layout of long conversations; ``sqlite``: the
SQL statements that change the database; ``postgres``: the statements other
than plain reads, and each transaction's ``COMMIT``, on a PostgreSQL server
named by ``$TURNFSM_CRASH_PG``, a URL whose database may make others, each
case on a database copied from a template; ``python tests/crash/matrix.py
--store postgres`` starts a throwaway server when it is not set) and each kind of change (create,
send, approve, deny, cancel, fork, switch, config, prompts, answer, delete,
and ``mcp``: approving a call of an MCP server's tool):

1. a clean run of the change, from a prepared store, records the state after
   each commit and where each commit starts and ends in the count of steps;
2. for each ``n`` from 0 until the change completes, a process makes the change
   again from the same prepared store and is killed (``os._exit``) just before
   its step ``n``;
3. a fresh process opens the store and checks that the context is in exactly
   the state before or after the commit the kill fell in (its messages, fields
   and audit steps), that ``list_contexts``, ``load`` and ``delete`` agree on
   whether it exists, and that a fresh engine brings it to rest (resuming the
   turn, approving what waits for approval).

Every process is forked from a server that has imported turnfsm once, so a
case costs milliseconds, not an interpreter start. Stores run without fsync: a
killed process loses nothing the kernel already has, so fsync changes nothing
here (it matters for power loss, which this cannot simulate).

    python tests/crash/matrix.py                     # the full matrix, both stores
    python tests/crash/matrix.py --store files --kind approve
    python tests/crash/matrix.py --store files-torn  # the control: must FAIL
    python tests/crash/matrix.py --store postgres-torn --kind approve  # must FAIL
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import re
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from turnfsm import Engine, ask_user, records, subtask, tool
from turnfsm.adapters.llm import LLMResponse, ToolCallData
from turnfsm.engine import DEFAULT_SUMMARY_PROMPT
from turnfsm.errors import ContextNotFound
from turnfsm.storage import FilesStore, SQLiteStore, Store
from turnfsm.storage import _files as files_module
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

FAULT_SERVER = [
    sys.executable,
    str(Path(__file__).resolve().parents[1] / "mcp_tools" / "fault_server.py"),
]
NOTES = "notes.txt"

SUB_KINDS = ("spawn", "finish", "subtask_send", "subtask_approve")
"""Sub-contexts: several commits on two contexts (the parent is ``CID``).
``subtask_send``: a message whose answer calls a sub-task tool, whose child
waits for approval (the parent takes ``subtask_waits``); ``subtask_approve``:
approving that child's call on the parent, so the child and then the parent's
call complete."""
MCP_KINDS = ("mcp",)
"""Approving a call of a tool of an MCP server (the fault server of
tests/mcp_tools, over stdio) that is not idempotent and leaves a mark each time
it runs (a line in ``notes.txt`` of the case's folder): besides the store, the
check counts the marks, and a call the kill left started with no recorded
outcome must not run again without a human (``outcome_unknown``)."""
MCP_CONTROL = "mcp-rerun"
"""The control of the MCP kind: the same change with the tool declared
idempotent (as trusting a server's ``idempotentHint`` would), so a resumed
engine runs a started call again by itself. The matrix must see it."""
KINDS = (
    "create",
    "send",
    "approve",
    "deny",
    "cancel",
    "fork",
    "switch",
    "config",
    "prompts",
    "answer",
    "delete",
    *SUB_KINDS,
    *MCP_KINDS,
)
STORES = ("files", "files-tail", "sqlite")
"""The stores of the default run; ``postgres`` needs a server (``PG_ENV``)."""
PG_ENV = "TURNFSM_CRASH_PG"
PG_URL_FILE = "postgres.url"
CID = "c"
RESTING = ("Idle",)


class TornFilesStore(FilesStore):
    """The control: a file store that applies a commit's files without writing
    the journal first (as the store once did), so a kill between two files
    leaves half a commit. The matrix must catch it."""

    def _write_journal(self, folder: Path, journal: bytes) -> None:
        return None


class TailFilesStore(FilesStore):
    """The files store of a long conversation, on the matrix's short ones:
    every commit that fits appends its record to ``commits.jsonl``, which may
    grow to three times the whole files before a commit writes them again."""

    tail_from = 0
    tail_limit = 3.0


def open_test_store(kind: str, workdir: Path) -> Store:
    if kind == "files":
        return FilesStore(workdir / "files", fsync=False)
    if kind == "files-tail":
        return TailFilesStore(workdir / "files", fsync=False)
    if kind == "files-torn":
        return TornFilesStore(workdir / "files", fsync=False)
    if kind in ("postgres", "postgres-torn"):
        from turnfsm.storage import PostgresStore

        url = (workdir / PG_URL_FILE).read_text()
        if kind == "postgres-torn":
            return torn_postgres(PostgresStore)(url, max_size=2)  # type: ignore[no-any-return]
        return PostgresStore(url, max_size=2)  # type: ignore[no-any-return]
    return SQLiteStore(workdir / "store.db", synchronous="OFF")


def torn_postgres(base: type) -> type:
    """The PostgreSQL control: a store whose writes run without a transaction
    (each statement commits on its own), so a kill between two statements of a
    commit leaves half of it. The matrix must catch it."""

    class TornPostgresStore(base):  # type: ignore[valid-type,misc]
        async def _run(self, fn: Any, *, transaction: bool = False) -> Any:
            return await super()._run(fn)

        async def commit(self, commit: Any) -> None:
            # the store's commit is one statement (atomic by itself); the torn
            # one runs the statements a missed commit falls back to, each on
            # its own
            await self._run(lambda conn: self._commit_tx(conn, commit))

    return TornPostgresStore


def _pg_admin(statement: str) -> None:
    import psycopg

    with psycopg.connect(os.environ[PG_ENV], autocommit=True) as conn:
        conn.execute(statement.encode())


_DATABASES = itertools.count()


def pg_database(workdir: Path, template: Path | None = None) -> None:
    """A database for the case in ``workdir`` (empty, or a copy of the one of
    ``template``): its URL is written to ``workdir / PG_URL_FILE``."""
    base = os.environ[PG_ENV]
    name = f"m{os.getpid()}_{next(_DATABASES)}"
    source = ""
    if template is not None:
        source = " TEMPLATE " + (template / PG_URL_FILE).read_text().rsplit("/", 1)[1]
    _pg_admin(f"CREATE DATABASE {name}{source}")
    (workdir / PG_URL_FILE).write_text(base.rsplit("/", 1)[0] + "/" + name)


# ---------------------------------------------------------------------- the conversation


@tool(approval="required")
def book(city: str) -> dict[str, Any]:
    """Books a trip; a human approves each call."""
    return {"booked": city}


research = subtask("research", "Research in a helper conversation.", tools=["book"])


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


def answer(request: Any) -> Any:
    messages = request.messages
    last = messages[-1]
    if last["role"] == "tool":
        return {"text": "Booked."}
    turn = sum(1 for m in messages if m["role"] == "user")
    if _text(last) == DEFAULT_SUMMARY_PROMPT:  # finish's summary request
        return {"text": f"Summary {turn}."}
    if "research" in _text(last):
        return LLMResponse(
            tool_calls=(ToolCallData(f"research-{turn}", "research", {"task": "book Oslo"}),)
        )
    if "ask" in _text(last):
        question = {"question": "Which city?", "choices": ["Oslo", "Rome"]}
        return LLMResponse(tool_calls=(ToolCallData(f"q-{turn}", "ask_user", question),))
    if "note" in _text(last):  # an MCP tool (MCP_KINDS)
        return LLMResponse(
            tool_calls=(ToolCallData(f"call-{turn}", "write_note", {"text": "Oslo"}),)
        )
    if "book" in _text(last):
        return LLMResponse(tool_calls=(ToolCallData(f"call-{turn}", "book", {"city": "Oslo"}),))
    return {"text": f"Answer {turn}."}


def engine_for(
    store: Store, prefix: str, notes: Path | None = None, *, rerun: bool = False
) -> Engine:
    """The engine of every process; with ``notes``, the fault MCP server too
    (its ``write_note`` appends to that file; ``rerun``: declared idempotent)."""
    toolsets = []
    if notes is not None:
        from turnfsm.tools.mcp import MCPServer

        env = {"FAULT_SERVER_LOG": str(notes)}
        toolsets.append(MCPServer.stdio(FAULT_SERVER, env=env, timeout=30, idempotent=rerun))
    return Engine(
        llm=ScriptedLLM(answer, record=False),
        tools=[book, ask_user, research],
        store=store,
        clock=FakeClock(),
        ids=SequentialIds(prefix),
        toolsets=toolsets,
    )


def notes_of(kind: str, workdir: Path) -> Path | None:
    """The file the MCP tool marks, for the MCP kinds."""
    return workdir / NOTES if kind in (*MCP_KINDS, MCP_CONTROL) else None


def marks(notes: Path | None) -> int:
    """How many times the MCP tool ran."""
    if notes is None or not notes.exists():
        return 0
    return len(notes.read_text().splitlines())


async def prepare(store_kind: str, kind: str, workdir: Path) -> None:
    """The store as it is before the change ``kind``."""
    store = open_test_store(store_kind, workdir)
    await store.list_ids()  # a server store makes its tables here, not in the change
    async with engine_for(store, "pre-", notes_of(kind, workdir)) as engine:
        if kind == "create":
            return
        await engine.create_context(context_id=CID, system_prompt="Be brief.")
        await engine.send(CID, "hello")
        if kind in ("approve", "deny", "cancel"):
            turn = await engine.send(CID, "please book Oslo")
            assert str(turn.state) == "AwaitingToolApproval", turn.state
        if kind in (*MCP_KINDS, MCP_CONTROL):
            turn = await engine.send(CID, "please note Oslo")
            assert [c.id for c in turn.pending_tool_calls] == ["call-2"], turn
        if kind == "switch":
            await engine.fork(CID, "alt", 0)
        if kind == "finish":
            await engine.spawn(CID, "what is the answer?", title="helper")
        if kind == "subtask_approve":
            turn = await engine.send(CID, "please research Oslo")
            assert [c.id for c in turn.pending_tool_calls] == ["call-1"], turn
        if kind == "answer":
            turn = await engine.send(CID, "please ask me")
            assert turn.questions, turn


async def change(kind: str, store: Store, notes: Path | None = None) -> None:
    """The change itself (one or more commits)."""
    async with engine_for(store, "op-", notes, rerun=kind == MCP_CONTROL) as engine:
        if kind == "create":
            await engine.create_context(context_id=CID, system_prompt="Be brief.")
        elif kind == "send":
            await engine.send(CID, "how are you?")
        elif kind in ("approve", *MCP_KINDS, MCP_CONTROL):
            await engine.approve(CID, "call-2")
        elif kind == "deny":
            await engine.deny(CID, "call-2", "not today")
        elif kind == "cancel":
            await engine.cancel(CID)
        elif kind == "fork":
            await engine.fork(CID, "alt", 0)
        elif kind == "switch":
            await engine.switch_branch(CID, "main")
        elif kind == "config":
            await engine.update_config(CID, model="m2", title="A trip", parameters={"n": 1})
        elif kind == "prompts":
            await engine.set_branch_prompts(CID, "main", system_prompt="Be long.", user_prompt="Hi")
        elif kind == "answer":
            await engine.answer(CID, "q-2", "Rome")
        elif kind == "delete":
            await store.delete(CID)
        elif kind == "spawn":
            await engine.spawn(CID, "what is the answer?", title="helper")
        elif kind == "finish":
            [child] = await engine.children(CID)
            await engine.finish(child.context_id)  # the LLM summary
        elif kind == "subtask_send":
            await engine.send(CID, "please research Oslo")
        elif kind == "subtask_approve":
            await engine.approve(CID, "call-1")  # the child's call, surfaced on CID
        else:
            raise ValueError(kind)


async def snapshot(store: Store) -> str | None:
    """The context as stored, with its audit steps (None: it does not exist)."""
    try:
        ctx = await store.load(CID)
    except ContextNotFound:
        return None
    steps = [
        (s.version, s.from_state, s.trigger, s.to_state, s.detail) for s in await store.steps(CID)
    ]
    return json.dumps([records.to_python(ctx), steps], sort_keys=True)


# ---------------------------------------------------------------------- kill points


class Steps:
    """Counts the steps that change the disk; calls ``at_step(n)`` before step n."""

    def __init__(self, at_step: Callable[[int], None] | None = None) -> None:
        self.count = 0
        self.labels: list[str] = []
        self.at_step = at_step
        self.paused = False

    def __call__(self, label: str) -> None:
        if self.paused:
            return
        if self.at_step is not None:
            self.at_step(self.count)
        self.labels.append(label)
        self.count += 1

    def install(self, store: Store) -> None:
        inner = getattr(store, "inner", store)
        if type(inner).__name__ in ("PostgresStore", "TornPostgresStore"):
            _count_pg_statements(self)
        elif isinstance(inner, FilesStore):
            files_module.op_hook = lambda kind, path: self(f"{kind} {path.name}")
        else:
            conn = inner._conn  # type: ignore[attr-defined]
            assert isinstance(conn, sqlite3.Connection)

            def trace(sql: str) -> None:
                head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
                if head not in ("SELECT", "PRAGMA", "BEGIN"):
                    self(sql.strip()[:40])

            conn.set_trace_callback(trace)


def _count_pg_statements(steps: Steps) -> None:
    """Call ``steps`` before every statement psycopg sends that is not a plain
    read (a ``SELECT`` of one of the store's functions, ``turnfsm_commit``,
    writes), and before each transaction's ``COMMIT`` (psycopg's classes are
    patched: this runs in a process of its own)."""
    import psycopg

    def label(query: Any) -> str | None:
        text = query.decode() if isinstance(query, bytes) else str(query)
        if not text.strip():
            return None  # the pool's check that a connection is alive
        head = text.lstrip().split(None, 1)[0].upper()
        upper = text.upper()
        writes = "FOR UPDATE" in upper or re.search(r"\bTURNFSM_\w+\s*\(", upper) is not None
        if head == "SET" or (head == "SELECT" and not writes):
            return None  # a plain read, or a read transaction's isolation level
        return " ".join(text.split())[:40]

    execute = psycopg.AsyncCursor.execute
    executemany = psycopg.AsyncCursor.executemany
    aexit = psycopg.AsyncTransaction.__aexit__

    async def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        what = label(query)
        if what is not None:
            steps(what)
        return await execute(self, query, *args, **kwargs)

    async def counted_executemany(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        what = label(query)
        if what is not None:
            steps(what)
        return await executemany(self, query, *args, **kwargs)

    async def counted_aexit(self: Any, exc_type: Any, *args: Any) -> Any:
        if exc_type is None:
            steps("COMMIT")
        return await aexit(self, exc_type, *args)

    psycopg.AsyncCursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.AsyncCursor.executemany = counted_executemany  # type: ignore[method-assign]
    psycopg.AsyncTransaction.__aexit__ = counted_aexit  # type: ignore[method-assign]


class Recording:
    """A store wrapper that notes, for each commit, the step count at its start
    and end and the state it left (read by a second store object)."""

    def __init__(self, inner: Store, steps: Steps, reader: Callable[[], Store]) -> None:
        self.inner = inner
        self.steps = steps
        self.reader = reader
        self.commits: list[tuple[int, int, str | None]] = []

    async def _note(self, fn: Any, *args: Any) -> None:
        start = self.steps.count
        await fn(*args)
        end = self.steps.count
        self.steps.paused = True
        try:
            reader = self.reader()
            state = await snapshot(reader)
            await reader.aclose()
        finally:
            self.steps.paused = False
        self.commits.append((start, end, state))

    async def create(self, context: Any) -> None:
        await self._note(self.inner.create, context)

    async def commit(self, commit: Any) -> None:
        await self._note(self.inner.commit, commit)

    async def delete(self, context_id: str) -> None:
        await self._note(self.inner.delete, context_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# ---------------------------------------------------------------------- the processes


def _clean_run(store_kind: str, kind: str, workdir: str) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        store = open_test_store(store_kind, Path(workdir))
        before = await snapshot(store)
        steps = Steps()
        steps.install(store)
        rec = Recording(store, steps, lambda: open_test_store(store_kind, Path(workdir)))
        await change(kind, rec, notes_of(kind, Path(workdir)))  # type: ignore[arg-type]
        return {"before": before, "commits": rec.commits, "labels": steps.labels}

    return anyio.run(go)


def _killed_run(store_kind: str, kind: str, workdir: str, n: int) -> None:
    def at_step(i: int) -> None:
        if i == n:
            os._exit(9)

    async def go() -> None:
        store = open_test_store(store_kind, Path(workdir))
        Steps(at_step).install(store)
        await change(kind, store, notes_of(kind, Path(workdir)))

    anyio.run(go)
    os._exit(0)  # completed: step n was never reached


def _check(store_kind: str, kind: str, workdir: str, allowed: list[str | None]) -> list[str]:
    """What a fresh process finds wrong with the store after the kill."""

    async def go() -> list[str]:
        problems: list[str] = []
        store = open_test_store(store_kind, Path(workdir))
        try:
            state = await snapshot(store)
        except Exception as exc:
            return [f"load failed: {type(exc).__name__}: {exc}"]
        if state not in allowed:
            problems.append(f"a state that no commit made: {_diff(state, allowed)}")
        listed = CID in {s.id for s in await store.list_contexts()}
        if listed != (state is not None):
            problems.append(f"list_contexts says exists={listed}, load says {state is not None}")
        if state is None:
            try:
                await store.delete(CID)
                problems.append("delete found a context that load does not")
            except ContextNotFound:
                pass
            if kind == "create":  # absent means absent: it can be created now
                async with engine_for(open_test_store(store_kind, Path(workdir)), "x-") as e:
                    await e.create_context(context_id=CID)
                    if (await e.get_context(CID)).version != 0:
                        problems.append("a created context is not new")
            await store.aclose()
            return problems
        notes = notes_of(kind, Path(workdir))
        async with engine_for(store, "rest-", notes, rerun=kind == MCP_CONTROL) as engine:
            try:
                ran = marks(notes)
                stored = await engine.store.load(CID)
                started = "call-2" in stored.progress.started_call_ids and not any(
                    n.message.tool_result is not None
                    and n.message.tool_result.request_id == "call-2"
                    for n in stored.history()
                )
                recovery = await engine.recover()
                again = marks(notes) - ran
                if notes is not None and started and again:
                    problems.append("recover ran a started MCP call with no outcome again")
                if ran and again:
                    problems.append(
                        f"recover ran the MCP call again without a human ({ran} + {again} marks)"
                    )
                elif again > 1:
                    problems.append(f"recover ran the MCP call {again} times")
                for cid, why in {**recovery.skipped, **recovery.failed}.items():
                    problems.append(f"recover did not take {cid}: {why}")
                ctx = await engine.get_context(CID)
                for _ in range(5):
                    if ctx.current_state != "AwaitingToolApproval":
                        break
                    # what a human is asked (a waiting sub-task's calls included)
                    turn = await engine.resume(CID)
                    pending = [c.id for c in turn.pending_tool_calls]
                    if not pending:
                        problems.append("AwaitingToolApproval with nothing pending")
                        break
                    questions = [c for c in pending if c.startswith("q-")]
                    for call_id in questions:
                        await engine.answer(CID, call_id, "Oslo")
                    if len(questions) < len(pending):
                        await engine.approve(CID, [c for c in pending if c not in questions])
                    ctx = await engine.get_context(CID)
                if ctx.current_state not in RESTING:
                    problems.append(f"did not come to rest: {ctx.current_state}")
                if kind in SUB_KINDS:
                    problems += await _tree_problems(engine, kind)
                if notes is not None and marks(notes) < 1:
                    problems.append("the approved MCP call never ran")
            except Exception as exc:
                problems.append(f"resuming failed: {type(exc).__name__}: {exc}")
            await engine.store.delete(CID)
            try:
                await engine.store.load(CID)
                problems.append("load finds a deleted context")
            except ContextNotFound:
                pass
            if CID in {s.id for s in await engine.store.list_contexts()}:
                problems.append("list_contexts shows a deleted context")
        return problems

    return anyio.run(go)


async def _tree_problems(engine: Engine, kind: str) -> list[str]:
    """After a kill in spawn or finish, and ``recover``: the parent and its
    children agree, and calling the change again completes it."""
    problems: list[str] = []
    parent = await engine.get_context(CID)
    if kind.startswith("subtask"):
        # at rest (the loop above approved what waited): each sub-task call
        # has one result, the summary, and its child is gone
        results = [
            n.message.tool_result
            for n in parent.history()
            if n.message.tool_result is not None
            and n.message.tool_result.request_id.startswith("research-")
        ]
        asked = [
            c.id
            for n in parent.history()
            for c in n.message.tool_calls or ()
            if c.tool_name == "research"
        ]  # none when the kill came before the message's commit
        if len(results) != len(asked) or not all(r.success for r in results):
            problems.append(f"the sub-task calls {asked}, their results: {results}")
        left = await engine.children(CID)
        if left:
            problems.append(f"children left after the sub-task completed: {left}")
        return problems
    announced = [
        s.detail["child_id"]
        for s in await engine.steps(CID)
        if s.trigger == "child_spawned" and s.detail is not None
    ]
    children = await engine.children(CID)
    ids = [c.context_id for c in children]
    summaries = [
        n.message.metadata.extra["sub_context"]["child_id"]
        for n in parent.history()
        if "sub_context" in n.message.metadata.extra
    ]
    for c in children:
        if c.state not in RESTING and c.state != "AwaitingToolApproval":
            problems.append(f"child {c.context_id} did not come to rest: {c.state}")
    if kind == "spawn":
        # a child is announced only once it exists; a kill between the two
        # leaves a child nobody announced, which ``children`` still lists
        for cid in announced:
            if cid not in ids:
                problems.append(f"child_spawned names {cid}, which does not exist")
        if summaries:
            problems.append(f"a summary appeared during spawn: {summaries}")
        return problems
    # finish: the summary is on the parent once, or not yet; finishing again completes it
    if len(summaries) > 1 or len(announced) != 1:
        problems.append(f"announced {announced}, summaries {summaries}")
        return problems
    [child_id] = announced
    if child_id in ids:
        done = await engine.finish(child_id)
        parent = await engine.get_context(CID)
    elif not summaries:
        problems.append(f"the child {child_id} is gone and no summary stands for it")
        return problems
    again = [
        n.id
        for n in parent.history()
        if n.message.metadata.extra.get("sub_context", {}).get("child_id") == child_id
    ]
    if len(again) != 1:
        problems.append(f"{len(again)} summaries of {child_id} after finishing again")
    if await engine.children(CID):
        problems.append("the child outlived finish")
    if child_id in ids and again and done.message_id != again[0]:
        problems.append("finish again points at another summary")
    return problems


def _diff(state: str | None, allowed: list[str | None]) -> str:
    if state is None:
        return "absent"
    got = json.loads(state)[0]
    for want in allowed:
        if want is None:
            continue
        ref = json.loads(want)[0]
        keys = sorted(k for k in set(got) | set(ref) if got.get(k) != ref.get(k))
        return f"state {got.get('current_state')} v{got.get('version')}, differs in {keys}"
    return f"state {got.get('current_state')} v{got.get('version')}"


# ---------------------------------------------------------------------- the matrix


@dataclass
class Result:
    cases: int = 0
    failures: list[str] = field(default_factory=list)


def _pool() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    preload = ["turnfsm", "turnfsm.storage", "turnfsm.testing", "anyio", "pydantic"]
    ctx.set_forkserver_preload([*preload, *([__name__] if __name__ != "__main__" else [])])
    return ctx


def _call(mp: Any, fn: Callable[..., Any], items: list[Any]) -> Any:
    """Run ``fn(items)`` in a fresh process; its result, or None when killed.
    It is given 120 s and 5 s more for each item: a fixed bound for a batch of
    any size ran out on a loaded machine for the larger kinds' kill points."""
    parent, child = mp.Pipe(duplex=False)
    proc = mp.Process(target=_child, args=(child, fn, (items,)))
    proc.start()
    child.close()
    within = 120 + 5 * len(items)
    try:
        result = parent.recv() if parent.poll(within) else ("error", f"timed out ({within} s)")
    except EOFError:
        result = None
    proc.join(60)
    if result is not None and result[0] == "error":
        raise RuntimeError(result[1])
    return None if result is None else result[1]


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        value = fn(*args)
    except BaseException as exc:  # reported to the parent, which raises
        import traceback

        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    else:
        conn.send(("ok", value))
    conn.close()


def allowed_states(clean: dict[str, Any], n: int) -> list[str | None]:
    """The states a kill before step ``n`` may leave: before or after the commit
    it fell in, or the state between two commits."""
    states: list[str | None] = [clean["before"]]
    for start, end, state in clean["commits"]:
        if end <= n:
            states = [state]
        elif start <= n:
            states = [states[-1], state]
            break
        else:
            break
    return states


Case = tuple[str, str, str, int]
"""(store, kind, work folder, kill before this step)."""


def _clean_all(runs: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """The clean run of each (store, kind, folder), each in a process forked from this one."""
    out = []
    for store_kind, kind, workdir in runs:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                data = json.dumps(_clean_run(store_kind, kind, workdir)).encode()
                with os.fdopen(write, "wb") as f:
                    f.write(data)
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            raw = f.read()
        os.waitpid(pid, 0)
        if not raw:
            raise RuntimeError(f"the clean run of {store_kind} {kind} failed")
        out.append(json.loads(raw))
    return out


def _kill_all(cases: list[Case]) -> list[int]:
    """Each case in its own process, forked from this one: exit codes (9: killed)."""
    codes = []
    for store_kind, kind, workdir, n in cases:
        pid = os.fork()
        if pid == 0:
            try:
                _killed_run(store_kind, kind, workdir, n)
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    return codes


def _check_all(cases: list[tuple[str, str, str, list[str | None]]]) -> list[list[str]]:
    return [_check(store_kind, kind, w, allowed) for store_kind, kind, w, allowed in cases]


def run_matrix(
    pairs: list[tuple[str, str]],
    points: Callable[[dict[str, Any]], list[int]] | None = None,
) -> Result:
    """Every kill point (or those ``points`` picks from the clean run) of each
    (store, kind). Three processes do the work: one makes the clean runs, one
    forks a process per kill, and a fresh one checks every store left."""
    mp = _pool()
    result = Result()
    base = Path(tempfile.mkdtemp(prefix="crash-matrix-"))
    try:
        templates = {}
        for store_kind, kind in pairs:
            template = base / f"{store_kind}-{kind}"
            template.mkdir()
            if store_kind.startswith("postgres"):
                pg_database(template)
            real = {"files-torn": "files", "postgres-torn": "postgres"}.get(store_kind, store_kind)
            anyio.run(prepare, real, kind, template)
            _copy_case(store_kind, template, base / f"{store_kind}-{kind}-clean")
            templates[store_kind, kind] = template
        runs = [(s, k, str(base / f"{s}-{k}-clean")) for s, k in pairs]
        cleans = dict(zip(pairs, _call(mp, _clean_all, runs), strict=True))
        cases: list[Case] = []
        for (store_kind, kind), clean in cleans.items():
            total = len(clean["labels"])
            for n in list(range(total + 1)) if points is None else points(clean):
                work = base / f"{store_kind}-{kind}-kill-{n}"
                _copy_case(store_kind, templates[store_kind, kind], work)
                cases.append((store_kind, kind, str(work), n))
        codes = _call(mp, _kill_all, cases)
        checks = [(s, k, w, allowed_states(cleans[s, k], n)) for s, k, w, n in cases]
        found = _call(mp, _check_all, checks)
        for (store_kind, kind, _, n), code, problems in zip(cases, codes, found, strict=True):
            clean = cleans[store_kind, kind]
            total = len(clean["labels"])
            result.cases += 1
            label = clean["labels"][n] if n < total else "(completed)"
            if code != (0 if n >= total else 9):
                problems = [f"the run exited with {code}", *problems]
            result.failures += [
                f"{store_kind} {kind} kill before step {n} [{label}]: {p}" for p in problems
            ]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return result


def _copy_case(store_kind: str, template: Path, work: Path) -> None:
    """The prepared store of ``template``, copied for one case."""
    shutil.copytree(template, work)
    if store_kind.startswith("postgres"):
        pg_database(work, template)


def a_few(clean: dict[str, Any]) -> list[int]:
    """The reduced matrix: inside the first commit (its middle; for the file
    store, the step after its journal is in place) and before the last step."""
    total = len(clean["labels"])
    start, end, _ = clean["commits"][0]
    points = {(start + end) // 2, total - 1}
    for i, label in enumerate(clean["labels"]):
        if label == f"rename {files_module.JOURNAL}":
            points.add(i + 1)
            break
    return sorted(p for p in points if 0 <= p <= total)


def between_attempt_and_outcome(clean: dict[str, Any]) -> list[int]:
    """The kill right after the first commit (a tool call's recorded attempt)
    and before the second (its outcome): where a call was started and has no
    outcome."""
    _, end, _ = clean["commits"][0]
    return [end] if len(clean["commits"]) > 1 else []


def a_few_and_between(clean: dict[str, Any]) -> list[int]:
    """The reduced matrix, plus a kill right after each commit but the last:
    where a change of several commits (spawn, finish) stops between them."""
    points = set(a_few(clean))
    points.update(end for _, end, _ in clean["commits"][:-1])
    return sorted(points)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--store",
        choices=(*STORES, "postgres", "files-torn", "postgres-torn"),
        action="append",
    )
    p.add_argument("--kind", choices=(*KINDS, MCP_CONTROL), action="append")
    p.add_argument("--reduced", action="store_true", help="a few kill points per kind")
    args = p.parse_args(argv)
    pairs = [(s, k) for s in args.store or STORES for k in args.kind or KINDS]
    cluster = None
    if any(s.startswith("postgres") for s in args.store or ()) and not os.environ.get(PG_ENV):
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from tests.storage.pg import Cluster, find_bin_dir

        bin_dir = find_bin_dir()
        if bin_dir is None:
            p.error("--store postgres: no PostgreSQL binaries (initdb, pg_ctl) found")
        cluster = Cluster(bin_dir)
        cluster.start()
        os.environ[PG_ENV] = cluster.url
    try:
        r = run_matrix(pairs, a_few if args.reduced else None)
    finally:
        if cluster is not None:
            cluster.stop()
    for line in r.failures:
        print(f"FAIL {line}")
    print(f"{r.cases} kill points, {len(r.failures)} problems")
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
