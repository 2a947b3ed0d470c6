"""Tool history by call count: the newest calls in full, older ones by name only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import InvalidInput
from ..model import ChatContext, LLMRequest

__all__ = ["NAME_ONLY_ARGUMENTS", "ToolCallHistory", "name_only_result"]

NAME_ONLY_ARGUMENTS = "{}"
"""The arguments an older call shows in the view (an empty JSON object)."""


def name_only_result(name: str) -> str:
    """The content an older call's result shows in the view."""
    return f"[omitted: result of an earlier {name} call]"


class ToolCallHistory:
    """Shows the model the last ``calls`` tool calls in full; older calls by name only.

    Calls are counted one by one (an answer asking for three tools holds three
    calls), newest first. An older call stays in its assistant message with its
    id and tool name, so the model still sees which tools it used, but its
    arguments become ``{}`` and its result's content becomes
    ``[omitted: result of an earlier NAME call]``. Every call keeps exactly one
    result, so the view stays valid for every provider; stored history is
    untouched. ``calls=0`` shows every call by name only.

    The request's ``metadata["tool_history"]`` says how many calls the view holds
    and how many of them are shown by name only.
    """

    def __init__(self, calls: int = 10) -> None:
        if isinstance(calls, bool) or not isinstance(calls, int) or calls < 0:
            raise InvalidInput("calls", f"must be an integer >= 0, not {calls!r}")
        self.calls = calls
        # the name-only forms of the engine's message dicts, which are kept across
        # requests: the same dict gives the same form (by identity; the dict is held)
        self._forms: dict[tuple[int, int], tuple[dict[str, Any], dict[str, Any]]] = {}

    def _form(self, msg: dict[str, Any], n: int, name: str = "") -> dict[str, Any]:
        """``msg`` with its first ``n`` calls by name only (a tool message: its
        result omitted, ``n`` = 0)."""
        key = (id(msg), n)
        hit = self._forms.get(key)
        if hit is not None and hit[0] is msg:
            return hit[1]
        if msg.get("role") == "tool":
            out = {**msg, "content": name_only_result(name)}
        else:
            out = _assistant_name_only(msg, n)
        if len(self._forms) >= 8192:
            self._forms.clear()
        self._forms[key] = (msg, out)
        return out

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        messages = request.messages
        total = 0
        for m in messages:
            if m.get("role") == "assistant":
                calls = m.get("tool_calls")
                if calls:
                    total += len(calls)
        cut = total - self.calls
        if cut > 0:
            request.messages = _name_only(messages, cut, self._form)
            request.metadata["tool_history"] = {
                "calls": total,
                "full": self.calls,
                "name_only": cut,
            }
        return request

    def shrink(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` as it shows once its calls are older than the last
        ``calls`` (the smallest form this enhancer can give it)."""
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            return self._form(message, len(message["tool_calls"]))
        if role == "tool":
            return {**message, "content": name_only_result("tool")}
        return message


def _assistant_name_only(msg: dict[str, Any], count: int) -> dict[str, Any]:
    calls = msg["tool_calls"]
    new_calls = [
        {
            **c,
            "function": {"name": c["function"]["name"], "arguments": NAME_ONLY_ARGUMENTS},
        }
        for c in calls[:count]
    ]
    return {**msg, "tool_calls": [*new_calls, *calls[count:]]}


def _name_only(
    messages: list[dict[str, Any]], cut: int, form: Callable[..., dict[str, Any]]
) -> list[dict[str, Any]]:
    """The first ``cut`` calls (in order) by name only, and their results."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # the calls cut in the current round: id -> tool name
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role == "tool":
            name = names.get(msg.get("tool_call_id", ""))
            if name is not None:
                out.append(form(msg, 0, name))
            else:
                out.append(msg)
            continue
        names = {}  # a round's results follow it directly; ids may be reused later
        if cut <= 0:
            out.extend(messages[i:])
            return out
        calls = msg.get("tool_calls") if role == "assistant" else None
        if calls:
            n = min(cut, len(calls))
            cut -= n
            names = {c["id"]: c["function"]["name"] for c in calls[:n]}
            out.append(form(msg, n))
        else:
            out.append(msg)
    return out
