"""An HTTP request's W3C trace context, current while the request is served
(``turnfsm serve``): the engine calls it makes, and the turns it starts in
tasks of their own, are children of the caller's span, or of the request's
own HTTP span when something in front made one (FastAPI's telemetry, an ASGI
instrumentation)."""

from __future__ import annotations

from typing import Any

__all__ = ["TraceContextMiddleware"]

_HEADERS = (b"traceparent", b"tracestate", b"baggage")


class TraceContextMiddleware:
    """ASGI middleware: when a request has a ``traceparent`` header, the
    context the process's propagators (``OTEL_PROPAGATORS``; W3C trace
    context and baggage by default) extract from its headers is attached for
    the request. A request without one passes through untouched, and so does
    one whose span is already current: whatever made that span (FastAPI's own
    telemetry, which runs before the app's middleware, or an ASGI
    instrumentation in front) read the header for it, and its span, not the
    caller's, is the parent of the engine's."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier: dict[str, str] | None = None
        for name, value in scope.get("headers", ()):
            if name in _HEADERS:
                if carrier is None:
                    carrier = {}
                carrier[name.decode("latin-1")] = value.decode("latin-1")
        if carrier is None or "traceparent" not in carrier:
            await self.app(scope, receive, send)
            return
        try:
            from opentelemetry import context, propagate, trace
        except ImportError:  # no opentelemetry-api: nothing to parent
            await self.app(scope, receive, send)
            return
        if trace.get_current_span().get_span_context().is_valid:  # the HTTP span
            await self.app(scope, receive, send)
            return
        token = context.attach(propagate.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)
