"""What a call into the engine returns."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..model import InternalMessage, Role, ToolCallRequest
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

    @property
    def text(self) -> str:
        """The text of the last assistant message this call added ("" if none)."""
        for msg in reversed(self.messages):
            if msg.role is Role.ASSISTANT:
                return msg.text
        return ""

    @property
    def refusal(self) -> str | None:
        """The refusal of the last assistant message this call added, if it refused
        (``stop_reason`` is then ``refusal``)."""
        for msg in reversed(self.messages):
            if msg.role is Role.ASSISTANT:
                return msg.refusal
        return None


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
