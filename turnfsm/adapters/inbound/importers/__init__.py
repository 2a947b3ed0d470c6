"""Conversations kept in other formats, imported into a :class:`ChatContext`.

Four sources, each with its own function (:func:`import_context` picks one,
:func:`detect_format` tells them apart):

``session``  (:func:`import_session_records`) the session JSON of seed 001:
    ``{"id", "title", "created_at", "updated_at", "records": [...]}`` (or the
    bare list of records), where a record is a ``MessageRecord`` (``type:
    "message"``, ``role`` system/user/assistant, ``content``, ``binary_content``,
    ``timestamp``) or a ``ToolCallRecord`` (``type: "tool_call"``,
    ``tool_call_id``, ``tool_name``, ``arguments``, ``result``, ``success``,
    ``timestamp``).
``entries``  (:func:`import_conversation_entries`) the alternating entries of
    seed 003: ``[{"user": {...}, "assistant": {...}}, ...]`` (or
    ``{"entries": [...]}``), in the serde shape of the chat CLI the seed comes
    from (``{"content": {"Prompt": {"prompt": ...}}}``, ``{"ToolUseResults":
    ...}``, ``{"CancelledToolUses": ...}``, ``{"Response": {...}}``,
    ``{"ToolUse": {..., "tool_uses": [...]}}``) or a plain one (``{"prompt":
    ...}``, ``{"content": ..., "tool_uses": [...]}``, or just strings).
``openai``   (:func:`import_openai_messages`) a plain OpenAI Chat Completions
    ``messages`` list (or ``{"messages": [...], "model": ...}``).
``request``  (:func:`import_request_body`) a request body of seed 004, through
    :func:`~turnfsm.adapters.inbound.parse_request`.

Every import gives a context in state ``Idle`` with one branch, ``main``, whose
messages are chained by ``parent_id``. Timestamps come from the source where it
has them, else from ``now`` (injected; by default the current UTC time; one
without an offset is taken as UTC). Message, context and system prompt ids come
from ``ids`` (default: uuid4 hex); tool call ids are the source's own.

Nothing is dropped silently:

- fields this module does not map are kept, verbatim, in the
  ``metadata.extra`` of the message they came with; fields of the whole source
  that a context has no place for (a session's ``id`` and ``title``, unknown
  top-level keys) go to ``metadata.extra["source"]`` of the first message;
- what cannot be converted raises :class:`~turnfsm.errors.InvalidInput`, whose
  ``where`` is the JSON path of the offending value (``$.records[3].role``);
- the source must hold only what a store can load back (the rules of
  :mod:`turnfsm.model._json`: nesting depth, string keys, finite numbers,
  valid Unicode text), and so must tool arguments given as JSON text; what
  breaks them is refused the same way, with its JSON path;
- an empty source (no record, entry or message) is refused: there would be
  nothing to import.

Tool calls: every call of an imported context ends with exactly one result, a
``tool`` message right after the assistant message that asked for it (and after
that message's other results), so the context rests in ``Idle`` with no open
call. A call whose result the source does not have gets one: ``{"error": "no
result in the imported history", "status": "missing"}`` with ``success=False``,
flagged ``metadata.extra["synthesized"] = True``, and the call itself is marked
``Denied`` by ``system`` with reason ``"missing"`` (as the engine does for the
calls it closes). A result that names no call of the message just before it is
an error. Calls that have a result are ``Approved`` (they ran); calls the chat
CLI recorded as cancelled are ``Denied`` by ``human``.

Seed 001 batching: each ``ToolCallRecord`` becomes its own assistant message
(one call, ``message_type`` ToolCall) followed by its tool message; consecutive
records are *not* merged into one parallel batch. The records do not say which
calls came from one model response (a round without thinking text writes no
message record between two rounds), so a merge could invent a parallel batch
that never happened; one call per message is also how the seed itself rebuilds
the messages it sends to the model. An assistant text record before the calls
stays its own message, with its own timestamp.

Only the OpenAI import lifts a system prompt: a first ``system`` message with
plain text content and no other field becomes the branch's system prompt. In
the other formats system messages carry timestamps a system prompt cannot
hold, so they stay messages, as do later or annotated OpenAI system messages.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from pydantic import TypeAdapter, ValidationError

from ...errors import InvalidInput
from ...model import (
    ApprovalStatus,
    Branch,
    ChatConfig,
    ChatContext,
    ContentPart,
    FilePart,
    ImagePart,
    InternalMessage,
    JSONProblem,
    MessageMetadata,
    MessageNode,
    MessageType,
    Role,
    SystemPrompt,
    TextPart,
    ToolCallRequest,
    ToolCallResult,
    check_json,
    id_problem,
)
from ...states import State
from ._request import parse_request

__all__ = [
    "IMPORT_FORMATS",
    "MISSING_RESULT",
    "ImportFormat",
    "count_tool_calls",
    "detect_format",
    "import_context",
    "import_conversation_entries",
    "import_openai_messages",
    "import_request_body",
    "import_session_records",
]

ImportFormat = Literal["session", "entries", "openai", "request"]
IMPORT_FORMATS: tuple[str, ...] = get_args(ImportFormat)

MISSING_RESULT: dict[str, str] = {
    "error": "no result in the imported history",
    "status": "missing",
}
"""The result given to a tool call whose result is not in the imported source."""

Ids = Callable[[], str]


def _uuid_hex() -> str:
    return uuid.uuid4().hex


# --- small checks, each naming the JSON path ----------------------------------------------


def _kind(value: Any) -> str:
    """The JSON name of a value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _obj(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(path, f"must be an object, not {_kind(value)}")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInput(path, f"must be an array, not {_kind(value)}")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(path, f"must be a string, not {_kind(value)}")
    return value


def _required(obj: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        raise InvalidInput(f"{path}.{key}", "missing")
    return obj[key]


def _opt_str(obj: Mapping[str, Any], key: str, path: str) -> str | None:
    value = obj.get(key)
    return None if value is None else _str(value, f"{path}.{key}")


_DATETIME: TypeAdapter[datetime] = TypeAdapter(datetime)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _timestamp(value: Any, path: str) -> datetime | None:
    """An ISO 8601 string (or Unix seconds) as an aware datetime; ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidInput(path, f"must be an ISO 8601 timestamp, not {_kind(value)}")
    try:
        return _utc(_DATETIME.validate_python(value))
    except ValidationError as exc:
        raise InvalidInput(path, f"not a timestamp: {value!r}") from exc


def _unknown(obj: Mapping[str, Any], known: Iterable[str]) -> dict[str, Any]:
    """The fields of ``obj`` this module does not map, kept verbatim."""
    skip = set(known)
    return {k: v for k, v in obj.items() if k not in skip}


def _merge(extra: dict[str, Any], ours: Mapping[str, Any], path: str) -> dict[str, Any]:
    """``extra`` plus the importer's own keys; a source field of the same name is an error."""
    for key in ours:
        if key in extra:
            raise InvalidInput(
                f"{path}.{key}",
                "this field name is used by the importer itself in metadata.extra; "
                "rename the field",
            )
    return {**extra, **ours}


def _check_base64(data: str, path: str) -> None:
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput(path, "is not valid base64") from exc


def _data_url(url: str, path: str) -> tuple[str, str]:
    """``data:<mime>;base64,<data>`` as (mime, data)."""
    head, sep, data = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise InvalidInput(path, "must be a base64 data URL (data:<mime type>;base64,<data>)")
    mime = head[len("data:") : -len(";base64")] or "application/octet-stream"
    _check_base64(data, path)
    return mime, data


def _arguments(value: Any, path: str) -> tuple[dict[str, Any], str | None]:
    """Tool call arguments: an object, or JSON text; text that is not a JSON object
    is kept verbatim as ``raw_arguments`` (with empty ``arguments``)."""
    if value is None:
        return {}, None
    if isinstance(value, dict):
        return value, None
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            return {}, value
        if not isinstance(decoded, dict):
            return {}, value
        try:
            check_json(decoded, path)
        except JSONProblem as exc:
            raise InvalidInput(exc.path, f"{exc.reason} (in the JSON text of {path})") from None
        return decoded, None
    raise InvalidInput(path, f"must be an object or a JSON string, not {_kind(value)}")


def _check_source(data: Any) -> None:
    """Refuse a source that holds what a store cannot load back (the size of the
    whole source is not limited: it holds many payloads)."""
    try:
        check_json(data, "$", max_bytes=None)
    except JSONProblem as exc:
        raise InvalidInput(exc.path, exc.reason) from None


def _new_id(ids: Ids) -> str:
    if not callable(ids):
        raise InvalidInput("ids", f"must be a callable returning ids, not {_kind(ids)}")
    value = ids()
    reason = id_problem(value)
    if reason is not None:
        raise InvalidInput("ids", f"the id factory returned {value!r}: {reason}")
    return value


def _now(now: datetime | None) -> datetime:
    if now is not None and not isinstance(now, datetime):
        raise InvalidInput("now", f"must be a datetime or None, not {_kind(now)}")
    return _utc(now) if now is not None else datetime.now(UTC)


# --- the history being built --------------------------------------------------------------


@dataclass
class _Batch:
    index: int
    """Where the assistant message that asked for the calls is in the history."""
    calls: list[ToolCallRequest]
    open: dict[str, int]
    """Call id -> position in ``calls``, for calls without a result yet."""


@dataclass
class _History:
    """Messages in order, checking that every result answers a call just before it."""

    now: datetime
    messages: list[InternalMessage] = field(default_factory=list)
    batch: _Batch | None = None
    asked_at: dict[str, str] = field(default_factory=dict)
    """Call id -> JSON path where it was asked."""
    answered: set[str] = field(default_factory=set)
    synthesized: set[str] = field(default_factory=set)
    """Calls given the missing result when their batch closed."""

    def message(self, msg: InternalMessage, call_paths: Mapping[str, str] | None = None) -> None:
        """Append a message that is not a tool result (this closes the open batch)."""
        self._close()
        calls = msg.tool_calls or []
        paths = call_paths or {}
        for c in calls:
            where = paths.get(c.id, "$")
            if c.id in self.asked_at:
                raise InvalidInput(
                    where, f"duplicate tool call id {c.id!r} (first at {self.asked_at[c.id]})"
                )
            self.asked_at[c.id] = where
        self.messages.append(msg)
        if calls:
            self.batch = _Batch(
                index=len(self.messages) - 1,
                calls=list(calls),
                open={c.id: i for i, c in enumerate(calls)},
            )

    def result(
        self,
        call_id: str,
        result: Any,
        *,
        success: bool,
        at: datetime,
        path: str,
        extra: dict[str, Any] | None = None,
        content: list[ContentPart] | None = None,
        denied: str | None = None,
    ) -> None:
        """Append the result of a call of the newest batch; ``denied`` marks the call
        as refused by a human with that reason."""
        batch = self.batch
        if batch is None or call_id not in batch.open:
            if call_id in self.answered and call_id not in self.synthesized:
                raise InvalidInput(path, f"a second result for tool call {call_id!r}")
            if call_id in self.asked_at:
                raise InvalidInput(
                    path,
                    f"the result for tool call {call_id!r} is not right after the assistant "
                    f"message that asked for it ({self.asked_at[call_id]})",
                )
            raise InvalidInput(path, f"no tool call with id {call_id!r} before this result")
        pos = batch.open.pop(call_id)
        self.answered.add(call_id)
        if denied is not None:
            batch.calls[pos] = batch.calls[pos].model_copy(
                update={
                    "approval_status": ApprovalStatus.DENIED,
                    "decided_by": "human",
                    "reason": denied,
                }
            )
        self.messages.append(
            InternalMessage(
                role=Role.TOOL,
                content=content or [],
                tool_result=ToolCallResult(request_id=call_id, result=result, success=success),
                message_type=MessageType.TOOL_RESULT,
                metadata=MessageMetadata(created_at=at, extra=extra or {}),
            )
        )

    def _close(self) -> None:
        batch = self.batch
        if batch is None:
            return
        self.batch = None
        for call_id, pos in list(batch.open.items()):
            batch.calls[pos] = batch.calls[pos].model_copy(
                update={
                    "approval_status": ApprovalStatus.DENIED,
                    "decided_by": "system",
                    "reason": "missing",
                }
            )
            self.answered.add(call_id)
            self.synthesized.add(call_id)
            self.messages.append(
                InternalMessage(
                    role=Role.TOOL,
                    tool_result=ToolCallResult(
                        request_id=call_id, result=dict(MISSING_RESULT), success=False
                    ),
                    message_type=MessageType.TOOL_RESULT,
                    metadata=MessageMetadata(created_at=self.now, extra={"synthesized": True}),
                )
            )
        asked = self.messages[batch.index]
        if asked.tool_calls != batch.calls:
            self.messages[batch.index] = asked.model_copy(update={"tool_calls": batch.calls})

    def finish(self) -> list[InternalMessage]:
        self._close()
        return self.messages


def _with_source(
    messages: list[InternalMessage], source: dict[str, Any], path: str
) -> list[InternalMessage]:
    """Keep the source's own fields in ``metadata.extra["source"]`` of the first message."""
    if not source:
        return messages
    if not messages:
        raise InvalidInput(path, "has no message to keep the source's fields on")
    first = messages[0]
    extra = _merge(dict(first.metadata.extra), {"source": source}, f"{path}[0]")
    meta = first.metadata.model_copy(update={"extra": extra})
    return [first.model_copy(update={"metadata": meta}), *messages[1:]]


def _context(
    messages: list[InternalMessage],
    *,
    now: datetime,
    ids: Ids,
    system_prompt: str | None = None,
    created_at: datetime | None = None,
    updated_at: datetime | None = None,
    model: str | None = None,
) -> ChatContext:
    ctx_id = _new_id(ids)
    prompt = (
        SystemPrompt(id=_new_id(ids), content=system_prompt) if system_prompt is not None else None
    )
    pool: dict[str, MessageNode] = {}
    order: list[str] = []
    parent: str | None = None
    for msg in messages:
        mid = _new_id(ids)
        if mid in pool or mid == ctx_id:
            raise InvalidInput("ids", f"the id factory returned {mid!r} twice")
        pool[mid] = MessageNode(id=mid, message=msg, parent_id=parent)
        order.append(mid)
        parent = mid
    times = [m.metadata.created_at for m in messages]
    config = ChatConfig(system_prompt_id=prompt.id if prompt else None)
    if model is not None:
        config = ChatConfig(model_id=model, system_prompt_id=config.system_prompt_id)
    return ChatContext(
        id=ctx_id,
        config=config,
        message_pool=pool,
        branches={"main": Branch(name="main", message_ids=order, system_prompt=prompt)},
        active_branch_name="main",
        current_state=State.IDLE.value,
        created_at=created_at or (min(times) if times else now),
        updated_at=updated_at or (max(times) if times else now),
    )


def _nonempty(items: list[Any], path: str) -> None:
    if not items:
        raise InvalidInput(path, "is empty: there is nothing to import")


# --- binary content (seed 001) and images (seed 003) --------------------------------------


def _binary_part(item: Any, path: str, index: int) -> tuple[ContentPart, dict[str, Any]]:
    """One ``binary_content`` item as a content part, and its fields left over.

    Accepted: ``{"data": <base64>, "media_type": ..., "identifier"?, "kind"?: "binary"}``
    (pydantic-ai's ``BinaryContent``; ``mime_type`` and ``name``/``filename`` are
    read too), ``{"url": ..., "kind"?: "image-url"}``, or a base64 data URL string.
    Images become image parts (a data URL), other media file parts.
    """
    if isinstance(item, str):
        mime, data = _data_url(item, path)
        if mime.startswith("image/"):
            return ImagePart(url=item), {}
        return FilePart(name=f"attachment-{index + 1}", mime_type=mime, data=data), {}
    obj = _obj(item, path)
    if "data" in obj:
        data = _str(obj["data"], f"{path}.data")
        _check_base64(data, f"{path}.data")
        mime_key = "mime_type" if "mime_type" in obj else "media_type"
        mime = _str(_required(obj, mime_key, path), f"{path}.{mime_key}")
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
                name = _str(obj[name_key], f"{path}.{name_key}")
                known.add(name_key)
            part = FilePart(name=name, mime_type=mime, data=data)
        return part, _unknown(obj, known)
    if "url" in obj:
        if obj.get("kind", "image-url") != "image-url":
            raise InvalidInput(
                f"{path}.kind",
                f"only image URLs can be imported, not {obj['kind']!r} (inline the data instead)",
            )
        url = _str(obj["url"], f"{path}.url")
        return ImagePart(url=url), _unknown(obj, {"url", "kind"})
    raise InvalidInput(path, "binary content needs 'data' (base64) and 'media_type', or a 'url'")


_IMAGE_FORMATS = {"png": "image/png", "jpeg": "image/jpeg", "jpg": "image/jpeg"}
_IMAGE_FORMATS |= {"gif": "image/gif", "webp": "image/webp"}


def _image_block(item: Any, path: str) -> ImagePart:
    """A chat CLI ``ImageBlock``: ``{"format": "png", "source": {"Bytes": ...}}``, the
    bytes as base64 text or as an array of byte values."""
    obj = _obj(item, path)
    fmt = _str(_required(obj, "format", path), f"{path}.format").lower()
    mime = _IMAGE_FORMATS.get(fmt)
    if mime is None:
        raise InvalidInput(
            f"{path}.format", f"unknown image format {fmt!r} (png, jpeg, gif or webp)"
        )
    source = _obj(_required(obj, "source", path), f"{path}.source")
    raw = _required(source, "Bytes", f"{path}.source")
    bpath = f"{path}.source.Bytes"
    if isinstance(raw, str):
        _check_base64(raw, bpath)
        data = raw
    elif isinstance(raw, list) and all(
        isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in raw
    ):
        data = base64.b64encode(bytes(raw)).decode("ascii")
    else:
        raise InvalidInput(bpath, "must be base64 text or an array of byte values")
    leftover = _unknown(obj, {"format", "source"}) | _unknown(source, {"Bytes"})
    if leftover:
        raise InvalidInput(path, f"unexpected image fields: {', '.join(sorted(leftover))}")
    return ImagePart(url=f"data:{mime};base64,{data}")


# --- seed 001: session records ------------------------------------------------------------

_SESSION_ROLES = {"system": Role.SYSTEM, "user": Role.USER, "assistant": Role.ASSISTANT}
_MESSAGE_RECORD = {"type", "role", "content", "binary_content", "timestamp"}
_TOOL_RECORD = {"type", "tool_call_id", "tool_name", "arguments", "result", "success", "timestamp"}


def _session_message(rec: dict[str, Any], path: str, now: datetime) -> InternalMessage:
    role_value = _required(rec, "role", path)
    role = _SESSION_ROLES.get(role_value) if isinstance(role_value, str) else None
    if role is None:
        raise InvalidInput(
            f"{path}.role",
            f"must be 'system', 'user' or 'assistant', not {role_value!r} "
            "(tool results are 'tool_call' records)",
        )
    content = rec.get("content")
    text = "" if content is None else _str(content, f"{path}.content")
    parts: list[ContentPart] = [TextPart(text=text)] if text else []
    binary = rec.get("binary_content")
    ours: dict[str, Any] = {}
    if binary is not None:
        leftovers: list[dict[str, Any]] = []
        for j, item in enumerate(_list(binary, f"{path}.binary_content")):
            part, rest = _binary_part(item, f"{path}.binary_content[{j}]", j)
            parts.append(part)
            leftovers.append(rest)
        if any(leftovers):
            ours["binary_content"] = leftovers
    at = _timestamp(rec.get("timestamp"), f"{path}.timestamp") or now
    extra = _merge(_unknown(rec, _MESSAGE_RECORD), ours, path)
    return InternalMessage(
        role=role, content=parts, metadata=MessageMetadata(created_at=at, extra=extra)
    )


def _session_tool_call(h: _History, rec: dict[str, Any], path: str, now: datetime) -> None:
    call_id = _str(_required(rec, "tool_call_id", path), f"{path}.tool_call_id")
    name = _str(_required(rec, "tool_name", path), f"{path}.tool_name")
    args, raw = _arguments(rec.get("arguments"), f"{path}.arguments")
    success = _required(rec, "success", path)
    if not isinstance(success, bool):
        raise InvalidInput(f"{path}.success", f"must be true or false, not {_kind(success)}")
    at = _timestamp(rec.get("timestamp"), f"{path}.timestamp") or now
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
            metadata=MessageMetadata(created_at=at, extra=_unknown(rec, _TOOL_RECORD)),
        ),
        {call_id: f"{path}.tool_call_id"},
    )
    h.result(call_id, rec.get("result"), success=success, at=at, path=path)


