"""L4: traces and metrics for operators (docs/observability.md).

:func:`tracing_from_env` sets up the OpenTelemetry SDK as the standard
environment variables ask (extra ``otel``); :class:`EngineMetrics` keeps the
Prometheus metrics of an engine's calls (extra ``metrics``);
:class:`TraceContextMiddleware` lets an HTTP request's ``traceparent``
parent the spans of the engine calls it makes. Each name imports its module
(and the third-party package behind it) when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ._asgi import TraceContextMiddleware
    from ._export import TelemetrySetupError, tracing_from_env
    from ._metrics import EngineMetrics

__all__ = ["EngineMetrics", "TelemetrySetupError", "TraceContextMiddleware", "tracing_from_env"]

_HOMES = {
    "EngineMetrics": "._metrics",
    "TelemetrySetupError": "._export",
    "TraceContextMiddleware": "._asgi",
    "tracing_from_env": "._export",
}


__getattr__ = lazy_names(__name__, _HOMES)
