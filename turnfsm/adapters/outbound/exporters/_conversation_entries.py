"""A context's branch as the conversation entries of a chat CLI,
``{"entries": [{"user": {...}, "assistant": {...}}, ...]}``, in that CLI's serde
shape, as :func:`~turnfsm.adapters.inbound.import_conversation_entries` reads it.

- A user's (or frontend operator's) message is a user ``Prompt`` with its
  timestamp, its base64 images as ``images`` (``{"format": "png", "source":
  {"Bytes": <base64 text>}}``; the import also reads the byte arrays the chat
  CLI writes), ``additional_context`` and ``env_context`` as the import kept
  them.
- An assistant's message is a ``Response``, or a ``ToolUse`` with its
  ``tool_uses`` (``id``, ``name``, ``args`` and ``orig_name``/``orig_args``)
  when it asks for tools, with its ``message_id`` when an import kept one, its
  ``thinking`` and its timestamp. It goes into the entry of the user message
  before it, or into an entry of its own (``"user": null``).
- The results of one batch of calls are the next entry's user message:
  ``ToolUseResults``, or ``CancelledToolUses`` when every call of the batch was
  denied by a human (with the prompt of the user message that follows, when
  the two were one message of the source: same timestamp, nothing of their
  own). A text result is a ``{"Text": ...}`` block, any other a ``{"Json":
  ...}`` block; ``status`` is ``Success`` or ``Error``. A result an import made
  up for a call that had none is not written (the import makes it again), nor
  is a call that has none yet given one. A result that answers no call of
  the assistant message just before it is left out.
- ``metadata.extra`` keys are written back as fields of the object they came
  from: the user or assistant message, a tool use, a tool use result, the
  entry (``extra["entry"]``) or the top level (``extra["source"]`` of the
  first message).

What the format has no place for, and is left out: other branches, system
messages and the branch's system and user prompt, the frontend operator's role
(a user), files and images that are not base64 PNG, JPEG, GIF or WebP, images
in assistant messages, the order of text among images, one timestamp per
result (a batch's results share their user message's), approval decisions other
than a whole batch denied by a human (an import marks every call with a result
``Approved``), message types other than text and tool calls, and message
metadata other than the timestamp and ``extra``.
"""

from __future__ import annotations

from typing import Any

from ....model import ApprovalStatus, ChatContext, ImagePart, InternalMessage, Role, ToolCallRequest
from ._common import (
    base64_data_url,
    extra_fields,
    is_synthesized,
    select_branch,
    source_fields,
    stamp,
)

__all__ = [
    "export_conversation_entries",
]

_IMAGE_FORMATS = {"image/png": "png", "image/jpeg": "jpeg"}
_IMAGE_FORMATS |= {"image/gif": "gif", "image/webp": "webp"}
_USER = ("content", "timestamp", "images", "additional_context", "env_context", "entry")
_ASSISTANT = ("content", "message_id", "thinking", "tool_uses", "timestamp", "entry")
_RESULT = ("tool_use_id", "content", "status")
_TOOL_USE = ("id", "name", "args", "orig_name", "orig_args")
_USER_LEVEL = ("additional_context", "env_context", "entry")
"""Keys an import puts on the first result of a user message that has no prompt."""


def _image_block(part: ImagePart) -> dict[str, Any] | None:
    inline = base64_data_url(part.url)
    fmt = _IMAGE_FORMATS.get(inline[0]) if inline is not None else None
    if inline is None or fmt is None:
        return None
    return {"format": fmt, "source": {"Bytes": inline[1]}}


def _images(msg: InternalMessage) -> list[dict[str, Any]] | None:
    blocks = [_image_block(p) for p in msg.content if isinstance(p, ImagePart)]
    kept = [b for b in blocks if b is not None]
    return kept or None


def _user(msg: InternalMessage, content: dict[str, Any]) -> dict[str, Any]:
    """A user message of the chat CLI around ``content``, with ``msg``'s timestamp,
    images and user-level fields."""
    extra = msg.metadata.extra
    additional = extra.get("additional_context")
    return {
        "additional_context": additional if isinstance(additional, str) else "",
        "env_context": extra.get("env_context"),
        "content": content,
        "timestamp": stamp(msg.metadata.created_at),
        "images": _images(msg),
    }


def _result_blocks(result: Any) -> list[dict[str, Any]]:
    """A result as content blocks the import reads back as the same value: a
    string as one ``Text`` block, a list of several blocks as they are (the import
    keeps several blocks verbatim), anything else as one ``Json`` block."""
    if isinstance(result, str):
        return [{"Text": result}]
    if (
        isinstance(result, list)
        and len(result) != 1
        and all(
            isinstance(b, dict)
            and len(b) == 1
            and next(iter(b)) in ("Text", "Json", "text", "json")
            and (next(iter(b)).lower() == "json" or isinstance(next(iter(b.values())), str))
            for b in result
        )
    ):
        return list(result)
    return [{"Json": result}]


def _result_item(msg: InternalMessage, skip: tuple[str, ...]) -> dict[str, Any]:
    done = msg.tool_result
    assert done is not None
    item = {
        "tool_use_id": done.request_id,
        "content": _result_blocks(done.result),
        "status": "Success" if done.success else "Error",
    }
    return {**item, **extra_fields(msg.metadata.extra, (*_RESULT, *skip))}


def _tool_use(call: ToolCallRequest, rest: Any) -> dict[str, Any]:
    args: Any = call.raw_arguments if call.raw_arguments is not None else call.arguments
    use = {"id": call.id, "name": call.tool_name, "orig_name": call.tool_name, "args": args}
    use["orig_args"] = args
    kept = rest if isinstance(rest, dict) else {}
    # a kept orig_name/orig_args differed from the call's: it wins
    return {**use, **{k: v for k, v in kept.items() if k not in ("id", "name", "args")}}


