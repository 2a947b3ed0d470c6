"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc``
(ReDoc), with every asset served by this server (``docs/server.md``).

Swagger UI's and ReDoc's scripts and style sheet come from the installed
``fastapi-offline`` package (a dependency of the ``server`` extra), the
script that starts Swagger UI from ``web/api-docs.js``: no page loads
anything from another site, so the docs read offline, and both pages carry a
Content-Security-Policy that allows this server only (:data:`DOCS_CSP`).
"""

from __future__ import annotations

import html
from functools import cache
from importlib import resources
from pathlib import Path

import anyio.to_thread
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import HTMLResponse
from starlette.routing import Route

__all__ = ["DOCS_CSP", "build_openapi_off_the_loop", "router"]

_REDOC_STYLES = (
    "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=' "  # an empty <style>, filled by CSSOM
    "'sha256-QMIg+bpjm3JdElJ388KYke01izlUW0UoNOeKjpMxdgc='"  # ReDoc's one fixed <style>
)
DOCS_CSP = (
    f"default-src 'none'; script-src 'self'; style-src 'self' {_REDOC_STYLES}; "
    "img-src 'self' data:; font-src 'self'; connect-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
"""The docs pages' policy: scripts, styles, images and requests of this server only."""
_WEB = Path(__file__).parent / "web"
_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "api-docs.js": "text/javascript; charset=utf-8",
}
_HEADERS = {
    "Content-Security-Policy": DOCS_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
ASSET_PATH = "/docs/assets"

router = APIRouter(include_in_schema=False)


def build_openapi_off_the_loop(app: FastAPI) -> None:
    """Make ``app``'s OpenAPI document, on its first request, in a worker
    thread. FastAPI builds it in the request's handler, on the event loop, and
    building it walks every route's models: until it is done no other request
    is answered and no event stream moves. The first ``/openapi.json`` (which
    ``/docs`` and ``/redoc`` load) now waits for the thread, the loop runs
    meanwhile, and the document, kept by FastAPI, is served from then on as
    before: the same bytes, the same handling of a root path."""
    at, route = next(
        (
            (at, route)
            for at, route in enumerate(app.router.routes)
            if isinstance(route, Route) and route.path == app.openapi_url
        ),
        (-1, None),
    )
    if route is None:
        raise LookupError(f"no route serves the OpenAPI document at {app.openapi_url!r}")
    served = route.endpoint

    async def openapi(request: Request) -> Response:
        if app.openapi_schema is None:
            await anyio.to_thread.run_sync(app.openapi)
        response: Response = await served(request)
        return response

    app.router.routes[at] = Route(route.path, openapi, include_in_schema=False)


@cache
def _asset(name: str) -> bytes:
    """An asset's bytes: ours from ``web/``, the others from ``fastapi-offline``."""
    if name == "api-docs.js":
        return (_WEB / name).read_bytes()
    return resources.files("fastapi_offline").joinpath("static", name).read_bytes()


def _page(title: str, head: str, body: str) -> HTMLResponse:
    text = (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n{head}</head>\n<body>\n{body}</body>\n</html>\n"
    )
    return HTMLResponse(text, headers=_HEADERS)


def _openapi_url(request: Request) -> str:
    root = str(request.scope.get("root_path", ""))
    return html.escape(root + (request.app.openapi_url or "/openapi.json"))


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = html.escape(str(request.scope.get("root_path", "")) + ASSET_PATH)
    return _page(
        f"{request.app.title} · API (Swagger UI)",
        f'<link rel="stylesheet" href="{root}/swagger-ui.css">\n',
        f'<div id="swagger-ui" data-openapi="{_openapi_url(request)}"></div>\n'
        f'<script src="{root}/swagger-ui-bundle.js"></script>\n'
        f'<script src="{root}/api-docs.js"></script>\n',
    )


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = html.escape(str(request.scope.get("root_path", "")) + ASSET_PATH)
    return _page(
        f"{request.app.title} · API (ReDoc)",
        "",
        f'<redoc spec-url="{_openapi_url(request)}"></redoc>\n'
        f'<script src="{root}/redoc.standalone.js"></script>\n',
    )


@router.get(ASSET_PATH + "/{name}")
async def asset(name: str) -> Response:
    if name not in _ASSETS:
        return Response("not found", status_code=404, media_type="text/plain")
    return Response(
        _asset(name),
        media_type=_ASSETS[name],
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )
