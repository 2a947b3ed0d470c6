"""Stored messages in OpenAI chat format: the provider-format view of history.

:func:`to_chat_message` is pure and total: every stored message has exactly one
chat-format form, so the engine can keep the list incrementally and a
from-scratch build (:func:`to_chat_messages`) gives the same list.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Final

from ._message import (
    OPENAI_PROVIDER,
    FilePart,
    ImagePart,
    InternalMessage,
    ReasoningItem,
    Role,
    TextPart,
    ToolCallRequest,
)

__all__ = [
    "FRONTEND_OPERATOR_NAME",
    "RESPONSES_KEY",
    "append_chat",
    "frontend_operator_as_assistant",
    "to_chat_message",
    "to_chat_messages",
    "tool_result_content",
]

RESPONSES_KEY = "responses_items"
"""The key of a chat-format assistant message that holds what a provider needs
back besides the chat fields: ``{"reasoning": [{"id", "summary": [...],
"encrypted_content"?, "provider"?, "data"?, "position"?}], "phase"?:
"commentary"}`` (a reasoning item's JSON form; ``provider`` is left out for
the Responses API's own items). Each adapter reads the items of its own
provider and drops the others; the Chat Completions adapter sends none."""


def _one_shot(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode``, with one C encoder made once for all values.

    ``JSONEncoder.encode`` makes a C encoder for every value it encodes (with
    a fresh dict for the circular check) and calls it through two Python
    frames. The one made here has no circular check, so it keeps nothing
    between calls; a value that makes it recurse too deeply (circular, or
    nested past the recursion limit) is encoded again by ``encoder.encode``,
    which raises what it always raised. Strings go to ``encoder.encode`` as
    they are (the same text, the same errors either way)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None or encoder.indent is not None:  # pragma: no cover - no C accelerator
        return encoder.encode
    c_encode = make(
        None,  # no circular check: nothing kept from one value to the next
        encoder.default,
        json.encoder.encode_basestring_ascii
        if encoder.ensure_ascii
        else json.encoder.encode_basestring,
        encoder.indent,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )
    plain = encoder.encode
    join = "".join

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return plain(value)
        try:
            return join(c_encode(value, 0))
        except RecursionError:
            return plain(value)  # circular or too deep: the checking encoder says which

    return encode


# json.dumps with any option builds a new encoder on every call; these are the
# same encoders, built once.
_encode_result = _one_shot(json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str))
_encode_arguments = _one_shot(json.JSONEncoder(ensure_ascii=False, separators=(",", ":")))
_ROLE_NAME = {role: role.value for role in Role}
# The roles to_chat_message tells apart, read for every stored message: on
# Python 3.11 reading ``Role.X`` goes through the hook of EnumType's
# ``__getattr__`` (the metaclass defines one), which costs several times a
# module global.
_TOOL: Final = Role.TOOL
_ASSISTANT: Final = Role.ASSISTANT
_FRONTEND_OPERATOR: Final = Role.FRONTEND_OPERATOR


FRONTEND_OPERATOR_NAME = "frontend_operator"
"""The ``name`` of the ``user`` message a frontend operator speaks in."""


def _reasoning_json(item: ReasoningItem) -> dict[str, Any]:
    """The item's JSON form (as ``turnfsm.records.to_python`` gives it), built
    directly: this runs for every answer of a Responses model."""
    out: dict[str, Any] = {"id": item.id, "summary": list(item.summary)}
    if item.encrypted_content is not None:
        out["encrypted_content"] = item.encrypted_content
    if item.provider != OPENAI_PROVIDER:
        out["provider"] = item.provider
    if item.data is not None:
        out["data"] = item.data
    if item.position:
        out["position"] = item.position
    return out


def tool_result_content(result: Any) -> str:
    """The ``content`` of a ``tool`` message: strings as they are, the rest as JSON."""
    if isinstance(result, str):
        return result
    return _encode_result(result)


def _content(msg: InternalMessage) -> str | list[dict[str, Any]]:
    parts = msg.content
    if len(parts) == 1 and type(parts[0]) is TextPart:  # the common case
        return parts[0].text
    if all(isinstance(p, TextPart) for p in parts):
        return "".join([p.text for p in parts])  # type: ignore[union-attr]
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            image: dict[str, Any] = {"url": p.url}
            if p.detail is not None:
                image["detail"] = p.detail
            out.append({"type": "image_url", "image_url": image})
        elif isinstance(p, FilePart):
            out.append(
                {
                    "type": "file",
                    "file": {
                        "filename": p.name,
                        "file_data": f"data:{p.mime_type};base64,{p.data}",
                    },
                }
            )
    return out


def _chat_call(c: ToolCallRequest) -> dict[str, Any]:
    """One tool call of an assistant message, in chat format."""
    return {
        "id": c.id,
        "type": "function",
        "function": {
            "name": c.tool_name,
            "arguments": c.raw_arguments
            if c.raw_arguments is not None
            else _encode_arguments(c.arguments),
        },
    }


def to_chat_message(msg: InternalMessage) -> dict[str, Any]:
    """One stored message as an OpenAI chat message.

    A frontend operator speaks as ``user`` with ``name="frontend_operator"``; a
    tool message carries ``tool_call_id``; an assistant message asking for tools
    carries ``tool_calls`` (arguments as the JSON text the model sent). A
    refusal goes back as the API gave it: ``refusal``, with ``content`` null
    when there was no text.

    What only a provider's own API takes back (its reasoning items, a
    Responses message's ``phase``) rides under :data:`RESPONSES_KEY`, which
    the Chat Completions adapter leaves out of its body and the other
    adapters read.
    """
    role = msg.role
    if role is _TOOL:
        result = msg.tool_result
        assert result is not None, "a tool message has a tool_result"
        return {
            "role": "tool",
            "tool_call_id": result.request_id,
            "content": tool_result_content(result.result),
        }
    if role is _ASSISTANT:
        parts = msg.content
        if not parts:
            text = ""
        elif len(parts) == 1 and type(parts[0]) is TextPart:
            text = parts[0].text
        else:
            text = msg.text
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        calls = msg.tool_calls
        if calls:
            # one call (the common case) in a list of one: a comprehension's
            # list keeps room for four, and the engine keeps this list with
            # the history
            out["tool_calls"] = (
                [_chat_call(calls[0])] if len(calls) == 1 else [_chat_call(c) for c in calls]
            )
        elif out["content"] is None and msg.refusal is None:
            out["content"] = ""
        if msg.refusal is not None:
            out["refusal"] = msg.refusal
        if msg.reasoning or msg.phase is not None:
            extra: dict[str, Any] = {}
            if msg.reasoning:
                extra["reasoning"] = [_reasoning_json(r) for r in msg.reasoning]
            if msg.phase is not None:
                extra["phase"] = msg.phase
            out[RESPONSES_KEY] = extra
        return out
    if role is _FRONTEND_OPERATOR:
        return {"role": "user", "name": FRONTEND_OPERATOR_NAME, "content": _content(msg)}
    return {"role": _ROLE_NAME[role], "content": _content(msg)}


def to_chat_messages(messages: Iterable[InternalMessage]) -> list[dict[str, Any]]:
    """A from-scratch build of the chat-format list (see :func:`append_chat`)."""
    chat: list[dict[str, Any]] = []
    append = chat.append
    after_tool = False  # whether the list ends with a tool message
    for m in messages:
        item = to_chat_message(m)
        is_tool = item["role"] == "tool"
        if is_tool and after_tool:
            append_chat(chat, item)  # may belong before an earlier result
        else:
            append(item)  # what append_chat does with it, without the call
        after_tool = is_tool
    return chat


def append_chat(chat: list[dict[str, Any]], item: dict[str, Any]) -> None:
    """Append one chat-format message, keeping a batch's tool results in the
    order of its calls.

    Stored history is in the order things happened: the answer to a question
    (or a sub-task's result) can be stored before the results of calls asked
    before it in the same batch. Providers pair results with calls by id, but
    some expect them in the order asked, so the view puts each result after
    the results of the batch's earlier calls. A result whose call is not in
    the batch just before it is appended as it comes.
    """
    if item.get("role") != "tool" or not chat or chat[-1].get("role") != "tool":
        chat.append(item)
        return
    start = len(chat)
    while start > 0 and chat[start - 1].get("role") == "tool":
        start -= 1
    asked = chat[start - 1].get("tool_calls") if start > 0 else None
    if not asked:
        chat.append(item)
        return
    order = {c.get("id"): i for i, c in enumerate(asked)}
    rank = order.get(item.get("tool_call_id"))
    if rank is None:
        chat.append(item)
        return
    at = len(chat)
    while at > start and order.get(chat[at - 1].get("tool_call_id"), -1) > rank:
        at -= 1
    chat.insert(at, item)


def frontend_operator_as_assistant(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat-format list with each frontend operator message (a ``user``
    message named ``frontend_operator``) sent as an ``assistant`` message of
    the same text, as the request formats send the operator's message; a new
    list (the one given is left as it is) when there is one, else the same.

    An operator message with more than text (an image, a file) stays a named
    user message: an assistant message cannot carry them."""
    out: list[dict[str, Any]] | None = None
    for i, m in enumerate(messages):
        if m.get("name") != FRONTEND_OPERATOR_NAME or m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                continue
            content = "".join(str(p.get("text", "")) for p in content)
        if out is None:
            out = list(messages)
        out[i] = {"role": "assistant", "content": content}
    return messages if out is None else out
