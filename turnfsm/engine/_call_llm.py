"""The ``call_llm`` effect (AwaitingLLMResponse, and StreamingLLMResponse while
the stream it opened is read): one attempt; the answer, or a failure edge.

What the adapter returns is checked and turned into a message by the pure
functions of ``_answer``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, Final, Literal

from ..errors import EnhancerError, LLMError, PermanentLLMError
from ..events import (
    ContentDelta,
    MessageCompleted,
    Retrying,
    ToolCallArgumentsDelta,
    ToolCallsRequested,
)
from ..model import LLMRequest, clean_text
from ..states import Trigger
from . import _history, _steps
from ._answer import (
    CALL,
    CHUNK_KINDS,
    INVALID,
    RESPONSE,
    TEXT,
    THINKING,
    adapter_failure,
    chunk_kind,
    close_stream,
    conclude,
    delta_text,
    invalid_answer,
    open_stream,
    storable_error,
)
from ._backoff import failure_edge
from ._call_pieces import CallPieces
from ._clock import from_timestamp
from ._host import Host
from ._prepare import build_request, compact, compaction_of, prefetch
from ._runtime import Runtime
from ._subscribers import yield_to_readers
from ._turn import StopReason
from ._typed import mark_answer

__all__ = ["StreamRead", "call_llm", "fail_llm", "read_stream"]

# The triggers of every call, as module names: on Python 3.11 reading
# ``Trigger.X`` goes through the hook of EnumType's ``__getattr__`` (the
# metaclass defines one), which costs several times a module global.
_STREAM_STARTED: Final = Trigger.STREAM_STARTED
_STREAM_ENDED: Final = Trigger.STREAM_ENDED
_RESPONSE_RECEIVED: Final = Trigger.RESPONSE_RECEIVED


@dataclass(slots=True)
class StreamRead:
    """What reading one attempt's stream gave: the final chunk, or the failure
    that ended it, and what arrived before."""

    partial: list[str]
    """The text deltas, as published."""
    response: object = None
    """The final chunk (checked by :func:`~turnfsm.engine._answer.conclude`)."""
    failure: LLMError | None = None
    streaming: bool = False
    """A delta arrived: the context took ``stream_started``."""
    thinking: list[str] = field(default_factory=list)
    thinking_fixed: int = 0


async def call_llm(d: Host, rt: Runtime) -> None:
    """AwaitingLLMResponse: one attempt; the answer, or a failure.

    The shell around pure decisions: the request is prepared
    (:func:`_request`), the adapter's stream read with its deltas published
    (:func:`read_stream`), and what arrived is judged by
    :func:`~turnfsm.engine._answer.conclude` (the answer message, or the
    failure it amounts to); then the edge is taken. Whatever the adapter
    returns or raises ends in a declared trigger (see
    :mod:`turnfsm.engine._answer` for the rules); only cancellation and other
    ``BaseException`` propagate. Only the adapter's own code runs under the
    ``except`` clauses: an error of the store still propagates.
    """
    request = rt.request
    if request is not None and compaction_of(d, rt) is None:
        rt.request = None  # ``_request``'s common case, without its coroutine
    else:
        request = await _request(d, rt)
        if request is None:
            return
    if rt.watch is not None:  # traced: the attempt's own request
        rt.watch.llm_request(rt, request)
    progress = rt.ctx.progress
    s = d.settings
    message_id = s.ids()
    # written slot by slot, every field: a class call runs ``__init__`` in a
    # frame of its own, twice a tool-loop turn
    read = _new(StreamRead)
    read.partial = []
    read.response = None
    read.failure = None
    read.streaming = False
    read.thinking = []
    read.thinking_fixed = 0
    rt.partial = read.partial
    rt.partial_id = message_id
    llm = s.llm
    try:
        if llm is None:
            raise TypeError("the engine has no LLM (it was made with llm=None)")
        chunks = open_stream(llm.stream(request))
    except Exception as exc:
        await fail_llm(d, rt, adapter_failure(exc))
        return
    await read_stream(d, rt, chunks, read, message_id, progress.attempt)
    closed = await close_stream(chunks)
    if read.failure is None and closed is not None:
        read.failure = adapter_failure(closed, "".join(read.partial))
    answer = conclude(
        read.response,
        read.failure,
        read.partial,
        taken_ids=functools.partial(_history.call_ids, rt),
        streamed_thinking="".join(read.thinking) if read.thinking else None,
        thinking_fixed=read.thinking_fixed,
        created_at=from_timestamp(s.clock.time(), UTC),  # ``d.now()``, without its frame
        request=request,
        attempt=progress.attempt,
        iteration=progress.iteration,
        answer_type=s.answer_type(rt.ctx),
        offered=functools.partial(s.offered, rt.ctx),
    )
    rt.partial = ()
    if isinstance(answer, LLMError):
        await fail_llm(d, rt, answer)
        return
    message, calls = answer
    if request.output is not None and not calls:
        mark_answer(message, request.output)
    del request  # unless the adapter kept it, the history now grows in place
    client_id = _history.answer_id(rt.ctx, message)
    if client_id is not None:  # the request's X-response
        message.metadata.extra["message_id"] = client_id
    node = _history.append(rt, message, message_id)
    taken = rt.call_ids
    if calls and taken is not None:
        for c in calls:
            taken[c.id] = None
    rt.answer = node
    _steps.fire(rt, _STREAM_ENDED if read.streaming else _RESPONSE_RECEIVED)
    if not rt.subscribers:  # their seqs only (see ``_steps.later``)
        rt.seq += 2 if calls else 1  # ``_steps.unheard``, without its frame
        return
    _steps.later(rt, MessageCompleted, message_id=node.id, message=message)
    if calls:
        _steps.later(rt, ToolCallsRequested, message_id=node.id, calls=calls)


async def _request(d: Host, rt: Runtime) -> LLMRequest | None:
    """The request of this attempt: the one ``prepare`` built, unless a
    compaction summary was made first (then built again). None when that
    failed: the failure edge is taken."""
    request = rt.request
    rt.request = None
    comp = compaction_of(d, rt)
    if comp is not None:  # (no coroutine for a view without compaction)
        compacted, summary_failure = await compact(d, rt, comp)
        if summary_failure is not None:
            await fail_llm(d, rt, summary_failure)
            return None
        if compacted:
            request = None  # built before the summary: build it again
    if request is None:
        s = d.settings
        try:
            if len(s.enhancers) > s.builtin_count:  # only the application's prefetch
                await prefetch(d, rt)
            request = build_request(d, rt)
        except EnhancerError as exc:
            await fail_llm(d, rt, PermanentLLMError(str(exc)), transient=False)
            return None
    return request


async def read_stream(
    d: Host,
    rt: Runtime,
    chunks: AsyncIterator[Any],
    read: StreamRead,
    message_id: str,
    attempt: int,
) -> None:
    """Read the adapter's stream into ``read`` until its final chunk or a
    failure: each text or thinking delta published as a ContentDelta, each
    tool-call piece as a ToolCallArgumentsDelta, at once (no commit: deltas
    are not stored; each takes a seq, sent or not), the first one taking
    ``stream_started``. The stream is
    closed here only when the read is cancelled; else by the caller."""
    partial = read.partial
    thinking = read.thinking
    streaming = read.streaming
    index = 0
    kinds = CHUNK_KINDS
    calls: CallPieces | None = None  # made at a call's first piece
    try:
        next_chunk = chunks.__anext__
        # per chunk: looked up once
        subscribers = rt.subscribers
        clock_time = d.settings.clock.time
        context_id = rt.ctx.id
        while True:
            try:
                chunk = await next_chunk()
            except StopAsyncIteration:
                break
            except Exception as exc:
                read.failure = adapter_failure(exc, "".join(partial))
                break
            kind = type(chunk)
            channel = kinds.get(kind) or chunk_kind(chunk)
            if channel is RESPONSE:
                read.response = chunk
                break
            if channel is INVALID:
                read.failure = invalid_answer(
                    f"the stream yielded a {type(chunk).__name__}, not a TextDelta, "
                    "ThinkingDelta, ToolCallDelta or LLMResponse",
                    "".join(partial),
                )
                break
            if channel is CALL:  # a piece of a tool call: its own path, off the text's
                if calls is None:
                    calls = CallPieces()
                if not await _call_piece(d, rt, read, calls, chunk, message_id, attempt):
                    break
                streaming = True
                continue
            try:
                text = chunk.text
                if type(text) is str and text.isascii():  # no lone surrogate in it
                    fixed = 0
                else:
                    text, fixed = delta_text(chunk, kind.__name__)
            except LLMError as exc:
                exc.partial_text = "".join(partial)
                read.failure = exc
                break
            if not streaming:
                streaming = read.streaming = True
                await d.step(rt, _STREAM_STARTED)
            delta_channel: Literal["text", "thinking"]
            if channel is TEXT:
                partial.append(text)
                delta_channel = TEXT
            else:
                thinking.append(text)
                read.thinking_fixed += fixed
                delta_channel = THINKING
            seq = rt.seq = rt.sent_seq = rt.seq + 1
            if subscribers:
                # ``publish`` written out: every chunk of every stream comes here
                event = _content_delta(
                    context_id, seq, clock_time(), message_id, text, index, attempt, delta_channel
                )
                pressed = False
                for sub in subscribers:
                    if sub.offer(event):
                        pressed = True
                if pressed:
                    await yield_to_readers()
            index += 1
    except BaseException:
        await close_stream(chunks)
        raise


_new = object.__new__


def _content_delta(
    context_id: str,
    seq: int,
    timestamp: float,
    message_id: str,
    delta: str,
    index: int,
    attempt: int,
    channel: Literal["text", "thinking"],
) -> ContentDelta:
    """``ContentDelta(context_id=context_id, ...)``, without a class call with
    keywords: CPython packs those into a dict for ``__init__`` to take apart
    again, on every streamed chunk. Every field is set here (a test holds it)."""
    event: ContentDelta = _new(ContentDelta)
    event.context_id = context_id
    event.seq = seq
    event.timestamp = timestamp
    event.message_id = message_id
    event.delta = delta
    event.index = index
    event.attempt = attempt
    event.channel = channel
    event.kind = "ContentDelta"
    return event


async def _call_piece(
    d: Host,
    rt: Runtime,
    read: StreamRead,
    calls: CallPieces,
    chunk: Any,
    message_id: str,
    attempt: int,
) -> bool:
    """A piece of a tool call read from the stream, published as a
    ToolCallArgumentsDelta (the first delta of the stream taking
    ``stream_started``); False when the piece fails the read."""
    try:
        piece = calls.take(chunk)
    except LLMError as exc:
        exc.partial_text = "".join(read.partial)
        read.failure = exc
        return False
    if not read.streaming:
        read.streaming = True
        await d.step(rt, _STREAM_STARTED)
    seq = rt.seq = rt.sent_seq = rt.seq + 1
    if rt.subscribers and _steps.publish(
        rt,
        ToolCallArgumentsDelta(
            context_id=rt.ctx.id,
            seq=seq,
            timestamp=d.settings.clock.time(),
            message_id=message_id,
            call_index=piece.call_index,
            call_id=piece.call_id,
            tool_name=piece.tool_name,
            delta=piece.arguments,
            attempt=attempt,
        ),
    ):
        await yield_to_readers()
    return True


async def fail_llm(d: Host, rt: Runtime, exc: LLMError, *, transient: bool | None = None) -> None:
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
    policy = d.settings.retry_policy
    attempt = ctx.progress.attempt
    trigger, will_retry = failure_edge(transient, attempt, policy.max_attempts)
    if trigger is Trigger.LLM_FAILED_PERMANENT:
        ctx.progress = dataclasses.replace(ctx.progress, last_error=error)
        rt.stop_reason = StopReason.FAILED
        _steps.fire(rt, Trigger.LLM_FAILED_PERMANENT)
        _steps.failed(rt, error, exc.partial_text)
        _steps.end_turn(rt)
        return
    delay = policy.delay(attempt, exc) if will_retry else 0.0
    ctx.progress = dataclasses.replace(
        ctx.progress,
        last_error=error,
        retry_at=d.settings.clock.time() + delay if will_retry else None,
    )
    _steps.fire(rt, Trigger.LLM_FAILED_TRANSIENT)
    if will_retry:
        _steps.later(
            rt,
            Retrying,
            attempt=attempt,
            delay=delay,
            error=error,
            partial_text=exc.partial_text,
        )
