"""LLM adapters: the interface, the scripted test double, and (separately, so that
``openai``, ``anthropic`` and ``google.genai`` are imported only when used) the
provider adapters.

``AnthropicLLM`` and ``GeminiLLM`` are exported lazily: ``from
turnfsm.adapters.llm import AnthropicLLM`` imports the ``anthropic`` SDK (extra
``anthropic``) then, ``GeminiLLM`` the ``google-genai`` SDK (extra ``google``),
and ``import turnfsm.adapters.llm`` alone imports neither.
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
    from .gemini import GeminiLLM

__all__ = [
    "LLM",
    "AnswerSpec",
    "AnthropicLLM",
    "GeminiLLM",
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
    if name == "GeminiLLM":
        try:
            from .gemini import GeminiLLM
        except ModuleNotFoundError as exc:
            if exc.name not in ("google", "google.genai"):
                raise
            raise ImportError(
                "GeminiLLM needs the google-genai SDK: pip install 'turnfsm[google]'"
            ) from exc
        return GeminiLLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