def import_session_records(
    data: Any, *, now: datetime | None = None, ids: Ids | None = None
) -> ChatContext:
    """A seed 001 session (``{"records": [...], ...}`` or the bare list of records).

    A ``MessageRecord`` becomes a system, user or assistant message: ``content``
    as a text part, each ``binary_content`` item as an image part (``image/*``)
    or a file part. A ``ToolCallRecord`` becomes an assistant message asking for
    that one call (``Approved``) followed by a tool message with its ``result``
    and ``success``; records are never merged into one batch (see the module
    docstring). The session's ``created_at``/``updated_at`` become the context's;
    its ``id``, ``title`` and any other field go to ``metadata.extra["source"]``
    of the first message.
    """
    _check_source(data)
    at = _now(now)
    source: dict[str, Any] = {}
    created = updated = None
    if isinstance(data, list):
        records, root = data, "$"
    else:
        obj = _obj(data, "$")
        records = _list(_required(obj, "records", "$"), "$.records")
        root = "$.records"
        created = _timestamp(obj.get("created_at"), "$.created_at")
        updated = _timestamp(obj.get("updated_at"), "$.updated_at")
        source = _unknown(obj, {"records", "created_at", "updated_at"})
    _nonempty(records, root)
    h = _History(at)
    for i, item in enumerate(records):
        path = f"{root}[{i}]"
        rec = _obj(item, path)
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
    messages = _with_source(h.finish(), source, root)
    return _context(messages, now=at, ids=ids or _uuid_hex, created_at=created, updated_at=updated)