def _thinking(msg: InternalMessage) -> Any:
    """``thinking`` as the import read it: text, or ``{"text": ..., <kept fields>}``,
    or the value kept verbatim when it had no text."""
    kept = msg.metadata.extra.get("thinking")
    if msg.thinking is not None:
        if isinstance(kept, dict) and "text" not in kept:
            return {"text": msg.thinking, **kept}
        return msg.thinking
    if isinstance(kept, dict) and not isinstance(kept.get("text"), str):
        return kept
    return None


def _assistant(msg: InternalMessage) -> dict[str, Any]:
    extra = msg.metadata.extra
    body: dict[str, Any] = {}
    message_id = extra.get("message_id")
    if isinstance(message_id, str):
        body["message_id"] = message_id
    body["content"] = msg.text
    thinking = _thinking(msg)
    if thinking is not None:
        body["thinking"] = thinking
    calls = msg.tool_calls or []
    if calls:
        kept = extra.get("tool_uses")
        rests = kept if isinstance(kept, list) else []
        body["tool_uses"] = [
            _tool_use(c, rests[j] if j < len(rests) else None) for j, c in enumerate(calls)
        ]
    body["timestamp"] = stamp(msg.metadata.created_at)
    body |= extra_fields(extra, _ASSISTANT)
    return {"ToolUse" if calls else "Response": body}


def _denied_by_human(call: ToolCallRequest) -> bool:
    return call.approval_status is ApprovalStatus.DENIED and call.decided_by == "human"


def _joins_prompt(results: list[InternalMessage], after: InternalMessage | None) -> bool:
    """Whether cancelled results and the user message after them were one user
    message of the source (the import gives them its timestamp, and its fields
    and images to the prompt)."""
    if after is None or after.role not in (Role.USER, Role.FRONTEND_OPERATOR):
        return False
    first = results[0]
    return (
        all(r.metadata.created_at == after.metadata.created_at for r in results)
        and not first.content
        and not any(k in first.metadata.extra for k in _USER_LEVEL)
    )


class _Entries:
    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None
        """The newest entry while it has a user message and no assistant yet."""

    def user(self, user: dict[str, Any], first: InternalMessage) -> None:
        self.open = self._entry(user, first)

    def assistant(self, body: dict[str, Any], msg: InternalMessage) -> None:
        if self.open is None:
            self._entry(None, msg)["assistant"] = body
        else:
            self.open["assistant"] = body
        self.open = None

    def _entry(self, user: dict[str, Any] | None, first: InternalMessage) -> dict[str, Any]:
        kept = first.metadata.extra.get("entry")
        rest = kept if isinstance(kept, dict) else {}
        entry = {"user": user, "assistant": None}
        entry |= {k: v for k, v in rest.items() if k not in entry}
        self.entries.append(entry)
        return entry


def export_conversation_entries(ctx: ChatContext, *, branch: str | None = None) -> dict[str, Any]:
    """The branch (the active one by default) as conversation entries (see the
    module docstring for what is written where, and what is left out)."""
    _, history = select_branch(ctx, branch)
    source = source_fields(history)
    out = _Entries()
    calls: dict[str, ToolCallRequest] = {}
    i = 0
    while i < len(history):
        msg = history[i]
        i += 1
        if msg.role is Role.SYSTEM:
            continue
        if msg.role in (Role.USER, Role.FRONTEND_OPERATOR):
            calls = {}  # a user message closes the batch
            user = _user(msg, {"Prompt": {"prompt": msg.text}})
            out.user(user | extra_fields(msg.metadata.extra, _USER), msg)
            continue
        if msg.role is Role.ASSISTANT:
            calls = {c.id: c for c in msg.tool_calls or []}
            out.assistant(_assistant(msg), msg)
            continue
        # a run of tool messages: the results of the newest batch
        run = [msg]
        while i < len(history) and history[i].role is Role.TOOL:
            run.append(history[i])
            i += 1
        results, cancelled = _results_of(run, calls)
        if results:
            after = history[i] if i < len(history) else None
            if _put_results(out, results, cancelled, after):
                i += 1  # the prompt that followed went with them
    return {**{k: v for k, v in source.items() if k != "entries"}, "entries": out.entries}


def _results_of(
    run: list[InternalMessage], calls: dict[str, ToolCallRequest]
) -> tuple[list[InternalMessage], bool]:
    """The results of a run of tool messages that answer calls of the batch
    (taken out of ``calls``), and whether every one of those calls was denied
    by a person."""
    results: list[InternalMessage] = []
    cancelled = True
    for m in run:  # a result that answers no call of the batch has no place
        done = m.tool_result
        call = calls.pop(done.request_id, None) if done is not None else None
        if call is not None and not is_synthesized(m):
            results.append(m)
            cancelled = cancelled and _denied_by_human(call)
    return results, cancelled


def _put_results(
    out: _Entries,
    results: list[InternalMessage],
    cancelled: bool,
    after: InternalMessage | None,
) -> bool:
    """The results as a user entry; whether the message ``after`` them (the
    prompt of a cancelled batch) went into it."""
    if cancelled and _joins_prompt(results, after):
        assert after is not None
        items = [_result_item(r, ()) for r in results]
        body = {"prompt": after.text, "tool_use_results": items}
        user = _user(after, {"CancelledToolUses": body})
        out.user(user | extra_fields(after.metadata.extra, _USER), after)
        return True
    first = results[0]
    items = [_result_item(r, _USER_LEVEL if j == 0 else ()) for j, r in enumerate(results)]
    variant = "CancelledToolUses" if cancelled else "ToolUseResults"
    out.user(_user(first, {variant: {"tool_use_results": items}}), first)
    return False
