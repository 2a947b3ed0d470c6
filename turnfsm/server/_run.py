"""Run the app under uvicorn, with a shutdown that tells event streams first."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import logging
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from types import FrameType
from typing import Any, cast

import structlog
import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from ..engine import Engine
from ._app import create_app
from ._config import ServerConfig
from ._flags import wake

__all__ = [
    "GC_THRESHOLDS",
    "HTTP_PROTOCOL",
    "KEEP_ALIVE",
    "LOOPBACK",
    "TICK",
    "HeadWithBody",
    "ServerStop",
    "StartupFailed",
    "configure_logging",
    "is_loopback",
    "key_value_line",
    "listening_urls",
    "run_server",
    "tune_collector",
]

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")


class HeadWithBody:
    """A connection's transport that sends a response's head with what
    follows it: one system call, one wake-up of the client.

    uvicorn writes a response's head and its body separately, so a client
    woke for the head and again for the body of every ``202``. A head (a
    write that starts with ``HTTP/`` and ends with the blank line) is held
    until the next write, which it goes out with, or until the next turn of
    the event loop (a stream's head, whose first event may be long in
    coming). Every other write goes out at once; everything else is the real
    transport's."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + bytes(data))
        elif data[:5] == b"HTTP/" and data[-4:] == b"\r\n\r\n":
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def writelines(self, lines: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(lines))

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def get_write_buffer_size(self) -> int:
        held = self._held
        return self._transport.get_write_buffer_size() + (len(held) if held else 0)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _head_with_body(base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    class Protocol(base):  # type: ignore[misc,valid-type]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            # uvloop's transports are not asyncio.Transport subclasses: no check
            wire = HeadWithBody(cast(asyncio.Transport, transport), asyncio.get_running_loop())
            super().connection_made(wire)

    Protocol.__name__ = Protocol.__qualname__ = f"HeadWithBody{base.__name__}"
    return Protocol


HTTP_PROTOCOL = _head_with_body(AutoHTTPProtocol)
"""uvicorn's HTTP protocol (httptools when installed, as the ``server`` extra
does; h11 otherwise) over :class:`HeadWithBody`: ``uvicorn.Config(http=...)``."""


TICK = 1.0
"""Seconds between two ticks of the server's main loop (:class:`_Server`)."""

KEEP_ALIVE = 5
"""Seconds an idle keep-alive connection stays open (uvicorn's default)."""

GC_THRESHOLDS = (10_000, 20, 20)
"""The cyclic collector's thresholds in ``turnfsm serve`` (Python's: 700, 10, 10)."""


def tune_collector() -> None:
    """Python's cyclic garbage collector, set for a server's life: what exists
    once the app is made (modules, the app, its routes) is frozen out of its
    passes (``gc.freeze()``), and a pass runs after 10,000 allocations rather
    than 700. A turn allocates a few thousand objects (models, events, dicts),
    most freed at once by reference counting: with the defaults a pass ran
    every few turns and cost about a sixteenth of the server's CPU."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def listening_urls(sockets: Iterable[socket.socket]) -> list[str]:
    """The ``http://`` URLs of listening sockets, with the ports they got (an
    IPv6 address in brackets)."""
    urls = []
    for sock in sockets:
        host, port = sock.getsockname()[:2]
        urls.append(
            f"http://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}"
        )
    return urls


class _Server(uvicorn.Server):
    """On SIGTERM / SIGINT, event streams are told to close (a final
    ``StreamClosed`` event) before uvicorn waits for open requests. Once it
    listens, ``on_listening`` is given the URLs it listens on: with port 0
    they name the port the system chose, which nothing else could know."""

    on_exit: Callable[[], None] = staticmethod(lambda: None)
    on_listening: Callable[[list[str]], None] = staticmethod(lambda urls: None)
    stopped_by: ServerStop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            bound = [sock for server in self.servers for sock in server.sockets]
            self.on_listening(listening_urls(bound))
            if self.stopped_by is not None:
                self.stopped_by._listening(self)

    _tick: asyncio.Future[None] | None = None
    """What :meth:`main_loop` waits on between two ticks."""

    async def main_loop(self) -> None:
        """uvicorn's loop, ticking once a second rather than ten times: a
        tick renews the ``Date`` header (uvicorn's every tenth tick does, so
        each of these counts as ten) and looks at ``should_exit``, which an
        exit signal sets and wakes the loop for at once (:meth:`handle_exit`).
        A server, busy or idle, wakes a tenth as often for its ticks."""
        loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000
            tick = self._tick = loop.create_future()
            timer = loop.call_later(TICK, wake, tick)
            try:
                await tick
            finally:
                timer.cancel()
                self._tick = None
            should_exit = await self.on_tick(counter)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.on_exit()
        super().handle_exit(sig, frame)
        self._wake()

    def stop(self) -> None:
        """:meth:`handle_exit` without a signal, on the server's loop
        (:class:`ServerStop`): no signal to raise again once stopped, and
        sse-starlette's flag, which would close the streams of every server
        of the process and is never put back, is left alone (a stream closes
        on ``hub.closing``, which ``on_exit`` sets)."""
        self.on_exit()
        self.should_exit = True
        self._wake()

    def _wake(self) -> None:
        tick = self._tick
        if tick is not None:  # from a signal's handler or any thread
            tick.get_loop().call_soon_threadsafe(wake, tick)


class ServerStop:
    """A way to stop a server :func:`run_server` runs (``stop=``) from the
    same process: :meth:`stop`, from any thread, does what SIGTERM does (no
    new connections, event streams closed with their final event, running
    turns cancelled to Idle, the engine closed), and ``run_server`` then
    returns. Asked before the server listens, it stops once it does; asked
    after it stopped, it does nothing. One handle serves one run.

    With it, ``run_server`` may run off the main thread, where uvicorn sets
    no signal handler: SIGTERM and Ctrl-C then go to whatever the process
    does with them, and only :meth:`stop` stops the server."""

    __slots__ = ("_asked", "_lock", "_loop", "_server")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked = False
        self._server: _Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def stop(self) -> None:
        """Stop the server, now or once it listens; returns at once (the
        server stops on its own loop, as ``run_server`` returns)."""
        with self._lock:
            self._asked = True
            server, loop = self._server, self._loop
        if server is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: it stopped
                loop.call_soon_threadsafe(server.stop)

    def _listening(self, server: _Server) -> None:
        """The server listens, on the running loop (:meth:`_Server.startup`)."""
        with self._lock:
            self._server, self._loop = server, asyncio.get_running_loop()
            asked = self._asked
        if asked:
            server.stop()

    def _done(self) -> None:
        with self._lock:
            self._server = self._loop = None


def configure_logging() -> None:
    """The server's log lines (the access log: one per request) as structured
    ``key=value`` lines to standard error (standard output is left to what a
    command outputs), at INFO, with an ISO timestamp and
    the level; each logger is built once. Nothing is changed when the
    application configured structlog itself. (structlog's unconfigured default
    is a development console renderer, several times the cost per line.)"""
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, key_value_line],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        # a line and its end in one write (print() writes them apart when
        # standard output is unbuffered)
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def key_value_line(_logger: Any, method_name: str, event: MutableMapping[str, Any]) -> str:
    """The line structlog's ``add_log_level``, ``TimeStamper(fmt="iso")`` and
    ``KeyValueRenderer(key_order=["timestamp", "level", "event"])`` make, in
    one step rather than three processors and a key sorter: every request
    writes one (``tests/server/test_serve.py`` holds it to theirs)."""
    if method_name == "warn":  # add_log_level's names
        method_name = "warning"
    elif method_name == "exception":
        method_name = "error"
    stamp = datetime.datetime.now(tz=datetime.UTC).isoformat().replace("+00:00", "Z")
    event.pop("timestamp", None)
    event.pop("level", None)
    head = f"timestamp={stamp!r} level={method_name!r} event={event.pop('event', None)!r}"
    if not event:
        return head
    return head + " " + " ".join([k + "=" + repr(v) for k, v in event.items()])


class StartupFailed(RuntimeError):
    """The server did not start (the engine or its tools could not be made,
    the store did not open, the port is taken): one line saying why, the
    error itself as ``__cause__`` when there is one."""


class _StartupErrors(logging.Filter):
    """uvicorn's error lines until the server has started, kept rather than
    printed (a traceback of the app's start, "Application startup failed",
    "[Errno 98] address already in use"): :func:`run_server` says what went
    wrong in one line instead. Once the server runs, its errors print."""

    def __init__(self, server: uvicorn.Server) -> None:
        super().__init__()
        self.server = server
        self.lines: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if self.server.started or record.levelno < logging.ERROR:
            return True
        self.lines.append(record.getMessage().strip())
        return False


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())


def run_server(
    factory: Callable[[], Engine],
    config: ServerConfig,
    *,
    host: str,
    port: int,
    keep_alive: int = KEEP_ALIVE,
    on_listening: Callable[[list[str]], None] | None = None,
    stop: ServerStop | None = None,
    on_close: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve until SIGTERM or Ctrl-C: stop accepting, close event streams with a
    final event, cancel running turns cleanly (each ends at Idle, its text kept),
    close the engine. Logs as :func:`configure_logging` says. ``keep_alive``:
    the seconds an idle connection is kept open (uvicorn's default).
    ``on_listening`` is called once the server listens, with the URLs it
    listens on (``port`` 0 takes a free port, which they name). ``stop``'s
    :meth:`~ServerStop.stop` stops it as SIGTERM does, from any thread of the
    process (it may then run off the main thread, where only that stops it).
    ``on_close`` is awaited on the server's loop once the engine is closed (as
    :func:`create_app` says).

    It sets what a server process keeps for its life: the collector
    (:func:`tune_collector`), structlog (:func:`configure_logging`) and
    uvicorn's loggers."""
    configure_logging()
    app = create_app(factory, config, on_close=on_close)
    tune_collector()
    hub = app.state.hub
    server = _Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="on",
            ws="none",
            http=HTTP_PROTOCOL,
            timeout_graceful_shutdown=max(1, int(config.shutdown_grace)),
            timeout_keep_alive=keep_alive,
        )
    )

    def on_exit() -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_soon(hub.closing.set)

    server.on_exit = on_exit
    if on_listening is not None:
        server.on_listening = on_listening
    server.stopped_by = stop
    kept = _StartupErrors(server)
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addFilter(kept)
    try:
        server.run()
    except SystemExit:  # uvicorn's exit when it cannot listen
        if server.started:
            raise
    finally:
        uvicorn_log.removeFilter(kept)
        if stop is not None:
            stop._done()
    if server.started:
        return
    error: BaseException | None = getattr(app.state, "startup_error", None)
    if error is not None:
        raise StartupFailed(f"{type(error).__name__}: {_one_line(str(error))}") from error
    shown = [line for line in kept.lines if line and "Application startup failed" not in line]
    raise StartupFailed(_one_line(shown[-1]) if shown else "the server did not start")
