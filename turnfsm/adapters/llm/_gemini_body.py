"""The Gemini ``generateContent`` request, as pure functions over plain JSON
values (no ``google.genai`` here).

:func:`gemini_request` turns an :class:`~turnfsm.model.LLMRequest`
(chat-format messages and tools, built by the engine) into the request's
``contents`` and its config, in the API's own (camelCase) names:

- system messages go into ``systemInstruction`` (one text part each, in
  order); ``contents`` has no system role;
- a user (or frontend operator) message is a ``user`` content: text as
  ``text`` parts, images and files as ``inlineData`` parts (a ``data:`` URL's
  MIME type and base64 data) or, for any other URL, ``fileData`` parts;
- an assistant message is a ``model`` content whose parts are, in the order
  the model gave them: its thought summaries (``thought: true`` text parts),
  its text, its ``functionCall`` parts (``args`` the arguments object). A
  ``thoughtSignature`` goes back unchanged on the part it came with (the
  function call it was attached to, the text, or the thought; the text
  streamed before a signed part goes back as a part of its own, never merged
  with the signed one). Reasoning of
  another provider is dropped, and so is an answer with nothing in it;
- tool results are ``functionResponse`` parts (``name`` the called tool's,
  ``response`` the result's JSON object, or ``{"result": ...}`` for any other
  value), in the calls' order, in one ``user`` content (a user message that
  follows them joins it);
- tools are one ``{"functionDeclarations": [...]}`` tool
  (``parametersJsonSchema`` the JSON schema as it is); ``tool_choice`` is a
  ``toolConfig.functionCallingConfig``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from ...model import RESPONSES_KEY, LLMRequest
from ...model._json import loads_json
from ._common import append_turn, arguments_object, own_reasoning, text_of
from ._output import native_spec

__all__ = [
    "GOOGLE_PROVIDER",
    "gemini_contents",
    "gemini_request",
    "gemini_tools",
]

GOOGLE_PROVIDER = "google"
"""The ``provider`` of the reasoning items this adapter makes and sends back."""

_OWNED = frozenset(
    {"model", "messages", "contents", "tools", "stream", "input", "systemInstruction"}
)
_DROPPED = frozenset({"stream_options", "parallel_tool_calls"})
_SCHEMA_KEYS = frozenset(
    {
        "responseMimeType",
        "response_mime_type",
        "responseSchema",
        "response_schema",
        "responseJsonSchema",
        "response_json_schema",
    }
)
"""The config's answer-format keys (either spelling), replaced by a native answer type."""
_RENAMED = {
    "max_tokens": "maxOutputTokens",
    "max_completion_tokens": "maxOutputTokens",
    "max_output_tokens": "maxOutputTokens",
    "stop": "stopSequences",
    "stop_sequences": "stopSequences",
    "top_p": "topP",
    "top_k": "topK",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
}


def _media_part(url: str, fallback_mime: str) -> dict[str, Any]:
    if url.startswith("data:") and ";base64," in url:
        mime, data = url[5:].split(";base64,", 1)
        return {"inlineData": {"mimeType": mime or fallback_mime, "data": data}}
    return {"fileData": {"fileUri": url, "mimeType": fallback_mime}}


