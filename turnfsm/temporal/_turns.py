"""The turn calls of an engine that hands them to a workflow: written once,
for both engines that do (the client's :class:`~._client.TemporalEngine` and
the workflow's own :class:`~._children.WorkflowEngine`), as the part of the
engine that runs its turn calls (a :class:`~turnfsm.engine._turn_calls.TurnCalls`):
the engines restate none of them.

Each call checks its arguments as :class:`~turnfsm.Engine` does, asks for
the runner of its context (:meth:`WorkflowTurns._runner`), and
hands that runner the call as the workflow's table of calls (``OPS``) reads
it: the op's name and its arguments as data. With no runner, the engine runs
the call itself. The client's runner is an Update on the context's workflow;
the workflow's is the ``call`` signal to a sub-task child's workflow.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..adapters.inbound import InboundMessage
from ..engine import Turn
from ..engine._inputs import UNSET, check_call_ids, check_content, check_id, check_text
from ..engine._turn_calls import TurnCalls
from ..errors import InvalidInput
from ..model import ContentPart
from . import _codec

__all__ = ["Runner", "WorkflowTurns", "no_output_type"]

Runner = Callable[[str, str, dict[str, Any]], Awaitable[Turn]]
"""Runs one call on a context elsewhere: ``runner(context_id, op, args)``."""

_ROLES = ("user", "frontend_operator")


def no_output_type(output_type: object, output_retries: object) -> None:
    """A call's own output type is not carried to the workflow (yet): refused
    at the call rather than dropped."""
    if output_type is not UNSET or output_retries is not None:
        raise InvalidInput(
            "output_type", "a call's own output type does not run on Temporal: use Engine"
        )


class WorkflowTurns(TurnCalls):
    """Turn calls that may run in a workflow (see the module)."""

    def _runner(self, context_id: str, op: str) -> Runner | None:
        """Where the call ``op`` on the context runs (None: here)."""
        return None

    async def send(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str = "user",
        *,
        message_id: str | None = None,
        context: Sequence[InboundMessage] | None = None,
        output_type: Any = UNSET,
        output_retries: int | None = None,
        client_tools: Any = None,
    ) -> Turn:
        no_output_type(output_type, output_retries)
        run = self._runner(context_id, "send")
        if run is None:
            return await super().send(
                context_id,
                content,
                role,
                message_id=message_id,
                context=context,
                client_tools=client_tools,
            )
        check_id("context_id", context_id)
        if client_tools:
            raise InvalidInput("client_tools", "turns on Temporal do not take client tools")
        if not isinstance(role, str) or role not in _ROLES:
            raise InvalidInput("role", f"must be 'user' or 'frontend_operator', not {role!r}")
        check_content("content", content)
        if message_id is not None:
            check_id("message_id", message_id)
        args: dict[str, Any] = {
            "content": _codec.parts_to(content if isinstance(content, str) else list(content)),
            "role": role,
            "message_id": message_id,
        }
        if context:  # the conversation a client resent: laid over the branch in the workflow
            for i, m in enumerate(context):
                if not isinstance(m, InboundMessage):
                    raise InvalidInput(f"context[{i}]", "must be an InboundMessage")
            args["context"] = _codec.inbound_to(list(context))
        return await run(context_id, "send", args)

    async def approve(self, context_id: str, call_ids: str | Sequence[str]) -> Turn:
        run = self._runner(context_id, "approve")
        if run is None:
            return await super().approve(context_id, call_ids)
        check_id("context_id", context_id)
        ids = check_call_ids("call_ids", call_ids)
        return await run(context_id, "approve", {"call_ids": ids})

    async def deny(
        self, context_id: str, call_id: str | Sequence[str], reason: str | None = ""
    ) -> Turn:
        run = self._runner(context_id, "deny")
        if run is None:
            return await super().deny(context_id, call_id, reason)
        check_id("context_id", context_id)
        ids = check_call_ids("call_id", call_id)
        check_text("reason", reason, optional=True)
        return await run(context_id, "deny", {"call_ids": ids, "reason": reason})

    async def answer(self, context_id: str, call_id: str, text: str) -> Turn:
        run = self._runner(context_id, "answer")
        if run is None:
            return await super().answer(context_id, call_id, text)
        check_id("context_id", context_id)
        check_text("call_id", call_id, empty=False)
        check_text("text", text, empty=False)
        return await run(context_id, "answer", {"call_id": call_id, "text": text})

    async def resume(self, context_id: str) -> Turn:
        return await self._bare(context_id, "resume", super().resume)

    async def cancel(self, context_id: str) -> Turn:
        return await self._bare(context_id, "cancel", super().cancel)

    async def retry(self, context_id: str) -> Turn:
        return await self._bare(context_id, "retry", super().retry)

    async def reset(self, context_id: str) -> Turn:
        return await self._bare(context_id, "reset", super().reset)

    async def _bare(self, context_id: str, op: str, here: Callable[[str], Awaitable[Turn]]) -> Turn:
        """A call that takes the context alone: run by its runner, or ``here``."""
        run = self._runner(context_id, op)
        if run is None:
            return await here(context_id)
        check_id("context_id", context_id)
        return await run(context_id, op, {})