# --- seed 003: alternating conversation entries -------------------------------------------

_USER_VARIANTS = ("Prompt", "ToolUseResults", "CancelledToolUses")
_ASSISTANT_VARIANTS = ("Response", "ToolUse")


def _tool_use_result(item: Any, path: str) -> tuple[str, Any, bool, dict[str, Any]]:
    """A chat CLI ``ToolUseResult``: (call id, result, success, fields left over).

    The result is the one content block's value (``{"Text": s}`` -> ``s``,
    ``{"Json": v}`` -> ``v``), or the blocks verbatim when there are several.
    """
    obj = _obj(item, path)
    call_id = _str(_required(obj, "tool_use_id", path), f"{path}.tool_use_id")
    blocks = _list(obj.get("content", []), f"{path}.content")
    values: list[Any] = []
    for j, block in enumerate(blocks):
        b = _obj(block, f"{path}.content[{j}]")
        if len(b) != 1 or next(iter(b)) not in ("Text", "Json", "text", "json"):
            raise InvalidInput(f"{path}.content[{j}]", 'must be {"Text": ...} or {"Json": ...}')
        [(key, value)] = b.items()
        if key.lower() == "text":
            _str(value, f"{path}.content[{j}].{key}")
        values.append(value)
    result: Any = values[0] if len(values) == 1 else blocks
    status = _str(_required(obj, "status", path), f"{path}.status")
    if status.lower() not in ("success", "error"):
        raise InvalidInput(f"{path}.status", f"must be 'Success' or 'Error', not {status!r}")
    return (
        call_id,
        result,
        status.lower() == "success",
        _unknown(obj, {"tool_use_id", "content", "status"}),
    )


