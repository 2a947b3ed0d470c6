"""What the effects may ask of the engine that runs them: :class:`Host`.

The effects (``prepare``, ``call_llm``, ``decide``, ``run_tools``, ``backoff``)
and the calls' first steps (``_calls``, ``_requests``, ``_children``) do their
I/O through this small declared host, never through the drive loop's class:
commit (alone, or with a trigger taken just before), the clock, the settings
(LLM, tools, ids) and the sub-task runner. The steps they take on the loaded
context are plain functions of ``_steps``; what an answer means, which edge
to take, when to back off and what to approve are pure functions of data
beside them (``_decide``, ``_backoff``, ``_answer``, ``_approval``).

The engine's own host is ``_drive.Driver``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from ..model import ToolCallRequest
from ..states import State, Trigger
from ..tools import SubtaskHost
from ._runtime import Runtime
from ._settings import Settings

__all__ = ["Host", "SubtaskRunnerHost"]


class SubtaskRunnerHost(SubtaskHost, Protocol):
    """Runs sub-task tools' children, and says which of them wait for a human."""

    def take_waiting(
        self, parent_id: str
    ) -> dict[str, tuple[str, tuple[ToolCallRequest, ...]]]: ...


class Host(Protocol):
    """The engine as the effects see it: what waits or reaches outside the
    loaded context. The steps a call takes on its context (take a trigger,
    reserve an event, record a change, add results) are plain functions in
    ``_steps``, on the runtime."""

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

    async def step(self, rt: Runtime, trigger: Trigger) -> State:
        """Take ``trigger`` and commit it at once."""
        ...

    async def commit(self, rt: Runtime) -> None:
        """Commit what changed since the last commit, then send its events."""
        ...
