"""A small OpenAI-compatible HTTP server on loopback, for tests.

The server of :mod:`loopback` (a real socket on ``127.0.0.1``, HTTP/1.1 with
keep-alive and chunked transfer encoding) with real Server-Sent Events framing
(``data: {...}\\n\\n``, ``data: [DONE]\\n\\n``; an ``event: <type>`` line
before the data of an event that has a ``type``, as the Responses API streams
them). It answers every POST with the next scripted
:class:`Reply`, in order, and records each request it got
(:attr:`LoopbackServer.requests`). With no reply left it answers 400 with a
message saying so.

This folder has no ``__init__.py`` on purpose: with pytest's default
``prepend`` import mode a package here would be imported as ``openai`` and hide
the SDK. So the helper modules have names of their own (``openai_loopback``,
``openai_samples``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loopback import Handler, Recorded, ScriptedServer

__all__ = ["DONE", "LoopbackServer", "Recorded", "Reply", "error_body"]

DONE = "[DONE]"
"""The data of the last event of a Chat Completions stream."""


def error_body(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    """An error body as the OpenAI API sends it."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


@dataclass
class Reply:
    """One scripted answer.

    ``events`` makes it a 200 SSE stream: a dict is sent as ``data: <json>``
    (with ``event: <type>`` first when it has a ``type``), a str as
    ``data: <str>`` verbatim (``DONE``, or a malformed chunk). Else ``json`` is
    the whole body. ``delay`` waits before the status line, ``event_delay``
    between events; ``break_after`` closes the connection after that many
    events, without ending the chunked body (a stream that breaks mid-way).
    """

    status: int = 200
    json: Any = None
    events: Sequence[Mapping[str, Any] | str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    event_delay: float = 0.0
    break_after: int | None = None


class LoopbackServer(ScriptedServer[Reply]):
    """Start with :meth:`start` (or as a context manager); ``url`` is the base URL
    to give the SDK (``http://127.0.0.1:<port>/v1``)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def no_reply(self, message: str) -> Reply:
        return Reply(status=400, json=error_body(message, "invalid_request_error"))

    def answer(self, handler: Handler, reply: Reply) -> None:
        if reply.delay and self.stopping.wait(reply.delay):
            return
        if reply.events is None:
            payload = json.dumps(reply.json if reply.json is not None else {}).encode()
            handler.send_whole(reply.status, payload, reply.headers)
            return
        handler.start_stream(reply.status, reply.headers)
        for n, event in enumerate(reply.events):
            if reply.break_after is not None and n == reply.break_after:
                handler.drop()
                return
            if n and reply.event_delay and self.stopping.wait(reply.event_delay):
                return
            if isinstance(event, str):
                frame = f"data: {event}\n\n"
            else:
                head = f"event: {event['type']}\n" if isinstance(event.get("type"), str) else ""
                frame = f"{head}data: {json.dumps(event)}\n\n"
            handler.chunk(frame.encode())
        if reply.break_after is not None:
            handler.drop()
            return
        handler.end_stream()
