"""The ``prepare`` effect (ProcessingUserMessage): run the enhancers and build
the request; ``prompt_ready``, or ``prepare_failed`` when an enhancer raises."""

from __future__ import annotations

import dataclasses
from typing import Final

from ..enhancers import Compaction, summary_of
from ..errors import EnhancerError, InvalidInput, LLMError
from ..model import (
    InternalMessage,
    LLMRequest,
    LLMResponse,
    MessageMetadata,
    Role,
    TextPart,
    clean_text,
    frontend_operator_as_assistant,
)
from ..states import Trigger
from . import _history, _steps
from ._answer import adapter_failure, close_stream, invalid_answer, open_stream
from ._client_view import turn_parameters
from ._host import Host
from ._runtime import Runtime
from ._turn import StopReason
from ._typed import shape_request

__all__ = ["build_request", "compact", "compaction_of", "prefetch", "prepare"]

_new = object.__new__
_PROMPT_READY: Final = Trigger.PROMPT_READY
"""Read once: on Python 3.11 ``Trigger.X`` goes through the hook of EnumType's
``__getattr__`` (the metaclass defines one), several times a global's cost."""


def build_request(d: Host, rt: Runtime) -> LLMRequest:
    """The request for the next LLM call: the history in chat format, passed
    through every enhancer, then its frontend operator messages sent as
    assistant messages when the context's ``frontend_operator_as`` says so
    (EnhancerError when an enhancer raises, or
    :class:`~turnfsm.engine._modes.UnknownMode` when the engine does not know
    the context's mode)."""
    ctx = rt.ctx
    s = d.settings
    s.modes.require(ctx)
    p = ctx.progress
    messages = rt.chat
    try:  # the context's own history settings, if it has any
        view = s.view(ctx.config)
    except InvalidInput as exc:  # a stored setting the enhancers refuse
        raise EnhancerError("history settings", exc) from exc
    plan = view.plan
    start = 0
    compacted = None
    if plan.compaction is not None:
        try:
            messages, compacted = plan.compaction.view(messages, ctx)
        except Exception as exc:
            raise EnhancerError(type(plan.compaction).__name__, exc) from exc
    if plan.budget is not None:
        head = 0  # leading system messages (a summary) always stay
        while head < len(messages) and messages[head].get("role") == "system":
            head += 1
        try:
            cut = plan.budget.window(messages, ctx, plan.shrink, start_at=head)
        except Exception as exc:
            raise EnhancerError(type(plan.budget).__name__, exc) from exc
        start = cut - head
        if start:
            messages = [*messages[:head], *messages[cut:]] if head else messages[cut:]
    # written slot by slot, every field (see _answer._new;
    # tests/engine/test_answer_records.py holds it to the class's own)
    request = _new(LLMRequest)
    request.context_id = ctx.id
    request.model = ctx.config.model_id
    request.messages = messages
    request.tools = []
    request.parameters = turn_parameters(ctx)
    request.attempt = p.attempt
    request.iteration = p.iteration
    request.request_cancel = rt.request_cancel
    request.metadata = {}
    request.output = None
    if compacted is not None:
        request.metadata["compaction"] = compacted
    if start:
        request.metadata["token_budget"] = {"dropped_messages": start}
    enhancers = view.enhancers
    builtin = view.builtin_count
    # two loops rather than a test of each enhancer's index: the copy below
    # comes once, between the built-in enhancers and the application's
    for enhancer in enhancers[:builtin]:
        try:
            request = enhancer.enhance(request, ctx)
        except Exception as exc:
            raise EnhancerError(type(enhancer).__name__, exc) from exc
    if builtin < len(enhancers):
        # the built-in enhancers never change the list they are given; the
        # application's may change the request's list in place, which must
        # not change rt.chat
        if request.messages is rt.chat:
            request.messages = list(rt.chat)
        for enhancer in enhancers[builtin:]:
            try:
                request = enhancer.enhance(request, ctx)
            except Exception as exc:
                raise EnhancerError(type(enhancer).__name__, exc) from exc
    # otherwise the request shares rt.chat: the engine copies it before its
    # next change if the request is still held then (_history.append)
    if ctx.config.frontend_operator_as == "assistant":  # the role the context asks for
        request.messages = frontend_operator_as_assistant(request.messages)
    if p.output is not None:
        shape_request(d, request, p.output)
    return request


