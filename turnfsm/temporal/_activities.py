"""The activities: every piece of I/O of a turn on Temporal.

The workflow (``_workflow.py``) runs the declared table and the engine's
effects; whatever they ask of the outside world comes here, to a worker that
holds the store, the LLM adapter, the tools and the event log:

- ``turnfsm.load``: a context from the store;
- ``turnfsm.commit``: one step to the store. The store's version check makes
  a retried commit harmless: a commit whose reply was lost and that Temporal
  runs again finds the context already at its version and time, and is taken
  as applied; any other writer's commit in between is a ``VersionConflict``.
  Once stored, the commit's events are written to the event log (as the
  relay writes an engine's events after their commit);
- ``turnfsm.llm``: one LLM attempt, streamed from the provider. Each delta is
  rung on the event log as it arrives (as ``EventRelay`` rings a worker's
  deltas), the activity heartbeats, and it returns every chunk (and the
  adapter's error, if it raised), which the workflow reads as the engine reads
  an adapter's stream;
- ``turnfsm.tool``: one tool call, run as in-process (``run_calls``);
- ``turnfsm.contexts``: a sub-task's child created, listed or deleted;
- ``turnfsm.events``: durable events the engine sent outside a commit's
  activity, if any (each activity above also writes those that wait, first).

Errors the engine has a meaning for (an unknown context, a version
conflict) fail the activity for good (``non_retryable``), carrying the error
(``_codec.error_to``); the workflow raises it again as the engine's own.
Anything else (the store's I/O) is retried by Temporal.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from .. import events as event_types  # EVENT_ADAPTER is built on first use
from ..adapters.llm import LLM
from ..engine._answer import delta_text
from ..engine._call_pieces import CallPieces
from ..errors import ContextNotFound, LLMError, SchemaVersionError, VersionConflict
from ..events import ContentDelta, StateChanged, ToolCallArgumentsDelta
from ..model import LLMResponse, TextDelta, ThinkingDelta, ToolCallDelta, ToolCallRequest
from ..relay import event_json
from ..states import State, Trigger
from ..storage import Commit, Store
from ..storage._logtypes import EventLog, LogNote
from ..tools import ToolRegistry, run_calls
from . import _codec

__all__ = ["DEFINITE", "Activities"]

DEFINITE = (ContextNotFound, VersionConflict, SchemaVersionError)
"""Store errors that a retry would only repeat."""


def _definite(exc: BaseException) -> ApplicationError:
    return ApplicationError(
        str(exc), _codec.error_to(exc), type=type(exc).__name__, non_retryable=True
    )


@contextlib.contextmanager
def _beating(interval: float) -> Iterator[None]:
    """Heartbeat every ``interval`` seconds while the block runs (a tool that
    takes long still shows the worker alive)."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(interval)
            activity.heartbeat()

    task = asyncio.get_running_loop().create_task(beat())
    try:
        yield
    finally:
        task.cancel()


