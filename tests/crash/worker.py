"""The crash harness's worker: one process that drives a conversation against a
store until it finishes, or until it kills itself at a chosen persistence
boundary (SIGKILL: no cleanup, no flush, like a power cut for the process).

Run by ``harness.py``; each run resumes whatever the previous one left.

Files in ``--dir``:
    context.txt   the context id (written atomically once it is created)
    acks.jsonl    what the engine acknowledged: message ids from MessageCompleted /
                  ToolResult events and finished turns (with the seconds each
                  took), fsynced line by line; and a ``ready`` line once the
                  engine has resumed what it found and the turns start
    runs.jsonl    one line per tool run (the tools' side effects), fsynced
    commits.txt   how many commits this run made (written at a clean exit)
    file_ops.txt  how many file operations the file store made (at a clean exit)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from turnfsm import Engine, State, tool
from turnfsm.adapters.llm import LLMResponse, ToolCallData
from turnfsm.events import MessageCompleted, ToolResult
from turnfsm.storage import FilesStore, Store, open_store
from turnfsm.storage import _files as files_module
from turnfsm.testing import ScriptedLLM

TURNS = 3
TEXT = "Done: both tools ran."


def _append_line(path: Path, data: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(data) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class CrashingStore:
    """Counts commits; SIGKILLs the process before or after commit number ``at``.

    ``plant="early-ack"`` is the control bug: a commit returns before it is
    written (the write happens at the next commit), so acknowledged work can be
    lost. The harness must catch it.
    """

    def __init__(self, inner: Store, at: int, phase: str, plant: str | None) -> None:
        self.inner = inner
        self.at = at
        self.phase = phase
        self.plant = plant
        self.count = 0
        self._deferred: Any = None

    async def commit(self, commit: Any) -> None:
        self.count += 1
        if self.count == self.at and self.phase == "before":
            _die()
        if self.plant == "early-ack":
            # the deferred write lands during a later call, under a later lease:
            # it goes unfenced, so that the bug stays the one it stands for
            # (acknowledged work not yet stored), not a refused stale write
            previous, self._deferred = self._deferred, replace(commit, lease_token=None)
            if previous is not None:
                await self.inner.commit(previous)
        else:
            await self.inner.commit(commit)
        if self.count == self.at and self.phase == "after":
            _die()

    async def aclose(self) -> None:
        if self._deferred is not None:  # a clean exit writes what it acknowledged
            await self.inner.commit(self._deferred)
            self._deferred = None
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class FileOps:
    """For the file store: counts its file operations (a write, rename or
    removal) and SIGKILLs the process before the ``at``-th (0: never), i.e. in
    the middle of a commit that changes several files."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.count = 0
        files_module.op_hook = self

    def __call__(self, kind: str, path: Path) -> None:
        self.count += 1
        if self.count == self.at:
            _die()


def make_tools(workdir: Path) -> list[Any]:
    runs = workdir / "runs.jsonl"

    @tool(idempotent=True)
    def lookup(city: str) -> dict[str, Any]:
        """Read-only: safe to run again."""
        _append_line(runs, {"tool": "lookup", "city": city})
        return {"city": city, "temp_c": 15}

    @tool
    def book(city: str) -> dict[str, Any]:
        """Has a side effect: must not run twice unnoticed."""
        from turnfsm.tools import current_call

        call = current_call()
        _append_line(runs, {"tool": "book", "call": call.id if call else None})
        return {"booked": city}

    return [lookup, book]


def handler(request: Any) -> Any:
    messages = request.messages
    last = messages[-1]["role"]
    turn = sum(1 for m in messages if m["role"] == "user")
    if last == "user":
        return LLMResponse(
            tool_calls=(
                ToolCallData(f"look_{turn}", "lookup", {"city": "Oslo"}),
                ToolCallData(f"book_{turn}", "book", {"city": "Oslo"}),
            )
        )
    if last == "tool":
        return {"chunks": ["Done: ", "both tools ", "ran."]}
    raise AssertionError(f"unexpected last role {last}")


async def run(args: argparse.Namespace) -> int:
    workdir = Path(args.dir)
    acks = workdir / "acks.jsonl"
    if args.files_tail:  # commits.jsonl at any size (the harness's files-tail)
        FilesStore.tail_from, FilesStore.tail_limit = 0, 3.0
    inner = open_store(args.store)
    ops = FileOps(args.crash_at if args.crash_phase == "write" else 0)
    if args.crash_phase == "write":
        store: Any = CrashingStore(inner, 0, "none", args.plant)
    else:
        store = CrashingStore(inner, args.crash_at, args.crash_phase, args.plant)
    cid_file = workdir / "context.txt"
    async with Engine(
        llm=ScriptedLLM(handler, record=False), tools=make_tools(workdir), store=store
    ) as engine:
        if cid_file.exists():
            cid = cid_file.read_text().strip()
        else:
            cid = await engine.create_context(system_prompt="crash test")
            tmp = cid_file.with_suffix(".tmp")
            tmp.write_text(cid)
            os.replace(tmp, cid_file)

        async def listen() -> None:
            async with engine.subscribe(cid) as events:
                async for ev in events:
                    if isinstance(ev, MessageCompleted | ToolResult):
                        _append_line(acks, {"message": ev.message_id})

        async with anyio.create_task_group() as tg:
            tg.start_soon(listen)
            await anyio.lowlevel.checkpoint()
            recovery = await engine.recover()
            # the killed run's lease names a process that is gone: taken over at once
            if recovery.skipped or recovery.failed:
                raise SystemExit(f"recover did not take every context: {recovery}")
            for turn in recovery.resumed.values():
                await _finish(engine, cid, turn.state)
            ctx = await engine.get_context(cid)
            await _finish(engine, cid, State(ctx.current_state))
            done = sum(1 for n in ctx.history() if n.message.role == "user")
            _append_line(acks, {"ready": os.getpid()})
            for i in range(done + 1, TURNS + 1):
                began = time.perf_counter()
                turn = await engine.send(cid, f"turn {i}")
                _append_line(acks, {"turn": i, "messages": list(turn.message_ids)})
                state = await _finish(engine, cid, turn.state)
                took = time.perf_counter() - began
                _append_line(acks, {"turn": i, "state": str(state), "seconds": took})
            tg.cancel_scope.cancel()
    (workdir / "commits.txt").write_text(str(store.count))
    (workdir / "file_ops.txt").write_text(str(ops.count))
    return 0


async def _finish(engine: Engine, cid: str, state: State) -> State:
    """As the human: approve calls whose outcome is unknown (they may run again,
    marked as such); retry a failed turn."""
    while state is State.AWAITING_TOOL_APPROVAL:
        ctx = await engine.get_context(cid)
        state = (await engine.approve(cid, [c.id for c in ctx.pending_tool_calls()])).state
    return state


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--crash-at", type=int, default=0)
    p.add_argument("--crash-phase", choices=("before", "after", "write", "none"), default="none")
    p.add_argument("--plant", choices=("early-ack",), default=None)
    p.add_argument("--files-tail", action="store_true")
    return anyio.run(run, p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
