"""``POST /api/ui/chat``: the AI SDK's UI message stream (``docs/server.md``,
"The AI SDK's useChat").

The route reads what ``useChat``'s default transport sends (``_ui_messages.py``)
and answers with the UI message stream protocol, version 1: Server-Sent Events
whose data are the chunks ``start``, ``start-step``, ``text-*``,
``reasoning-*``, ``tool-input-*``, ``tool-approval-request``,
``tool-output-*``, ``finish-step``, ``finish`` (or ``error``), then
``data: [DONE]``, with the header ``x-vercel-ai-ui-message-stream: v1``.

What a request does, by its last message and ``trigger``:

- a ``user`` message: the message is sent (the earlier ones matched as a
  resent history, as on ``/v1``);
- an ``assistant`` message with tool parts in state ``approval-responded``:
  the calls are approved or denied, and the turn goes on;
- ``regenerate-message``: from ``PermanentFailure`` the failed LLM call is
  tried again (:meth:`~turnfsm.engine.Engine.retry`); at rest otherwise, the
  last user message is asked again on a new branch forked just before it
  (the earlier answer stays on its branch).

The turn runs in the server's task group, as every turn does: a client that
goes away does not cancel it; ``GET /api/contexts/{id}/events`` (with
``Last-Event-ID``) gives the rest.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from ..engine import Turn
from ..errors import ContextNotFound, InvalidInput, StoreError
from ..events import (
    ContentDelta,
    Event,
    Failed,
    MessageCompleted,
    StateChanged,
    ToolApprovalRequested,
    ToolCallArgumentsDelta,
    ToolCallsRequested,
    ToolResult,
)
from ..model import Role
from ..states import State
from ._calls import create_context, decide_calls
from ._deps import HubOf, Tenant
from ._hub import Hub, Job, next_batch
from ._json_body import DocumentRoute
from ._sse import json_frame, sse_frame
from ._ui_messages import Decisions, UIChatIn, decisions, resent, user_text

__all__ = ["STREAM_HEADER", "router"]

STREAM_HEADER = "x-vercel-ai-ui-message-stream"
"""The header that names the protocol of the answer (``v1``)."""

_FINISH = {
    "completed": "stop",
    "length": "length",
    "content_filter": "content-filter",
    "awaiting_approval": "tool-calls",
    "failed": "error",
}
"""The ``finishReason`` of each stop reason (``other`` for the rest)."""

router = APIRouter(prefix="/api/ui", tags=["ui"], route_class=DocumentRoute)


async def _context(hub: Hub, cid: str, who: str) -> None:
    """The chat's context: the caller's own, or made now in the caller's tenant."""
    try:
        await hub.check(cid, who)
        return
    except ContextNotFound:
        pass
    async with hub.reserve(who):  # over the tenant's turn limit: 429 before it is made
        try:
            await create_context(hub, who, context_id=cid)
        except StoreError:  # made meanwhile: by this tenant, or another's (404)
            await hub.check(cid, who)


async def _regenerate(hub: Hub, cid: str) -> Callable[[], Awaitable[Turn]]:
    """The call that asks for the last answer again (see the module docstring)."""
    engine = hub.engine
    ctx = await engine.get_context(cid)
    if ctx.current_state == State.PERMANENT_FAILURE.value:
        return lambda: engine.retry(cid)
    history = ctx.history()
    at = next(
        (i for i in range(len(history) - 1, -1, -1) if history[i].message.role is Role.USER),
        None,
    )
    if at is None:
        raise InvalidInput("trigger", "there is no user message to answer again")
    text = history[at].message.text
    branch = f"regenerated-{engine.new_id()}"

    async def again() -> Turn:
        await engine.fork(cid, branch, at - 1)
        return await engine.send(cid, text)

    return again


