"""What crosses Temporal's wire, as plain JSON values: contexts, commits,
requests, an adapter's chunks, turns, errors and events.

Temporal keeps every activity's input and result and every update's argument
and result in the workflow's history, as JSON. turnfsm's records go there in
their stored form (``turnfsm.records``), so a history is read back with the
same checks as a store's rows. Nothing here imports temporalio: these are
pure functions of data, used on both sides.
"""

from __future__ import annotations

import dataclasses
import importlib
import types
from typing import Any

from .. import records
from ..adapters.inbound import InboundMessage
from ..engine import Finished, Question, StopReason, Turn
from ..events import Event, event_bytes
from ..model import (
    ChatContext,
    ContentPart,
    InternalMessage,
    LLMRequest,
    LLMResponse,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallRequest,
)
from ..states import State
from ..storage import Commit

__all__ = [
    "NOT_ADMITTED",
    "chunk_from",
    "chunk_to",
    "commit_from",
    "commit_to",
    "context_from",
    "context_to",
    "error_from",
    "error_to",
    "event_row",
    "finished_from",
    "finished_to",
    "inbound_from",
    "inbound_to",
    "parts_from",
    "parts_to",
    "request_from",
    "request_to",
    "turn_from",
    "turn_to",
]

JSON = Any

NOT_ADMITTED = "not admitted"
"""The second detail of a call refused by the workflow's validator, before
Temporal accepted it (the first is the engine's error): nothing of it ran."""


# ---------------------------------------------------------------- records


def context_to(ctx: ChatContext) -> JSON:
    return records.to_python(ctx)


def context_from(data: JSON) -> ChatContext:
    return records.from_python(ChatContext, data)


def commit_to(commit: Commit) -> JSON:
    return records.to_python(commit)


def commit_from(data: JSON) -> Commit:
    return records.from_python(Commit, data)


def parts_to(content: str | list[ContentPart]) -> JSON:
    if isinstance(content, str):
        return content
    return [
        records.to_python(
            p,
        )
        for p in content
    ]


def parts_from(data: JSON) -> str | list[ContentPart]:
    if isinstance(data, str):
        return data
    return list(records.from_python(list[ContentPart], data))


# ---------------------------------------------------------------- the LLM call


def request_to(request: LLMRequest) -> JSON:
    """A request as the activity gets it (``request_cancel`` stays behind: a
    cancel reaches the activity as Temporal's cancellation)."""
    return {
        "context_id": request.context_id,
        "model": request.model,
        "messages": request.messages,
        "tools": request.tools,
        "parameters": request.parameters,
        "attempt": request.attempt,
        "iteration": request.iteration,
        "metadata": request.metadata,
    }


def request_from(data: JSON) -> LLMRequest:
    return LLMRequest(**data)


_CHUNKS: dict[type, str] = {
    TextDelta: "text",
    ThinkingDelta: "thinking",
    ToolCallDelta: "call",
    LLMResponse: "response",
}
_CHUNK_TYPES: dict[str, type] = {v: k for k, v in _CHUNKS.items()}


KEPT_READY: tuple[Any, ...] = (
    ChatContext,
    Commit,
    InternalMessage,
    ToolCallRequest,
    list[ContentPart],
    *_CHUNKS,
)
"""The record types whose adapters a workflow task and its activities use."""


def warm() -> None:
    """Build the adapters of :data:`KEPT_READY` now, as a worker starts: a
    workflow task that built them itself on a loaded machine could pass
    Temporal's two-second bound on a workflow task and be reported as a
    deadlock (TMPRL1101). ``turnfsm`` is passed through the sandbox, so the
    workflows find them built."""
    for tp in KEPT_READY:
        records.adapter(tp)


def chunk_to(chunk: object) -> JSON:
    """``[kind, data]``; a chunk of no known type as ``["other", its type's name]``
    (the engine then fails the attempt naming that type, as in-process)."""
    kind = _CHUNKS.get(type(chunk))
    if kind is None:
        return ["other", type(chunk).__name__]
    return [kind, records.to_python(chunk)]


