"""The server the AG-UI tests run: the scripted model of ``scripted.py``, and one
answer more that streams a tool call's arguments in several pieces, as a
provider's stream does (``plan`` in the user's message: text, then a call of
``add`` whose arguments arrive in :data:`PIECES`), and one that calls the
frontend's tool ``show_card`` (``card`` in the user's message)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from turnfsm import Engine
from turnfsm.adapters.llm import LLMRequest
from turnfsm.adapters.llm.scripted import AnswerSpec
from turnfsm.model import LLMChunk, TextDelta, ToolCallDelta
from turnfsm.testing import ScriptedLLM

from .conftest import TOKENS, Running, serve_in_thread
from .scripted import add, answer, book

PIECES = ('{"a": ', '4, "b"', ": 5}")
"""The argument text of the streamed call, as the model sends it."""
PLAN_TEXT = "Let me add them."


class PiecesLLM:
    """``scripted.answer``'s model, but a ``plan`` message gets a streamed call."""

    def __init__(self) -> None:
        self._scripted = ScriptedLLM(answer)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        last = request.messages[-1]
        said = json.dumps(last.get("content"))
        if last["role"] == "user" and "card" in said:
            call = {"id": "call_card", "name": "show_card", "arguments": {"title": "Oslo"}}
            yield AnswerSpec.parse({"tool_calls": [call]}).response(request.model)
            return
        if last["role"] != "user" or "plan" not in said:
            async for chunk in self._scripted.stream(request):
                yield chunk
            return
        yield TextDelta(PLAN_TEXT)
        yield ToolCallDelta(index=0, id="call_plan", name="add")
        for piece in PIECES:
            yield ToolCallDelta(index=0, arguments=piece)
        call = {"id": "call_plan", "name": "add", "arguments": "".join(PIECES)}
        spec = AnswerSpec.parse({"chunks": [PLAN_TEXT], "tool_calls": [call]})
        yield spec.response(request.model)


def ag_ui_server(db: Path, **config: Any) -> Iterator[Running]:
    from turnfsm.server import ServerConfig, create_app

    def factory() -> Engine:
        return Engine(llm=PiecesLLM(), tools=[add, book], store=f"sqlite:///{db}")

    app = create_app(factory, ServerConfig(tokens=dict(TOKENS), heartbeat=0.5, **config))
    for url in serve_in_thread(app):
        yield Running(url, db)
