"""A real server over a scripted model that reports token usage, for the session
and compatibility endpoints: one word of the user's message picks the answer.

- ``add``: thinks, then calls ``add`` (no approval needed), then says the sum;
- ``book``: calls ``book``, which needs approval;
- ``refuse``: the model refuses to answer;
- ``fail``: the model's API refuses the request for good (HTTP 400);
- ``picture``: says how many images and files the message holds;
- ``user``: says the ``user`` model parameter it was sent;
- ``hold``: waits until the test lets it go (``GATE``), then answers (with
  ``add``: the answer after the tool's result waits);
- anything else: a streamed greeting.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

from turnfsm import Approval, Engine, tool
from turnfsm.adapters.llm import LLMRequest
from turnfsm.testing import ScriptedLLM

from .conftest import TOKENS, Running, serve_in_thread

USAGE = {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
GATE = threading.Event()
"""Set by a test to let the ``hold`` answers go."""


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool(approval=Approval.REQUIRED)
def book(city: str) -> str:
    """Book a trip."""
    return f"booked {city}"


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


async def answer(request: LLMRequest) -> dict[str, Any]:
    last = request.messages[-1]
    if last["role"] == "tool":
        asked = next(_text(m) for m in reversed(request.messages) if m["role"] == "user")
        if "hold" in asked:
            await anyio.to_thread.run_sync(GATE.wait, abandon_on_cancel=True)
        return {"chunks": ["The answer is ", f"{last['content']}."], "usage": USAGE}
    text = _text(last)
    if "add" in text:
        call = {"id": "call_add", "name": "add", "arguments": {"a": 2, "b": 3}}
        return {"thinking": "Two and three.", "tool_calls": [call], "usage": USAGE}
    if "book" in text:
        call = {"id": "call_book", "name": "book", "arguments": {"city": "Oslo"}}
        return {"text": "I will book it.", "tool_calls": [call]}
    if "refuse" in text:
        return {"refusal": "I can't help with that."}
    if "fail" in text:
        return {"error": {"status": 400, "message": "the model refused the request"}}
    if "picture" in text:
        parts = last["content"] if isinstance(last["content"], list) else []
        images = sum(1 for p in parts if p.get("type") == "image_url")
        files = sum(1 for p in parts if p.get("type") == "file")
        return {"text": f"{images} images, {files} files."}
    if "user" in text:
        return {"text": f"user={request.parameters.get('user')}"}
    if "hold" in text:
        await anyio.to_thread.run_sync(GATE.wait, abandon_on_cancel=True)
        return {"text": "Held."}
    return {"chunks": ["Hello", " there."], "usage": USAGE}


def scripted_server(
    db: Path, engine: dict[str, Any] | None = None, **config: Any
) -> Iterator[Running]:
    """The server over the scripted model (``engine``: more ``Engine`` arguments)."""
    from turnfsm.server import ServerConfig, create_app

    def factory() -> Engine:
        return Engine(
            llm=ScriptedLLM(answer), tools=[add, book], store=f"sqlite:///{db}", **(engine or {})
        )

    app = create_app(factory, ServerConfig(tokens=dict(TOKENS), heartbeat=0.5, **config))
    for url in serve_in_thread(app):
        yield Running(url, db)