def chunk_from(data: JSON) -> object:
    kind, value = data
    if kind == "other":
        return types.new_class(str(value))()
    return records.from_python(_CHUNK_TYPES[kind], value)


# ---------------------------------------------------------------- turns


def turn_to(turn: Turn) -> JSON:
    return {
        "context_id": turn.context_id,
        "state": str(turn.state),
        "stop_reason": None if turn.stop_reason is None else str(turn.stop_reason),
        "states": [str(s) for s in turn.states],
        "messages": [records.to_python(m) for m in turn.messages],
        "message_ids": list(turn.message_ids),
        "pending_tool_calls": [records.to_python(c) for c in turn.pending_tool_calls],
        "error": turn.error,
        "questions": [
            {
                "call_id": q.call_id,
                "tool_name": q.tool_name,
                "question": q.question,
                "choices": list(q.choices),
            }
            for q in turn.questions
        ],
    }


def turn_from(data: JSON) -> Turn:
    return Turn(
        context_id=data["context_id"],
        state=State(data["state"]),
        stop_reason=None if data["stop_reason"] is None else StopReason(data["stop_reason"]),
        states=tuple(State(s) for s in data["states"]),
        messages=tuple(records.from_python(InternalMessage, m) for m in data["messages"]),
        message_ids=tuple(data["message_ids"]),
        pending_tool_calls=tuple(
            records.from_python(ToolCallRequest, c) for c in data["pending_tool_calls"]
        ),
        error=data["error"],
        questions=tuple(
            Question(q["call_id"], q["tool_name"], q["question"], tuple(q["choices"]))
            for q in data["questions"]
        ),
    )


# ---------------------------------------------------------------- errors


def inbound_to(messages: list[InboundMessage]) -> JSON:
    return [m.model_dump(mode="json") for m in messages]


def inbound_from(data: JSON) -> list[InboundMessage] | None:
    """A resent conversation (None: none was sent)."""
    if data is None:
        return None
    return [InboundMessage.model_validate(m) for m in data]


def finished_to(finished: Finished) -> JSON:
    return dataclasses.asdict(finished)


def finished_from(data: JSON) -> Finished:
    return Finished(**data)


def _plain(value: object) -> bool:
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def error_to(exc: BaseException) -> JSON:
    """An exception as data: its class (module and name), ``args`` and the
    attributes that are plain JSON values, so that :func:`error_from` gives
    back the same class with the same message and fields."""
    cls = type(exc)
    fields: dict[str, Any] = {}
    for name in getattr(exc, "__dict__", {}):
        value = exc.__dict__[name]
        if _plain(value):
            fields[name] = list(value) if isinstance(value, tuple) else value
    for name in ("retryable",):  # class-level data the engine reads
        value = getattr(exc, name, None)
        if isinstance(value, bool):
            fields.setdefault(name, value)
    return {
        "module": cls.__module__,
        "name": cls.__qualname__,
        "args": [a if _plain(a) else str(a) for a in exc.args],
        "fields": fields,
    }


def error_from(data: JSON) -> Exception:
    """The exception :func:`error_to` described: of its class when that class
    can be found and made without its constructor; else an ``Exception``
    subclass of the same name (so that messages that name the type stay
    the same)."""
    cls: type[Exception] | None = None
    try:
        found = importlib.import_module(data["module"])
        for part in data["name"].split("."):
            found = getattr(found, part)
        if isinstance(found, type) and issubclass(found, Exception):
            cls = found
    except (ImportError, AttributeError):
        cls = None
    if cls is None:
        cls = types.new_class(data["name"].rsplit(".", 1)[-1], (Exception,))
    exc: Exception = cls.__new__(cls)
    exc.args = tuple(data["args"])
    for name, value in data["fields"].items():
        try:
            if name == "retryable" and getattr(cls, "retryable", None) == value:
                continue
            setattr(exc, name, tuple(value) if name == "choices" else value)
        except AttributeError:
            pass
    return exc


# ---------------------------------------------------------------- events


def event_row(ev: Event) -> JSON:
    """A durable event as the event log keeps it: ``[context_id, seq, kind, json]``."""
    return [ev.context_id, ev.seq, ev.kind, event_bytes(ev).decode()]
