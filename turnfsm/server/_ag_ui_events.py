"""The engine's events as AG-UI events (see ``docs/ag-ui.md``).

:class:`Translator` turns one run's engine events into AG-UI's, in order:

- ``StateChanged``: the state left ends its step (``STEP_FINISHED``), the
  state entered starts one (``STEP_STARTED``, ``stepName`` the state's name);
- ``ContentDelta`` (text): ``TEXT_MESSAGE_START`` on a message's first piece,
  ``TEXT_MESSAGE_CONTENT`` for each, ``TEXT_MESSAGE_END`` when the message is
  complete; the message id is the stored message's (an answer of a later LLM
  attempt, after a retry, gets ``<id>.<attempt>``: what an earlier attempt
  streamed cannot be taken back);
- ``ToolCallArgumentsDelta``: ``TOOL_CALL_START`` once the piece names the
  call (``parentMessageId`` the assistant message that makes it), then each
  piece of its arguments' JSON text in a ``TOOL_CALL_ARGS``, as the model
  streams them;
- ``ToolCallsRequested``: ``TOOL_CALL_END`` for the calls streamed; a call
  that was not streamed comes whole: ``TOOL_CALL_START``, its arguments in one
  ``TOOL_CALL_ARGS``, ``TOOL_CALL_END``;
- ``ToolResult``: ``TOOL_CALL_RESULT`` (the tool message's id, the result as
  text: a string as it is, other JSON data as its JSON text).

Each is emitted once, whatever brought it: the turn's messages are gone over
again when it rests (:meth:`Translator.settle`), so what a subscriber that fell
behind missed (``EventsMissed``), or an answer that was not streamed, still
reaches the client. :meth:`Translator.finish` closes what is open and ends the
run: ``RUN_FINISHED`` (``success``, naming the frontend's calls left to run
in ``pendingToolCallIds``, or ``interrupt`` when calls wait for a human) or
``RUN_ERROR``.

Frames end their lines with ``\\n`` alone: AG-UI's client splits a stream on
``\\n\\n``, so the ``\\r\\n`` frames of the server's other streams
(``_sse.py``) would reach it as one unreadable event.
"""

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..engine import Turn
from ..events import (
    ContentDelta,
    Event,
    MessageCompleted,
    Retrying,
    StateChanged,
    ToolCallArgumentsDelta,
    ToolCallsRequested,
    ToolResult,
)
from ..model import InternalMessage, Role, ToolCallRequest
from ..states import State

__all__ = ["APPROVAL_SCHEMA", "Translator", "frame", "interrupts"]

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
}
"""The answer an approval interrupt expects (its ``responseSchema``)."""


def frame(event: dict[str, Any], ident: int | None = None) -> bytes:
    """One AG-UI event as a server-sent event: ``id:`` (the engine event's
    ``seq``, when it came from one) and one ``data:`` line of JSON."""
    data = json.dumps(event, separators=(",", ":")).encode()
    if ident is None:
        return b"data: %s\n\n" % data
    return b"id: %d\ndata: %s\n\n" % (ident, data)


def _content(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result)


def _arguments(call: ToolCallRequest) -> str:
    if call.raw_arguments is not None:
        return call.raw_arguments
    return json.dumps(call.arguments)


def interrupts(turn: Turn) -> list[dict[str, Any]]:
    """The calls the turn waits on, as AG-UI interrupts: one per call, its id
    the call's; a question's ``responseSchema`` asks for an ``answer``."""
    questions = {q.call_id: q for q in turn.questions}
    out: list[dict[str, Any]] = []
    for call in turn.pending_tool_calls:
        question = questions.get(call.id)
        if question is None:
            out.append(
                {
                    "id": call.id,
                    "reason": "tool_approval",
                    "message": f"approve or deny the call of {call.tool_name}",
                    "toolCallId": call.id,
                    "responseSchema": APPROVAL_SCHEMA,
                    "metadata": {"toolName": call.tool_name, "arguments": call.arguments},
                }
            )
            continue
        answer: dict[str, Any] = {"type": "string", "minLength": 1}
        if question.choices:
            answer["enum"] = list(question.choices)
        out.append(
            {
                "id": call.id,
                "reason": "question",
                "message": question.question,
                "toolCallId": call.id,
                "responseSchema": {
                    "type": "object",
                    "properties": {"answer": answer},
                    "required": ["answer"],
                },
                "metadata": {"toolName": call.tool_name},
            }
        )
    return out


