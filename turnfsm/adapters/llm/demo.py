"""The demo model: a scripted weather assistant that needs no key and no network.

It answers like a real model would, from the request it is sent: a weather
question asks for the ``get_weather`` tool; a tool result is turned into a
streamed sentence; a denied call is acknowledged; anything else gets a short
streamed reply. ``delay`` spaces the chunks out so streaming can be seen.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio

from ...model import LLMChunk, LLMRequest, LLMResponse, TextDelta, ToolCallData

__all__ = ["DemoLLM"]

_CITY = re.compile(r"\bin ([A-Z][a-zA-Z\- ]+?)(?:[?.!,]|$)")


def _chunks(text: str, size: int = 6) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


class DemoLLM:
    """A deterministic stand-in for a chat model, for ``turnfsm demo``."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls = 0

    def _answer(self, request: LLMRequest) -> tuple[str, tuple[ToolCallData, ...]]:
        last = request.messages[-1]
        if last["role"] == "tool":
            return self._after_tool(last), ()
        text = last.get("content") if isinstance(last.get("content"), str) else ""
        offered = {t["function"]["name"] for t in request.tools}
        match = _CITY.search(text or "")
        if "weather" in (text or "").lower() and "get_weather" in offered:
            city = match.group(1).strip() if match else "London"
            call = ToolCallData(f"call_{self.calls}", "get_weather", {"city": city})
            return "Let me check.", (call,)
        return "I am the demo model. Ask me about the weather in a city.", ()

    def _after_tool(self, message: dict[str, Any]) -> str:
        try:
            result = json.loads(message["content"])
        except ValueError:
            result = {"error": message["content"]}
        if isinstance(result, dict) and "error" in result:
            return f"I could not get the weather ({result['error']})."
        city = result.get("city", "that city")
        temp = result.get("temp_c", "?")
        cond = result.get("conditions")
        tail = f" and {cond}" if cond else ""
        return f"The weather in {city} is {temp} C{tail}."

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        self.calls += 1
        text, calls = self._answer(request)
        if calls:
            yield LLMResponse(text=text, tool_calls=calls, finish_reason="tool_calls", model="demo")
            return
        for piece in _chunks(text):
            if self.delay:
                await anyio.sleep(self.delay)
            yield TextDelta(piece)
        yield LLMResponse(text=text, finish_reason="stop", model="demo")
