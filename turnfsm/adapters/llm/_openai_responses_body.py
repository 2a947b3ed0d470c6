"""The OpenAI Responses request, as pure functions over plain JSON values (no
``openai`` here): :func:`responses_request_body` (``POST /responses``), its
``input`` items built from the chat-format messages by :func:`responses_input`
and its tools by :func:`responses_tools`. The answer's side is
:mod:`._openai_responses`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...model import (
    OPENAI_PROVIDER,
    RESPONSES_KEY,
    LLMRequest,
)
from ._common import own_reasoning, text_of
from ._openai_common import (
    merge_parameters,
)
from ._output import native_schema, native_spec

__all__ = [
    "ENCRYPTED_REASONING",
    "LOGPROBS_INCLUDE",
    "responses_input",
    "responses_request_body",
    "responses_tools",
]

# ---------------------------------------------------------------------- Responses out


def _input_part(part: object) -> object:
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": part.get("text", "")}
    if kind == "image_url":
        image = part.get("image_url")
        image = image if isinstance(image, dict) else {"url": image}
        return {
            "type": "input_image",
            "image_url": image.get("url"),
            "detail": image.get("detail") or "auto",
        }
    if kind == "file":
        raw = part.get("file")
        file: dict[str, Any] = raw if isinstance(raw, dict) else {}
        out: dict[str, Any] = {"type": "input_file"}
        for key in ("file_data", "file_id", "filename"):
            if key in file:
                out[key] = file[key]
        return out
    return part  # already a Responses part, or one we do not know: as it is


def _input_content(content: object) -> object:
    if isinstance(content, list):
        return [_input_part(p) for p in content]
    return content if content is not None else ""


def responses_input(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat-format messages as Responses ``input`` items.

    ``system``/``developer``/``user`` become ``message`` items (text parts as
    ``input_text``, images as ``input_image``, files as ``input_file``); an
    assistant's reasoning items (under ``responses_items``) come back first as
    ``reasoning`` items (id, summary parts, ``encrypted_content``), then its
    text as an assistant ``message`` (with its ``phase``; a refusal as a
    ``refusal`` content part, after any ``output_text``), then each of its tool
    calls as a ``function_call`` item; a ``tool`` message becomes a
    ``function_call_output``. A chat ``name`` (the frontend operator) has no
    place in a Responses message and is left out.
    """
    items: list[dict[str, Any]] = []
    for msg in messages:
        role = msg.get("role")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": msg.get("tool_call_id"),
                    "output": text_of(msg.get("content")),
                }
            )
        elif role == "assistant":
            extra = msg.get(RESPONSES_KEY)
            extra = extra if isinstance(extra, Mapping) else {}
            for r in own_reasoning(extra.get("reasoning") or (), OPENAI_PROVIDER, unlabelled=True):
                items.append(_reasoning_input(r))
            text = text_of(msg.get("content"))
            refusal = msg.get("refusal")
            phase = extra.get("phase")
            item: dict[str, Any] | None = None
            if isinstance(refusal, str):
                parts: list[dict[str, Any]] = []
                if text:
                    parts.append({"type": "output_text", "text": text, "annotations": []})
                parts.append({"type": "refusal", "refusal": refusal})
                item = {"type": "message", "role": "assistant", "content": parts}
            elif text:
                item = {"type": "message", "role": "assistant", "content": text}
            if item is not None:
                if isinstance(phase, str):
                    item["phase"] = phase
                items.append(item)
            for call in msg.get("tool_calls") or ():
                function = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": function.get("arguments") or "{}",
                    }
                )
        else:
            items.append(
                {"type": "message", "role": role, "content": _input_content(msg.get("content"))}
            )
    return items


def _reasoning_input(r: object) -> dict[str, Any]:
    data: Mapping[str, Any] = r if isinstance(r, Mapping) else {}
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": data.get("id"),
        "summary": [{"type": "summary_text", "text": t} for t in data.get("summary") or ()],
    }
    if data.get("encrypted_content") is not None:
        item["encrypted_content"] = data["encrypted_content"]
    return item


