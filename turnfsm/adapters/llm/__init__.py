"""LLM adapters: the interface, the scripted test double, and (separately, so that
``openai`` is imported only when used) the OpenAI adapter."""

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

__all__ = [
    "LLM",
    "AnswerSpec",
    "LLMChunk",
    "LLMRequest",
    "LLMResponse",
    "ScriptedLLM",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallData",
    "ToolCallDelta",
]