def _user_parts(content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            if part.get("text"):
                parts.append({"text": part["text"]})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            parts.append(_media_part(str(url), "image/png"))
        elif kind == "file":
            file = part.get("file")
            raw = file.get("file_data") if isinstance(file, dict) else None
            parts.append(_media_part(str(raw or ""), "application/octet-stream"))
        else:
            parts.append(dict(part))  # already a Gemini part
    return parts


def _signed(part: dict[str, Any], data: Mapping[str, Any] | None) -> dict[str, Any]:
    signature = data.get("thoughtSignature") if data is not None else None
    if isinstance(signature, str):
        part["thoughtSignature"] = signature
    return part


def _split_signed(
    text: str, data: Mapping[str, Any] | None, extra: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """A text (or thought) as the parts it came in: the unsigned text before the
    signed part, then the signed part (from ``data["at"]`` on) with its
    signature; a signed part is never merged with an unsigned one."""
    at = data.get("at") if data is not None else None
    if data is None or not isinstance(data.get("thoughtSignature"), str):
        return [{"text": text, **extra}]
    if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at <= len(text):
        at = 0
    before = [{"text": text[:at], **extra}] if at else []
    return [*before, _signed({"text": text[at:], **extra}, data)]


def _model_parts(msg: Mapping[str, Any]) -> list[dict[str, Any]]:
    extra = msg.get(RESPONSES_KEY)
    reasoning = extra.get("reasoning") if isinstance(extra, Mapping) else None
    thoughts: dict[int, list[dict[str, Any]]] = {}
    text_data: Mapping[str, Any] | None = None
    call_data: dict[int, Mapping[str, Any]] = {}
    for item in own_reasoning(reasoning or (), GOOGLE_PROVIDER):
        data = item.get("data")
        data = data if isinstance(data, Mapping) else {}
        position = item.get("position", 0)
        position = position if isinstance(position, int) else 0
        kind = data.get("part")
        if kind == "thought":
            summary = "".join(str(s) for s in item.get("summary") or ())
            thoughts.setdefault(position, []).extend(
                _split_signed(summary, data, {"thought": True})
            )
        elif kind == "text":
            text_data = data
        elif kind == "functionCall":
            call_data[position] = data
    parts = list(thoughts.pop(0, ()))
    text = text_of(msg.get("content"))
    if text or text_data is not None:
        parts.extend(_split_signed(text, text_data, {}))
    for n, call in enumerate(msg.get("tool_calls") or ()):
        if n:
            parts.extend(thoughts.pop(n, ()))
        function = call.get("function") or {}
        part = {
            "functionCall": {
                "name": function.get("name"),
                "args": arguments_object(function.get("arguments")),
            }
        }
        parts.append(_signed(part, call_data.get(n)))
    for n in sorted(thoughts):  # after every call (an answer cut after its thought)
        parts.extend(thoughts[n])
    return parts


def _response_object(content: object) -> dict[str, Any]:
    text = text_of(content)
    try:
        value = loads_json(text)
    except ValueError:
        return {"result": text}
    return value if isinstance(value, dict) else {"result": value}


def gemini_contents(
    messages: Iterable[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Chat-format messages as Gemini's ``systemInstruction`` parts and
    ``contents`` (see the module's docstring)."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        append_turn(out, role, parts, "parts")

    for msg in messages:
        role = msg.get("role")
        if role in ("system", "developer"):
            text = text_of(msg.get("content"))
            if text:
                system.append({"text": text})
        elif role == "tool":
            call_id = msg.get("tool_call_id")
            name = names.get(call_id, "") if isinstance(call_id, str) else ""
            response = _response_object(msg.get("content"))
            add("user", [{"functionResponse": {"name": name, "response": response}}])
        elif role == "assistant":
            for call in msg.get("tool_calls") or ():
                function = call.get("function") or {}
                if isinstance(call.get("id"), str):
                    names[call["id"]] = str(function.get("name") or "")
            add("model", _model_parts(msg))
        else:
            add("user", _user_parts(msg.get("content")))
    return system, out


def gemini_tools(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat tool definitions as one Gemini tool of ``functionDeclarations``
    (``parametersJsonSchema`` the schema as it is); a definition already in
    another form goes as it is, a tool of its own."""
    declarations: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    for tool in tools:
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, Mapping):
            others.append(dict(tool))
            continue
        flat: dict[str, Any] = {"name": function.get("name")}
        if function.get("description") is not None:
            flat["description"] = function["description"]
        if function.get("parameters"):
            flat["parametersJsonSchema"] = function["parameters"]
        declarations.append(flat)
    return ([{"functionDeclarations": declarations}] if declarations else []) + others


def _tool_config(choice: object) -> dict[str, Any] | None:
    if isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict):
            return {
                "functionCallingConfig": {
                    "mode": "ANY",
                    "allowedFunctionNames": [function.get("name")],
                }
            }
        return dict(choice)  # already the Gemini form
    modes = {"auto": "AUTO", "none": "NONE", "required": "ANY", "any": "ANY"}
    if isinstance(choice, str) and choice in modes:
        return {"functionCallingConfig": {"mode": modes[choice]}}
    return None


def gemini_request(
    request: LLMRequest,
    *,
    model: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"model", "contents", "config"}`` for ``request`` (pure).

    Parameters: the adapter's ``params``, then the request's own (the
    context's), win in that order; keys the request itself decides (model,
    messages, tools, stream) are ignored. ``max_tokens`` (or
    ``max_completion_tokens``) becomes ``maxOutputTokens``, ``stop``
    ``stopSequences`` (a list), ``top_p`` ``topP``; ``tool_choice`` becomes
    ``toolConfig``; ``parallel_tool_calls`` and ``stream_options`` are
    dropped. Another parameter goes into the config as it is (one the SDK's
    ``GenerateContentConfig`` does not know is refused, named).

    A native answer type (``request.output``, mode ``native``) sets
    ``responseMimeType: "application/json"`` and ``responseJsonSchema`` (the
    schema as it is: Gemini takes JSON Schema); it replaces any answer format
    of the parameters (``responseSchema`` and ``responseJsonSchema`` exclude
    each other).
    """
    system, contents = gemini_contents(request.messages)
    config: dict[str, Any] = {}
    for source in (params, request.parameters):
        for key, value in (source or {}).items():
            if key in _OWNED or key in _DROPPED:
                continue
            config[_RENAMED.get(key, key)] = value
    stop = config.get("stopSequences")
    if isinstance(stop, str):
        config["stopSequences"] = [stop]
    choice = config.pop("tool_choice", None)
    tool_config = _tool_config(choice)
    if tool_config is not None:
        config["toolConfig"] = tool_config
    if system:
        config["systemInstruction"] = {"parts": system}
    if request.tools:
        config["tools"] = gemini_tools(request.tools)
    spec = native_spec(request)
    if spec is not None:
        for key in _SCHEMA_KEYS:
            config.pop(key, None)
        config["responseMimeType"] = "application/json"
        config["responseJsonSchema"] = copy.deepcopy(spec.schema)
    return {"model": model or request.model, "contents": contents, "config": config}
