"""The context document of the architecture: a ``ChatContext`` serialised as its
fields, ``{"id", "parent_id", "config", "message_pool", "branches",
"active_branch_name", "current_state", "created_at", "updated_at"}``, written by
another program (no ``schema_version``: that is turnfsm's own export, the
``context`` format of ``turnfsm import``).

Kept as they are: the context's id, ``parent_id``, every branch (its
``message_ids``, ``parent_message_id``, system prompt and user prompt), the
active branch, the message pool with its message ids and ``parent_id`` links,
each message's role, content parts, tool calls with their approval status,
tool results, message type, metadata and thinking, and the config (model id,
mode, parameters, system prompt id, agent role, workspace path, title).

How the document may spell what turnfsm spells one way:

- roles, approval statuses and message types in any case, snake_case or
  CamelCase (``"User"``, ``"user"``; ``"Pending"``, ``"pending"``;
  ``"ToolCall"``, ``"tool_call"``);
- content as a list of parts, each ``{"type": "text", "text"}`` (``image``:
  ``url``, ``detail``; ``file``: ``name``, ``mime_type``, ``data``) or
  externally tagged (``{"Text": {"text": ...}}``, ``{"Text": "..."}``), or as
  one string;
- a tool call's ``tool_name`` as ``name``, its ``arguments`` as JSON text; a
  tool result without ``success`` succeeded;
- a message without ``metadata`` (or with ``null``) was created when the
  context was; a message without ``message_type`` is ``ToolCall`` when it asks
  for tools, ``ToolResult`` when it holds a result, else ``Text``;
- a branch without ``name`` is named by its key; a system prompt without an
  ``id`` gets one from ``ids``; a document without ``id``, ``created_at`` or
  ``updated_at`` gets them from ``ids`` and ``now``.

Fields the document has that turnfsm has no place for are kept, never
dropped: a message's in its ``metadata.extra``, a metadata's own unknown
fields there too, and the context's, its config's and its branches' in
``metadata.extra["source"]`` of the first message of the active branch (a
document with such fields and no message is refused, naming the field).

The context must be at rest: ``current_state`` (``Idle`` by default) is
``Idle``, ``AwaitingToolApproval`` (its active branch ends with calls of which
one at least is ``Pending`` and has no result) or ``PermanentFailure``; a
context in the middle of a turn (``StreamingLLMResponse``, ...) is refused,
as is an ``Idle`` one whose active branch ends with calls that have no result.
The version counters and the turn's progress start at zero. Every problem
raises :class:`~turnfsm.errors.InvalidInput` naming its JSON path
(``$.message_pool["m1"].message.role``), as the other importers do.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ValidationError

from .... import records
from ....errors import InvalidInput
from ....model import ApprovalStatus, ChatContext, MessageType, Role, id_problem
from ....states import State
from ._checks import (
    Ids,
    check_source,
    expect_array,
    expect_object,
    expect_string,
    kind_of,
    merge_extra,
    new_id,
    parse_timestamp,
    resolve_now,
    tool_arguments,
    unmapped_fields,
    uuid_hex,
)
from ._checks import (
    object_key as _key,
)

__all__ = ["import_chat_context", "is_chat_context", "is_message_type", "same_spelling"]

_CONTEXT_KEYS = (
    "id",
    "parent_id",
    "config",
    "message_pool",
    "branches",
    "active_branch_name",
    "current_state",
    "created_at",
    "updated_at",
)
_CONFIG_KEYS = (
    "model_id",
    "mode",
    "parameters",
    "system_prompt_id",
    "agent_role",
    "workspace_path",
    "title",
)
_BRANCH_KEYS = ("name", "message_ids", "parent_message_id", "system_prompt", "user_prompt")
_NODE_KEYS = ("id", "message", "parent_id")
_MESSAGE_KEYS = (
    "role",
    "content",
    "tool_calls",
    "tool_result",
    "message_type",
    "metadata",
    "thinking",
)
_METADATA_KEYS = (
    "created_at",
    "model",
    "usage",
    "attempt",
    "iteration",
    "finish_reason",
    "cancelled",
    "extra",
)
_CALL_KEYS = ("id", "tool_name", "name", "arguments", "approval_status")
_RESULT_KEYS = ("request_id", "result", "success")
_AT_REST = {
    State.IDLE.value,
    State.AWAITING_TOOL_APPROVAL.value,
    State.PERMANENT_FAILURE.value,
}


def is_chat_context(data: Any) -> bool:
    """The architecture's context document: a ``message_pool`` and ``branches``,
    and no ``schema_version`` (turnfsm's own export has one)."""
    return (
        isinstance(data, dict)
        and "message_pool" in data
        and "branches" in data
        and "schema_version" not in data
    )


def _squash(value: str) -> str:
    """``"Tool-Call"``, ``"tool_call"``, ``"TOOLCALL"`` -> ``"toolcall"``."""
    return "".join(c for c in value.lower() if c.isalnum())


def _enum(value: Any, path: str, choices: dict[str, str], what: str) -> str:
    text = expect_string(value, path)
    found = choices.get(_squash(text))
    if found is None:
        raise InvalidInput(
            path, f"{text!r} is not {what} ({', '.join(sorted(set(choices.values())))})"
        )
    return found


_ROLES = {_squash(r.value): r.value for r in Role} | {"frontendoperator": "frontend_operator"}
_STATUSES = {_squash(s.value): s.value for s in ApprovalStatus}
_TYPES = {_squash(t.value): t.value for t in MessageType}


def same_spelling(a: str, b: str) -> bool:
    """Whether two spellings name the same role, status or message type
    (``"ToolCall"``, ``"tool_call"``)."""
    return _squash(a) == _squash(b)


def is_message_type(value: str) -> bool:
    """Whether ``value`` spells one of turnfsm's message types (any case,
    snake_case or CamelCase)."""
    return _squash(value) in _TYPES


def _check_id(value: Any, path: str) -> str:
    text = expect_string(value, path)
    reason = id_problem(text)
    if reason is not None:
        raise InvalidInput(path, reason)
    return text


def _optional_id(value: Any, path: str) -> str | None:
    return None if value is None else _check_id(value, path)


def _part(item: Any, path: str) -> dict[str, Any]:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    obj = expect_object(item, path)
    if "type" not in obj and len(obj) == 1:  # externally tagged: {"Text": ...}
        ((tag, body),) = obj.items()
        kind = _squash(tag)
        if kind == "text" and isinstance(body, str):
            return {"type": "text", "text": body}
        if isinstance(body, dict) and kind in ("text", "image", "file"):
            return {**body, "type": kind}
        raise InvalidInput(_key(path, tag), "is not a text, image or file part")
    kind_value = expect_string(obj.get("type"), f"{path}.type")
    kind = _squash(kind_value)
    if kind not in ("text", "image", "file"):
        raise InvalidInput(f"{path}.type", f"{kind_value!r} is not text, image or file")
    return {**obj, "type": kind}


def _content(value: Any, path: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "text", "text": value}] if value else []
    return [_part(item, f"{path}[{i}]") for i, item in enumerate(expect_array(value, path))]