class Activities:
    """The activities of one worker, over its store, LLM, tools and event log."""

    def __init__(
        self,
        *,
        store: Store,
        llm: LLM | None,
        tools: ToolRegistry,
        event_log: EventLog | None,
        heartbeat: float = 2.0,
    ) -> None:
        self.store = store
        self.llm = llm
        self.tools = tools
        self.event_log = event_log
        self.heartbeat = heartbeat

    def all(self) -> list[Any]:
        return [self.load, self.commit, self.llm_call, self.tool, self.events, self.contexts]

    # ------------------------------------------------------------ events

    async def _write(self, rows: Sequence[Sequence[Any]]) -> None:
        """Durable events (``_codec.event_row``) to the event log, with their notes."""
        log = self.event_log
        if not rows or log is None:
            return
        kept = [(str(c), int(s), str(k), str(j)) for c, s, k, j in rows]
        notes = [LogNote(c, s) for c, s, _, _ in kept] if log.rings else []
        await log.add(kept, notes)

    async def _ring(self, ev: ContentDelta | ToolCallArgumentsDelta) -> None:
        log = self.event_log
        if log is None or not log.rings:
            return
        with contextlib.suppress(Exception):  # a note lost is read from the log later
            await log.add([], [LogNote(ev.context_id, ev.seq, event_json(ev))])

    async def _stream_started(self, context_id: str, seq: int) -> float | None:
        """The time of the ``stream_started`` step at ``seq`` when the event log
        holds it already (written by an earlier attempt of this call)."""
        log = self.event_log
        if log is None:
            return None
        for got, kind, data in await log.after(context_id, seq - 1, seq):
            if got == seq and kind == "StateChanged":
                ev = event_types.EVENT_ADAPTER.validate_json(data)
                if isinstance(ev, StateChanged) and ev.trigger == Trigger.STREAM_STARTED:
                    return float(ev.timestamp)
        return None

    async def _start_stream(self, context_id: str, seq: int, at: float) -> None:
        """The ``StateChanged`` of the ``stream_started`` step, kept in the event
        log before the first delta is rung: no reader is given a delta before
        every durable event with a lower seq is in the log. The workflow's
        engine takes the step with this very time (the result's
        ``started_at``), so its commit writes the same row again (kept once)."""
        ev = StateChanged(
            context_id=context_id,
            seq=seq,
            timestamp=at,
            from_state=State.AWAITING_LLM_RESPONSE,
            to_state=State.STREAMING_LLM_RESPONSE,
            trigger=Trigger.STREAM_STARTED,
        )
        await self._write([_codec.event_row(ev)])

    @activity.defn(name="turnfsm.events")
    async def events(self, rows: list[Any]) -> None:
        await self._write(rows)

    # ------------------------------------------------------------ the store

    @activity.defn(name="turnfsm.load")
    async def load(self, context_id: str, rows: list[Any]) -> Any:
        await self._write(rows)
        try:
            ctx = await self.store.load(context_id)
        except DEFINITE as exc:
            raise _definite(exc) from exc
        return _codec.context_to(ctx)

    @activity.defn(name="turnfsm.contexts")
    async def contexts(self, op: str, arg: Any, rows: list[Any]) -> Any:
        """What a sub-task asks of the store besides loads and commits:
        ``create`` a child, ``delete`` one, ``list`` the contexts."""
        await self._write(rows)
        store = self.store
        try:
            if op == "create":
                await store.create(_codec.context_from(arg))
                return None
            if op == "delete":
                await store.delete(str(arg))
                return None
            if op == "list":
                from .. import records

                return [records.to_python(s) for s in await store.list_contexts()]
        except DEFINITE as exc:
            raise _definite(exc) from exc
        raise ApplicationError(f"unknown store operation {op!r}", non_retryable=True)

    @activity.defn(name="turnfsm.commit")
    async def commit(self, data: Any, rows: list[Any], after: list[Any]) -> None:
        """One commit; ``rows`` (events of earlier commits) written first,
        ``after`` (this commit's events) once it is stored."""
        await self._write(rows)
        commit = _codec.commit_from(data)
        try:
            await self.store.commit(commit)
        except VersionConflict as exc:
            if activity.info().attempt == 1 or not await self._applied(commit):
                raise _definite(exc) from exc
        except DEFINITE as exc:
            raise _definite(exc) from exc
        await self._write(after)

    async def _applied(self, commit: Commit) -> bool:
        """Whether the store holds ``commit`` already: applied by an attempt
        whose reply was lost (its version, with its time)."""
        stored = await self.store.load(commit.context_id)
        return stored.version == commit.version and stored.updated_at == commit.updated_at

    # ------------------------------------------------------------ the LLM

    @activity.defn(name="turnfsm.llm")
    async def llm_call(
        self, data: Any, seq: int, message_id: str, streamed: bool, rows: list[Any]
    ) -> Any:
        """One attempt: ``{"chunks": [...], "error": ... | None, "cancel_at": ...,
        "started_at": ...}`` (``cancel_at``: after how many chunks the adapter
        asked to cancel the turn, if it did; ``started_at``: the time of the
        ``stream_started`` step this attempt or an earlier one put in the event
        log, if any). ``seq`` is
        the context's last seq when the attempt starts: the deltas are rung
        with the seqs the workflow gives them (the first one after the
        ``stream_started`` step's). ``streamed``: ring the deltas (not for a
        compaction summary, whose deltas nobody sees)."""
        await self._write(rows)
        request = _codec.request_from(data)
        chunks: list[Any] = []
        cancels: list[int] = []
        # an adapter (a test double, a UI's stop button behind it) may ask to
        # cancel the turn: where it asked travels back, and the workflow asks
        # its engine there
        request.request_cancel = lambda: cancels.append(len(chunks))
        error: Any = None
        started = False
        index = 0
        calls = CallPieces()
        attempt = request.attempt
        stream: AsyncIterator[Any] | None = None
        context_id = request.context_id
        # an earlier attempt (its worker lost) may have started the stream:
        # the log then says so, and the engine takes the step as it was kept
        started_at = None
        if streamed and activity.info().attempt > 1:
            started_at = await self._stream_started(context_id, seq + 1)
        try:
            if self.llm is None:
                raise TypeError("the engine has no LLM (it was made with llm=None)")
            stream = aiter(self.llm.stream(request))
            with _beating(self.heartbeat):  # also while the provider thinks
                async for chunk in stream:
                    if cancels:
                        # the adapter asked to cancel the turn: the engine stops
                        # reading here, so nothing after is rung (its seqs go to
                        # the cancel's events)
                        break
                    chunks.append(_codec.chunk_to(chunk))
                    activity.heartbeat()
                    kind = type(chunk)
                    if kind is LLMResponse or kind not in (TextDelta, ThinkingDelta, ToolCallDelta):
                        break
                    if not streamed:
                        continue
                    if not started:
                        started = True
                        seq += 1  # the stream_started step
                        if started_at is None:
                            started_at = time.time()
                            await self._start_stream(context_id, seq, started_at)
                    if kind is ToolCallDelta:
                        try:
                            piece = calls.take(chunk)
                        except LLMError:  # the workflow's engine judges it
                            break
                        seq += 1
                        await self._ring(
                            ToolCallArgumentsDelta(
                                context_id=context_id,
                                seq=seq,
                                timestamp=time.time(),
                                message_id=message_id,
                                call_index=piece.call_index,
                                call_id=piece.call_id,
                                tool_name=piece.tool_name,
                                delta=piece.arguments,
                                attempt=attempt,
                            )
                        )
                        continue
                    text, _ = delta_text(chunk, kind.__name__)
                    seq += 1
                    await self._ring(
                        ContentDelta(
                            context_id=context_id,
                            seq=seq,
                            timestamp=time.time(),
                            message_id=message_id,
                            delta=text,
                            index=index,
                            attempt=attempt,
                            channel="text" if kind is TextDelta else "thinking",
                        )
                    )
                    index += 1
        except asyncio.CancelledError:
            # the turn was cancelled: what arrived is the answer's partial
            # text, which the engine keeps (marked cancelled), as in-process
            return {"chunks": chunks, "error": None, "cancel_at": None, "started_at": started_at}
        except Exception as exc:
            error = _codec.error_to(exc)
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
        return {
            "chunks": chunks,
            "error": error,
            "cancel_at": cancels[0] if cancels else None,
            "started_at": started_at,
        }

    # ------------------------------------------------------------ tools

    @activity.defn(name="turnfsm.tool")
    async def tool(self, data: Any, rows: list[Any]) -> Any:
        """One call, run as in-process: ``[success, result, notes]``."""
        await self._write(rows)
        from .. import records

        call = records.from_python(ToolCallRequest, data)
        with _beating(self.heartbeat):
            (outcome,) = await run_calls(self.tools, [call])
        return [outcome.success, outcome.result, list(outcome.notes)]
