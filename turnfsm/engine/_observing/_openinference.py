"""The OpenInference attributes of the engine's spans, beside the GenAI ones
(docs/observability.md, "OpenInference"): what Arize Phoenix and Arize read
to show a span as an LLM, tool or agent span with its input and output.

The names are those of the OpenInference semantic conventions
(``openinference-semantic-conventions``, ``openinference.semconv.trace``),
kept here so that the engine needs nothing beyond ``opentelemetry-api``.
The functions build plain attribute dicts; :mod:`turnfsm.engine._observing._otel_spans`
decides when content may be recorded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = [
    "AGENT",
    "AGENT_NAME",
    "CHAIN",
    "INPUT_MIME_TYPE",
    "INPUT_VALUE",
    "JSON_MIME",
    "LLM",
    "LLM_INPUT_MESSAGES",
    "LLM_INVOCATION_PARAMETERS",
    "LLM_MODEL_NAME",
    "LLM_OUTPUT_MESSAGES",
    "LLM_PROVIDER",
    "LLM_SYSTEM",
    "LLM_TOKEN_COUNT_COMPLETION",
    "LLM_TOKEN_COUNT_PROMPT",
    "LLM_TOKEN_COUNT_TOTAL",
    "OUTPUT_MIME_TYPE",
    "OUTPUT_VALUE",
    "SESSION_ID",
    "SPAN_KIND",
    "TEXT_MIME",
    "TOOL",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "TOOL_PARAMETERS",
    "content_text",
    "messages_attributes",
    "value",
]

SPAN_KIND = "openinference.span.kind"
LLM = "LLM"
TOOL = "TOOL"
AGENT = "AGENT"
CHAIN = "CHAIN"

SESSION_ID = "session.id"
AGENT_NAME = "agent.name"

INPUT_VALUE = "input.value"
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME_TYPE = "output.mime_type"
TEXT_MIME = "text/plain"
JSON_MIME = "application/json"

LLM_MODEL_NAME = "llm.model_name"
LLM_PROVIDER = "llm.provider"
LLM_SYSTEM = "llm.system"
LLM_INVOCATION_PARAMETERS = "llm.invocation_parameters"
LLM_INPUT_MESSAGES = "llm.input_messages"
LLM_OUTPUT_MESSAGES = "llm.output_messages"
LLM_TOKEN_COUNT_PROMPT = "llm.token_count.prompt"
LLM_TOKEN_COUNT_COMPLETION = "llm.token_count.completion"
LLM_TOKEN_COUNT_TOTAL = "llm.token_count.total"

TOOL_NAME = "tool.name"
TOOL_DESCRIPTION = "tool.description"
TOOL_PARAMETERS = "tool.parameters"

# the keys of one message, after the list's prefix and its index
_ROLE = "message.role"
_CONTENT = "message.content"
_NAME = "message.name"
_TOOL_CALL_ID = "message.tool_call_id"
_TOOL_CALLS = "message.tool_calls"
_CALL_ID = "tool_call.id"
_CALL_NAME = "tool_call.function.name"
_CALL_ARGUMENTS = "tool_call.function.arguments"


def value(data: Any) -> str:
    """JSON text of ``data`` (what is not JSON is written as its ``str``)."""
    return json.dumps(data, ensure_ascii=False, default=str)


def content_text(content: Any) -> str | None:
    """The text of a chat-format message's ``content``: the string, or its
    text parts joined; None when it has no text."""
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        texts = [
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        return "".join(texts) or None
    if content is None:
        return None
    return value(content)


def messages_attributes(prefix: str, messages: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Chat-format messages (OpenAI's shape) as the flattened list
    ``{prefix}.{i}.message.role`` / ``.content`` / ``.name`` /
    ``.tool_call_id`` / ``.tool_calls.{j}.tool_call.id`` /
    ``.function.name`` / ``.function.arguments``."""
    attrs: dict[str, Any] = {}
    for i, message in enumerate(messages):
        at = f"{prefix}.{i}."
        role = message.get("role")
        if isinstance(role, str):
            attrs[at + _ROLE] = role
        text = content_text(message.get("content"))
        if text is not None:
            attrs[at + _CONTENT] = text
        name = message.get("name")
        if isinstance(name, str):
            attrs[at + _NAME] = name
        call_id = message.get("tool_call_id")
        if isinstance(call_id, str):
            attrs[at + _TOOL_CALL_ID] = call_id
        for j, call in enumerate(message.get("tool_calls") or ()):
            if not isinstance(call, dict):
                continue
            call_at = f"{at}{_TOOL_CALLS}.{j}."
            if isinstance(call.get("id"), str):
                attrs[call_at + _CALL_ID] = call["id"]
            fn = call.get("function") or {}
            if isinstance(fn.get("name"), str):
                attrs[call_at + _CALL_NAME] = fn["name"]
            arguments = fn.get("arguments")
            if arguments is not None:
                attrs[call_at + _CALL_ARGUMENTS] = (
                    arguments if isinstance(arguments, str) else value(arguments)
                )
    return attrs