def _entry_user(h: _History, user: Any, path: str, entry_extra: dict[str, Any]) -> None:
    if isinstance(user, str):
        user = {"prompt": user}
    obj = _obj(user, path)
    at = _timestamp(obj.get("timestamp"), f"{path}.timestamp") or h.now
    images = [
        _image_block(b, f"{path}.images[{j}]")
        for j, b in enumerate(_list(obj.get("images") or [], f"{path}.images"))
    ]
    known = {"content", "timestamp", "images", "additional_context", "env_context"}
    ours: dict[str, Any] = dict(entry_extra)
    if obj.get("additional_context"):
        ours["additional_context"] = _str(obj["additional_context"], f"{path}.additional_context")
    if obj.get("env_context") is not None:
        ours["env_context"] = obj["env_context"]

    content = obj.get("content")
    if isinstance(content, dict):
        if len(content) != 1 or next(iter(content)) not in _USER_VARIANTS:
            raise InvalidInput(
                f"{path}.content", f"must be one of {{{', '.join(_USER_VARIANTS)}: ...}}"
            )
        [(variant, body_value)] = content.items()
        bpath = f"{path}.content.{variant}"
        body = _obj(body_value, bpath)
    elif "prompt" in obj or isinstance(content, str):
        variant, bpath = "Prompt", path
        body = {"prompt": obj.get("prompt", content)}
        known.add("prompt")
    else:
        raise InvalidInput(
            path, "a user message needs 'content' ({\"Prompt\": {\"prompt\": ...}}) or 'prompt'"
        )
    extra = _merge(_unknown(obj, known), ours, path)

    prompt: str | None = None
    if variant == "Prompt":
        prompt = _str(_required(body, "prompt", bpath), f"{bpath}.prompt")
        body_known = {"prompt"}
    else:
        results = _list(_required(body, "tool_use_results", bpath), f"{bpath}.tool_use_results")
        body_known = {"tool_use_results"}
        if variant == "CancelledToolUses":
            body_known.add("prompt")
            if body.get("prompt") is not None:
                prompt = _str(body["prompt"], f"{bpath}.prompt")
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
                extra=_merge(rest, extra, rpath) if first else rest,
                content=list(images) if first else None,
                denied=_cancel_reason(result) if variant == "CancelledToolUses" else None,
            )
        if not results and prompt is None:
            raise InvalidInput(f"{bpath}.tool_use_results", "is empty and there is no prompt")
    body_rest = _unknown(body, body_known)
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
    obj = _obj(value, path)
    text = obj.get("text")
    if isinstance(text, str):
        rest = _unknown(obj, {"text"})
        return text, ({"thinking": rest} if rest else {})
    return None, {"thinking": value}


