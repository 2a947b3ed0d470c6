"""What the effects may ask of the engine that runs them: :class:`Host`.

The effects (``prepare``, ``call_llm``, ``decide``, ``run_tools``, ``backoff``)
and the calls' first steps (``_calls``, ``_requests``, ``_children``) do their
I/O and take their triggers through this small declared host, never through
the drive loop's class: take a trigger on the machine, reserve an event for
the next commit, commit, publish a delta, the clock and the ids (through
``settings``). What an answer means, which edge to take, when to back off and
what to approve are pure functions of data beside them (``_decide``,
``_backoff``, ``_answer``, ``_approval``); the host is the one way out.

The engine's own host is ``_drive.Driver``; a test, a replay or a durable
workflow may give another one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from ..events import Event
from ..model import ToolCallRequest
from ..states import Change, State, Trigger
from ..tools import SubtaskHost, ToolOutcome
from ._runtime import Runtime
from ._settings import Settings

__all__ = ["Host", "SubtaskRunnerHost"]


class SubtaskRunnerHost(SubtaskHost, Protocol):
    """Runs sub-task tools' children, and says which of them wait for a human."""

    def take_waiting(
        self, parent_id: str
    ) -> dict[str, tuple[str, tuple[ToolCallRequest, ...]]]: ...


class Host(Protocol):
    """The engine as the effects see it."""

    @property
    def settings(self) -> Settings:
        """The engine's settings: tools, modes, LLM, retry policy, clock, ids."""
        ...

    @property
    def subtask_host(self) -> SubtaskRunnerHost | None:
        """Runs the sub-task tools' children (None: no sub-task runs)."""
        ...

    def now(self) -> datetime:
        """The clock's time as a datetime (UTC)."""
        ...

    def fire(self, rt: Runtime, trigger: Trigger) -> State:
        """Take ``trigger`` on the machine (its StateChanged goes out after the
        next commit); :class:`~turnfsm.errors.IllegalTransition` if the table
        has no such edge from the current state."""
        ...

    async def step(self, rt: Runtime, trigger: Trigger) -> State:
        """Take ``trigger`` and commit it at once."""
        ...

    async def commit(self, rt: Runtime) -> None:
        """Commit what changed since the last commit, then send its events."""
        ...

    def later(self, rt: Runtime, kind: Callable[..., Event], **fields: Any) -> None:
        """Reserve the next seq for an event that goes out after the next commit."""
        ...

    def publish(self, rt: Runtime, event: Event) -> bool:
        """Offer an event that needs no commit (a delta) to the subscribers now;
        True when the caller should give readers a turn."""
        ...

    def change(self, rt: Runtime, change: Change, detail: dict[str, Any]) -> None:
        """A change that is not a transition, with the next commit."""
        ...

    def end_turn(self, rt: Runtime) -> None:
        """The TurnCompleted event (``rt.stop_reason``), with the next commit."""
        ...

    def failed(self, rt: Runtime, error: str, partial_text: str) -> None:
        """The Failed event, with the next commit."""
        ...

    def add_results(
        self, rt: Runtime, calls: Sequence[ToolCallRequest], outcomes: Sequence[ToolOutcome]
    ) -> None:
        """Append one result per call, each with its ToolResult event."""
        ...

    def close_open_calls(
        self, rt: Runtime, why: str, error: Callable[[ToolCallRequest], str]
    ) -> None:
        """Close the open calls with failed results, each with its ToolResult event."""
        ...
