"""The session JSON format: ``{"id", "title", "created_at", "updated_at",
"records": [...]}`` (or the bare list of records), where a record is a
``MessageRecord`` (``type: "message"``, ``role`` system/user/assistant,
``content``, ``binary_content``, ``timestamp``) or a ``ToolCallRecord``
(``type: "tool_call"``, ``tool_call_id``, ``tool_name``, ``arguments``,
``result``, ``success``, ``timestamp``).

Batching: each ``ToolCallRecord`` becomes its own assistant message (one call,
``message_type`` ToolCall) followed by its tool message; consecutive records
are *not* merged into one parallel batch. The records do not say which calls
came from one model response (a round without thinking text writes no message
record between two rounds), so a merge could invent a parallel batch that
never happened; one call per message is also how the application that writes
this format rebuilds the messages it sends to the model. An assistant text
record before the calls stays its own message, with its own timestamp.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ....errors import InvalidInput
from ....model import (
    ApprovalStatus,
    ChatContext,
    ContentPart,
    FilePart,
    ImagePart,
    InternalMessage,
    MessageMetadata,
    MessageType,
    Role,
    TextPart,
    ToolCallRequest,
    title_problem,
)
from ._checks import (
    Ids,
    check_base64,
    check_source,
    expect_array,
    expect_object,
    expect_string,
    kind_of,
    merge_extra,
    parse_timestamp,
    required_field,
    resolve_now,
    split_data_url,
    tool_arguments,
    unmapped_fields,
    uuid_hex,
)
from ._history import History, build_context, require_nonempty, with_source

__all__ = [
    "import_session_records",
]


def _binary_part(item: Any, path: str, index: int) -> tuple[ContentPart, dict[str, Any]]:
    """One ``binary_content`` item as a content part, and its fields left over.

    Accepted: ``{"data": <base64>, "media_type": ..., "identifier"?, "kind"?: "binary"}``
    (pydantic-ai's ``BinaryContent``; ``mime_type`` and ``name``/``filename`` are
    read too), ``{"url": ..., "kind"?: "image-url"}``, or a base64 data URL string.
    Images become image parts (a data URL), other media file parts.
    """
    if isinstance(item, str):
        mime, data = split_data_url(item, path)
        if mime.startswith("image/"):
            return ImagePart(url=item), {}
        return FilePart(name=f"attachment-{index + 1}", mime_type=mime, data=data), {}
    obj = expect_object(item, path)
    if "data" in obj:
        data = expect_string(obj["data"], f"{path}.data")
        check_base64(data, f"{path}.data")
        mime_key = "mime_type" if "mime_type" in obj else "media_type"
        mime = expect_string(required_field(obj, mime_key, path), f"{path}.{mime_key}")
        if obj.get("kind", "binary") != "binary":
            raise InvalidInput(
                f"{path}.kind", f"must be 'binary' for inline data, not {obj['kind']!r}"
            )
        known = {"data", mime_key, "kind"}
        if mime.startswith("image/"):
            part: ContentPart = ImagePart(url=f"data:{mime};base64,{data}")
        else:
            name_key = next((k for k in ("identifier", "name", "filename") if k in obj), None)
            name = f"attachment-{index + 1}"
            if name_key is not None and obj[name_key] is not None:
                name = expect_string(obj[name_key], f"{path}.{name_key}")
                known.add(name_key)
            part = FilePart(name=name, mime_type=mime, data=data)
        return part, unmapped_fields(obj, known)
    if "url" in obj:
        if obj.get("kind", "image-url") != "image-url":
            raise InvalidInput(
                f"{path}.kind",
                f"only image URLs can be imported, not {obj['kind']!r} (inline the data instead)",
            )
        url = expect_string(obj["url"], f"{path}.url")
        return ImagePart(url=url), unmapped_fields(obj, {"url", "kind"})
    raise InvalidInput(path, "binary content needs 'data' (base64) and 'media_type', or a 'url'")


_SESSION_ROLES = {"system": Role.SYSTEM, "user": Role.USER, "assistant": Role.ASSISTANT}
_MESSAGE_RECORD = {"type", "role", "content", "binary_content", "timestamp"}
_TOOL_RECORD = {"type", "tool_call_id", "tool_name", "arguments", "result", "success", "timestamp"}


def _session_message(rec: dict[str, Any], path: str, now: datetime) -> InternalMessage:
    role_value = required_field(rec, "role", path)
    role = _SESSION_ROLES.get(role_value) if isinstance(role_value, str) else None
    if role is None:
        raise InvalidInput(
            f"{path}.role",
            f"must be 'system', 'user' or 'assistant', not {role_value!r} "
            "(tool results are 'tool_call' records)",
        )
    content = rec.get("content")
    text = "" if content is None else expect_string(content, f"{path}.content")
    parts: list[ContentPart] = [TextPart(text=text)] if text else []
    binary = rec.get("binary_content")
    ours: dict[str, Any] = {}
    if binary is not None:
        leftovers: list[dict[str, Any]] = []
        for j, item in enumerate(expect_array(binary, f"{path}.binary_content")):
            part, rest = _binary_part(item, f"{path}.binary_content[{j}]", j)
            parts.append(part)
            leftovers.append(rest)
        if any(leftovers):
            ours["binary_content"] = leftovers
    at = parse_timestamp(rec.get("timestamp"), f"{path}.timestamp") or now
    extra = merge_extra(unmapped_fields(rec, _MESSAGE_RECORD), ours, path)
    return InternalMessage(
        role=role, content=parts, metadata=MessageMetadata(created_at=at, extra=extra)
    )


def _session_tool_call(h: History, rec: dict[str, Any], path: str, now: datetime) -> None:
    call_id = expect_string(required_field(rec, "tool_call_id", path), f"{path}.tool_call_id")
    name = expect_string(required_field(rec, "tool_name", path), f"{path}.tool_name")
    args, raw = tool_arguments(rec.get("arguments"), f"{path}.arguments")
    success = required_field(rec, "success", path)
    if not isinstance(success, bool):
        raise InvalidInput(f"{path}.success", f"must be true or false, not {kind_of(success)}")
    at = parse_timestamp(rec.get("timestamp"), f"{path}.timestamp") or now
    call = ToolCallRequest(
        id=call_id,
        tool_name=name,
        arguments=args,
        raw_arguments=raw,
        approval_status=ApprovalStatus.APPROVED,
    )
    h.message(
        InternalMessage(
            role=Role.ASSISTANT,
            tool_calls=[call],
            message_type=MessageType.TOOL_CALL,
            metadata=MessageMetadata(created_at=at, extra=unmapped_fields(rec, _TOOL_RECORD)),
        ),
        {call_id: f"{path}.tool_call_id"},
    )
    h.result(call_id, rec.get("result"), success=success, at=at, path=path)


def import_session_records(
    data: Any, *, now: datetime | None = None, ids: Ids | None = None
) -> ChatContext:
    """A session in the session JSON format (``{"records": [...], ...}`` or the bare
    list of records).

    A ``MessageRecord`` becomes a system, user or assistant message: ``content``
    as a text part, each ``binary_content`` item as an image part (``image/*``)
    or a file part. A ``ToolCallRecord`` becomes an assistant message asking for
    that one call (``Approved``) followed by a tool message with its ``result``
    and ``success``; records are never merged into one batch (see the module
    docstring). The session's ``created_at``/``updated_at`` become the context's,
    its ``title`` the context's title (when it is one line of text: 1 to 1,000
    characters, no control character); its ``id``, a title that is not one, and
    any other field go to ``metadata.extra["source"]`` of the first message.
    """
    check_source(data)
    at = resolve_now(now)
    source: dict[str, Any] = {}
    created = updated = None
    if isinstance(data, list):
        records, root = data, "$"
    else:
        obj = expect_object(data, "$")
        records = expect_array(required_field(obj, "records", "$"), "$.records")
        root = "$.records"
        created = parse_timestamp(obj.get("created_at"), "$.created_at")
        updated = parse_timestamp(obj.get("updated_at"), "$.updated_at")
        source = unmapped_fields(obj, {"records", "created_at", "updated_at"})
    title = source.get("title")
    if title_problem(title) is None:
        del source["title"]
    else:
        title = None
    require_nonempty(records, root)
    h = History(at)
    for i, item in enumerate(records):
        path = f"{root}[{i}]"
        rec = expect_object(item, path)
        kind = rec.get("type")
        if kind == "message":
            h.message(_session_message(rec, path, at))
        elif kind == "tool_call":
            _session_tool_call(h, rec, path, at)
        elif "type" not in rec:
            raise InvalidInput(f"{path}.type", "missing (expected 'message' or 'tool_call')")
        else:
            raise InvalidInput(
                f"{path}.type", f"unknown record type {kind!r} (expected 'message' or 'tool_call')"
            )
    messages = with_source(h.finish(), source, root)
    return build_context(
        messages,
        now=at,
        ids=ids or uuid_hex,
        created_at=created,
        updated_at=updated,
        title=title,
    )
