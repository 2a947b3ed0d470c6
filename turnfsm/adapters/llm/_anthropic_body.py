"""The Anthropic Messages request body, as pure functions over plain JSON values
(no ``anthropic`` here).

:func:`anthropic_request_body` turns an :class:`~turnfsm.model.LLMRequest`
(chat-format messages and tools, built by the engine) into a ``POST
/v1/messages`` body:

- system messages go into the top-level ``system`` (one text block each, in
  order); the Messages API has no system role inside ``messages``;
- a user (or frontend operator) message is a ``user`` message: text as
  ``text`` blocks, images as ``image`` blocks (a ``data:`` URL as a
  ``base64`` source, any other URL as a ``url`` source), files as
  ``document`` blocks (``text/plain`` as a ``text`` source, anything else as
  ``base64``: the API takes PDFs);
- an assistant message is an ``assistant`` message whose blocks are, in the
  order the model gave them: its Claude reasoning (``thinking`` blocks with
  their ``signature``, ``redacted_thinking`` blocks with their ``data``, each
  unchanged, placed by its ``position``), its text, its ``tool_use`` blocks
  (ids kept, ``input`` the arguments object). Reasoning of another provider
  is dropped. A refused answer, and an answer with nothing in it, is left out
  (Claude is not to be sent its refused turn back);
- tool results are ``tool_result`` blocks at the start of one ``user``
  message (a user message that follows them joins that message after them);
- tools are ``{name, description, input_schema}``; ``tool_choice`` and
  ``parallel_tool_calls`` are translated (``required`` is ``any``).

Prompt caching: with ``cache=True`` (the adapter's default) a ``cache_control``
breakpoint (``{"type": "ephemeral"}``) goes on the last system block, the
last tool and the last block of the newest message, so that the next request
(the same prefix and one more turn) reads the prefix from the cache.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from ...model import RESPONSES_KEY, LLMRequest
from ._common import append_turn, arguments_object, own_reasoning, text_of
from ._output import closed_schema, native_spec

__all__ = [
    "ANTHROPIC_PROVIDER",
    "CACHE_CONTROL",
    "DEFAULT_MAX_TOKENS",
    "anthropic_messages",
    "anthropic_request_body",
    "anthropic_tools",
]

ANTHROPIC_PROVIDER = "anthropic"
"""The ``provider`` of the reasoning items this adapter makes and sends back."""
DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` when neither the adapter nor the request sets it (the
Messages API requires one)."""
CACHE_CONTROL: dict[str, str] = {"type": "ephemeral"}
"""The breakpoint put on the system prompt, the tools and the newest turn."""

_OWNED = frozenset({"model", "messages", "system", "tools", "stream", "input"})
_DROPPED = frozenset({"stream_options", "parallel_tool_calls", "max_completion_tokens"})
_CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result"})


def _image_block(url: str) -> dict[str, Any]:
    if url.startswith("data:") and ";base64," in url:
        head, data = url[5:].split(";base64,", 1)
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": head or "image/png", "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _document_block(file: Mapping[str, Any]) -> dict[str, Any]:
    raw = str(file.get("file_data") or "")
    media, data = "application/octet-stream", raw
    if raw.startswith("data:") and ";base64," in raw:
        media, data = raw[5:].split(";base64,", 1)
    block: dict[str, Any]
    if media == "text/plain":
        text = base64.b64decode(data).decode("utf-8", "replace")
        block = {"type": "document", "source": {"type": "text", "media_type": media, "data": text}}
    else:
        block = {
            "type": "document",
            "source": {"type": "base64", "media_type": media, "data": data},
        }
    if isinstance(file.get("filename"), str):
        block["title"] = file["filename"]
    return block


def _user_blocks(content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            if part.get("text"):
                blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            blocks.append(_image_block(str(url)))
        elif kind == "file":
            file = part.get("file")
            blocks.append(_document_block(file if isinstance(file, dict) else {}))
        else:
            blocks.append(dict(part))  # already a Messages block
    return blocks


def _reasoning_block(item: Mapping[str, Any]) -> dict[str, Any] | None:
    data = item.get("data")
    if not isinstance(data, Mapping):
        return None
    if data.get("type") == "redacted_thinking":
        return {"type": "redacted_thinking", "data": data.get("data")}
    if data.get("type") == "thinking":
        summary = item.get("summary") or ()
        return {
            "type": "thinking",
            "thinking": "".join(str(s) for s in summary),
            "signature": data.get("signature"),
        }
    return None


def _assistant_blocks(msg: Mapping[str, Any]) -> list[dict[str, Any]]:
    extra = msg.get(RESPONSES_KEY)
    reasoning = extra.get("reasoning") if isinstance(extra, Mapping) else None
    placed: dict[int, list[dict[str, Any]]] = {}
    for item in own_reasoning(reasoning or (), ANTHROPIC_PROVIDER):
        block = _reasoning_block(item)
        if block is not None:
            position = item.get("position", 0)
            placed.setdefault(position if isinstance(position, int) else 0, []).append(block)
    blocks = list(placed.pop(0, ()))
    text = text_of(msg.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    for n, call in enumerate(msg.get("tool_calls") or ()):
        if n:
            blocks.extend(placed.pop(n, ()))
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": arguments_object(function.get("arguments")),
            }
        )
    for n in sorted(placed):  # after every call (an answer cut after its reasoning)
        blocks.extend(placed[n])
    return blocks


