"""The built-in enhancers: the system prompt, the tool definitions and the
trimming of old tool rounds (the engine puts them first, in that order)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidInput
from ..model import ChatContext, LLMRequest, tool_allowed

__all__ = ["SystemPromptEnhancer", "ToolDefinitionsEnhancer", "ToolHistoryTrimmer"]


class SystemPromptEnhancer:
    """Puts the active branch's system prompt, then its user prompt, first.

    The two are joined by a blank line into one ``system`` message; a branch with
    neither gets none (or ``default``, when given).
    """

    def __init__(self, default: str | None = None) -> None:
        self.default = default

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        branch = context.active_branch
        parts = [
            branch.system_prompt.content if branch.system_prompt else self.default,
            branch.user_prompt,
        ]
        text = "\n\n".join(p for p in parts if p)
        if text:
            request.messages = [{"role": "system", "content": text}, *request.messages]
        return request


class ToolDefinitionsEnhancer:
    """Offers the tool definitions (OpenAI ``tools`` format) to the model: those
    the context may use (:func:`~turnfsm.model.tool_allowed`)."""

    def __init__(
        self, definitions: Sequence[dict[str, Any]] | Callable[[], list[dict[str, Any]]]
    ) -> None:
        self._definitions = definitions

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        defs = self._definitions
        offered = defs() if callable(defs) else list(defs)
        config = context.config
        if config.tools is not None:
            offered = [d for d in offered if tool_allowed(config, _tool_name(d))]
        request.tools = offered
        return request


def _tool_name(definition: dict[str, Any]) -> str:
    """The name in an OpenAI tool definition (``""`` when it has none)."""
    function = definition.get("function")
    name = function.get("name") if isinstance(function, dict) else definition.get("name")
    return name if isinstance(name, str) else ""


class ToolHistoryTrimmer:
    """Shows the model only the last ``rounds`` tool rounds in full.

    Older rounds lose their ``tool_calls`` and ``tool`` messages from the view (an
    assistant message left with no text is dropped too), so the view stays valid
    for every provider. Stored history is untouched.
    """

    def __init__(self, rounds: int) -> None:
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
            raise InvalidInput("rounds", f"must be an integer >= 0, not {rounds!r}")
        self.rounds = rounds

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        messages = request.messages
        total = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        if total > self.rounds:
            request.messages = _drop_old_rounds(messages, total - self.rounds)
        return request


def _drop_old_rounds(messages: list[dict[str, Any]], to_cut: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cut_ids: set[str] = set()
    for msg in messages:
        role = msg.get("role")
        if role == "assistant" and msg.get("tool_calls") and to_cut > 0:
            to_cut -= 1
            cut_ids.update(c["id"] for c in msg["tool_calls"])
            if msg.get("content"):
                out.append({"role": "assistant", "content": msg["content"]})
            continue
        if role == "tool":
            if msg.get("tool_call_id") in cut_ids:
                continue
        else:
            cut_ids = set()  # a round's results follow it directly; ids may be reused later
        out.append(msg)
    return out
