"""The router's order (``turnfsm.server._app``): the routes of every turn are
matched first, the OpenAPI document lists paths as declared."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from turnfsm import Engine

if TYPE_CHECKING:
    from starlette.routing import BaseRoute


def _first_full(routes: Sequence[BaseRoute], scope: dict[str, Any]) -> Any:
    """The route that takes a request (inside an included router: the router's own)."""
    from starlette.routing import Match

    for route in routes:
        if route.matches(scope)[0] is Match.FULL:
            inner = getattr(route, "original_router", None)  # FastAPI's included router
            return _first_full(inner.routes, scope) if inner is not None else route
    return None


def test_the_routes_of_every_turn_are_matched_first_and_take_nothing_else() -> None:
    from turnfsm.server import ServerConfig, create_app
    from turnfsm.server._app import HOT_ROUTES

    app = create_app(lambda: Engine(), ServerConfig())
    hot = app.routes[: len(HOT_ROUTES)]
    first = [(m, r.path) for r in hot for m in r.methods]  # type: ignore[attr-defined]
    assert sorted(first) == sorted(HOT_ROUTES)
    for method, path in [
        ("POST", "/api/contexts/c1/messages"),
        ("GET", "/api/contexts/c1/events"),
    ]:
        scope = {"type": "http", "method": method, "path": path, "root_path": ""}
        assert _first_full(app.routes, scope) in hot
    # a request for another route on the same path goes where it went before
    for method, path in [
        ("GET", "/api/contexts/c1/messages"),
        ("GET", "/api/contexts/c1/messages/m1"),
        ("POST", "/api/contexts/c1/tools/approve"),
        ("GET", "/api/events"),
    ]:
        scope = {"type": "http", "method": method, "path": path, "root_path": ""}
        taken = _first_full(app.routes, scope)
        assert taken is not None, (method, path)
        assert (method, taken.path) not in HOT_ROUTES


def test_the_openapi_document_lists_paths_as_declared() -> None:
    from turnfsm.server import ServerConfig, create_app

    app = create_app(lambda: Engine(), ServerConfig())
    paths = list(app.openapi()["paths"])
    assert paths[:3] == ["/healthz", "/readyz", "/api/contexts"]
    messages = "/api/contexts/{context_id}/messages"
    assert paths.index(messages) < paths.index("/api/contexts/{context_id}/events")
    assert set(app.openapi()["paths"][messages]) == {"get", "post"}
    assert app.openapi() is app.openapi()  # made once
