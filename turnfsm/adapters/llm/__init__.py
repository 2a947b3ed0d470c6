"""LLM adapters: the interface, the scripted test double, and (separately, so that
``openai`` and ``anthropic`` are imported only when used) the provider adapters.

``AnthropicLLM`` is exported lazily: ``from turnfsm.adapters.llm import
AnthropicLLM`` imports the ``anthropic`` SDK (extra ``anthropic``) then, and
``import turnfsm.adapters.llm`` alone does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import (
    LLM,
    LLMChunk,
    LLMRequest,
    LLMResponse,
    TextDelta,
    ThinkingDelta,
    ToolCallData,
    ToolCallDelta,
)
from .scripted import AnswerSpec, ScriptedLLM

if TYPE_CHECKING:
    from .anthropic import AnthropicLLM

__all__ = [
    "LLM",
    "AnswerSpec",
    "AnthropicLLM",
    "LLMChunk",
    "LLMRequest",
    "LLMResponse",
    "ScriptedLLM",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallData",
    "ToolCallDelta",
]


def __getattr__(name: str) -> Any:
    if name == "AnthropicLLM":
        try:
            from .anthropic import AnthropicLLM
        except ModuleNotFoundError as exc:
            if exc.name != "anthropic":
                raise
            raise ImportError(
                "AnthropicLLM needs the anthropic SDK: pip install 'turnfsm[anthropic]'"
            ) from exc
        return AnthropicLLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
