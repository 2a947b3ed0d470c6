"""Conversation entries of a chat CLI: ``[{"user": {...}, "assistant": {...}},
...]`` (or ``{"entries": [...]}``), in that CLI's serde shape
(``{"content": {"Prompt": {"prompt": ...}}}``, ``{"ToolUseResults": ...}``,
``{"CancelledToolUses": ...}``, ``{"Response": {...}}``, ``{"ToolUse": {...,
"tool_uses": [...]}}``) or a plain one (``{"prompt": ...}``, ``{"content": ...,
"tool_uses": [...]}``, or just strings).

Calls the chat CLI recorded as cancelled are ``Denied`` by ``human``.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

from ....errors import InvalidInput
from ....model import (
    ApprovalStatus,
    ChatContext,
    ContentPart,
    ImagePart,
    InternalMessage,
    MessageMetadata,
    MessageType,
    Role,
    TextPart,
    ToolCallRequest,
)
from ._checks import (
    Ids,
    check_base64,
    check_source,
    expect_array,
    expect_object,
    expect_string,
    merge_extra,
    optional_string,
    parse_timestamp,
    required_field,
    resolve_now,
    tool_arguments,
    unmapped_fields,
    uuid_hex,
)
from ._history import History, build_context, require_nonempty, with_source

__all__ = [
    "import_conversation_entries",
]

_IMAGE_FORMATS = {"png": "image/png", "jpeg": "image/jpeg", "jpg": "image/jpeg"}
_IMAGE_FORMATS |= {"gif": "image/gif", "webp": "image/webp"}


def _image_block(item: Any, path: str) -> ImagePart:
    """A chat CLI ``ImageBlock``: ``{"format": "png", "source": {"Bytes": ...}}``, the
    bytes as base64 text or as an array of byte values."""
    obj = expect_object(item, path)
    fmt = expect_string(required_field(obj, "format", path), f"{path}.format").lower()
    mime = _IMAGE_FORMATS.get(fmt)
    if mime is None:
        raise InvalidInput(
            f"{path}.format", f"unknown image format {fmt!r} (png, jpeg, gif or webp)"
        )
    source = expect_object(required_field(obj, "source", path), f"{path}.source")
    raw = required_field(source, "Bytes", f"{path}.source")
    bpath = f"{path}.source.Bytes"
    if isinstance(raw, str):
        check_base64(raw, bpath)
        data = raw
    elif isinstance(raw, list) and all(
        isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in raw
    ):
        data = base64.b64encode(bytes(raw)).decode("ascii")
    else:
        raise InvalidInput(bpath, "must be base64 text or an array of byte values")
    leftover = unmapped_fields(obj, {"format", "source"}) | unmapped_fields(source, {"Bytes"})
    if leftover:
        raise InvalidInput(path, f"unexpected image fields: {', '.join(sorted(leftover))}")
    return ImagePart(url=f"data:{mime};base64,{data}")


_USER_VARIANTS = ("Prompt", "ToolUseResults", "CancelledToolUses")
_ASSISTANT_VARIANTS = ("Response", "ToolUse")


def _tool_use_result(item: Any, path: str) -> tuple[str, Any, bool, dict[str, Any]]:
    """A chat CLI ``ToolUseResult``: (call id, result, success, fields left over).

    The result is the one content block's value (``{"Text": s}`` -> ``s``,
    ``{"Json": v}`` -> ``v``), or the blocks verbatim when there are several.
    """
    obj = expect_object(item, path)
    call_id = expect_string(required_field(obj, "tool_use_id", path), f"{path}.tool_use_id")
    blocks = expect_array(obj.get("content", []), f"{path}.content")
    values: list[Any] = []
    for j, block in enumerate(blocks):
        b = expect_object(block, f"{path}.content[{j}]")
        if len(b) != 1 or next(iter(b)) not in ("Text", "Json", "text", "json"):
            raise InvalidInput(f"{path}.content[{j}]", 'must be {"Text": ...} or {"Json": ...}')
        [(key, value)] = b.items()
        if key.lower() == "text":
            expect_string(value, f"{path}.content[{j}].{key}")
        values.append(value)
    result: Any = values[0] if len(values) == 1 else blocks
    status = expect_string(required_field(obj, "status", path), f"{path}.status")
    if status.lower() not in ("success", "error"):
        raise InvalidInput(f"{path}.status", f"must be 'Success' or 'Error', not {status!r}")
    return (
        call_id,
        result,
        status.lower() == "success",
        unmapped_fields(obj, {"tool_use_id", "content", "status"}),
    )


def _user_extra(obj: dict[str, Any], path: str, entry_extra: dict[str, Any]) -> dict[str, Any]:
    """The entry's fields kept in the message's ``extra``, with the user's context."""
    ours: dict[str, Any] = dict(entry_extra)
    if obj.get("additional_context"):
        ours["additional_context"] = expect_string(
            obj["additional_context"], f"{path}.additional_context"
        )
    if obj.get("env_context") is not None:
        ours["env_context"] = obj["env_context"]
    return ours