async def prefetch(d: Host, rt: Runtime) -> None:
    """Await the ``prefetch(context)`` of each enhancer of the application's
    that has one (reading files, say, in a worker thread rather than on the
    event loop's thread), before the request is built; EnhancerError when
    one raises. (The application's enhancers are the same in every view: a
    context's own history settings change only the built-in ones and the
    budget, which has no ``prefetch``.)"""
    settings = d.settings
    enhancers = settings.enhancers
    for i in range(settings.builtin_count, len(enhancers)):
        fetch = getattr(enhancers[i], "prefetch", None)
        if fetch is not None:
            try:
                await fetch(rt.ctx)
            except Exception as exc:
                raise EnhancerError(type(enhancers[i]).__name__, exc) from exc


async def prepare(d: Host, rt: Runtime) -> None:
    """ProcessingUserMessage: run the enhancers; ``prompt_ready`` or ``prepare_failed``."""
    try:
        settings = d.settings
        if len(settings.enhancers) > settings.builtin_count:  # no coroutine without them
            await prefetch(d, rt)
        rt.request = build_request(d, rt)
    except EnhancerError as exc:
        rt.ctx.progress = dataclasses.replace(rt.ctx.progress, last_error=str(exc))
        rt.stop_reason = StopReason.FAILED
        rt.log.warning("prepare_failed", error=str(exc))
        _steps.fire(rt, Trigger.PREPARE_FAILED)
        _steps.failed(rt, str(exc), "")
        _steps.end_turn(rt)
        return
    _steps.fire(rt, _PROMPT_READY)


def compaction_of(d: Host, rt: Runtime) -> Compaction | None:
    """The compaction of the context's view (the engine's, or its own
    setting's); None when it has none."""
    try:
        return d.settings.view(rt.ctx.config).plan.compaction
    except InvalidInput:  # a stored setting refused: building the request says so
        return None


async def compact(d: Host, rt: Runtime, comp: Compaction) -> tuple[bool, LLMError | None]:
    """Before the turn's next LLM call (in ``call_llm``, so that it shares the
    call's retry and failure edges): when the view is over the compaction
    threshold (``comp``: :func:`compaction_of`), one summary call through
    the engine's adapter, and the summary stored as its own message
    (committed at once). Returns whether a summary was made, and the failure
    of the summary call (None when it succeeded or none was needed)."""
    ctx = rt.ctx
    try:
        plan = comp.plan(rt.chat, ctx)
    except Exception as exc:
        return False, invalid_answer(f"planning the summary raised {type(exc).__name__}: {exc}")
    if plan is None:
        return False, None
    ids = ctx.active_branch.message_ids
    previous = comp.newest(ctx)
    p = ctx.progress
    request = LLMRequest(
        context_id=ctx.id,
        model=ctx.config.model_id,
        messages=plan.messages,
        parameters=ctx.config.parameters,
        attempt=p.attempt,
        iteration=p.iteration,
        request_cancel=rt.request_cancel,
        metadata={"purpose": "compaction", "covers": plan.end},
    )
    llm = d.settings.llm
    try:
        if llm is None:
            raise TypeError("the engine has no LLM (it was made with llm=None)")
        chunks = open_stream(llm.stream(request))
    except Exception as exc:
        return False, adapter_failure(exc)
    response: object = None
    failure: LLMError | None = None
    try:
        while True:
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                break
            except Exception as exc:
                failure = adapter_failure(exc)
                break
            if isinstance(chunk, LLMResponse):
                response = chunk
                break
    finally:
        closed = await close_stream(chunks)
    if failure is None and closed is not None:
        failure = adapter_failure(closed)
    if failure is not None:
        return False, failure
    text = response.text if isinstance(response, LLMResponse) else None
    if not isinstance(text, str) or not text.strip():
        return False, invalid_answer("the summary call answered no text")
    covers: dict[str, object] = {"count": plan.end, "last_id": ids[plan.end - 1]}
    if previous is not None:
        covers["extends"] = previous[1].id
    message = InternalMessage(
        role=Role.SYSTEM,
        content=[TextPart(text=clean_text(text.strip())[0])],
        metadata=MessageMetadata(
            created_at=d.now(),
            model=request.model,
            attempt=p.attempt,
            iteration=p.iteration,
            extra={"summary": covers},
        ),
    )
    node = _history.append(rt, message, d.settings.ids())
    assert summary_of(node) is not None
    rt.log.info("compacted", summary_id=node.id, covers=plan.end)
    await d.commit(rt)
    return True, None
