"""Traces and metrics of ``turnfsm serve``, ``worker`` and ``chat``
(docs/observability.md): the OTLP export the environment asks for, and the
worker's metrics port."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..engine import Engine
from ._errors import CLIError, count

__all__ = ["add_metrics_options", "serve_metrics", "start_tracing"]


def start_tracing(service_name: str) -> Callable[[], None]:
    """Export traces as the ``OTEL_*`` environment variables ask (nothing
    when they ask for nothing); returns the function that flushes and stops
    the export, to call on the way out."""
    from ..observability._export import TelemetrySetupError, tracing_from_env

    try:
        stop = tracing_from_env(service_name)
    except TelemetrySetupError as exc:
        raise CLIError(str(exc)) from None
    return stop if stop is not None else _nothing


def _nothing() -> None:
    return None


def add_metrics_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-port",
        type=count(1, 65535),
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (off unless given; "
        "needs the metrics extra)",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address of --metrics-port (127.0.0.1; it asks for no token)",
    )


def serve_metrics(args: argparse.Namespace, engine: Engine) -> Callable[[], None]:
    """With ``--metrics-port``: count ``engine``'s calls and serve the metrics
    on that port, in a thread; returns the function that stops serving."""
    if args.metrics_port is None:
        return _nothing
    try:
        from ..observability import EngineMetrics
    except ImportError as exc:
        raise CLIError(
            f"--metrics-port needs the metrics extra ({exc.name} is missing): "
            "pip install 'turnfsm[metrics]'"
        ) from None
    metrics = EngineMetrics()
    metrics.attach(engine)
    try:
        return metrics.serve(args.metrics_port, args.metrics_host)
    except OSError as exc:
        raise CLIError(
            f"--metrics-port {args.metrics_port}: cannot listen on "
            f"{args.metrics_host}:{args.metrics_port} ({exc.strerror or exc})"
        ) from None