def _call(item: Any, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    obj = expect_object(item, path)
    name_key = "tool_name" if "tool_name" in obj else "name"
    if name_key not in obj:
        raise InvalidInput(f"{path}.tool_name", "missing")
    arguments, raw = tool_arguments(obj.get("arguments"), f"{path}.arguments")
    call: dict[str, Any] = {
        "id": _check_id(obj.get("id"), f"{path}.id"),
        "tool_name": expect_string(obj[name_key], f"{path}.{name_key}"),
        "arguments": arguments,
        "approval_status": _enum(
            obj.get("approval_status", "Pending"),
            f"{path}.approval_status",
            _STATUSES,
            "an approval status",
        ),
    }
    if raw is not None:
        call["raw_arguments"] = raw
    return call, unmapped_fields(obj, _CALL_KEYS)


def _result(value: Any, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    obj = expect_object(value, path)
    success = obj.get("success", True)
    if not isinstance(success, bool):
        raise InvalidInput(f"{path}.success", f"must be a boolean, not {kind_of(success)}")
    return (
        {
            "request_id": _check_id(obj.get("request_id"), f"{path}.request_id"),
            "result": obj.get("result"),
            "success": success,
        },
        unmapped_fields(obj, _RESULT_KEYS),
    )


def _metadata(value: Any, path: str, created: datetime) -> dict[str, Any]:
    if value is None:
        return {"created_at": created, "extra": {}}
    obj = expect_object(value, path)
    at = parse_timestamp(obj.get("created_at"), f"{path}.created_at")
    extra = obj.get("extra") or {}
    extra = dict(expect_object(extra, f"{path}.extra"))
    meta = {k: obj[k] for k in _METADATA_KEYS if k in obj and k not in ("created_at", "extra")}
    meta["created_at"] = at or created
    meta["extra"] = merge_extra(extra, unmapped_fields(obj, _METADATA_KEYS), f"{path}.extra")
    return meta


def _message(value: Any, path: str, created: datetime) -> dict[str, Any]:
    obj = expect_object(value, path)
    if "role" not in obj:
        raise InvalidInput(f"{path}.role", "missing")
    out: dict[str, Any] = {
        "role": _enum(obj["role"], f"{path}.role", _ROLES, "a role"),
        "content": _content(obj.get("content"), f"{path}.content"),
    }
    kept: dict[str, Any] = {}
    calls = obj.get("tool_calls")
    if calls is not None:
        out["tool_calls"] = []
        for i, item in enumerate(expect_array(calls, f"{path}.tool_calls")):
            call, left = _call(item, f"{path}.tool_calls[{i}]")
            out["tool_calls"].append(call)
            if left:
                kept.setdefault("tool_calls", {})[call["id"]] = left
    if obj.get("tool_result") is not None:
        out["tool_result"], left = _result(obj["tool_result"], f"{path}.tool_result")
        if left:
            kept["tool_result"] = left
    if obj.get("message_type") is not None:
        out["message_type"] = _enum(
            obj["message_type"], f"{path}.message_type", _TYPES, "a message type"
        )
    else:
        out["message_type"] = (
            MessageType.TOOL_CALL.value
            if out.get("tool_calls")
            else MessageType.TOOL_RESULT.value
            if "tool_result" in out
            else MessageType.TEXT.value
        )
    if obj.get("thinking") is not None:
        out["thinking"] = expect_string(obj["thinking"], f"{path}.thinking")
    meta = _metadata(obj.get("metadata"), f"{path}.metadata", created)
    unknown = unmapped_fields(obj, _MESSAGE_KEYS)
    if kept:
        unknown = merge_extra(unknown, {"source_fields": kept}, path)
    meta["extra"] = merge_extra(meta["extra"], unknown, f"{path}.metadata.extra")
    out["metadata"] = meta
    return out


def _branch(value: Any, path: str, name: str, ids: Ids) -> tuple[dict[str, Any], dict[str, Any]]:
    obj = expect_object(value, path)
    given = obj.get("name", name)
    if given != name:
        raise InvalidInput(f"{path}.name", f"is {given!r}, but the branch is kept as {name!r}")
    message_ids = [
        _check_id(mid, f"{path}.message_ids[{i}]")
        for i, mid in enumerate(expect_array(obj.get("message_ids", []), f"{path}.message_ids"))
    ]
    prompt = obj.get("system_prompt")
    system_prompt = None
    if isinstance(prompt, str):
        system_prompt = {"id": new_id(ids), "content": prompt}
    elif prompt is not None:
        p = expect_object(prompt, f"{path}.system_prompt")
        content = expect_string(p.get("content"), f"{path}.system_prompt.content")
        pid = p.get("id")
        system_prompt = {
            "id": new_id(ids) if pid is None else _check_id(pid, f"{path}.system_prompt.id"),
            "content": content,
        }
        left = unmapped_fields(p, ("id", "content"))
        if left:
            raise InvalidInput(_key(f"{path}.system_prompt", next(iter(left))), "unknown field")
    user_prompt = obj.get("user_prompt")
    if user_prompt is not None:
        expect_string(user_prompt, f"{path}.user_prompt")
    branch = {
        "name": name,
        "message_ids": message_ids,
        "parent_message_id": _optional_id(
            obj.get("parent_message_id"), f"{path}.parent_message_id"
        ),
        "system_prompt": system_prompt,
        "user_prompt": user_prompt,
    }
    return branch, unmapped_fields(obj, _BRANCH_KEYS)


def _state_at_rest(doc: dict[str, Any]) -> str:
    """The document's state: one of the table's, and at rest."""
    state = expect_string(doc.get("current_state", State.IDLE.value), "$.current_state")
    if state not in {s.value for s in State}:
        raise InvalidInput("$.current_state", f"{state!r} is not a state of the table")
    if state not in _AT_REST:
        raise InvalidInput(
            "$.current_state",
            f"{state!r} is the middle of a turn: only a context at rest (Idle, "
            "AwaitingToolApproval, PermanentFailure) can be imported",
        )
    return state


def _pool(doc: dict[str, Any], created: datetime) -> dict[str, Any]:
    """The message pool's nodes (a node's unknown fields kept in its message's extra)."""
    pool: dict[str, Any] = {}
    raw_pool = expect_object(doc.get("message_pool"), "$.message_pool")
    for mid, node in raw_pool.items():
        path = _key("$.message_pool", mid)
        _check_id(mid, path)
        obj = expect_object(node, path)
        if obj.get("id", mid) != mid:
            raise InvalidInput(
                f"{path}.id", f"is {obj.get('id')!r}, but the node is kept as {mid!r}"
            )
        message = _message(obj.get("message"), f"{path}.message", created)
        left = unmapped_fields(obj, _NODE_KEYS)
        if left:
            message["metadata"]["extra"] = merge_extra(
                message["metadata"]["extra"], {"node": left}, f"{path}.message.metadata.extra"
            )
        pool[mid] = {
            "id": mid,
            "message": message,
            "parent_id": _optional_id(obj.get("parent_id"), f"{path}.parent_id"),
        }
    return pool


def _branches(doc: dict[str, Any], ids: Ids, source: dict[str, Any]) -> dict[str, Any]:
    """The branches, at least one (their unknown fields go to ``source``)."""
    branches: dict[str, Any] = {}
    for name, body in expect_object(doc.get("branches"), "$.branches").items():
        path = _key("$.branches", name)
        _check_id(name, path)
        branches[name], left = _branch(body, path, name, ids)
        if left:
            source.setdefault("branches", {})[name] = left
    if not branches:
        raise InvalidInput("$.branches", "holds no branch: a context has at least one")
    return branches


def import_chat_context(
    data: Any, *, now: datetime | None = None, ids: Ids | None = None
) -> ChatContext:
    """The architecture's context document as a :class:`ChatContext` (see the module)."""
    ids = uuid_hex if ids is None else ids
    doc = expect_object(data, "$")
    check_source(doc)
    now = resolve_now(now)
    created = parse_timestamp(doc.get("created_at"), "$.created_at") or now
    updated = parse_timestamp(doc.get("updated_at"), "$.updated_at") or created
    config = expect_object(doc.get("config") or {}, "$.config")
    state = _state_at_rest(doc)
    pool = _pool(doc, created)
    source: dict[str, Any] = {}
    branches = _branches(doc, ids, source)
    active = expect_string(doc.get("active_branch_name", "main"), "$.active_branch_name")
    cid = doc.get("id")
    context: dict[str, Any] = {
        "id": new_id(ids) if cid is None else _check_id(cid, "$.id"),
        "parent_id": _optional_id(doc.get("parent_id"), "$.parent_id"),
        "config": {k: config[k] for k in _CONFIG_KEYS if k in config},
        "message_pool": pool,
        "branches": branches,
        "active_branch_name": active,
        "current_state": state,
        "created_at": created,
        "updated_at": updated,
    }
    if left := unmapped_fields(config, _CONFIG_KEYS):
        source["config"] = left
    if left := unmapped_fields(doc, _CONTEXT_KEYS):
        source.update(left)
    _check_links(pool, branches, active)
    try:
        ctx = records.from_python(ChatContext, context)
    except ValidationError as exc:
        raise InvalidInput(*_first_problem(exc)) from None
    _check_rest(ctx)
    if source:
        ctx = _with_source(ctx, source)
    return ctx


def _first_problem(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors(include_url=False)[0]
    path = "$"
    for part in err["loc"]:
        path = f"{path}[{part}]" if isinstance(part, int) else _key(path, str(part))
    return path, str(err["msg"])


def _check_links(pool: dict[str, Any], branches: dict[str, Any], active: str) -> None:
    """Every id a branch names is in the pool; the active branch exists."""
    if active not in branches:
        raise InvalidInput("$.active_branch_name", f"no branch named {active!r}")
    for name, branch in branches.items():
        path = _key("$.branches", name)
        for i, mid in enumerate(branch["message_ids"]):
            if mid not in pool:
                raise InvalidInput(f"{path}.message_ids[{i}]", f"no message {mid!r} in the pool")
        parent = branch["parent_message_id"]
        if parent is not None and parent not in pool:
            raise InvalidInput(f"{path}.parent_message_id", f"no message {parent!r} in the pool")


def _check_rest(ctx: ChatContext) -> None:
    """The state agrees with the active branch's last calls (see the module)."""
    batch = ctx.last_tool_batch()
    open_calls = [] if batch is None else ctx.open_tool_calls()
    state = ctx.current_state
    if batch is None:
        if state == State.AWAITING_TOOL_APPROVAL.value:
            raise InvalidInput(
                "$.current_state",
                "is AwaitingToolApproval, but the active branch does not end with tool calls",
            )
        return
    node, _ = batch
    assert node.message.tool_calls is not None
    path = f"{_key('$.message_pool', node.id)}.message.tool_calls"
    index = {c.id: i for i, c in enumerate(node.message.tool_calls)}
    if state == State.IDLE.value and open_calls:
        first = open_calls[0]
        raise InvalidInput(
            f"{path}[{index[first.id]}]",
            f"call {first.id!r} has no result, but the context is Idle: give its result, "
            "or the state AwaitingToolApproval",
        )
    if state == State.AWAITING_TOOL_APPROVAL.value and not any(
        c.approval_status is ApprovalStatus.PENDING for c in open_calls
    ):
        raise InvalidInput(
            path, "no call is Pending without a result, but the context is AwaitingToolApproval"
        )


def _with_source(ctx: ChatContext, source: dict[str, Any]) -> ChatContext:
    """``source`` in ``metadata.extra["source"]`` of the active branch's first message."""
    ids = ctx.active_branch.message_ids
    if not ids:
        first = next(iter(source))
        raise InvalidInput(
            _key("$", first),
            "turnfsm has no place for this field, and the active branch has no message "
            "to keep it with",
        )
    data = records.to_python(ctx)
    extra = data["message_pool"][ids[0]]["message"]["metadata"]["extra"]
    path = f"{_key('$.message_pool', ids[0])}.message.metadata.extra"
    data["message_pool"][ids[0]]["message"]["metadata"]["extra"] = merge_extra(
        extra, {"source": source}, path
    )
    return records.from_python(ChatContext, data)
