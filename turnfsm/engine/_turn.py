"""What a call into the engine returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..errors import OutputValidationError
from ..model import InternalMessage, Role, ToolCallRequest, detached
from ..states import State

__all__ = ["Child", "ChildInfo", "Finished", "Question", "StopReason", "Turn"]


class StopReason(StrEnum):
    COMPLETED = "completed"
    """The model answered with text."""
    REFUSAL = "refusal"
    """The model refused (the answer's ``refusal``)."""
    LENGTH = "length"
    """The answer was cut at the token limit (``finish_reason`` ``length``, or a
    Responses answer incomplete for ``max_output_tokens``). Its tool calls,
    if any, were not run: each got an error result."""
    CONTENT_FILTER = "content_filter"
    """The provider's content filter cut or withheld the answer; what arrived is
    kept. Its tool calls, if any, were not run."""
    INCOMPLETE = "incomplete"
    """A Responses answer marked incomplete for another reason (the message's
    ``metadata.incomplete_reason`` says which)."""
    MAX_ITERATIONS = "max_iterations"
    """The last allowed LLM call still asked for tools; they were not run."""
    AWAITING_APPROVAL = "awaiting_approval"
    """At least one tool call waits for a human decision (an approval, or the
    answer to a question: see :attr:`Turn.questions`)."""
    CLIENT_TOOLS = "client_tools"
    """The model called tools the client runs: :attr:`Turn.client_tool_calls`
    wait for their results (``Engine.submit_results``)."""
    FAILED = "failed"
    """A permanent error, or transient errors past ``max_attempts``."""
    CANCELLED = "cancelled"
    RESET = "reset"
    """A failed turn was abandoned."""
    BRANCH = "branch"
    """A branch was forked or switched; no turn ran."""


@dataclass(frozen=True, slots=True)
class Question:
    """A question the model asked the user (a pending call to a question tool).

    Answer it with ``engine.answer(context_id, call_id, text)``; when ``choices``
    is not empty, ``text`` must be one of them.
    """

    call_id: str
    tool_name: str
    question: str
    choices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Turn:
    """The outcome of one call, returned once the context rests.

    ``states`` are the states entered during the call, in order (a fresh
    context's trace is ``[Idle, *turn.states]``). ``messages`` are the messages
    this call added, ``message_ids`` their ids. ``pending_tool_calls`` are the
    calls waiting for a human (questions included); ``questions`` are those of
    them that are questions to the user, to be answered with ``Engine.answer``.

    A turn the engine returns copies its ``messages`` from the engine's records
    when they are first read, and keeps those copies (the same tuple on every
    read); ``text`` and ``refusal`` read the records without copying them. The
    engine never changes a record in place (it stores a changed message as a
    new record), so the copies are the messages as the call left them, however
    late they are read.
    """

    context_id: str
    state: State
    stop_reason: StopReason | None
    states: tuple[State, ...]
    messages: tuple[InternalMessage, ...]
    message_ids: tuple[str, ...]
    pending_tool_calls: tuple[ToolCallRequest, ...]
    error: str | None = None
    questions: tuple[Question, ...] = ()
    output: Any = None
    """The turn's typed answer, validated: an instance of the output type's
    model or dataclass, the Python value of another type, the decoded JSON
    of a JSON Schema (docs/structured-output.md). None when the call had no
    output type or did not end in a valid answer."""
    output_error: OutputValidationError | None = None
    """Why the answer did not match the output type once the output retries
    were spent (the turn is in PermanentFailure; ``error`` says the same)."""
    client_tool_calls: tuple[ToolCallRequest, ...] = ()
    """The calls of client tools waiting for the caller's results (see
    ``Engine.submit_results``); not among ``pending_tool_calls``. The engine's
    calls of the same batch come first: while some wait for a human, these
    wait too, until the human's decisions let them run (docs/client-tools.md)."""

    @property
    def text(self) -> str:
        """The text of the last assistant message this call added ("" if none)."""
        for msg in reversed(_read(self)):
            if msg.role is Role.ASSISTANT:
                return msg.text
        return ""

    @property
    def refusal(self) -> str | None:
        """The refusal of the last assistant message this call added, if it refused
        (``stop_reason`` is then ``refusal``)."""
        for msg in reversed(_read(self)):
            if msg.role is Role.ASSISTANT:
                return msg.refusal
        return None


# ``Turn.messages``, copied when first read. The field's slot keeps either the
# copies or, until the first read, a ``_Uncopied`` holding the engine's own
# records; a property in front of the slot makes the copies on the first read
# and stores them in the slot. Copying the four messages of a tool-loop turn
# was about a twelfth of the turn, paid by every caller, most of whom read
# ``state`` and ``text`` only.


class _Uncopied:
    """The engine's records, until the first read copies them (a plain class:
    one is made every call, and a frozen dataclass sets its field through
    ``object.__setattr__``; nothing outside this module sees it)."""

    __slots__ = ("records",)

    def __init__(self, records: tuple[InternalMessage, ...]) -> None:
        self.records = records


_SLOT: Any = Turn.__dict__["messages"]  # the slot's descriptor, behind the property


def _read(turn: Turn) -> Sequence[InternalMessage]:
    """The turn's messages, as records or copies, without copying them: for
    reading strings (which cannot change) out of them."""
    value = _SLOT.__get__(turn, Turn)
    read: Sequence[InternalMessage] = value.records if type(value) is _Uncopied else value
    return read  # typed by the annotation: ``cast`` is a call


def _messages(turn: Turn) -> tuple[InternalMessage, ...]:
    value = _SLOT.__get__(turn, Turn)
    if type(value) is _Uncopied:
        value = tuple(detached(m) for m in value.records)
        _SLOT.__set__(turn, value)
    messages: tuple[InternalMessage, ...] = value
    return messages


def _set_messages(turn: Turn, value: tuple[InternalMessage, ...]) -> None:
    # only reached from the constructor (a frozen Turn's own __setattr__ refuses)
    _SLOT.__set__(turn, value)


setattr(  # noqa: B010  (mypy: a property put over a dataclass field)
    Turn,
    "messages",
    property(
        _messages,
        _set_messages,
        doc="The messages this call added (copies: see :class:`Turn`).",
    ),
)


class _OpenTurn:
    """Turn's slots, without its frozen ``__setattr__`` (see :func:`new_turn`)."""

    __slots__ = (
        "client_tool_calls",
        "context_id",
        "error",
        "message_ids",
        "messages",
        "output",
        "output_error",
        "pending_tool_calls",
        "questions",
        "state",
        "states",
        "stop_reason",
    )
    context_id: str
    state: State
    stop_reason: StopReason | None
    states: tuple[State, ...]
    messages: _Uncopied
    message_ids: tuple[str, ...]
    pending_tool_calls: tuple[ToolCallRequest, ...]
    error: str | None
    questions: tuple[Question, ...]
    output: Any
    output_error: OutputValidationError | None
    client_tool_calls: tuple[ToolCallRequest, ...]


_new = object.__new__


def new_turn(
    *,
    context_id: str,
    state: State,
    stop_reason: StopReason | None,
    states: tuple[State, ...],
    records: tuple[InternalMessage, ...],
    message_ids: tuple[str, ...],
    pending_tool_calls: tuple[ToolCallRequest, ...],
    error: str | None,
    questions: tuple[Question, ...],
    output: Any,
    output_error: OutputValidationError | None,
    client_tool_calls: tuple[ToolCallRequest, ...],
) -> Turn:
    """The :class:`Turn` a call returns, with ``records``, the engine's own
    messages, as its messages (copied when ``messages`` is first read). It is
    the record ``Turn(...)`` makes, made with plain slot writes: a frozen
    dataclass's ``__init__`` sets each of its twelve fields through
    ``object.__setattr__``, several times the cost, once a call
    (``tests/test_open_records.py`` holds the two to the same record)."""
    t = _new(_OpenTurn)
    t.context_id = context_id
    t.state = state
    t.stop_reason = stop_reason
    t.states = states
    t.messages = _Uncopied(records)  # the slot the ``messages`` property reads
    t.message_ids = message_ids
    t.pending_tool_calls = pending_tool_calls
    t.error = error
    t.questions = questions
    t.output = output
    t.output_error = output_error
    t.client_tool_calls = client_tool_calls
    # laid out as a Turn (the same slots), it becomes one
    t.__class__ = Turn  # type: ignore[assignment]
    return t  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Child:
    """What :meth:`Engine.spawn` returns: the new sub-context's id and the turn
    its task ran (the child is at rest: ``turn.state``)."""

    context_id: str
    turn: Turn


@dataclass(frozen=True, slots=True)
class Finished:
    """What :meth:`Engine.finish` returns: the parent's message that now stands
    for the child."""

    context_id: str
    """The parent's id."""
    child_id: str
    message_id: str
    """The summary message, on the parent's active branch."""
    summary: str
    kept: bool
    """The child was kept (finished, archived) rather than deleted."""


@dataclass(frozen=True, slots=True)
class ChildInfo:
    """One direct child, as :meth:`Engine.children` lists it."""

    context_id: str
    state: str
    """The child's stored state (a name of the table)."""
    title: str | None
    finished: bool
    """Finished and kept (``finish(keep=True)``): it takes no more input."""