def _user_body(obj: dict[str, Any], path: str, known: set[str]) -> tuple[str, str, dict[str, Any]]:
    """The user message's variant, its path and its body (``known`` gains the
    fields the body was taken from)."""
    content = obj.get("content")
    if isinstance(content, dict):
        if len(content) != 1 or next(iter(content)) not in _USER_VARIANTS:
            raise InvalidInput(
                f"{path}.content", f"must be one of {{{', '.join(_USER_VARIANTS)}: ...}}"
            )
        [(variant, body_value)] = content.items()
        bpath = f"{path}.content.{variant}"
        return variant, bpath, expect_object(body_value, bpath)
    if "prompt" in obj or isinstance(content, str):
        known.add("prompt")
        return "Prompt", path, {"prompt": obj.get("prompt", content)}
    raise InvalidInput(
        path, "a user message needs 'content' ({\"Prompt\": {\"prompt\": ...}}) or 'prompt'"
    )


def _entry_user(h: History, user: Any, path: str, entry_extra: dict[str, Any]) -> None:
    if isinstance(user, str):
        user = {"prompt": user}
    obj = expect_object(user, path)
    at = parse_timestamp(obj.get("timestamp"), f"{path}.timestamp") or h.now
    images = [
        _image_block(b, f"{path}.images[{j}]")
        for j, b in enumerate(expect_array(obj.get("images") or [], f"{path}.images"))
    ]
    known = {"content", "timestamp", "images", "additional_context", "env_context"}
    ours = _user_extra(obj, path, entry_extra)
    variant, bpath, body = _user_body(obj, path, known)
    extra = merge_extra(unmapped_fields(obj, known), ours, path)

    prompt: str | None = None
    if variant == "Prompt":
        prompt = expect_string(required_field(body, "prompt", bpath), f"{bpath}.prompt")
        body_known = {"prompt"}
    else:
        results = expect_array(
            required_field(body, "tool_use_results", bpath), f"{bpath}.tool_use_results"
        )
        body_known = {"tool_use_results"}
        if variant == "CancelledToolUses":
            body_known.add("prompt")
            if body.get("prompt") is not None:
                prompt = expect_string(body["prompt"], f"{bpath}.prompt")
        for j, item in enumerate(results):
            rpath = f"{bpath}.tool_use_results[{j}]"
            call_id, result, success, rest = _tool_use_result(item, rpath)
            first = j == 0 and prompt is None
            h.result(
                call_id,
                result,
                success=success,
                at=at,
                path=f"{rpath}.tool_use_id",
                extra=merge_extra(rest, extra, rpath) if first else rest,
                content=list(images) if first else None,
                denied=_cancel_reason(result) if variant == "CancelledToolUses" else None,
            )
        if not results and prompt is None:
            raise InvalidInput(f"{bpath}.tool_use_results", "is empty and there is no prompt")
    body_rest = unmapped_fields(body, body_known)
    if body_rest:
        raise InvalidInput(bpath, f"unexpected fields: {', '.join(sorted(body_rest))}")
    if prompt is not None:
        parts: list[ContentPart] = [TextPart(text=prompt)] if prompt else []
        h.message(
            InternalMessage(
                role=Role.USER,
                content=[*parts, *images],
                metadata=MessageMetadata(created_at=at, extra=extra),
            )
        )


def _cancel_reason(result: Any) -> str:
    return result if isinstance(result, str) and result else "cancelled by the user"


def _thinking(value: Any, path: str) -> tuple[str | None, dict[str, Any]]:
    if value is None:
        return None, {}
    if isinstance(value, str):
        return value, {}
    obj = expect_object(value, path)
    text = obj.get("text")
    if isinstance(text, str):
        rest = unmapped_fields(obj, {"text"})
        return text, ({"thinking": rest} if rest else {})
    return None, {"thinking": value}


