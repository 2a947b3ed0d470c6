"""The server's traces and metrics (docs/observability.md): an HTTP
request's ``traceparent`` parents the spans of the calls it makes, and
``GET /metrics`` answers the Prometheus metrics of the app's engine, behind
the same bearer tokens as the API."""

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request, Response

from ..engine import Engine
from ._deps import Tenant
from ._errors import ApiError
from ._hub import Hub

__all__ = ["make_metrics", "observed", "router", "stream_count"]

router = APIRouter()


def make_metrics() -> Any:
    """An :class:`~turnfsm.observability.EngineMetrics` for the app, or None
    when ``prometheus-client`` (the ``metrics`` extra) is not installed."""
    try:
        from ..observability import EngineMetrics
    except ImportError:
        return None
    return EngineMetrics()


def observed(factory: Callable[[], Engine], metrics: Any) -> Callable[[], Engine]:
    """``factory``, with its engine's calls counted by ``metrics`` (if any)."""
    if metrics is None:
        return factory

    def make() -> Engine:
        return metrics.attach(factory())  # type: ignore[no-any-return]

    return make


def stream_count(hub: Hub) -> int:
    """The event streams open on the app: per context, and tenant-wide."""
    return sum(len(ch.listeners) for ch in hub.channels.values()) + sum(
        len(streams) for streams in hub.listeners.values()
    )


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, _: Tenant) -> Response:
    """The Prometheus metrics of this server's engine (any tenant's token)."""
    found = getattr(request.app.state, "metrics", None)
    if found is None:
        raise ApiError(
            404,
            "metrics_unavailable",
            "metrics need the metrics extra: pip install 'turnfsm[metrics]'",
        )
    from ..observability._metrics import CONTENT_TYPE

    return Response(found.render(), media_type=CONTENT_TYPE)
