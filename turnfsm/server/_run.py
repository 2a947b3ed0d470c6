"""Run the app under uvicorn, with a shutdown that tells event streams first."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import FrameType

import structlog
import uvicorn

from ..engine import Engine
from ._app import ServerConfig, create_app

__all__ = ["LOOPBACK", "configure_logging", "is_loopback", "run_server"]

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")


class _Server(uvicorn.Server):
    """On SIGTERM / SIGINT, event streams are told to close (a final
    ``StreamClosed`` event) before uvicorn waits for open requests."""

    on_exit: Callable[[], None] = staticmethod(lambda: None)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.on_exit()
        super().handle_exit(sig, frame)


def configure_logging() -> None:
    """The server's log lines (the access log: one per request) as structured
    ``key=value`` lines to standard output, at INFO, with an ISO timestamp and
    the level; each logger is built once. Nothing is changed when the
    application configured structlog itself. (structlog's unconfigured default
    is a development console renderer, several times the cost per line.)"""
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"]),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(),
        cache_logger_on_first_use=True,
    )


def run_server(
    factory: Callable[[], Engine], config: ServerConfig, *, host: str, port: int
) -> None:
    """Serve until SIGTERM or Ctrl-C: stop accepting, close event streams with a
    final event, cancel running turns cleanly (each ends at Idle, its text kept),
    close the engine. Logs as :func:`configure_logging` says."""
    configure_logging()
    app = create_app(factory, config)
    hub = app.state.hub
    server = _Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="on",
            ws="none",
            timeout_graceful_shutdown=max(1, int(config.shutdown_grace)),
        )
    )

    def on_exit() -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_soon(hub.closing.set)

    server.on_exit = on_exit
    server.run()
