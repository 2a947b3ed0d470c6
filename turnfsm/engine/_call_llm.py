"""The ``call_llm`` effect (AwaitingLLMResponse, and StreamingLLMResponse while
the stream it opened is read): one attempt; the answer, or a failure edge.

What the adapter returns is checked and turned into a message by the pure
functions of ``_answer``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Literal

from ..errors import EnhancerError, LLMError, PermanentLLMError
from ..events import ContentDelta, MessageCompleted, Retrying, ToolCallsRequested
from ..model import (
    InternalMessage,
    LLMResponse,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallRequest,
    clean_text,
)
from ..states import Trigger
from . import _history
from ._answer import (
    adapter_failure,
    build_answer,
    close_stream,
    delta_text,
    invalid_answer,
    open_stream,
    storable_error,
)
from ._approval import as_question
from ._prepare import build_request, compact
from ._runtime import Runtime
from ._subscribers import yield_to_readers
from ._turn import StopReason

if TYPE_CHECKING:
    from ._drive import Driver

__all__ = ["call_llm", "fail_llm"]


async def call_llm(d: Driver, rt: Runtime) -> None:
    """AwaitingLLMResponse: one attempt; the answer, or a failure.

    Whatever the adapter returns or raises ends in a declared trigger (see
    :mod:`turnfsm.engine._answer` for the rules); only cancellation and other
    ``BaseException`` propagate. Only the adapter's own code runs under the
    ``except`` clauses: an error of the store still propagates.
    """
    request = rt.request
    rt.request = None
    compacted, summary_failure = await compact(d, rt)
    if summary_failure is not None:
        await fail_llm(d, rt, summary_failure)
        return
    if compacted:
        request = None  # built before the summary: build it again
    if request is None:
        try:
            request = build_request(d, rt)
        except EnhancerError as exc:
            await fail_llm(d, rt, PermanentLLMError(str(exc)), transient=False)
            return
    progress = rt.ctx.progress
    message_id = d.ids()
    partial: list[str] = []
    rt.partial = partial
    rt.partial_id = message_id
    thinking: list[str] = []
    thinking_fixed = 0
    streaming = False
    response: object = None
    failure: LLMError | None = None
    index = 0
    llm = d.llm
    try:
        if llm is None:
            raise TypeError("the engine has no LLM (it was made with llm=None)")
        chunks = open_stream(llm.stream(request))
    except Exception as exc:
        await fail_llm(d, rt, adapter_failure(exc))
        return
    try:
        next_chunk = chunks.__anext__
        # per chunk: looked up once
        subscribers = rt.subscribers
        clock_time = d.clock.time
        context_id = rt.ctx.id
        attempt = progress.attempt
        while True:
            try:
                chunk = await next_chunk()
            except StopAsyncIteration:
                break
            except Exception as exc:
                failure = adapter_failure(exc, "".join(partial))
                break
            kind = type(chunk)
            if kind is LLMResponse:
                response = chunk
                break
            if kind is TextDelta:
                channel: Literal["text", "thinking"] | None = "text"
            elif kind is ThinkingDelta:
                channel = "thinking"
            elif kind is ToolCallDelta:
                channel = None
            elif isinstance(chunk, LLMResponse):
                response = chunk
                break
            elif isinstance(chunk, TextDelta):
                channel = "text"
            elif isinstance(chunk, ThinkingDelta):
                channel = "thinking"
            elif isinstance(chunk, ToolCallDelta):
                channel = None
            else:
                failure = invalid_answer(
                    f"the stream yielded a {type(chunk).__name__}, not a TextDelta, "
                    "ThinkingDelta, ToolCallDelta or LLMResponse",
                    "".join(partial),
                )
                break
            if channel is not None:
                try:
                    text = chunk.text
                    if type(text) is str and text.isascii():  # no lone surrogate in it
                        fixed = 0
                    else:
                        text, fixed = delta_text(chunk, kind.__name__)
                except LLMError as exc:
                    exc.partial_text = "".join(partial)
                    failure = exc
                    break
            if not streaming:
                streaming = True
                await d.step(rt, Trigger.STREAM_STARTED)
            if channel is None:
                continue
            if channel == "text":
                partial.append(text)
            else:
                thinking.append(text)
                thinking_fixed += fixed
            rt.seq += 1
            rt.sent_seq = rt.seq
            if subscribers and d.publish(
                rt,
                ContentDelta(
                    context_id=context_id,
                    seq=rt.seq,
                    timestamp=clock_time(),
                    message_id=message_id,
                    delta=text,
                    index=index,
                    attempt=attempt,
                    channel=channel,
                ),
            ):
                await yield_to_readers()
            index += 1
    except BaseException:
        await close_stream(chunks)
        raise
    closed = await close_stream(chunks)
    if failure is None and closed is not None:
        failure = adapter_failure(closed, "".join(partial))
    if failure is None and response is None:
        failure = invalid_answer("the stream ended without a response", "".join(partial))
    message: InternalMessage | None = None
    calls: list[ToolCallRequest] = []
    if failure is None:
        try:
            message, calls = build_answer(
                response,
                taken_ids=functools.partial(_history.call_ids, rt),
                streamed_thinking="".join(thinking) if thinking else None,
                thinking_fixed=thinking_fixed,
                created_at=d.now(),
                model=request.model,
                attempt=progress.attempt,
                iteration=progress.iteration,
                answer_type=d.answer_type(rt.ctx),
            )
        except LLMError as exc:
            failure = exc
        except Exception as exc:  # an answer object whose attributes raise
            failure = invalid_answer(f"reading it raised {type(exc).__name__}: {exc}")
    rt.partial = []
    if failure is not None or message is None:
        if failure is None:  # pragma: no cover - build_answer returns a message
            failure = invalid_answer("no message")
        if not failure.partial_text and partial:
            failure.partial_text = "".join(partial)
        await fail_llm(d, rt, failure)
        return
    if request.metadata:
        # what the enhancers did to the view, kept with the answer for audits
        # (and for the token budget's calibration)
        meta = message.metadata
        extra = {**meta.extra, "view": request.metadata}
        message = dataclasses.replace(message, metadata=dataclasses.replace(meta, extra=extra))
    if calls:
        # type Question when it only asks (questions the context's mode offers)
        message = as_question(message, d.offered(rt.ctx))
    node = _history.append(rt, message, message_id)
    if calls and rt.call_ids is not None:
        rt.call_ids.update(c.id for c in calls)
    rt.answer = node
    d.fire(rt, Trigger.STREAM_ENDED if streaming else Trigger.RESPONSE_RECEIVED)
    d.later(rt, MessageCompleted, message_id=node.id, message=message)
    if calls:
        d.later(rt, ToolCallsRequested, message_id=node.id, calls=calls)


async def fail_llm(d: Driver, rt: Runtime, exc: LLMError, *, transient: bool | None = None) -> None:
    """Take the failure edge for ``exc``: transient (``retryable``, unless
    ``transient`` says otherwise) or permanent."""
    storable_error(exc)
    if transient is None:
        transient = exc.retryable is True
    ctx = rt.ctx
    try:
        error = exc.describe()
        if not isinstance(error, str):
            raise TypeError("describe() did not return a str")
    except Exception:  # an adapter's subclass overrode it
        error = f"{type(exc).__name__}: {exc.message}"
    error = clean_text(error)[0]
    rt.log.warning("llm_failed", error=error, transient=transient, attempt=ctx.progress.attempt)
    if not transient:
        ctx.progress = dataclasses.replace(ctx.progress, last_error=error)
        rt.stop_reason = StopReason.FAILED
        d.fire(rt, Trigger.LLM_FAILED_PERMANENT)
        d.failed(rt, error, exc.partial_text)
        d.end_turn(rt)
        return
    attempt = ctx.progress.attempt
    will_retry = attempt < d.retry_policy.max_attempts
    delay = d.retry_policy.delay(attempt, exc) if will_retry else 0.0
    ctx.progress = dataclasses.replace(
        ctx.progress,
        last_error=error,
        retry_at=d.clock.time() + delay if will_retry else None,
    )
    d.fire(rt, Trigger.LLM_FAILED_TRANSIENT)
    if will_retry:
        d.later(
            rt,
            Retrying,
            attempt=attempt,
            delay=delay,
            error=error,
            partial_text=exc.partial_text,
        )