def _entry_assistant(h: _History, assistant: Any, path: str, entry_extra: dict[str, Any]) -> None:
    if isinstance(assistant, str):
        assistant = {"content": assistant}
    obj = _obj(assistant, path)
    if len(obj) == 1 and next(iter(obj)) in _ASSISTANT_VARIANTS:
        [(variant, body_value)] = obj.items()
        bpath = f"{path}.{variant}"
        body = _obj(body_value, bpath)
        if variant == "ToolUse":
            _required(body, "tool_uses", bpath)
    else:
        variant, bpath, body = "", path, obj
    text = _str(body.get("content", ""), f"{bpath}.content")
    ours: dict[str, Any] = dict(entry_extra)
    message_id = _opt_str(body, "message_id", bpath)
    if message_id is not None:
        ours["message_id"] = message_id
    thinking, thinking_rest = _thinking(body.get("thinking"), f"{bpath}.thinking")
    ours |= thinking_rest
    calls: list[ToolCallRequest] = []
    call_paths: dict[str, str] = {}
    tool_use_rest: list[dict[str, Any]] = []
    uses = body.get("tool_uses")
    for j, use in enumerate(_list(uses, f"{bpath}.tool_uses") if uses is not None else []):
        upath = f"{bpath}.tool_uses[{j}]"
        u = _obj(use, upath)
        call_id = _str(_required(u, "id", upath), f"{upath}.id")
        name = _str(_required(u, "name", upath), f"{upath}.name")
        args, raw = _arguments(u.get("args"), f"{upath}.args")
        rest = _unknown(u, {"id", "name", "args"})
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
    at = _timestamp(body.get("timestamp"), f"{bpath}.timestamp") or h.now
    known = {"content", "message_id", "thinking", "tool_uses", "timestamp"}
    h.message(
        InternalMessage(
            role=Role.ASSISTANT,
            content=[TextPart(text=text)] if text else [],
            tool_calls=calls or None,
            message_type=MessageType.TOOL_CALL if calls else MessageType.TEXT,
            thinking=thinking,
            metadata=MessageMetadata(
                created_at=at, extra=_merge(_unknown(body, known), ours, bpath)
            ),
        ),
        call_paths,
    )