def anthropic_messages(
    messages: Iterable[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Chat-format messages as the Messages API's ``system`` blocks and
    ``messages`` (see the module's docstring)."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        append_turn(out, role, blocks, "content")

    for msg in messages:
        role = msg.get("role")
        if role in ("system", "developer"):
            text = text_of(msg.get("content"))
            if text:
                system.append({"type": "text", "text": text})
        elif role == "tool":
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": msg.get("tool_call_id"),
                        "content": text_of(msg.get("content")),
                    }
                ],
            )
        elif role == "assistant":
            if msg.get("refusal") is not None and not msg.get("tool_calls"):
                continue
            add("assistant", _assistant_blocks(msg))
        else:
            add("user", _user_blocks(msg.get("content")))
    return system, out


def anthropic_tools(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat tool definitions as Messages tools (``{name, description,
    input_schema}``); a definition already in another form goes as it is."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, Mapping):
            out.append(dict(tool))
            continue
        flat: dict[str, Any] = {"name": function.get("name")}
        if function.get("description") is not None:
            flat["description"] = function["description"]
        flat["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
        out.append(flat)
    return out


def _tool_choice(choice: object, parallel: object) -> dict[str, Any] | None:
    out: dict[str, Any] | None
    if isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict):
            out = {"type": "tool", "name": function.get("name")}
        else:
            out = dict(choice)  # already the Messages form
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, str):
        out = {"type": choice}  # auto, none, any
    else:
        out = None
    if parallel is False:
        out = out or {"type": "auto"}
        if out.get("type") != "none":
            out["disable_parallel_tool_use"] = True
    return out


def _mark_cache(blocks: list[dict[str, Any]]) -> None:
    for block in reversed(blocks):
        if block.get("type") in _CACHEABLE:
            block["cache_control"] = dict(CACHE_CONTROL)
            return


def anthropic_request_body(
    request: LLMRequest,
    *,
    model: str | None = None,
    max_tokens: int | None = None,
    thinking: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    cache: bool = True,
) -> dict[str, Any]:
    """The Messages request body for ``request`` (pure; always streamed).

    Parameters: the adapter's ``params``, then the request's own (the
    context's), win in that order; keys the request itself decides (model,
    messages, system, tools, stream) are ignored. ``max_tokens`` (or
    ``max_completion_tokens``) defaults to the adapter's, else
    :data:`DEFAULT_MAX_TOKENS`; ``stop`` becomes ``stop_sequences``;
    ``tool_choice`` and ``parallel_tool_calls`` are translated;
    ``stream_options`` is dropped. Another parameter goes as it is (one the
    API does not know is refused with a 400 that names it). ``thinking`` is
    the adapter's unless the parameters give one.

    A native answer type (``request.output``, mode ``native``) goes as
    ``output_config.format: {"type": "json_schema", "schema"}`` (Claude's
    structured outputs: the answer's text is the JSON), the schema's
    objects closed (:func:`~._output.closed_schema`, as the API requires);
    the rest of an ``output_config`` of the parameters (``effort``) stays.
    """
    system, messages = anthropic_messages(request.messages)
    merged: dict[str, Any] = {}
    for source in (params, request.parameters):
        for key, value in (source or {}).items():
            if key not in _OWNED:
                merged[key] = value
    body: dict[str, Any] = {"model": model or request.model}
    tokens = merged.pop("max_tokens", None)
    if tokens is None:
        tokens = merged.get("max_completion_tokens")
    body["max_tokens"] = tokens if tokens is not None else (max_tokens or DEFAULT_MAX_TOKENS)
    if system:
        body["system"] = system
    body["messages"] = messages
    if request.tools:
        body["tools"] = anthropic_tools(request.tools)
    choice = _tool_choice(merged.pop("tool_choice", None), merged.get("parallel_tool_calls"))
    if choice is not None:
        body["tool_choice"] = choice
    stop = merged.pop("stop", None)
    if stop is not None:
        merged.setdefault("stop_sequences", [stop] if isinstance(stop, str) else list(stop))
    if thinking is not None:
        merged.setdefault("thinking", dict(thinking))
    for key in _DROPPED:
        merged.pop(key, None)
    spec = native_spec(request)
    if spec is not None:
        config = merged.get("output_config")
        merged["output_config"] = {
            **(config if isinstance(config, dict) else {}),
            "format": {"type": "json_schema", "schema": closed_schema(spec.schema)},
        }
    body.update(merged)
    if cache:
        if system:
            _mark_cache(system)
        if body.get("tools"):
            tools = body["tools"]
            tools[-1] = {**tools[-1], "cache_control": dict(CACHE_CONTROL)}
        if messages:
            _mark_cache(messages[-1]["content"])
    body["stream"] = True
    return body