_Key = tuple[str, int, int]
"""A streamed call's place: its message's id, the LLM attempt, its index in the answer."""


class Translator:
    """One run's AG-UI events, as frames (see the module's docstring)."""

    def __init__(self, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self._step: str | None = None
        self._open_text: str | None = None
        self._streamed: dict[str, str] = {}
        self._ended: set[str] = set()
        self._calls: set[str] = set()
        self._open_calls: dict[_Key, str] = {}
        """The calls being streamed, by their place, to their ids."""
        self._unnamed: dict[_Key, list[str]] = {}
        """Pieces of calls not named yet (held until a piece names the call)."""
        self._results: set[str] = set()

    def started(self) -> bytes:
        return frame({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id})

    # ------------------------------------------------------------------ engine events

    def event(self, ev: Event) -> Iterable[bytes]:
        """The frames of one engine event (none for most kinds)."""
        seq = ev.seq
        if isinstance(ev, ContentDelta):
            if ev.channel == "text" and ev.delta:
                yield from self._delta(_wire_id(ev.message_id, ev.attempt), ev.delta, seq)
        elif isinstance(ev, StateChanged):
            yield from self._close_step(seq)
            self._step = ev.to_state
            yield frame({"type": "STEP_STARTED", "stepName": ev.to_state}, seq)
        elif isinstance(ev, MessageCompleted):
            yield from self._message(ev.message_id, ev.message, seq)
        elif isinstance(ev, ToolCallArgumentsDelta):
            yield from self._piece(ev, seq)
        elif isinstance(ev, ToolCallsRequested):
            yield from self._close_text(seq)
            for index, call in enumerate(ev.calls):
                for key, streamed in list(self._open_calls.items()):
                    if key[0] == ev.message_id and key[2] == index and streamed != call.id:
                        # the engine gave the call another id (the model's was used
                        # before): the streamed one is closed, the call sent whole
                        yield from self._close_call(key, seq)
                yield from self._call(call, ev.message_id, seq)
        elif isinstance(ev, Retrying):  # what the failed attempt streamed stays as it is
            yield from self._close_text(seq)
            for key in list(self._open_calls):
                yield from self._close_call(key, seq)
        elif isinstance(ev, ToolResult):
            yield from self._result(ev.message_id, ev.call_id, ev.result, seq)

    def _delta(self, wire: str, delta: str, seq: int | None) -> Iterable[bytes]:
        if self._open_text != wire:
            yield from self._close_text(seq)
            if wire in self._ended:  # a message completed once is not reopened
                return
            self._open_text = wire
            yield frame({"type": "TEXT_MESSAGE_START", "messageId": wire, "role": "assistant"}, seq)
        self._streamed[wire] = self._streamed.get(wire, "") + delta
        yield frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": wire, "delta": delta}, seq)

    def _close_text(self, seq: int | None) -> Iterable[bytes]:
        wire = self._open_text
        if wire is not None:
            self._open_text = None
            self._ended.add(wire)
            yield frame({"type": "TEXT_MESSAGE_END", "messageId": wire}, seq)

    def _close_step(self, seq: int | None) -> Iterable[bytes]:
        if self._step is not None:
            yield frame({"type": "STEP_FINISHED", "stepName": self._step}, seq)
            self._step = None

    def _message(self, mid: str, message: InternalMessage, seq: int | None) -> Iterable[bytes]:
        """What a complete message adds to what was streamed of it."""
        if message.role is Role.ASSISTANT:
            wire = _wire_id(mid, message.metadata.attempt)
            text = message.text
            if wire not in self._ended:
                sent = self._streamed.get(wire, "")
                if text.startswith(sent) and len(text) > len(sent):
                    yield from self._delta(wire, text[len(sent) :], seq)
                if self._open_text == wire:
                    yield from self._close_text(seq)
            for call in message.tool_calls or ():
                yield from self._call(call, wire, seq)
        elif message.role is Role.TOOL and message.tool_result is not None:
            result = message.tool_result
            yield from self._result(mid, result.request_id, result.result, seq)

    def _piece(self, ev: ToolCallArgumentsDelta, seq: int) -> Iterable[bytes]:
        """A piece of a call's arguments as the model streams them."""
        key = (ev.message_id, ev.attempt, ev.call_index)
        parent = _wire_id(ev.message_id, ev.attempt)
        call_id = self._open_calls.get(key)
        if call_id is None:
            if ev.call_id is None or ev.call_id in self._calls:
                self._unnamed.setdefault(key, []).append(ev.delta)
                return
            call_id = ev.call_id
            yield from self._close_text(seq)
            for other in [k for k in self._open_calls if k[:2] == key[:2]]:
                yield from self._close_call(other, seq)  # the model went on to the next call
            self._calls.add(call_id)
            self._open_calls[key] = call_id
            start = {"type": "TOOL_CALL_START", "toolCallId": call_id}
            start |= {"toolCallName": ev.tool_name or "", "parentMessageId": parent}
            yield frame(start, seq)
        delta = "".join(self._unnamed.pop(key, ())) + ev.delta
        if delta:
            yield frame({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": delta}, seq)

    def _close_call(self, key: _Key, seq: int | None) -> Iterable[bytes]:
        call_id = self._open_calls.pop(key, None)
        if call_id is not None:
            yield frame({"type": "TOOL_CALL_END", "toolCallId": call_id}, seq)

    def _call(self, call: ToolCallRequest, parent: str, seq: int | None) -> Iterable[bytes]:
        if call.id in self._calls:
            for key, open_id in list(self._open_calls.items()):
                if open_id == call.id:  # streamed: its arguments are complete
                    yield from self._close_call(key, seq)
            return
        self._calls.add(call.id)
        yield from self._close_text(seq)
        yield frame(
            {
                "type": "TOOL_CALL_START",
                "toolCallId": call.id,
                "toolCallName": call.tool_name,
                "parentMessageId": parent,
            },
            seq,
        )
        yield frame(
            {"type": "TOOL_CALL_ARGS", "toolCallId": call.id, "delta": _arguments(call)}, seq
        )
        yield frame({"type": "TOOL_CALL_END", "toolCallId": call.id}, seq)

    def _result(self, mid: str, call_id: str, result: Any, seq: int | None) -> Iterable[bytes]:
        if call_id in self._results:
            return
        self._results.add(call_id)
        yield from self._close_text(seq)
        yield frame(
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": mid,
                "toolCallId": call_id,
                "content": _content(result),
                "role": "tool",
            },
            seq,
        )

    # ------------------------------------------------------------------ the end

    def settle(self, turn: Turn) -> Iterable[bytes]:
        """What the turn's messages hold that was not emitted yet."""
        messages: Sequence[InternalMessage] = turn.messages
        for mid, message in zip(turn.message_ids, messages, strict=False):
            yield from self._message(mid, message, None)

    def finish(self, turn: Turn | None, error: str | None) -> Iterable[bytes]:
        """Close what is open; then ``RUN_ERROR`` (the turn failed, or the call
        raised ``error``) or ``RUN_FINISHED``."""
        yield from self._close_text(None)
        for key in list(self._open_calls):
            yield from self._close_call(key, None)
        yield from self._close_step(None)
        if turn is None or turn.state is State.PERMANENT_FAILURE or turn.error is not None:
            reason = (turn.error if turn is not None else None) or error or "the turn failed"
            yield frame({"type": "RUN_ERROR", "message": reason, "code": "turn_failed"})
            return
        end: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": self.thread_id}
        end["runId"] = self.run_id
        waiting = interrupts(turn)
        if waiting:
            end["outcome"] = {"type": "interrupt", "interrupts": waiting}
        else:
            end["outcome"] = {"type": "success"}
            if turn.client_tool_calls:  # the frontend's to run: their results come next
                end["outcome"]["pendingToolCallIds"] = [c.id for c in turn.client_tool_calls]
            end["result"] = {"state": turn.state.value, "stopReason": _stop(turn)}
        yield frame(end)


def _stop(turn: Turn) -> str | None:
    reason = turn.stop_reason
    return None if reason is None else str(reason.value)


def _wire_id(message_id: str, attempt: int | None) -> str:
    """The id a message has on the wire: the stored message's, ``.<attempt>``
    after it for an attempt after the first."""
    return message_id if attempt is None or attempt <= 1 else f"{message_id}.{attempt}"