def import_conversation_entries(
    data: Any, *, now: datetime | None = None, ids: Ids | None = None
) -> ChatContext:
    """Seed 003's conversation entries (a list, or ``{"entries": [...]}``).

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
    _check_source(data)
    at = _now(now)
    source: dict[str, Any] = {}
    if isinstance(data, list):
        entries, root = data, "$"
    else:
        obj = _obj(data, "$")
        entries = _list(_required(obj, "entries", "$"), "$.entries")
        root = "$.entries"
        source = _unknown(obj, {"entries"})
    _nonempty(entries, root)
    h = _History(at)
    for i, item in enumerate(entries):
        path = f"{root}[{i}]"
        entry = _obj(item, path)
        user, assistant = entry.get("user"), entry.get("assistant")
        if user is None and assistant is None:
            raise InvalidInput(path, "an entry needs a 'user' or an 'assistant' message")
        rest = _unknown(entry, {"user", "assistant"})
        entry_extra = {"entry": rest} if rest else {}
        if user is not None:
            _entry_user(h, user, f"{path}.user", entry_extra)
            entry_extra = {}
        if assistant is not None:
            _entry_assistant(h, assistant, f"{path}.assistant", entry_extra)
    messages = _with_source(h.finish(), source, root)
    return _context(messages, now=at, ids=ids or _uuid_hex)


# --- OpenAI chat messages -----------------------------------------------------------------

_OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")
_DETAILS = ("auto", "low", "high")


def _openai_part(part: Any, path: str) -> ContentPart:
    obj = _obj(part, path)
    kind = obj.get("type")

    def only(*keys: str) -> None:
        rest = _unknown(obj, {"type", *keys})
        if rest:
            raise InvalidInput(path, f"unexpected fields in a {kind!r} part: {', '.join(rest)}")

    if kind == "text":
        only("text")
        return TextPart(text=_str(_required(obj, "text", path), f"{path}.text"))
    if kind == "image_url":
        only("image_url")
        ipath = f"{path}.image_url"
        image = _required(obj, "image_url", path)
        if isinstance(image, str):
            return ImagePart(url=image)
        img = _obj(image, ipath)
        rest = _unknown(img, {"url", "detail"})
        if rest:
            raise InvalidInput(ipath, f"unexpected fields: {', '.join(rest)}")
        detail = img.get("detail")
        if detail is not None and detail not in _DETAILS:
            raise InvalidInput(
                f"{ipath}.detail", f"must be 'auto', 'low' or 'high', not {detail!r}"
            )
        return ImagePart(url=_str(_required(img, "url", ipath), f"{ipath}.url"), detail=detail)
    if kind == "file":
        only("file")
        fpath = f"{path}.file"
        f = _obj(_required(obj, "file", path), fpath)
        if "file_data" not in f:
            raise InvalidInput(
                fpath, "needs 'file_data' (a data URL); a 'file_id' reference cannot be imported"
            )
        rest = _unknown(f, {"filename", "file_data"})
        if rest:
            raise InvalidInput(fpath, f"unexpected fields: {', '.join(rest)}")
        mime, data = _data_url(_str(f["file_data"], f"{fpath}.file_data"), f"{fpath}.file_data")
        name = _opt_str(f, "filename", fpath) or "file"
        return FilePart(name=name, mime_type=mime, data=data)
    if "type" not in obj:
        raise InvalidInput(f"{path}.type", "missing")
    raise InvalidInput(
        f"{path}.type",
        f"unsupported content part type {kind!r} (supported: text, image_url, file)",
    )


def _openai_content(value: Any, path: str) -> list[ContentPart]:
    if value is None:
        return []
    if isinstance(value, str):
        return [TextPart(text=value)] if value else []
    return [_openai_part(p, f"{path}[{j}]") for j, p in enumerate(_list(value, path))]


def _plain_text(value: Any, path: str) -> str:
    """Content that must be text: a string or a list of text parts."""
    if isinstance(value, str):
        return value
    parts = _openai_content(value, path)
    for j, p in enumerate(parts):
        if not isinstance(p, TextPart):
            raise InvalidInput(f"{path}[{j}]", "only text parts are allowed here")
    return "".join(p.text for p in parts if isinstance(p, TextPart))


def _openai_tool_calls(value: Any, path: str) -> tuple[list[ToolCallRequest], dict[str, str]]:
    calls: list[ToolCallRequest] = []
    paths: dict[str, str] = {}
    for j, item in enumerate(_list(value, path)):
        cpath = f"{path}[{j}]"
        c = _obj(item, cpath)
        call_id = _str(_required(c, "id", cpath), f"{cpath}.id")
        if c.get("type", "function") != "function":
            raise InvalidInput(f"{cpath}.type", f"must be 'function', not {c['type']!r}")
        rest = _unknown(c, {"id", "type", "function"})
        if rest:
            raise InvalidInput(cpath, f"unexpected fields: {', '.join(rest)}")
        fpath = f"{cpath}.function"
        fn = _obj(_required(c, "function", cpath), fpath)
        rest = _unknown(fn, {"name", "arguments"})
        if rest:
            raise InvalidInput(fpath, f"unexpected fields: {', '.join(rest)}")
        name = _str(_required(fn, "name", fpath), f"{fpath}.name")
        args, raw = _arguments(fn.get("arguments"), f"{fpath}.arguments")
        calls.append(
            ToolCallRequest(
                id=call_id,
                tool_name=name,
                arguments=args,
                raw_arguments=raw,
                approval_status=ApprovalStatus.APPROVED,
            )
        )
        paths[call_id] = f"{cpath}.id"
    return calls, paths


def _openai_message(h: _History, m: dict[str, Any], path: str) -> None:
    role = _required(m, "role", path)
    if role not in _OPENAI_ROLES:
        hint = " (the deprecated 'function' role: use tool messages)" if role == "function" else ""
        raise InvalidInput(
            f"{path}.role",
            f"must be one of {', '.join(map(repr, _OPENAI_ROLES))}, not {role!r}{hint}",
        )
    at = h.now
    if role == "tool":
        call_id = _str(_required(m, "tool_call_id", path), f"{path}.tool_call_id")
        result = _plain_text(m.get("content"), f"{path}.content")
        extra = _unknown(m, {"role", "tool_call_id", "content"})
        h.result(call_id, result, success=True, at=at, path=f"{path}.tool_call_id", extra=extra)
        return
    if role == "assistant":
        if "function_call" in m:
            raise InvalidInput(
                f"{path}.function_call", "the deprecated function_call form is not supported"
            )
        content = _openai_content(m.get("content"), f"{path}.content")
        calls, paths = (
            _openai_tool_calls(m["tool_calls"], f"{path}.tool_calls")
            if m.get("tool_calls") is not None
            else ([], {})
        )
        thinking = _opt_str(m, "reasoning_content", path)
        h.message(
            InternalMessage(
                role=Role.ASSISTANT,
                content=content,
                tool_calls=calls or None,
                message_type=MessageType.TOOL_CALL if calls else MessageType.TEXT,
                thinking=thinking,
                metadata=MessageMetadata(
                    created_at=at,
                    extra=_unknown(m, {"role", "content", "tool_calls", "reasoning_content"}),
                ),
            ),
            paths,
        )
        return
    if "content" not in m:
        raise InvalidInput(f"{path}.content", "missing")
    content = _openai_content(m["content"], f"{path}.content")
    extra = _unknown(m, {"role", "content"})
    out_role = {"system": Role.SYSTEM, "developer": Role.SYSTEM, "user": Role.USER}[role]
    if role == "user" and extra.get("name") == "frontend_operator":
        out_role = Role.FRONTEND_OPERATOR
        del extra["name"]
    if role == "developer":
        extra = _merge(extra, {"openai_role": "developer"}, path)
    h.message(
        InternalMessage(
            role=out_role, content=content, metadata=MessageMetadata(created_at=at, extra=extra)
        )
    )


def _leading_system_prompt(messages: list[Any]) -> str | None:
    first = messages[0] if messages else None
    if (
        not isinstance(first, dict)
        or first.get("role") != "system"
        or set(first)
        != {
            "role",
            "content",
        }
    ):
        return None
    content = first["content"]
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict)
        and set(p) == {"type", "text"}
        and p["type"] == "text"
        and isinstance(p["text"], str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    return None


def import_openai_messages(
    data: Any, *, now: datetime | None = None, ids: Ids | None = None
) -> ChatContext:
    """An OpenAI Chat Completions ``messages`` list (or ``{"messages": [...], ...}``).

    A first ``system`` message with plain text becomes the branch's system
    prompt; other system and ``developer`` messages stay messages. A user message
    named ``frontend_operator`` is a frontend operator's (the inverse of
    :func:`~turnfsm.model.to_chat_message`). Assistant ``tool_calls`` become
    ``Approved`` calls whose JSON-text arguments are decoded (text that is not a
    JSON object is kept in ``raw_arguments``); ``reasoning_content`` becomes
    ``thinking``. A ``tool`` message's content is its call's result, verbatim
    (OpenAI has no success flag: ``success=True``). An assistant tool call with
    no ``tool`` message answering it gets the result :data:`MISSING_RESULT`
    with ``success=False``, and the call is marked ``Denied`` by ``system``
    (reason ``"missing"``). Content parts: text, image_url, file (with
    ``file_data``). Messages carry no timestamps, so all get ``now``. In the
    object form, ``model`` becomes the context's model id.
    """
    _check_source(data)
    at = _now(now)
    source: dict[str, Any] = {}
    model: str | None = None
    if isinstance(data, list):
        messages, root = data, "$"
    else:
        obj = _obj(data, "$")
        messages = _list(_required(obj, "messages", "$"), "$.messages")
        root = "$.messages"
        model = _opt_str(obj, "model", "$")
        source = _unknown(obj, {"messages", "model"})
    _nonempty(messages, root)
    system_prompt = _leading_system_prompt(messages)
    start = 1 if system_prompt is not None else 0
    h = _History(at)
    for i in range(start, len(messages)):
        path = f"{root}[{i}]"
        _openai_message(h, _obj(messages[i], path), path)
    out = h.finish()
    if source and not out:
        raise InvalidInput(root, "has no message to keep the other top-level fields on")
    return _context(
        _with_source(out, source, root),
        now=at,
        ids=ids or _uuid_hex,
        system_prompt=system_prompt,
        model=model,
    )


# --- seed 004: request bodies -------------------------------------------------------------


def import_request_body(
    data: Any, *, now: datetime | None = None, ids: Ids | None = None
) -> ChatContext:
    """A request body of seed 004 (either format), as parsed by
    :func:`~turnfsm.adapters.inbound.parse_request`: the conversation context,
    then the current message (flagged ``metadata.extra["current"]``, with the
    request's language and time zone). The current message is left unanswered:
    the context rests in ``Idle`` with a user (or frontend operator) message last.
    """
    _check_source(data)
    at = _now(now)
    request = parse_request(data)
    return _context(request.to_messages(now=at), now=at, ids=ids or _uuid_hex)


# --- detection and dispatch ---------------------------------------------------------------

_REQUEST_ONLY_KEYS = {"userLanguage", "userTimezone"}


def detect_format(data: Any) -> ImportFormat:
    """Which import fits ``data``, by its shape.

    - an object with ``records``, or an array whose first item has ``type``
      ``"message"``/``"tool_call"``: ``session``;
    - an object with ``entries``, or an array whose first item has ``user`` or
      ``assistant`` and no ``role``: ``entries``;
    - an object with ``contextManagement``; or with ``messages`` that is a valid
      request body or has ``userLanguage``/``userTimezone``: ``request``;
    - an array whose first item has a ``role``, or any other object with
      ``messages``: ``openai``.

    Anything else raises :class:`InvalidInput` saying which shapes are accepted.
    """
    if isinstance(data, dict):
        if "records" in data:
            return "session"
        if "entries" in data:
            return "entries"
        if "contextManagement" in data:
            return "request"
        if "messages" in data:
            if _REQUEST_ONLY_KEYS & set(data):
                return "request"
            try:
                parse_request(data)
            except InvalidInput:
                return "openai"
            return "request"
    elif isinstance(data, list):
        if not data:
            raise InvalidInput("$", "is an empty array: there is nothing to import")
        first = data[0]
        if isinstance(first, dict):
            if first.get("type") in ("message", "tool_call"):
                return "session"
            if "role" in first:
                return "openai"
            if "user" in first or "assistant" in first:
                return "entries"
    raise InvalidInput(
        "$",
        f'{_kind(data)} of no known format; expected a session ({{"records": [...]}}), '
        'conversation entries ([{"user": ..., "assistant": ...}]), OpenAI messages '
        '([{"role": ..., "content": ...}]) or a request body ({"contextManagement": ...} '
        'or {"messages": [...]})',
    )


_IMPORTERS: dict[str, Callable[..., ChatContext]] = {
    "session": import_session_records,
    "entries": import_conversation_entries,
    "openai": import_openai_messages,
    "request": import_request_body,
}


def import_context(
    data: Any,
    format: ImportFormat | Literal["auto"] = "auto",
    *,
    now: datetime | None = None,
    ids: Ids | None = None,
) -> ChatContext:
    """Import ``data`` in the given format (``"auto"``: :func:`detect_format`)."""
    fmt = detect_format(data) if format == "auto" else format
    importer = _IMPORTERS.get(fmt) if isinstance(fmt, str) else None
    if importer is None:
        raise InvalidInput(
            "format", f"must be 'auto' or one of {', '.join(IMPORT_FORMATS)}, not {fmt!r}"
        )
    return importer(data, now=now, ids=ids)


def count_tool_calls(ctx: ChatContext) -> int:
    """How many tool calls the context's messages ask for (all branches)."""
    return sum(len(n.message.tool_calls or ()) for n in ctx.message_pool.values())
