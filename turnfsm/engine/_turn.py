"""What a call into the engine returns."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..model import InternalMessage, Role, ToolCallRequest
from ..states import State

__all__ = ["StopReason", "Turn"]


class StopReason(StrEnum):
    COMPLETED = "completed"
    """The model answered with text."""
    MAX_ITERATIONS = "max_iterations"
    """The last allowed LLM call still asked for tools; they were not run."""
    AWAITING_APPROVAL = "awaiting_approval"
    """At least one tool call waits for a human decision."""
    FAILED = "failed"
    """A permanent error, or transient errors past ``max_attempts``."""
    CANCELLED = "cancelled"
    RESET = "reset"
    """A failed turn was abandoned."""
    BRANCH = "branch"
    """A branch was forked or switched; no turn ran."""


@dataclass(frozen=True, slots=True)
class Turn:
    """The outcome of one call, returned once the context rests.

    ``states`` are the states entered during the call, in order (a fresh
    context's trace is ``[Idle, *turn.states]``). ``messages`` are the messages
    this call added, ``message_ids`` their ids.
    """

    context_id: str
    state: State
    stop_reason: StopReason | None
    states: tuple[State, ...]
    messages: tuple[InternalMessage, ...]
    message_ids: tuple[str, ...]
    pending_tool_calls: tuple[ToolCallRequest, ...]
    error: str | None = None

    @property
    def text(self) -> str:
        """The text of the last assistant message this call added ("" if none)."""
        for msg in reversed(self.messages):
            if msg.role is Role.ASSISTANT:
                return msg.text
        return ""
