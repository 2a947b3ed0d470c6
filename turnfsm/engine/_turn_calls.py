"""The calls that run a context's turn (:class:`TurnCalls`): send a message,
hand it to a worker, give client tools' results, decide on pending calls,
answer a question, retry, reset, cancel, resume, recover, answer a request
body. ``Engine``'s methods of the same names are these
(``turnfsm.engine._delegate``); an engine that runs them elsewhere is made
with a subclass.

Each checks its arguments, then hands the call to the drive loop
(``_drive``); what a call does first is in ``_calls`` / ``_requests``. A turn
that rests waiting for a sub-task's child shows that child's pending calls
(``SubContexts.surface``), and decisions taken on a parent reach the child.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ..adapters.inbound import InboundMessage, parse_request
from ..errors import InvalidInput, StoreError
from ..model import ApprovalStatus, ClientTools, ContentPart, Role, TurnOutput
from ..states import State
from ..storage import WorkQueue
from . import _calls, _recovery, _requests
from ._client_tools import ClientToolsArg, check_client_tools, client_outcomes, start_submit
from ._drive import Driver, Start
from ._inputs import UNSET, check_call_ids, check_content, check_id, check_text
from ._manage import ContextManager
from ._recovery import Recovery
from ._runtime import CallEnd
from ._subcontexts._approvals import route_decisions, surface
from ._subcontexts._engine_calls import EngineCalls
from ._subcontexts._lifecycle import SubContexts
from ._turn import Turn
from ._typed import turn_output

__all__ = ["TurnCalls"]

_INPUT_ROLES = {"user": Role.USER, "frontend_operator": Role.FRONTEND_OPERATOR}

# The state every send's turn is checked for and the decisions' statuses, as
# module constants: on Python 3.11 reading a member off its enum class goes
# through ``EnumType.__getattr__``'s slow lookup.
_AWAITING_TOOL_APPROVAL = State.AWAITING_TOOL_APPROVAL
_APPROVED = ApprovalStatus.APPROVED
_DENIED = ApprovalStatus.DENIED


class TurnCalls:
    """Runs one engine's turn calls (see the module's docstring): ``driver``
    runs them, ``subcontexts`` routes decisions to sub-task children,
    ``contexts`` makes the context a request body without one gets, and
    ``calls`` are the engine's own (a child's question answered through it)."""

    def __init__(
        self,
        driver: Driver,
        contexts: ContextManager,
        subcontexts: SubContexts,
        calls: EngineCalls,
    ) -> None:
        self.driver = driver
        self.contexts = contexts
        self.subcontexts = subcontexts
        self.calls = calls

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
        client_tools: ClientToolsArg = None,
    ) -> Turn:
        """A user (or frontend operator) message; runs the turn until the context rests.

        At ``AwaitingToolApproval`` the pending calls are first closed with
        "superseded" results. ``message_id`` is the id the message gets (default:
        one from the engine's id factory, see :meth:`new_id`), so that a caller
        knows it before the turn rests; an id the context already holds is
        refused with :class:`InvalidInput`. ``context`` (the conversation as the
        client holds it) is matched as in :meth:`send_request`, but for its answers.
        ``output_type`` and ``output_retries`` replace the engine's for this turn
        (``output_type=None``: any text); :attr:`Turn.output` is the typed answer.
        ``client_tools`` are tools the caller runs (docs/client-tools.md).
        """
        d = self.driver
        settings = d.settings
        out = turn_output(settings.outputs, output_type, output_retries)
        client = check_client_tools("client_tools", client_tools, settings.tools)
        start = self.start_send(context_id, content, role, message_id, context, out, client)
        turn = await d.run(context_id, start)
        if turn.state is _AWAITING_TOOL_APPROVAL:  # it may wait for a sub-task's child
            return await surface(d, turn)
        return turn

    async def submit_results(
        self,
        context_id: str,
        results: Mapping[str, Any],
        *,
        context: Sequence[InboundMessage] | None = None,
        client_tools: ClientToolsArg = None,
    ) -> Turn:
        """Give the results of calls of client tools (``Turn.client_tool_calls``):
        ``results`` maps each call id to its result (a string, or JSON data,
        stored by the rules of :mod:`turnfsm.tools`), one result per call. Once
        no call of the batch waits, the turn goes on: the LLM is called again.

        A call the engine runs raises :class:`~turnfsm.errors.NotAClientCall`,
        an unknown id :class:`~turnfsm.errors.UnknownToolCall`, a call that has
        its result :class:`~turnfsm.errors.ToolCallNotPending`; nothing is
        stored then. A new user message instead closes the calls "superseded".

        ``context`` (the conversation as the client holds it) is matched as in
        :meth:`send`; it must hold nothing new (else
        :class:`~turnfsm.errors.HistoryConflict`). ``client_tools``, when
        given, replace the turn's client tools for its next requests.
        """
        check_id("context_id", context_id)
        outcomes = client_outcomes(results)
        d = self.driver
        client = check_client_tools("client_tools", client_tools, d.settings.tools)
        if context is not None:
            for i, m in enumerate(context):
                if not isinstance(m, InboundMessage):
                    raise InvalidInput(f"context[{i}]", "must be an InboundMessage")
        start = functools.partial(start_submit, d, outcomes, context, client)
        return await d.run(context_id, start)

    def start_send(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str,
        message_id: str | None,
        context: Sequence[InboundMessage] | None = None,
        output: TurnOutput | None = None,
        client: ClientTools | None = None,
    ) -> Start:
        """The checked arguments of :meth:`send` and :meth:`submit`, as the
        call's start."""
        check_id("context_id", context_id)
        if not isinstance(role, str) or role not in _INPUT_ROLES:
            raise InvalidInput("role", f"must be 'user' or 'frontend_operator', not {role!r}")
        parts = check_content("content", content)
        if message_id is not None:
            check_id("message_id", message_id)
        return _requests.send_start(
            self.driver, parts, _INPUT_ROLES[role], message_id, context, output, client
        )

    async def submit(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str = "user",
        *,
        message_id: str | None = None,
        output_type: Any = UNSET,
        output_retries: int | None = None,
    ) -> str:
        """Hand a user (or frontend operator) message's turn to a worker: commit
        the message and the ``user_message`` transition (what :meth:`send`
        commits first, the checks included) and release the context's lease in
        that same commit, then return the message's id without running the turn.

        The context is then away from rest (``ProcessingUserMessage``) with its
        lease released: exactly what ``claim_expired`` hands out, so a
        :class:`~turnfsm.engine.Worker` (``turnfsm worker``) on the same store
        claims it and resumes it from there (see ``docs/workers.md``). On
        PostgreSQL the commit also notifies the workers (``NOTIFY turnfsm_work``).
        ``message_id``, ``output_type`` and ``output_retries`` as for :meth:`send`.
        A store that no worker can claim from (it has no ``claim_expired``: the
        memory and files stores) is refused with :class:`StoreError`.
        """
        out = turn_output(self.driver.settings.outputs, output_type, output_retries)
        start = self.start_send(context_id, content, role, message_id, None, out)
        d = self.driver
        if not isinstance(d.settings.store, WorkQueue):
            raise StoreError(
                f"{d.settings.store!r} cannot hand turns to workers (it has no claim_expired): "
                "use a SQLite or PostgreSQL store, or send() to run the turn here"
            )
        turn = await d.run(context_id, start, hand_off=True)
        return turn.message_ids[-1]

    async def approve(self, context_id: str, call_ids: str | Sequence[str]) -> Turn:
        """Approve pending tool calls; once none is pending, the approved calls run.

        The pending calls of a sub-task's child surface on its parent (see
        :func:`~turnfsm.tools.subtask`): approving them here decides them on
        the child, which goes on; once it no longer waits, the parent's call
        runs again and completes.
        """
        check_id("context_id", context_id)
        ids = check_call_ids("call_ids", call_ids)
        return await self.subcontexts.decide(context_id, ids, _APPROVED, None)

    async def deny(
        self, context_id: str, call_id: str | Sequence[str], reason: str | None = ""
    ) -> Turn:
        """Deny pending tool calls: they are not run, and each result says it was
        denied (with ``reason``). ``call_id`` is one id or a list of them."""
        check_id("context_id", context_id)
        ids = check_call_ids("call_id", call_id)
        check_text("reason", reason, optional=True)
        return await self.subcontexts.decide(context_id, ids, _DENIED, reason or None)

    async def answer(self, context_id: str, call_id: str, text: str) -> Turn:
        """Answer a question the model asked (a pending call to a question tool,
        listed in :attr:`Turn.questions`): ``text`` is stored as the call's result,
        the text the model sees. Once no call is pending, the turn goes on as after
        :meth:`approve`: the approved calls run, then the model is called again.

        ``text`` is a non-empty string. When the question has ``choices`` they are
        binding: ``text`` must be exactly one of them, else
        :class:`~turnfsm.errors.AnswerNotAChoice`. A call that is not a question
        raises :class:`~turnfsm.errors.NotAQuestion`; to decline a question, deny it.
        """
        check_id("context_id", context_id)
        check_text("call_id", call_id, empty=False)
        check_text("text", text, empty=False)
        d = self.driver
        subs = self.subcontexts
        routed = await route_decisions(d, context_id, [call_id])
        if routed is not None:  # a question of a sub-task's child, surfaced here
            _, by_child, waiting = routed
            for child_id in by_child:
                await self.calls.answer(child_id, call_id, text)
            return await subs.after_children(context_id, {}, waiting)
        start = functools.partial(_calls.start_answer, d, call_id, text)
        return await subs.surface(await d.run(context_id, start))

    async def retry(self, context_id: str) -> Turn:
        """Try the failed LLM call again (from ``PermanentFailure``)."""
        check_id("context_id", context_id)
        d = self.driver
        return await d.run(context_id, functools.partial(_calls.start_retry, d))

    async def reset(self, context_id: str) -> Turn:
        """Abandon a failed turn (from ``PermanentFailure`` to ``Idle``)."""
        check_id("context_id", context_id)
        d = self.driver
        return await d.run(context_id, functools.partial(_calls.start_reset, d))

    async def cancel(self, context_id: str) -> Turn:
        """Cancel the running turn, or the wait for approval.

        Partial text is kept and marked cancelled; open tool calls get
        "cancelled" results. When a call is running on the context, this waits
        for it to wind down and returns its turn.
        """
        check_id("context_id", context_id)
        d = self.driver
        if context_id in d.busy:
            rt = d.loaded.get(context_id)
            if rt is not None and rt.running:
                end = rt.done
                if end is None:  # the first caller to wait for the call's end makes it
                    end = rt.done = CallEnd()
                d.request_cancel(context_id)
                await end.wait()
                assert end.turn is not None
                return end.turn
        return await d.run(context_id, functools.partial(_calls.start_cancel, d))

    def request_cancel(self, context_id: str) -> None:
        """Ask the running call on the context to cancel; returns at once.

        Does nothing when no call is running.
        """
        check_id("context_id", context_id)
        self.driver.request_cancel(context_id)

    async def resume(self, context_id: str) -> Turn:
        """Continue a context that a crash left in a non-resting state.

        :class:`~turnfsm.errors.ContextLeased` when another engine is running a
        call on it (its lease has not expired).
        """
        check_id("context_id", context_id)
        d = self.driver
        start = functools.partial(_calls.start_resume, d)
        turn = await d.run(context_id, start)
        if turn.state is _AWAITING_TOOL_APPROVAL:  # it may wait for a sub-task's child
            return await surface(d, turn)
        return turn

    async def recover(self) -> Recovery:
        """Resume every context of the store that a crash left busy (in a
        non-resting state), each on its own: one that cannot be resumed does not
        stop the others.

        A context whose lease another engine holds (its call is running, or its
        process died less than a lease's time ago) is not taken: it is listed in
        ``skipped`` with the reason. A context whose stored state the table does
        not know, or whose resume raises a turnfsm error, is listed in ``failed``
        with that error. Reading the list of contexts itself can still raise.
        """
        return await _recovery.recover(self.driver, self.calls.resume, self.subcontexts.surface)

    async def send_request(
        self,
        body: Any,
        context_id: str | None = None,
        *,
        output_type: Any = UNSET,
        output_retries: int | None = None,
    ) -> Turn:
        """Answer a chat request body (the ``contextManagement`` body or the legacy
        ``messages`` body, parsed by :func:`~turnfsm.adapters.inbound.parse_request`;
        :class:`InvalidInput` names what is wrong with it; an unknown key is
        ignored and logged once). Without ``context_id``, a new context is made
        (``create_context(frontend_operator_as="assistant")``, as the formats
        show an operator). The body's conversation context is laid over the active
        branch (a client may resend its whole history): what the context does
        not hold yet is appended, then the current message, flagged current
        with the user's language and time zone, in the ``user_message`` step;
        then the turn runs, once. A body that disagrees with the branch is a
        :class:`~turnfsm.errors.HistoryConflict`, a current message whose
        ``messageId`` the context holds is :class:`InvalidInput` (answered
        once); nothing is stored then (docs/server.md, "Resent histories").
        The view marks the current message and states the user's locale
        (:class:`~turnfsm.enhancers.CurrentMessageMarker`, ``UserLocale``).
        ``output_type`` and ``output_retries`` as for :meth:`send`.
        """
        request = parse_request(body, log=self.driver.settings.log)
        out = turn_output(self.driver.settings.outputs, output_type, output_retries)
        if context_id is None:
            context_id = await self.contexts.create_context(frontend_operator_as="assistant")
        else:
            check_id("context_id", context_id)
        d = self.driver
        start = functools.partial(_requests.start_request, d, request, output=out)
        return await d.run(context_id, start)
