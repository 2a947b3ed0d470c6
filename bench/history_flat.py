"""W12, history independence: what a W1 turn costs after ~100 and after ~5,000
stored messages, on the memory store and on SQLite, in instructions.

A turn must cost the same however long the conversation is (target: the
instructions of a turn at 5,000 messages at most 1.05x those at 100). Each
measurement is its own process under ``valgrind --tool=callgrind
--instr-atstart=no``: instrumentation is switched on just before the measured
turns and off just after them, by callgrind's client requests
(``CALLGRIND_START_INSTRUMENTATION`` / ``CALLGRIND_ZERO_STATS``, then
``CALLGRIND_DUMP_STATS`` / ``CALLGRIND_STOP_INSTRUMENTATION``, in a small C
library built here with ``cc``). Instrumentation is global, so the SQLite
store's own threads are counted too; building the history, loading it and
the warm-up turns are not. A full ``gc.collect()`` runs before the stretch, so
that no collection of what setting up left behind falls into it. Two
stretches per (store, size), of ``SHORT`` and ``LONG`` turns, each in a fresh
process; a turn's figure is their difference divided by ``LONG - SHORT``
(what the stretch's own start and end cost cancels out).

The stored conversation is W1's (user message, tool call, tool result, text
answer, with the engine's own metadata), put into the store with ``create``;
the turns then run exactly as W1's, checked by the same fake LLM.

::

    python bench/run.py --workload W12        # the figures (needs valgrind)
    python bench/history_flat.py --inner memory 100 2   # one stretch, no valgrind
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import TEXT_ANSWER, TOOL_NAME, TOOL_RESULT_TEMP, CheckFailed, check  # noqa: E402

SIZES = (100, 5_000)
STORES = ("memory", "sqlite")
SHORT, LONG = 2, 12
"""Turns in the two measured stretches (per size and store)."""
WARMUP = 2
"""Turns run before a stretch, uncounted (the context is loaded by the first)."""
TARGET = 1.05
SWITCH_C = """
#include <valgrind/callgrind.h>
void w12_on(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void w12_off(void) { CALLGRIND_DUMP_STATS_AT("w12"); CALLGRIND_STOP_INSTRUMENTATION; }
"""
"""The switch around the measured turns (no-ops outside valgrind)."""


def _switch(directory: str) -> Any:
    """The switch's library, built in ``directory``."""
    import ctypes

    source = os.path.join(directory, "w12_switch.c")
    library = os.path.join(directory, "w12_switch.so")
    with open(source, "w") as f:
        f.write(SWITCH_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", library, source], check=True)
    return ctypes.CDLL(library)


def _node_id(i: int) -> str:
    return f"00000000-0000-7000-8000-{i:012d}"


def history_context(context_id: str, n: int) -> Any:
    """A context holding ``n`` W1 messages (``n`` a multiple of 4), as the
    engine stores them: ``turn i``, its tool call ``call_i`` (approved by
    policy), the result, the answer."""
    from turnfsm.model import (
        ApprovalStatus,
        Branch,
        ChatContext,
        InternalMessage,
        MessageMetadata,
        MessageNode,
        MessageType,
        Role,
        TextPart,
        ToolCallRequest,
        ToolCallResult,
    )

    if n % 4:
        raise ValueError(f"{n} is not a whole number of W1 turns")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    plain = MessageMetadata(created_at=at)
    nodes: list[MessageNode] = []
    for t in range(1, n // 4 + 1):
        call = f"call_{t}"
        messages = (
            InternalMessage(role=Role.USER, content=[TextPart(text=f"turn {t}")], metadata=plain),
            InternalMessage(
                role=Role.ASSISTANT,
                tool_calls=[
                    ToolCallRequest(
                        id=call,
                        tool_name=TOOL_NAME,
                        arguments={"city": "London"},
                        approval_status=ApprovalStatus.APPROVED,
                        decided_by="policy",
                    )
                ],
                message_type=MessageType.TOOL_CALL,
                metadata=dataclasses.replace(
                    plain, model="scripted", attempt=1, iteration=1, finish_reason="tool_calls"
                ),
            ),
            InternalMessage(
                role=Role.TOOL,
                tool_result=ToolCallResult(
                    request_id=call, result={"city": "London", "temp_c": TOOL_RESULT_TEMP}
                ),
                message_type=MessageType.TOOL_RESULT,
                metadata=plain,
            ),
            InternalMessage(
                role=Role.ASSISTANT,
                content=[TextPart(text=TEXT_ANSWER)],
                metadata=dataclasses.replace(
                    plain, model="scripted", attempt=1, iteration=2, finish_reason="stop"
                ),
            ),
        )
        for message in messages:
            parent = nodes[-1].id if nodes else None
            nodes.append(MessageNode(id=_node_id(len(nodes)), message=message, parent_id=parent))
    return ChatContext(
        id=context_id,
        message_pool={node.id: node for node in nodes},
        branches={"main": Branch(name="main", message_ids=[node.id for node in nodes])},
        created_at=at,
        updated_at=at,
    )


def stretch(store_name: str, n: int, turns: int, *, counted: bool = False) -> int:
    """Run ``WARMUP`` turns, then ``turns`` turns (counted by callgrind, switched
    on around them, when ``counted``) on a context that starts with ``n`` stored
    messages; checks every turn and the stored history; returns the messages at
    the end."""
    import logging

    logging.getLogger("turnfsm").setLevel(logging.WARNING)
    from turnfsm_side import Handler, get_weather

    from turnfsm import Engine, State, StopReason, storage
    from turnfsm.testing import ScriptedLLM

    directory = tempfile.mkdtemp(prefix="turnfsm-w12-")
    store = (
        storage.SQLiteStore(os.path.join(directory, "w12.db"))
        if store_name == "sqlite"
        else storage.MemoryStore()
    )
    handler = Handler(keep=2 * (WARMUP + turns))
    engine = Engine(llm=ScriptedLLM(handler, record=False), tools=[get_weather], store=store)
    cid = "w12"
    first = n // 4 + 1

    async def run_turns(start: int, count: int) -> None:
        for i in range(start, start + count):
            turn = await engine.send(cid, f"turn {i}")
            if turn.state is not State.IDLE or turn.stop_reason is not StopReason.COMPLETED:
                raise CheckFailed(f"turn {i}: {turn.state} {turn.stop_reason} {turn.error}")

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(store.create(history_context(cid, n)))
        loop.run_until_complete(run_turns(first, WARMUP))
        switch = _switch(directory) if counted else None
        gc.collect()
        measured = run_turns(first + WARMUP, turns)
        if switch is not None:
            switch.w12_on()
            loop.run_until_complete(measured)
            switch.w12_off()
        else:
            loop.run_until_complete(measured)
        total = n + 4 * (WARMUP + turns)
        ctx = loop.run_until_complete(engine.get_context(cid))
        history = ctx.history()
        check(len(history) == total, f"{len(history)} messages, expected {total}")
        check(handler.calls == 2 * (WARMUP + turns), f"{handler.calls} LLM calls")
        check(handler.last is not None and len(handler.last) == total - 1, "last request")
        loop.run_until_complete(engine.aclose())
    finally:
        loop.close()
        for name in os.listdir(directory):
            os.remove(os.path.join(directory, name))
        os.rmdir(directory)
    return total


def _counted(store_name: str, n: int, turns: int) -> int:
    """Instructions of one stretch: a fresh process under callgrind."""
    directory = tempfile.mkdtemp(prefix="turnfsm-w12-out-")
    out = os.path.join(directory, "callgrind.out")
    try:
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            os.path.abspath(__file__),
            "--inner",
            store_name,
            str(n),
            str(turns),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"W12 {store_name} {n} {turns}: {proc.stderr[-2000:]}")
        for name in os.listdir(directory):  # the stretch's dump, and the end's (empty)
            with open(os.path.join(directory, name)) as f:
                text = f.read()
            found = re.search(r"^totals: (\d+)", text, re.M)
            if "Trigger: Client Request: w12" in text and found is not None:
                return int(found.group(1))
        raise RuntimeError(f"W12 {store_name} {n} {turns}: the stretch was not dumped")
    finally:
        for name in os.listdir(directory):
            os.remove(os.path.join(directory, name))
        os.rmdir(directory)


def run() -> dict[str, Any]:
    """Instructions a turn per store at each size, and the ratio 5,000/100."""
    result: dict[str, Any] = {"system": "turnfsm", "workload": "W12", "target": TARGET}
    worst = 0.0
    for store_name in STORES:
        per_turn = {}
        for n in SIZES:
            short = _counted(store_name, n, SHORT)
            long = _counted(store_name, n, LONG)
            per_turn[n] = (long - short) / (LONG - SHORT)
            result[f"{store_name}_instructions_at_{n}"] = round(per_turn[n])
        ratio = per_turn[SIZES[1]] / per_turn[SIZES[0]]
        result[f"{store_name}_ratio_5000_to_100"] = round(ratio, 4)
        worst = max(worst, ratio)
    result["value"] = round(worst, 4)
    result["unit"] = "x"
    return result


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--inner":
        stretch(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), counted=True)
    else:
        import json

        print(json.dumps(run()))
