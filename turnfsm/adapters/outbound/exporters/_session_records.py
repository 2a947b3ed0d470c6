"""A context's branch in the session JSON format: ``{"id", "title",
"created_at", "updated_at", "records": [...]}``, as
:func:`~turnfsm.adapters.inbound.import_session_records` reads it.

- ``id`` is the one an import of this format kept
  (``metadata.extra["source"]["id"]`` of the first message), else the
  context's; ``title`` is the context's title when its config has one, else the
  kept one, else null; ``created_at``/``updated_at`` are the context's. Other
  kept top-level fields are written back beside them.
- The branch's system prompt (and its user prompt, joined by a blank line, as
  the engine sends them) is a first ``system`` record, at the context's
  ``created_at`` (an import reads it back as a system message).
- A system, user or assistant message is a ``MessageRecord``: its text parts
  joined as ``content``, its images and files as ``binary_content`` (a base64
  data URL as ``{"data", "media_type", "kind": "binary"}``, a file with its
  name as ``identifier``, any other image URL as ``{"url", "kind":
  "image-url"}``), its timestamp. A frontend operator's message is a ``user``
  record: the format has no such role.
- Each tool call is a ``ToolCallRecord`` with its id, name, arguments (the
  text the model sent when it was not a JSON object), and its result and
  ``success``; the record's ``timestamp`` is the result's (when the call
  finished). An assistant message with text and calls gives its text record,
  then one record per call; a call with no result (still pending, or cut off)
  gets the result an import gives a call whose result is missing
  (:data:`~turnfsm.adapters.inbound.MISSING_RESULT`, ``success`` false): a
  record must have one.
- ``metadata.extra`` keys are written back as fields of the record they came
  from (a ``binary_content`` item's own leftover fields into that item).

What the format has no place for, and is left out: other branches, the
system prompt apart from the messages, thinking, an image's ``detail``, the
order of text among images (text comes first), the split of one answer's calls
into one message (each call becomes its own record and, on import, its own
message), approval decisions (an import marks every call with a result
``Approved``), the result message's own timestamp and ``metadata.extra``,
message types other than text and tool calls, and message metadata other than
the timestamp and ``extra`` (model, usage, attempt, finish reason, cancelled).
"""

from __future__ import annotations

from typing import Any

from ....model import (
    ChatContext,
    FilePart,
    ImagePart,
    InternalMessage,
    Role,
    TextPart,
    ToolCallRequest,
)
from ...inbound.importers import MISSING_RESULT
from ._common import (
    base64_data_url,
    extra_fields,
    results_by_call,
    select_branch,
    source_fields,
    stamp,
    system_text,
)

__all__ = [
    "export_session_records",
    "message_record",
    "tool_record",
]

_ROLES = {
    Role.SYSTEM: "system",
    Role.USER: "user",
    Role.FRONTEND_OPERATOR: "user",
    Role.ASSISTANT: "assistant",
}
_MESSAGE_RECORD = ("type", "role", "content", "binary_content", "timestamp")
_TOOL_RECORD = ("type", "tool_call_id", "tool_name", "arguments", "result", "success", "timestamp")
_TOP_LEVEL = ("id", "title", "created_at", "updated_at", "records")


def _binary_item(part: ImagePart | FilePart, rest: dict[str, Any]) -> dict[str, Any]:
    """One ``binary_content`` item, with the fields the import kept of it."""
    # a kept media_type sits beside a mime_type the import read: keep both apart
    mime_key = "mime_type" if "media_type" in rest else "media_type"
    item: dict[str, Any]
    if isinstance(part, FilePart):
        item = {"data": part.data, mime_key: part.mime_type, "identifier": part.name}
        item["kind"] = "binary"
    else:
        inline = base64_data_url(part.url)
        if inline is not None and inline[0].startswith("image/"):
            item = {"data": inline[1], mime_key: inline[0], "kind": "binary"}
        else:
            item = {"url": part.url, "kind": "image-url"}
    return {**item, **{k: v for k, v in rest.items() if k not in item}}


def message_record(msg: InternalMessage) -> dict[str, Any]:
    """One system, user or assistant message as a ``MessageRecord`` (see above)."""
    extra = msg.metadata.extra
    kept = extra.get("binary_content")
    leftovers = kept if isinstance(kept, list) else []
    items: list[dict[str, Any]] = []
    for part in msg.content:
        if isinstance(part, TextPart):
            continue
        j = len(items)
        rest = leftovers[j] if j < len(leftovers) and isinstance(leftovers[j], dict) else {}
        items.append(_binary_item(part, rest))
    record: dict[str, Any] = {
        "type": "message",
        "role": _ROLES[msg.role],
        "content": msg.text,
        "binary_content": items,
        "timestamp": stamp(msg.metadata.created_at),
    }
    return {**record, **extra_fields(extra, _MESSAGE_RECORD)}


def tool_record(
    call: ToolCallRequest, asked: InternalMessage, result: InternalMessage | None
) -> dict[str, Any]:
    """One call of ``asked`` as a ``ToolCallRecord``, with ``result`` (None: the
    result an import gives a call whose result is missing)."""
    done = result.tool_result if result is not None else None
    return {
        "type": "tool_call",
        "tool_call_id": call.id,
        "tool_name": call.tool_name,
        "arguments": call.raw_arguments if call.raw_arguments is not None else call.arguments,
        "result": done.result if done is not None else dict(MISSING_RESULT),
        "success": done.success if done is not None else False,
        "timestamp": stamp((result or asked).metadata.created_at),
    }


def export_session_records(ctx: ChatContext, *, branch: str | None = None) -> dict[str, Any]:
    """The branch (the active one by default) in the session JSON format (see the
    module docstring for what is written where, and what is left out)."""
    found, history = select_branch(ctx, branch)
    source = source_fields(history)
    results = results_by_call(history)
    records: list[dict[str, Any]] = []
    prompt = system_text(found)
    if prompt is not None:
        records.append(
            {
                "type": "message",
                "role": "system",
                "content": prompt,
                "binary_content": [],
                "timestamp": stamp(ctx.created_at),
            }
        )
    for msg in history:
        if msg.role is Role.TOOL:
            continue  # written with its call
        calls = msg.tool_calls or []
        if not calls or msg.content:
            records.append(message_record(msg))
        for i, call in enumerate(calls):
            record = tool_record(call, msg, results.get(call.id))
            if i == 0 and not msg.content:
                record |= extra_fields(msg.metadata.extra, _TOOL_RECORD)
            records.append(record)
    title = getattr(ctx.config, "title", None)
    return {
        "id": source.get("id", ctx.id),
        "title": title if title is not None else source.get("title"),
        "created_at": stamp(ctx.created_at),
        "updated_at": stamp(ctx.updated_at),
        **{k: v for k, v in source.items() if k not in _TOP_LEVEL},
        "records": records,
    }