def _entry_assistant(h: History, assistant: Any, path: str, entry_extra: dict[str, Any]) -> None:
    if isinstance(assistant, str):
        assistant = {"content": assistant}
    obj = expect_object(assistant, path)
    if len(obj) == 1 and next(iter(obj)) in _ASSISTANT_VARIANTS:
        [(variant, body_value)] = obj.items()
        bpath = f"{path}.{variant}"
        body = expect_object(body_value, bpath)
        if variant == "ToolUse":
            required_field(body, "tool_uses", bpath)
    else:
        variant, bpath, body = "", path, obj
    text = expect_string(body.get("content", ""), f"{bpath}.content")
    ours: dict[str, Any] = dict(entry_extra)
    message_id = optional_string(body, "message_id", bpath)
    if message_id is not None:
        ours["message_id"] = message_id
    thinking, thinking_rest = _thinking(body.get("thinking"), f"{bpath}.thinking")
    ours |= thinking_rest
    calls: list[ToolCallRequest] = []
    call_paths: dict[str, str] = {}
    tool_use_rest: list[dict[str, Any]] = []
    uses = body.get("tool_uses")
    for j, use in enumerate(expect_array(uses, f"{bpath}.tool_uses") if uses is not None else []):
        upath = f"{bpath}.tool_uses[{j}]"
        u = expect_object(use, upath)
        call_id = expect_string(required_field(u, "id", upath), f"{upath}.id")
        name = expect_string(required_field(u, "name", upath), f"{upath}.name")
        args, raw = tool_arguments(u.get("args"), f"{upath}.args")
        rest = unmapped_fields(u, {"id", "name", "args"})
        if rest.get("orig_name") == name:
            del rest["orig_name"]
        if "orig_args" in rest and rest["orig_args"] == u.get("args"):
            del rest["orig_args"]
        tool_use_rest.append(rest)
        calls.append(
            ToolCallRequest(
                id=call_id,
                tool_name=name,
                arguments=args,
                raw_arguments=raw,
                approval_status=ApprovalStatus.APPROVED,
            )
        )
        call_paths[call_id] = f"{upath}.id"
    if any(tool_use_rest):
        ours["tool_uses"] = tool_use_rest
    at = parse_timestamp(body.get("timestamp"), f"{bpath}.timestamp") or h.now
    known = {"content", "message_id", "thinking", "tool_uses", "timestamp"}
    h.message(
        InternalMessage(
            role=Role.ASSISTANT,
            content=[TextPart(text=text)] if text else [],
            tool_calls=calls or None,
            message_type=MessageType.TOOL_CALL if calls else MessageType.TEXT,
            thinking=thinking,
            metadata=MessageMetadata(
                created_at=at, extra=merge_extra(unmapped_fields(body, known), ours, bpath)
            ),
        ),
        call_paths,
    )


def import_conversation_entries(
    data: Any, *, now: datetime | None = None, ids: Ids | None = None
) -> ChatContext:
    """A chat CLI's conversation entries (a list, or ``{"entries": [...]}``).

    Each entry gives its ``user`` message, then its ``assistant`` message (either
    may be null). A user message with ``ToolUseResults`` becomes tool messages
    answering the previous assistant's ``tool_uses``; ``CancelledToolUses``
    gives failed results whose calls are marked ``Denied`` by ``human``, then the
    prompt that came with them, if any. ``additional_context`` (when not empty)
    and ``env_context`` (when not null) are kept in ``metadata.extra`` of the
    user message, or of its first tool message when it has no prompt (images
    too: they go to that message's content). Assistant messages have no
    timestamp in this format, so they get ``now``.
    """
    check_source(data)
    at = resolve_now(now)
    source: dict[str, Any] = {}
    if isinstance(data, list):
        entries, root = data, "$"
    else:
        obj = expect_object(data, "$")
        entries = expect_array(required_field(obj, "entries", "$"), "$.entries")
        root = "$.entries"
        source = unmapped_fields(obj, {"entries"})
    require_nonempty(entries, root)
    h = History(at)
    for i, item in enumerate(entries):
        path = f"{root}[{i}]"
        entry = expect_object(item, path)
        user, assistant = entry.get("user"), entry.get("assistant")
        if user is None and assistant is None:
            raise InvalidInput(path, "an entry needs a 'user' or an 'assistant' message")
        rest = unmapped_fields(entry, {"user", "assistant"})
        entry_extra = {"entry": rest} if rest else {}
        if user is not None:
            _entry_user(h, user, f"{path}.user", entry_extra)
            entry_extra = {}
        if assistant is not None:
            _entry_assistant(h, assistant, f"{path}.assistant", entry_extra)
    messages = with_source(h.finish(), source, root)
    return build_context(messages, now=at, ids=ids or uuid_hex)
