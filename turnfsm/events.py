"""The event vocabulary (``docs/events.md``).

Events are slotted dataclasses (immutable by convention) with a ``kind``
discriminator: cheap to build on the streaming hot path, and (de)serialised by pydantic through
:data:`EVENT_ADAPTER` (``EVENT_ADAPTER.dump_python(ev, mode="json")``,
``EVENT_ADAPTER.validate_python(data)``).

Every event carries the ``context_id``, a per-context ``seq`` that has no gaps,
and a ``timestamp`` (seconds since the epoch, from the engine's clock).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from .model import InternalMessage, ToolCallRequest

__all__ = [
    "EVENT_ADAPTER",
    "STREAMED_KINDS",
    "ContentDelta",
    "ContextChanged",
    "Event",
    "EventsMissed",
    "Failed",
    "MessageCompleted",
    "QuestionAsked",
    "Retrying",
    "StateChanged",
    "ToolApprovalRequested",
    "ToolCallArgumentsDelta",
    "ToolCallsRequested",
    "ToolResult",
    "TurnCompleted",
    "event_bytes",
]

# Not frozen: a frozen dataclass sets each field through object.__setattr__,
# which triples the cost of the ContentDelta sent for every streamed chunk.
# Treat events as immutable all the same.
_EV = {"slots": True, "kw_only": True}


@dataclass(**_EV)
class StateChanged:
    context_id: str
    seq: int
    timestamp: float
    from_state: str
    to_state: str
    trigger: str
    kind: Literal["StateChanged"] = "StateChanged"


@dataclass(**_EV)
class ContentDelta:
    """A piece of streamed text (``channel="text"``) or reasoning (``"thinking"``).

    ``index`` counts the deltas of one message attempt from 0; ``attempt`` is the
    LLM attempt the delta belongs to (a failed attempt's deltas are not kept).
    """

    context_id: str
    seq: int
    timestamp: float
    message_id: str
    delta: str
    index: int
    attempt: int
    channel: Literal["text", "thinking"] = "text"
    kind: Literal["ContentDelta"] = "ContentDelta"


@dataclass(**_EV)
class ToolCallArgumentsDelta:
    """A piece of a tool call's arguments (JSON text) as the model streams the call.

    ``delta`` is the new piece only: join a call's pieces in ``seq`` order for
    its arguments so far (the final, decoded arguments come in
    :class:`ToolCallsRequested`). ``call_index`` is the call's place in the
    answer (from 0); ``call_id`` and ``tool_name`` are None until the model has
    sent them, then repeated on each later piece of that call (the engine may
    still rename a ``call_id`` the context already used: the id to act on is
    the one in ``ToolCallsRequested``). ``delta`` may be empty on the piece that
    first names the call. ``attempt`` is the LLM attempt the piece belongs to
    (a failed attempt's pieces are not kept); like a ``ContentDelta``, it is
    sent and never stored.
    """

    context_id: str
    seq: int
    timestamp: float
    message_id: str
    call_index: int
    call_id: str | None
    tool_name: str | None
    delta: str
    attempt: int
    kind: Literal["ToolCallArgumentsDelta"] = "ToolCallArgumentsDelta"


@dataclass(**_EV)
class MessageCompleted:
    context_id: str
    seq: int
    timestamp: float
    message_id: str
    message: InternalMessage
    kind: Literal["MessageCompleted"] = "MessageCompleted"


@dataclass(**_EV)
class ToolCallsRequested:
    context_id: str
    seq: int
    timestamp: float
    message_id: str
    calls: list[ToolCallRequest]
    kind: Literal["ToolCallsRequested"] = "ToolCallsRequested"


@dataclass(**_EV)
class ToolApprovalRequested:
    context_id: str
    seq: int
    timestamp: float
    calls: list[ToolCallRequest]
    kind: Literal["ToolApprovalRequested"] = "ToolApprovalRequested"


@dataclass(**_EV)
class QuestionAsked:
    """The context went to ``AwaitingToolApproval`` on a question to the user: answer
    it with ``Engine.answer(context_id, call_id, text)`` (one of ``choices`` when
    there are some) or decline it with ``Engine.deny``."""

    context_id: str
    seq: int
    timestamp: float
    call_id: str
    tool_name: str
    question: str
    choices: list[str]
    kind: Literal["QuestionAsked"] = "QuestionAsked"


@dataclass(**_EV)
class ToolResult:
    context_id: str
    seq: int
    timestamp: float
    call_id: str
    tool_name: str
    success: bool
    result: Any
    message_id: str
    kind: Literal["ToolResult"] = "ToolResult"


@dataclass(**_EV)
class Retrying:
    """A transient failure; the next attempt starts after ``delay`` seconds."""

    context_id: str
    seq: int
    timestamp: float
    attempt: int
    delay: float
    error: str
    partial_text: str = ""
    kind: Literal["Retrying"] = "Retrying"


@dataclass(**_EV)
class TurnCompleted:
    context_id: str
    seq: int
    timestamp: float
    stop_reason: str
    state: str
    kind: Literal["TurnCompleted"] = "TurnCompleted"


@dataclass(**_EV)
class Failed:
    context_id: str
    seq: int
    timestamp: float
    error: str
    state: str
    partial_text: str = ""
    kind: Literal["Failed"] = "Failed"


@dataclass(**_EV)
class ContextChanged:
    """A change that is not a transition was committed: ``change`` names it
    (``config_updated``, ``branch_forked``, ``branch_switched``,
    ``branch_prompts_set``; see :class:`turnfsm.states.Change`) and ``detail``
    says what changed, as the audit trail keeps it."""

    context_id: str
    seq: int
    timestamp: float
    change: str
    detail: dict[str, Any]
    state: str
    kind: Literal["ContextChanged"] = "ContextChanged"


@dataclass(**_EV)
class EventsMissed:
    """Sent to a subscriber that fell behind: ``count`` events from ``first_seq`` on
    were dropped for it (the engine never waits for a subscriber)."""

    context_id: str
    seq: int
    timestamp: float
    count: int
    first_seq: int
    kind: Literal["EventsMissed"] = "EventsMissed"
    extra: dict[str, Any] = field(default_factory=dict)


Event = Annotated[
    StateChanged
    | ContentDelta
    | ToolCallArgumentsDelta
    | MessageCompleted
    | ToolCallsRequested
    | ToolApprovalRequested
    | QuestionAsked
    | ToolResult
    | Retrying
    | TurnCompleted
    | Failed
    | ContextChanged
    | EventsMissed,
    Field(discriminator="kind"),
]

EVENT_ADAPTER: TypeAdapter[Event]
"""The adapter of :data:`Event` (any kind, chosen by ``kind``): built on first
use (this module's ``__getattr__``), as a process that never (de)serialises an
event (``turnfsm --help``, an engine on a memory store) does not pay for
pydantic's schema of every kind."""

STREAMED_KINDS: frozenset[str] = frozenset({"ContentDelta", "ToolCallArgumentsDelta"})
"""The kinds sent while an answer streams and never stored: an event log does
not keep them (a note carries them), a resumed stream replays them only from
the server's memory."""

_KINDS: tuple[type, ...] = typing.get_args(typing.get_args(Event)[0])

_KIND_DUMPS: dict[type, Callable[[Any], bytes]] = {}
"""Each kind's own serializer's ``to_json``, built at its first
:func:`event_bytes`: the same JSON as :data:`EVENT_ADAPTER` without choosing
the kind on every call, and called directly rather than through
``TypeAdapter.dump_json``, which passes its fifteen options on, each at the
default ``to_json`` has itself (the same bytes: ``tests/engine/test_events.py``)."""


def __getattr__(name: str) -> Any:
    if name == "EVENT_ADAPTER":
        return _event_adapter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _event_adapter() -> TypeAdapter[Event]:
    """:data:`EVENT_ADAPTER`, built on the first call and then kept as the
    module's attribute (later reads find it without ``__getattr__``)."""
    built: TypeAdapter[Event] | None = globals().get("EVENT_ADAPTER")
    if built is None:
        built = TypeAdapter(Event)
        globals()["EVENT_ADAPTER"] = built
    return built


def _kind_dump(kind: type) -> Callable[[Any], bytes]:
    """What :func:`event_bytes` dumps a ``kind`` with, built once."""
    adapter = TypeAdapter(kind) if kind in _KINDS else _event_adapter()
    built = _KIND_DUMPS[kind] = adapter.serializer.to_json
    return built


_JSON_KEPT = 1024
"""Events whose JSON :func:`event_bytes` remembers."""
_json_memo: dict[int, tuple[Event, bytes]] = {}


def event_bytes(ev: Event) -> bytes:
    """``EVENT_ADAPTER.dump_json(ev)``, made once per event for the last
    :data:`_JSON_KEPT` events: the server's event log and each of its streams
    send the same event. Keyed by identity; an entry holds its event, so an
    id cannot be reused while it is kept."""
    key = id(ev)
    hit = _json_memo.get(key)
    if hit is not None and hit[0] is ev:
        return hit[1]
    data = (_KIND_DUMPS.get(type(ev)) or _kind_dump(type(ev)))(ev)
    if len(_json_memo) >= _JSON_KEPT:
        del _json_memo[next(iter(_json_memo))]
    _json_memo[key] = (ev, data)
    return data
