"""A plain OpenAI Chat Completions ``messages`` list (or ``{"messages": [...],
"model": ...}``).

A first ``system`` message with plain text content and no other field becomes
the branch's system prompt; later or annotated system messages stay messages.
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
)
from ._checks import (
    Ids,
    check_source,
    expect_array,
    expect_object,
    expect_string,
    merge_extra,
    optional_string,
    required_field,
    resolve_now,
    split_data_url,
    tool_arguments,
    unmapped_fields,
    uuid_hex,
)
from ._history import History, build_context, require_nonempty, with_source

__all__ = [
    "import_openai_messages",
]

_OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")
_DETAILS = ("auto", "low", "high")


def _openai_part(part: Any, path: str) -> ContentPart:
    obj = expect_object(part, path)
    kind = obj.get("type")

    def only(*keys: str) -> None:
        rest = unmapped_fields(obj, {"type", *keys})
        if rest:
            raise InvalidInput(path, f"unexpected fields in a {kind!r} part: {', '.join(rest)}")

    if kind == "text":
        only("text")
        return TextPart(text=expect_string(required_field(obj, "text", path), f"{path}.text"))
    if kind == "image_url":
        only("image_url")
        ipath = f"{path}.image_url"
        image = required_field(obj, "image_url", path)
        if isinstance(image, str):
            return ImagePart(url=image)
        img = expect_object(image, ipath)
        rest = unmapped_fields(img, {"url", "detail"})
        if rest:
            raise InvalidInput(ipath, f"unexpected fields: {', '.join(rest)}")
        detail = img.get("detail")
        if detail is not None and detail not in _DETAILS:
            raise InvalidInput(
                f"{ipath}.detail", f"must be 'auto', 'low' or 'high', not {detail!r}"
            )
        return ImagePart(
            url=expect_string(required_field(img, "url", ipath), f"{ipath}.url"), detail=detail
        )
    if kind == "file":
        only("file")
        fpath = f"{path}.file"
        f = expect_object(required_field(obj, "file", path), fpath)
        if "file_data" not in f:
            raise InvalidInput(
                fpath, "needs 'file_data' (a data URL); a 'file_id' reference cannot be imported"
            )
        rest = unmapped_fields(f, {"filename", "file_data"})
        if rest:
            raise InvalidInput(fpath, f"unexpected fields: {', '.join(rest)}")
        mime, data = split_data_url(
            expect_string(f["file_data"], f"{fpath}.file_data"), f"{fpath}.file_data"
        )
        name = optional_string(f, "filename", fpath) or "file"
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
    return [_openai_part(p, f"{path}[{j}]") for j, p in enumerate(expect_array(value, path))]


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
    for j, item in enumerate(expect_array(value, path)):
        cpath = f"{path}[{j}]"
        c = expect_object(item, cpath)
        call_id = expect_string(required_field(c, "id", cpath), f"{cpath}.id")
        if c.get("type", "function") != "function":
            raise InvalidInput(f"{cpath}.type", f"must be 'function', not {c['type']!r}")
        rest = unmapped_fields(c, {"id", "type", "function"})
        if rest:
            raise InvalidInput(cpath, f"unexpected fields: {', '.join(rest)}")
        fpath = f"{cpath}.function"
        fn = expect_object(required_field(c, "function", cpath), fpath)
        rest = unmapped_fields(fn, {"name", "arguments"})
        if rest:
            raise InvalidInput(fpath, f"unexpected fields: {', '.join(rest)}")
        name = expect_string(required_field(fn, "name", fpath), f"{fpath}.name")
        args, raw = tool_arguments(fn.get("arguments"), f"{fpath}.arguments")
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


def _openai_message(h: History, m: dict[str, Any], path: str) -> None:
    role = required_field(m, "role", path)
    if role not in _OPENAI_ROLES:
        hint = " (the deprecated 'function' role: use tool messages)" if role == "function" else ""
        raise InvalidInput(
            f"{path}.role",
            f"must be one of {', '.join(map(repr, _OPENAI_ROLES))}, not {role!r}{hint}",
        )
    at = h.now
    if role == "tool":
        call_id = expect_string(required_field(m, "tool_call_id", path), f"{path}.tool_call_id")
        result = _plain_text(m.get("content"), f"{path}.content")
        extra = unmapped_fields(m, {"role", "tool_call_id", "content"})
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
        thinking = optional_string(m, "reasoning_content", path)
        # a refusal is the message's own field; a null one is kept as given
        refusal = optional_string(m, "refusal", path)
        mapped = {"role", "content", "tool_calls", "reasoning_content"}
        h.message(
            InternalMessage(
                role=Role.ASSISTANT,
                content=content,
                tool_calls=calls or None,
                message_type=MessageType.TOOL_CALL if calls else MessageType.TEXT,
                thinking=thinking,
                refusal=refusal,
                metadata=MessageMetadata(
                    created_at=at,
                    extra=unmapped_fields(m, mapped | ({"refusal"} if refusal else set())),
                ),
            ),
            paths,
        )
        return
    if "content" not in m:
        raise InvalidInput(f"{path}.content", "missing")
    content = _openai_content(m["content"], f"{path}.content")
    extra = unmapped_fields(m, {"role", "content"})
    out_role = {"system": Role.SYSTEM, "developer": Role.SYSTEM, "user": Role.USER}[role]
    if role == "user" and extra.get("name") == "frontend_operator":
        out_role = Role.FRONTEND_OPERATOR
        del extra["name"]
    if role == "developer":
        extra = merge_extra(extra, {"openai_role": "developer"}, path)
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

    A first ``system`` message with plain text becomes the branch's system prompt; other
    system and ``developer`` messages stay messages. A user message named
    ``frontend_operator`` is a frontend operator's (the inverse of
    :func:`~turnfsm.model.to_chat_message`). Assistant ``tool_calls`` become ``Approved``
    calls whose JSON-text arguments are decoded (text that is not a JSON object is kept in
    ``raw_arguments``); ``reasoning_content`` becomes ``thinking``; a ``refusal`` text
    becomes the message's ``refusal`` (a null one is kept in ``metadata.extra``, as given).
    A ``tool`` message's content is its call's result, verbatim (OpenAI has no success flag:
    ``success=True``). An assistant tool call with no ``tool`` message answering it gets the
    result :data:`MISSING_RESULT` with ``success=False``, and the call is marked ``Denied``
    by ``system`` (reason ``"missing"``). Content parts: text, image_url, file (with
    ``file_data``). Messages carry no timestamps, so all get ``now``. In the object form,
    ``model`` becomes the context's model id.
    """
    check_source(data)
    at = resolve_now(now)
    source: dict[str, Any] = {}
    model: str | None = None
    if isinstance(data, list):
        messages, root = data, "$"
    else:
        obj = expect_object(data, "$")
        messages = expect_array(required_field(obj, "messages", "$"), "$.messages")
        root = "$.messages"
        model = optional_string(obj, "model", "$")
        source = unmapped_fields(obj, {"messages", "model"})
    require_nonempty(messages, root)
    system_prompt = _leading_system_prompt(messages)
    start = 1 if system_prompt is not None else 0
    h = History(at)
    for i in range(start, len(messages)):
        path = f"{root}[{i}]"
        _openai_message(h, expect_object(messages[i], path), path)
    out = h.finish()
    if source and not out:
        raise InvalidInput(root, "has no message to keep the other top-level fields on")
    return build_context(
        with_source(out, source, root),
        now=at,
        ids=ids or uuid_hex,
        system_prompt=system_prompt,
        model=model,
    )
