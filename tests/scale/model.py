"""The scripted model and tools the scale tests' processes run.

``turnfsm worker`` and ``turnfsm serve`` load them with ``--llm
tests.scale.model:make_llm --tools tests.scale.model:TOOLS``. Every turn is
one tool loop: the model (after ``$TURNFSM_SCALE_THINK`` seconds, 0.05 by
default) calls ``lookup`` (idempotent) and ``charge`` (not idempotent) with the
user message's text as their argument, then, once both results are in, streams
a text answer in three chunks. ``charge`` appends one line, ``ref pid``, to the
side-effect file ``$TURNFSM_SCALE_EFFECTS`` each time it runs: the checker
counts how often each one ran.
"""

from __future__ import annotations

import os
from typing import Any

import anyio

from turnfsm import tool
from turnfsm.model import LLMRequest
from turnfsm.testing import ScriptedLLM

__all__ = ["TOOLS", "charge", "lookup", "make_llm", "text_of", "think"]

MARKER = "[CURRENT MESSAGE FROM USER]: "


def think() -> float:
    return float(os.environ.get("TURNFSM_SCALE_THINK", "0.05"))


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


async def answer(request: LLMRequest) -> dict[str, Any]:
    await anyio.sleep(think())
    messages = request.messages
    last = messages[-1]
    if last["role"] == "user":
        ref = text_of(last)
        return {
            "tool_calls": [
                {"id": f"l-{ref}", "name": "lookup", "arguments": {"ref": ref}},
                {"id": f"c-{ref}", "name": "charge", "arguments": {"ref": ref}},
            ]
        }
    user = next(m for m in reversed(messages) if m["role"] == "user")
    ref = text_of(user)
    return {"chunks": ["done ", ref, "."]}


def make_llm() -> ScriptedLLM:
    return ScriptedLLM(answer, record=False)


@tool(idempotent=True)
async def lookup(ref: str) -> str:
    """Look a reference up (no side effect: safe to run again).

    Args:
        ref: the reference.
    """
    await anyio.sleep(think() / 2)
    return f"found {ref}"


@tool
async def charge(ref: str) -> str:
    """Charge a reference once (a side effect: not idempotent).

    Args:
        ref: the reference.
    """
    await anyio.sleep(think() / 2)
    path = os.environ["TURNFSM_SCALE_EFFECTS"]
    line = f"{ref} {os.getpid()}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write of a short line with O_APPEND: never torn
    finally:
        os.close(fd)
    await anyio.sleep(think() / 2)
    return f"charged {ref}"


TOOLS = [lookup, charge]
