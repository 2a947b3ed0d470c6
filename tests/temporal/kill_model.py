"""The model and tools the Temporal kill test's workers run.

``turnfsm temporal-worker`` loads them with ``--llm
tests.temporal.kill_model:make_llm --tools tests.temporal.kill_model:TOOLS``.
Every turn is one tool loop with an approval: the model (after
``$TURNFSM_KILL_THINK`` seconds) calls ``lookup`` (idempotent, no approval)
and ``charge`` (not idempotent, approval required) with the user message's
text as their argument; once both results are in, it streams ``done REF.``
in six chunks, ``$TURNFSM_KILL_THINK`` / 3 seconds apart.

``charge`` appends ``ref pid`` to the side-effect file
``$TURNFSM_KILL_EFFECTS`` each time it runs (the checker counts the runs).
Each model call and tool call also appends ``begin KIND REF PID`` and ``end
KIND REF PID`` lines to ``$TURNFSM_KILL_MARKS``: the driver reads them to kill
a worker in the middle of a stream or of a tool (``kill.py``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import anyio

from turnfsm import tool
from turnfsm.model import LLMRequest, LLMResponse, TextDelta, ToolCallData

__all__ = ["TOOLS", "KillModel", "charge", "lookup", "make_llm", "text_of"]

MARKER = "[CURRENT MESSAGE FROM USER]: "


def think() -> float:
    return float(os.environ.get("TURNFSM_KILL_THINK", "0.1"))


def _append(variable: str, line: str) -> None:
    path = os.environ.get(variable)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write of a short line with O_APPEND: never torn
    finally:
        os.close(fd)


def mark(edge: str, kind: str, ref: str) -> None:
    _append("TURNFSM_KILL_MARKS", f"{edge} {kind} {ref} {os.getpid()}\n")


def text_of(message: dict[str, Any]) -> str:
    """The text of a chat-format message (a string, or a list of parts)."""
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    else:
        text = ""
    return text.removeprefix(MARKER)


class KillModel:
    """The tool loop above, streamed."""

    async def stream(self, request: LLMRequest) -> AsyncIterator[Any]:
        messages = request.messages
        user = next(m for m in reversed(messages) if m["role"] == "user")
        ref = text_of(user)
        if messages[-1]["role"] == "user":
            mark("begin", "model", ref)
            await anyio.sleep(think())
            mark("end", "model", ref)
            yield LLMResponse(
                tool_calls=(
                    ToolCallData(f"l-{ref}", "lookup", {"ref": ref}),
                    ToolCallData(f"c-{ref}", "charge", {"ref": ref}),
                ),
                finish_reason="tool_calls",
            )
            return
        chunks = ["do", "ne", " ", ref[: len(ref) // 2], ref[len(ref) // 2 :], "."]
        mark("begin", "stream", ref)
        for chunk in chunks:
            await anyio.sleep(think() / 3)
            yield TextDelta(chunk)
        mark("end", "stream", ref)
        yield LLMResponse(text="".join(chunks), finish_reason="stop")


def make_llm() -> KillModel:
    return KillModel()


@tool(idempotent=True)
async def lookup(ref: str) -> str:
    """Look a reference up (no side effect: safe to run again).

    Args:
        ref: the reference.
    """
    mark("begin", "lookup", ref)
    await anyio.sleep(think() / 2)
    mark("end", "lookup", ref)
    return f"found {ref}"


@tool(approval="required")
async def charge(ref: str) -> str:
    """Charge a reference once (a side effect: not idempotent).

    Args:
        ref: the reference.
    """
    mark("begin", "charge", ref)
    await anyio.sleep(think() / 2)
    _append("TURNFSM_KILL_EFFECTS", f"{ref} {os.getpid()}\n")
    await anyio.sleep(think() / 2)
    mark("end", "charge", ref)
    return f"charged {ref}"


TOOLS = [lookup, charge]
