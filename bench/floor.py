"""The floor: the same work as turnfsm does, hand-written, no framework.

A plain asyncio loop over dicts and lists that keeps the provider-format
message list incrementally (one list per conversation, appended to, handed
as is to the fake LLM). This is the physical limit for Python on the machine
that the other systems are compared to (WORKLOADS.md, "Rules").

Imports nothing from turnfsm.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from _common import (
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
    W6_TURNS,
    CheckFailed,
    Timed,
    check,
    current_rss_mib,
    dumps,
    expected_w1_history,
    expected_w2_history,
    figure,
    peak_rss_mib,
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


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3, "W6": w6}


def run(workload: str) -> dict[str, Any]:
    return asyncio.run(WORKLOADS[workload]())
