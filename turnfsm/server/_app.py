"""The FastAPI application: the engine's calls under ``/api`` (see ``docs/server.md``).

:func:`create_app` puts the app together: the hub (``_hub.py``) in
``app.state``, the routers (``_api.py``, ``_events.py``, ``_openai_compat.py``,
``_ag_ui.py``, ``_request_compat.py``, ``_sessions.py``, the web view ``_web``, the API's
docs ``_docs.py``), the error
handlers and the middleware (``_gate.py``).
"""

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute

from ..engine import Engine
from . import _telemetry
from ._ag_ui import router as ag_ui_router
from ._api import router as api_router
from ._config import ServerConfig
from ._docs import build_openapi_off_the_loop
from ._docs import router as docs_router
from ._errors import install_handlers
from ._events import router as events_router
from ._gate import Gate
from ._hot import MessagePost
from ._hub import Hub
from ._manage_api import router as manage_router
from ._models import ErrorOut
from ._openai_compat import router as openai_router
from ._request_compat import router as request_router
from ._sessions import router as sessions_router
from ._ui_stream import router as ui_router
from ._web._routes import router as web_router

__all__ = ["FAVICON", "HOT_ROUTES", "create_app"]

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorOut} for s in (401, 404, 409, 413, 422)
}


def create_app(
    factory: Callable[[], Engine],
    config: ServerConfig | None = None,
    *,
    on_close: Callable[[], Awaitable[None]] | None = None,
) -> FastAPI:
    """The app over the engine ``factory()`` makes (in the app's event loop, on start).

    ``on_close`` is awaited in the app's event loop once the engine is closed
    (or its start failed): for what the engine uses but does not close, such as
    a model adapter's HTTP client, whose connections belong to that loop."""
    config = config or ServerConfig()
    metrics = _telemetry.make_metrics()
    hub = Hub(_telemetry.observed(factory, metrics), config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        started = False
        try:
            async with hub.lifespan():
                started = True
                yield
        except Exception as exc:
            if not started:  # what stopped the start, for run_server's one line
                app.state.startup_error = exc
            raise
        finally:
            if on_close is not None:
                await on_close()

    app = FastAPI(
        title="turnfsm",
        summary="LLM conversations driven by a declared finite-state machine, over HTTP",
        lifespan=lifespan,
        responses=_ERRORS,
        docs_url=None,  # /docs and /redoc are _docs.py's: their assets served here
        redoc_url=None,
    )
    build_openapi_off_the_loop(app)
    app.state.hub = hub
    app.state.metrics = metrics
    if metrics is not None:
        metrics.count_streams(lambda: _telemetry.stream_count(hub))
    install_handlers(app)
    app.include_router(api_router)
    app.include_router(manage_router)  # after it: /branches/active is the API's
    app.include_router(events_router)
    app.include_router(openai_router)
    app.include_router(ag_ui_router)  # POST /ag-ui (docs/ag-ui.md)
    app.include_router(request_router)
    app.include_router(sessions_router)
    app.include_router(ui_router)  # the AI SDK's useChat (docs/server.md)
    app.include_router(web_router)  # the web view at / (docs/web.md)
    app.include_router(docs_router)  # /docs and /redoc, offline (docs/server.md)
    app.include_router(_telemetry.router)  # GET /metrics (docs/observability.md)
    app.add_api_route("/favicon.ico", _favicon, include_in_schema=False)

    if config.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=config.cors_origins,
            allow_methods=["*"],
            allow_headers=["*"],
        )
    # the Gate also serves a request with a traceparent under its trace context
    app.add_middleware(Gate, limit=config.max_body, open_host_check=not config.tokens)
    _hot_routes_first(app, (api_router, events_router))
    return app


FAVICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    b'<circle cx="4" cy="8" r="3" fill="#2b6cb0"/><circle cx="12" cy="8" r="3" fill="#2b6cb0"/>'
    b'<path d="M7 8h2" stroke="#2b6cb0" stroke-width="2"/></svg>'
)
"""The icon browsers ask for: two states and an edge (an SVG; no tenant needed)."""


async def _favicon() -> Response:
    return Response(
        FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"}
    )


HOT_ROUTES = (
    ("POST", "/api/contexts/{context_id}/messages"),
    ("GET", "/api/contexts/{context_id}/events"),
)
"""The routes a conversation uses on every turn."""


def _hot_routes_first(app: FastAPI, routers: Sequence[APIRouter]) -> None:
    """Match :data:`HOT_ROUTES` first. The router tries routes in order, and
    these come after a dozen others (each a regular expression and a scope
    made). Each is added once more, at the front of the app's routes, out of
    the OpenAPI document (which keeps the declared order, from the routers);
    the message post as :class:`~turnfsm.server._hot.MessagePost`, which
    answers it without FastAPI's general machinery. No other route's path has
    their shapes, so no request goes elsewhere than it would in the declared
    order."""
    hot = [
        route
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute)
        and any((m, route.path) in HOT_ROUTES for m in route.methods or ())
    ]
    assert len(hot) == len(HOT_ROUTES), "a hot route is not among the routers given"
    for route in hot:
        if "POST" in (route.methods or ()):
            app.router.routes.append(MessagePost(route))
            continue
        app.router.add_api_route(
            route.path,
            route.endpoint,
            methods=sorted(route.methods or ()),
            name=route.name,
            status_code=route.status_code,
            response_model=None,
            response_class=route.response_class,
            dependencies=route.dependencies,
            include_in_schema=False,
        )
    first = app.router.routes[-len(hot) :]
    del app.router.routes[-len(hot) :]
    app.router.routes[:0] = first
