"""A small Gemini API server on loopback, for tests: it replays bodies byte
for byte.

A real socket on ``127.0.0.1`` (ephemeral port), ``http.server.ThreadingHTTPServer``
in a thread, HTTP/1.1 with keep-alive and chunked transfer encoding. Each POST
gets the next scripted :class:`Reply`, in order: a stream is the reply's
``chunks`` written as they are, one HTTP chunk each (so a chunk may end inside
a multi-byte character or a JSON value, as a network may cut them); a whole
body is ``body`` (bytes, as they are) with the reply's status and headers.
Every request is recorded (:attr:`LoopbackServer.requests`). With no reply
left it answers 400 with an error body saying so.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LoopbackServer", "Recorded", "Reply", "error_body"]


def error_body(code: int, status: str, message: str) -> bytes:
    """An error body as the Gemini API sends it (``google.rpc.Status`` under ``error``)."""
    return json.dumps({"error": {"code": code, "message": message, "status": status}}).encode()


@dataclass
class Reply:
    """One scripted answer: ``chunks`` make it a 200 ``text/event-stream``
    (each written as one HTTP chunk); else ``body`` is the whole body."""

    status: int = 200
    chunks: Sequence[bytes] | None = None
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


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
            return
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
        headers = {k.lower(): v for k, v in self.headers.items()}
        owner.requests.append(Recorded("POST", self.path, headers, body))
        try:
            reply = owner.replies.popleft()
        except IndexError:
            reply = Reply(
                status=400,
                body=error_body(
                    400,
                    "INVALID_ARGUMENT",
                    f"loopback server: no scripted reply left for request {len(owner.requests)}",
                ),
            )
        if reply.chunks is None:
            self.send_response(reply.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(reply.body)))
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(reply.body)
            self.wfile.flush()
            return
        self.send_response(reply.status)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        for chunk in reply.chunks:
            if chunk:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class LoopbackServer:
    """Start with :meth:`start` (or as a context manager); ``url`` is the base URL
    to give the SDK (``http://127.0.0.1:<port>``: it adds
    ``/v1beta/models/<model>:streamGenerateContent?alt=sse``)."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self.errors: list[str] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

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
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
