"""A small OpenAI-compatible HTTP server on loopback, for tests.

A real socket on ``127.0.0.1`` (ephemeral port), ``http.server.ThreadingHTTPServer``
in a thread, HTTP/1.1 with keep-alive and chunked transfer encoding, and real
Server-Sent Events framing (``data: {...}\\n\\n``, ``data: [DONE]\\n\\n``; an
``event: <type>`` line before the data of an event that has a ``type``, as the
Responses API streams them). It answers every POST with the next scripted
:class:`Reply`, in order, and records each request it got
(:attr:`LoopbackServer.requests`). With no reply left it answers 400 with a
message saying so.

This folder has no ``__init__.py`` on purpose: with pytest's default
``prepend`` import mode a package here would be imported as ``openai`` and hide
the SDK. So the helper modules have names of their own (``openai_loopback``,
``openai_samples``).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: LoopbackServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return  # the client went away (a timeout test): expected
        self.owner.errors.append(repr(exc))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        owner.requests.append(
            Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        )
        try:
            reply = owner.replies.popleft()
        except IndexError:
            reply = Reply(
                status=400,
                json=error_body(
                    f"loopback server: no scripted reply left for request {len(owner.requests)}",
                    "invalid_request_error",
                ),
            )
        if reply.delay and owner.stopping.wait(reply.delay):
            return
        if reply.events is None:
            self._send_json(reply)
        else:
            self._send_events(reply)

    def _send_json(self, reply: Reply) -> None:
        payload = json.dumps(reply.json if reply.json is not None else {}).encode()
        self.send_response(reply.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_events(self, reply: Reply) -> None:
        owner = self.server.owner
        self.send_response(reply.status)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        assert reply.events is not None
        for n, event in enumerate(reply.events):
            if reply.break_after is not None and n == reply.break_after:
                self._break()
                return
            if n and reply.event_delay and owner.stopping.wait(reply.event_delay):
                return
            if isinstance(event, str):
                frame = f"data: {event}\n\n"
            else:
                head = f"event: {event['type']}\n" if isinstance(event.get("type"), str) else ""
                frame = f"{head}data: {json.dumps(event)}\n\n"
            self._chunk(frame.encode())
        if reply.break_after is not None:
            self._break()
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _break(self) -> None:
        """Drop the connection in the middle of the chunked body."""
        self.close_connection = True
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class LoopbackServer:
    """Start with :meth:`start` (or as a context manager); ``url`` is the base URL
    to give the SDK (``http://127.0.0.1:<port>/v1``)."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> LoopbackServer:
        """Queue replies, answered in order."""
        self.replies.extend(replies)
        return self

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    def start(self) -> LoopbackServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
