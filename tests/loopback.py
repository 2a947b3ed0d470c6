"""What the providers' loopback servers share: a small HTTP server for tests that
answers each POST with the next scripted reply.

A real socket on ``127.0.0.1`` (ephemeral port), ``http.server.ThreadingHTTPServer``
in a thread, HTTP/1.1 with keep-alive and chunked transfer encoding. Every
request is recorded (:attr:`ScriptedServer.requests`); with no reply left the
server answers with its provider's error (:meth:`ScriptedServer.no_reply`). A
provider's module (``openai_loopback``, ``anthropic_loopback``,
``gemini_loopback``) says what a reply is, how it is written, and its base URL.

:class:`RawReply` and :class:`RawServer` are the byte-for-byte kind: a stream is
the reply's ``chunks`` written as they are, one HTTP chunk each (so a chunk may
end inside a multi-byte character or a JSON value, as a network may cut them);
a whole body is ``body`` with the reply's status and headers.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import sys
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Self, TypeVar

import pytest

__all__ = [
    "Case",
    "Handler",
    "RawReply",
    "RawServer",
    "Recorded",
    "ScriptedServer",
    "cut_inside_characters",
    "one_ssl_context",
    "serving",
]

R = TypeVar("R")


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedServer[Any]

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return  # the client went away (a timeout test): expected
        self.owner.errors.append(repr(exc))


class Handler(BaseHTTPRequestHandler):
    """Records each POST and hands the next reply to the server's :meth:`answer`;
    the writing helpers are what every provider's answers are made of."""

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
            reply = owner.no_reply(
                f"loopback server: no scripted reply left for request {len(owner.requests)}"
            )
        owner.answer(self, reply)

    def send_whole(self, status: int, payload: bytes, headers: Mapping[str, str]) -> None:
        """A whole JSON body."""
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def start_stream(self, status: int, headers: Mapping[str, str]) -> None:
        """The head of a ``text/event-stream`` in chunked transfer encoding."""
        self.send_response(status)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        """One HTTP chunk (an empty one would end the body: left out)."""
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def drop(self) -> None:
        """Drop the connection in the middle of the chunked body."""
        self.close_connection = True
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class ScriptedServer(Generic[R]):
    """Start with :meth:`start` (or as a context manager); :meth:`script` queues
    the replies, answered in order. A provider's server gives :attr:`url`,
    :meth:`no_reply` and :meth:`answer`."""

    def __init__(self) -> None:
        self.replies: deque[R] = deque()
        self.requests: list[Recorded] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        raise NotImplementedError

    def no_reply(self, message: str) -> R:
        """The reply when none is left: a 400 with the provider's error body."""
        raise NotImplementedError

    def answer(self, handler: Handler, reply: R) -> None:
        raise NotImplementedError

    def script(self, *replies: R) -> Self:
        """Queue replies, answered in order."""
        self.replies.extend(replies)
        return self

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


S = TypeVar("S", bound=ScriptedServer[Any])


def serving(server: S) -> Iterator[S]:
    """``server`` started for one test, stopped after it; a request it could not
    answer (an exception in a handler) fails the test."""
    with server:
        yield server
    assert not server.errors, server.errors


@dataclass
class RawReply:
    """One scripted answer: ``chunks`` make it a ``text/event-stream`` (each
    written as one HTTP chunk); else ``body`` is the whole body."""

    status: int = 200
    chunks: Sequence[bytes] | None = None
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


class RawServer(ScriptedServer[RawReply]):
    """A server that writes each reply byte for byte; :meth:`error_reply` is the
    provider's error body for an unscripted request."""

    def error_reply(self, message: str) -> bytes:
        raise NotImplementedError

    def no_reply(self, message: str) -> RawReply:
        return RawReply(status=400, body=self.error_reply(message))

    def answer(self, handler: Handler, reply: RawReply) -> None:
        if reply.chunks is None:
            handler.send_whole(reply.status, reply.body, reply.headers)
            return
        handler.start_stream(reply.status, reply.headers)
        for chunk in reply.chunks:
            handler.chunk(chunk)
        handler.end_stream()


@dataclass(frozen=True)
class Case:
    """A recorded answer of a provider's corpus, replayed byte for byte."""

    name: str
    chunks: list[bytes]
    tools: bool = False
    """Whether the answer asks for a tool (the engine then sends a second request)."""

    def reply(self) -> RawReply:
        return RawReply(chunks=self.chunks)


def cut_inside_characters(chunks: list[bytes]) -> list[bytes]:
    """The same bytes, cut into HTTP chunks in the middle of every multi-byte character."""
    whole = b"".join(chunks)
    cuts = [i + 1 for i, b in enumerate(whole) if b >= 0xC0]  # after a lead byte
    out, at = [], 0
    for cut in cuts:
        out.append(whole[at:cut])
        at = cut
    out.append(whole[at:])
    return out


@pytest.fixture(scope="session", autouse=True)
def one_ssl_context() -> Iterator[None]:
    """Every OpenAI and Anthropic client of a conftest that imports this
    shares one SSL context, as each new client would load the system's CA
    certificates again and those tests make one or two a test; the loopback is
    plain HTTP, where none is used."""
    import httpcore2  # both SDKs' transport, imported with them

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            httpcore2, "default_ssl_context", functools.cache(httpcore2.default_ssl_context)
        )
        yield
