"""Traces and metrics of ``turnfsm serve``, ``worker`` and ``chat``
(docs/observability.md): the OTLP export the environment asks for, and the
worker's metrics port."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from ..engine import Engine
from ._errors import CLIError, count

__all__ = ["add_metrics_options", "serve_metrics", "start_tracing"]


_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""The variables an OTLP endpoint is read from, the first given winning."""
_REACH_TIMEOUT = 1.0
"""Seconds the start waits to connect to the OTLP endpoint (a warning past it)."""


def check_otlp_endpoint(env: Mapping[str, str], prog: str) -> None:
    """When traces go to an OTLP endpoint: a malformed one is a usage error
    (exit 2) naming its variable; one that cannot be reached now is a
    warning line on stderr (it may come up later: spans wait in batches)."""
    from ..observability._export import _exporters_asked

    if "otlp" not in _exporters_asked(env):
        return
    name = next((n for n in _ENDPOINTS if env.get(n, "").strip()), None)
    if name is None:
        return  # the SDK's default, http://localhost:4318
    value = env[name].strip()
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise CLIError(f"{name}={value!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CLIError(
            f"{name}={value!r}: not an http:// or https:// URL with a host "
            "(e.g. http://localhost:4318)"
        )
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=_REACH_TIMEOUT):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        print(
            f"{prog}: warning: the OTLP endpoint {value} cannot be reached now ({reason}); "
            "spans are dropped while it cannot",
            file=sys.stderr,
            flush=True,
        )


def start_tracing(service_name: str) -> Callable[[], None]:
    """Export traces as the ``OTEL_*`` environment variables ask (nothing
    when they ask for nothing), the endpoint checked first
    (:func:`check_otlp_endpoint`); returns the function that flushes and
    stops the export, to call on the way out."""
    from ..observability._export import TelemetrySetupError, tracing_from_env

    check_otlp_endpoint(os.environ, service_name.replace("-", " ", 1))
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
        type=count(0, 65535),
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (off unless given; "
        "needs the metrics extra; 0 takes a free port, named on standard error: "
        "'turnfsm worker: metrics listening on URL')",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address of --metrics-port (127.0.0.1; it asks for no token)",
    )


def serve_metrics(args: argparse.Namespace, engine: Engine) -> Callable[[], None]:
    """With ``--metrics-port``: count ``engine``'s calls and serve the metrics
    on that port, in a thread; returns the function that stops serving. Says
    where on standard error (``turnfsm worker: metrics listening on URL``):
    the port ``--metrics-port 0`` took is known only there."""
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
        return metrics.serve(
            args.metrics_port,
            args.metrics_host,
            on_listening=lambda url: print(
                f"turnfsm worker: metrics listening on {url}", file=sys.stderr, flush=True
            ),
        )
    except OSError as exc:
        raise CLIError(
            f"--metrics-port {args.metrics_port}: cannot listen on "
            f"{args.metrics_host}:{args.metrics_port} ({exc.strerror or exc})"
        ) from None
