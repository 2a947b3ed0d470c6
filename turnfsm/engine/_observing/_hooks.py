"""The hooks of a watched engine call: :class:`Watch` (see ``_observers``)."""

from __future__ import annotations

from typing import Any

from ...model import LLMRequest, MessageNode, ToolCallRequest
from ...tools import ToolOutcome
from .._runtime import Runtime
from .._turn import Turn

__all__ = ["Watch"]


class Watch:
    """What watches one engine call. Every hook does nothing here: a watch
    overrides those it needs. ``rt`` is the loaded context (``rt.ctx``, its
    state in ``rt.holder.state``); treat it as read-only."""

    __slots__ = ()

    def entered(self, rt: Runtime) -> None:
        """The context is loaded and the call starts its work."""

    def handing_off(self, rt: Runtime) -> None:
        """``submit``: the call's last commit, which hands the turn to a
        worker, is about to be made (the new message is ``rt.appended[-1]``)."""

    def transition(self, rt: Runtime, source: str, trigger: str, dest: str) -> None:
        """A transition of the table fired (committed with the step's commit)."""

    def llm_started(self, rt: Runtime) -> None:
        """The ``call_llm`` effect starts: one LLM attempt (its request is
        given to :meth:`llm_request` once it is built)."""

    def llm_request(self, rt: Runtime, request: LLMRequest) -> None:
        """The attempt's request is built and about to be sent to the model
        (every attempt has its own: the first one ``prepare`` built, each
        later one built inside the effect). Not told when building it failed."""

    def llm_ended(
        self, rt: Runtime, answer: MessageNode | None, error: BaseException | None
    ) -> None:
        """The attempt ended: ``answer`` is the assistant message it added
        (None when it failed: ``rt.holder.state`` is then ``TransientFailure``
        or ``PermanentFailure`` and ``rt.ctx.progress.last_error`` says why);
        ``error`` what interrupted it (a cancellation)."""

    def tool_started(self, rt: Runtime, call: ToolCallRequest) -> Any:
        """A tool call starts to run; what this returns is given back to
        :meth:`tool_ended` (in the same task)."""
        return None

    def tool_ended(
        self,
        rt: Runtime,
        call: ToolCallRequest,
        started: Any,
        outcome: ToolOutcome | None,
        error: BaseException | None,
    ) -> None:
        """The tool call ended with ``outcome`` (an error result is an
        outcome too), or was interrupted by ``error``."""

    def ended(self, context_id: str, turn: Turn | None, error: BaseException | None) -> None:
        """The call returned ``turn``, or raised ``error``."""
