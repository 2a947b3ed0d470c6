"""What a ``tools/call`` result of an MCP server becomes (the rules in
:mod:`turnfsm.tools.mcp`'s docstring), and how the SDK's errors are said in
a failed outcome or a log line."""

from __future__ import annotations

from typing import Any

from ._mcp_transport import mt
from ._outcome import ToolOutcome

__all__ = ["describe", "outcome_of"]


def outcome_of(result: mt.CallToolResult, who: str = "the tool") -> ToolOutcome:
    """The outcome of a ``tools/call`` result (the rules in the module docstring)."""
    blocks = result.content
    texts = [b.text for b in blocks if isinstance(b, mt.TextContent)]
    only_text = len(texts) == len(blocks)
    structured = result.structured_content

    def wire() -> list[Any]:
        return [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in blocks]

    if result.is_error:
        error: dict[str, Any] = {"error": "\n".join(texts) or "the tool reported an error"}
        if not only_text:
            error["content"] = wire()
        if structured is not None:
            error["structuredContent"] = structured
        return ToolOutcome.of(False, error, who)
    value: Any
    if structured is not None:
        value = structured if only_text else {"content": wire(), "structuredContent": structured}
    elif only_text and len(texts) == 1:
        value = texts[0]
    else:
        value = {"content": wire()}
    return ToolOutcome.of(True, value, who)


def describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return describe(exc.exceptions[0])
    try:
        text = "; ".join(line.strip() for line in str(exc).splitlines()[:3])
    except Exception:
        text = ""
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