def responses_tools(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat tool definitions (``{"type": "function", "function": {...}}``) in the
    Responses' flat form. ``strict`` is false unless the definition asks for it
    (the Responses API would otherwise hold every schema to strict mode)."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, Mapping):
            out.append(dict(tool))  # a built-in tool, or already in the Responses form
            continue
        flat: dict[str, Any] = {"type": "function", "name": function.get("name")}
        if function.get("description") is not None:
            flat["description"] = function["description"]
        flat["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
        flat["strict"] = bool(function.get("strict", False))
        out.append(flat)
    return out


def _responses_tool_choice(choice: object) -> object:
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "function", "name": choice["function"].get("name")}
    return choice


def responses_request_body(
    request: LLMRequest,
    *,
    stream: bool,
    model: str | None = None,
    extra_body: Mapping[str, Any] | None = None,
    store: bool | None = None,
) -> dict[str, Any]:
    """The Responses request body for ``request`` (pure).

    Model parameters are merged in with the Chat Completions names translated:
    ``max_tokens`` / ``max_completion_tokens`` become ``max_output_tokens``,
    ``reasoning_effort`` becomes ``reasoning.effort``, a chat-form
    ``tool_choice`` becomes the flat form. Other parameters go as they are (a
    parameter the Responses API does not know is refused by the server with a
    400, which says which one). ``logprobs: true`` becomes ``include:
    ["message.output_text.logprobs"]`` (``top_logprobs`` goes as it is).

    ``store`` (the adapter's option; a ``store`` parameter wins) is sent when
    not ``None``. When the body says ``store: false``, ``include`` asks for
    ``reasoning.encrypted_content``: the API keeps nothing, so the reasoning
    items sent back on the next request must carry their content, and one
    that has none (an answer given under ``store: true``) is left out.

    A native answer type (``request.output``, mode ``native``) is sent as
    ``text.format: {"type": "json_schema", "name", "schema", "strict"}`` (as
    in :func:`~._openai_chat.chat_request_body`, strict when the schema can
    be made strict-compatible); it wins over a ``text.format`` of the
    parameters, and the rest of their ``text`` (``verbosity``) stays.
    """
    body: dict[str, Any] = {
        "model": model or request.model,
        "input": responses_input(request.messages),
    }
    if request.tools:
        body["tools"] = responses_tools(request.tools)
    params: dict[str, Any] = merge_parameters({}, (request.parameters, extra_body))
    for old in ("max_completion_tokens", "max_tokens"):
        if old in params:
            value = params.pop(old)
            params.setdefault("max_output_tokens", value)
    if "reasoning_effort" in params:
        effort = params.pop("reasoning_effort")
        reasoning = params.get("reasoning")
        extra = reasoning if isinstance(reasoning, dict) else {}
        params["reasoning"] = {"effort": effort, **extra}
    if "tool_choice" in params:
        params["tool_choice"] = _responses_tool_choice(params["tool_choice"])
    params.pop("stream_options", None)
    include = list(params.pop("include", None) or ())
    if params.pop("logprobs", None) is True:
        include.append(LOGPROBS_INCLUDE)
    if store is not None:
        params.setdefault("store", store)
    if params.get("store") is False:
        include.append(ENCRYPTED_REASONING)
        # nothing is kept under store: false, so a reasoning item without its
        # encrypted content (an answer given under store: true) would be looked
        # up by id and refused with a 404: it is left out
        body["input"] = [
            i
            for i in body["input"]
            if i.get("type") != "reasoning" or i.get("encrypted_content") is not None
        ]
    if include:
        params["include"] = list(dict.fromkeys(include))
    spec = native_spec(request)
    if spec is not None:
        sent = native_schema(spec)
        text = params.get("text")
        params["text"] = {
            **(text if isinstance(text, dict) else {}),
            "format": {
                "type": "json_schema",
                "name": spec.name,
                "schema": sent.schema,
                "strict": sent.strict,
            },
        }
    body.update(params)
    if stream:
        body["stream"] = True
    return body


ENCRYPTED_REASONING = "reasoning.encrypted_content"
"""What ``include`` asks for so that reasoning can be sent back under ``store: false``."""
LOGPROBS_INCLUDE = "message.output_text.logprobs"