@dataclass
class _Translate:
    """Engine events as UI message chunks, for one response."""

    denied: set[str]
    step: bool = False
    text: str | None = None
    """The id of the open text part (the message it streams)."""
    reasoning: str | None = None
    calls: dict[tuple[str, int], str] = field(default_factory=dict)
    """The toolCallId of each call streamed, by (message, call_index)."""
    waiting: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    """Pieces of calls whose id and name have not come yet."""
    shown: set[str] = field(default_factory=set)
    """Tool calls whose input part the client has."""
    streamed: set[str] = field(default_factory=set)
    """Messages whose text streamed."""
    failed: bool = False
    """An ``error`` chunk went out."""

    def chunks(self, ev: Event) -> list[dict[str, Any]]:
        if isinstance(ev, ContentDelta):
            return self._delta(ev)
        if isinstance(ev, ToolCallArgumentsDelta):
            return self._piece(ev)
        if isinstance(ev, StateChanged):
            if ev.to_state == State.AWAITING_LLM_RESPONSE.value:
                ended = self._end_step()
                self.step = True
                return [*ended, {"type": "start-step"}]
            return []
        if isinstance(ev, MessageCompleted):
            return self._completed(ev)
        if isinstance(ev, ToolCallsRequested):
            out: list[dict[str, Any]] = []
            for index, call in enumerate(ev.calls):
                if (ev.message_id, index) not in self.calls and call.id not in self.shown:
                    out.append(self._start(call.id, call.tool_name))
                self.shown.add(call.id)
                out.append(
                    {
                        "type": "tool-input-available",
                        "toolCallId": call.id,
                        "toolName": call.tool_name,
                        "input": call.arguments,
                        "dynamic": True,
                    }
                )
            return out
        if isinstance(ev, ToolApprovalRequested):
            return [
                {"type": "tool-approval-request", "approvalId": c.id, "toolCallId": c.id}
                for c in ev.calls
            ]
        if isinstance(ev, ToolResult):
            return self._result(ev)
        if isinstance(ev, Failed):
            self.failed = True
            return [*self._close(), {"type": "error", "errorText": ev.error}]
        return []

    def _start(self, call_id: str, name: str) -> dict[str, Any]:
        return {
            "type": "tool-input-start",
            "toolCallId": call_id,
            "toolName": name,
            "dynamic": True,
        }

    def _delta(self, ev: ContentDelta) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        part = f"{ev.message_id}-{ev.attempt}"
        if ev.channel == "text":
            if self.reasoning is not None:
                out.append({"type": "reasoning-end", "id": self.reasoning})
                self.reasoning = None
            if self.text != part:
                out += self._close()
                out.append({"type": "text-start", "id": part})
                self.text = part
            out.append({"type": "text-delta", "id": part, "delta": ev.delta})
            self.streamed.add(ev.message_id)
        else:
            if self.reasoning != part:
                out += self._close()
                self.reasoning = part
                out.append({"type": "reasoning-start", "id": part})
            out.append({"type": "reasoning-delta", "id": part, "delta": ev.delta})
        return out

    def _piece(self, ev: ToolCallArgumentsDelta) -> list[dict[str, Any]]:
        key = (ev.message_id, ev.call_index)
        call_id = self.calls.get(key)
        if call_id is None:
            if ev.call_id is None or ev.tool_name is None:  # named later: kept till then
                self.waiting.setdefault(key, []).append(ev.delta)
                return []
            call_id = self.calls[key] = ev.call_id
            self.shown.add(call_id)
            pieces = [*self.waiting.pop(key, []), ev.delta]
            out = [*self._close(), self._start(call_id, ev.tool_name)]
        else:
            pieces, out = [ev.delta], []
        return out + [
            {"type": "tool-input-delta", "toolCallId": call_id, "inputTextDelta": p}
            for p in pieces
            if p
        ]

    def _completed(self, ev: MessageCompleted) -> list[dict[str, Any]]:
        """An answer that streamed nothing is sent whole here."""
        message = ev.message
        if message.role is not Role.ASSISTANT:
            return []
        out = self._close()
        text = message.text
        if text and ev.message_id not in self.streamed:
            part = f"{ev.message_id}-whole"
            out += [
                {"type": "text-start", "id": part},
                {"type": "text-delta", "id": part, "delta": text},
                {"type": "text-end", "id": part},
            ]
        return out

    def _result(self, ev: ToolResult) -> list[dict[str, Any]]:
        if ev.call_id in self.denied:
            return [{"type": "tool-output-denied", "toolCallId": ev.call_id}]
        if ev.success:
            return [
                {
                    "type": "tool-output-available",
                    "toolCallId": ev.call_id,
                    "output": ev.result,
                    "dynamic": True,
                }
            ]
        text = ev.result if isinstance(ev.result, str) else str(ev.result)
        return [{"type": "tool-output-error", "toolCallId": ev.call_id, "errorText": text}]

    def _close(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.text is not None:
            out.append({"type": "text-end", "id": self.text})
            self.text = None
        if self.reasoning is not None:
            out.append({"type": "reasoning-end", "id": self.reasoning})
            self.reasoning = None
        return out

    def _end_step(self) -> list[dict[str, Any]]:
        out = self._close()
        if self.step:
            out.append({"type": "finish-step"})
            self.step = False
        return out

    def end(self, turn: Turn | None, error: str | None) -> list[dict[str, Any]]:
        out = self._end_step()
        if error is not None and not self.failed:
            out.append({"type": "error", "errorText": error})
        reason = None if turn is None or turn.stop_reason is None else str(turn.stop_reason)
        finish = "error" if error is not None else _FINISH.get(reason or "", "other")
        out.append({"type": "finish", "finishReason": finish})
        return out


@router.post("/chat", response_model=None)
async def ui_chat(hub: HubOf, body: UIChatIn, who: Tenant) -> StreamingResponse:
    """A turn of the chat ``body.id`` as the AI SDK's UI message stream."""
    cid = body.id
    engine = hub.engine
    decided: Decisions | None = None
    call: Callable[[], Awaitable[Turn]]
    if body.trigger == "regenerate-message":
        await _context(hub, cid, who)
        call = await _regenerate(hub, cid)
        message_id = body.messageId or engine.new_id()
    else:
        decided = decisions(body)
        if decided is not None:
            await hub.check(cid, who)
            call = decide_calls(hub, cid, decided.approve, decided.deny)
            message_id = body.messages[-1].id or engine.new_id()
        else:
            text = user_text(body)
            earlier = resent(body, len(body.messages) - 1)
            mine = body.messages[-1].id or None
            await _context(hub, cid, who)

            def call() -> Awaitable[Turn]:
                return engine.send(cid, text, message_id=mine, context=earlier)

            message_id = engine.new_id()

    sub = engine.subscribe(cid)
    try:
        job = await hub.launch(cid, call, wait=False)
    except BaseException:
        await sub.aclose()
        raise
    translate = _Translate(denied=decided.denied if decided is not None else set())

    async def stream(job: Job) -> AsyncIterator[bytes]:
        try:
            yield json_frame({"type": "start", "messageId": message_id})
            while True:
                batch, _ = await next_batch(sub, job)
                for ev in batch:
                    for chunk in translate.chunks(ev):
                        yield json_frame(chunk)
                if job.done.is_set() and not batch:
                    break
        finally:
            await sub.aclose()
        turn = job.turn
        error = None
        if turn is None:
            error = str(job.error or "the turn failed")
        elif turn.state is State.PERMANENT_FAILURE and turn.error is not None:
            error = turn.error
        for chunk in translate.end(turn, error):
            yield json_frame(chunk)
        yield sse_frame(b"[DONE]")

    return StreamingResponse(
        stream(job),
        media_type="text/event-stream",
        headers={STREAM_HEADER: "v1", "cache-control": "no-cache", "x-accel-buffering": "no"},
    )
