"""A route whose JSON body is read as every document from outside is read.

FastAPI reads a route's JSON body with :func:`json.loads`, which stops at the
process's recursion limit: under the default one a body nested a thousand
levels deep cannot be read (``422``, "cannot be read"), under a raised one it
is read and answered by whatever check comes next, or taken. A route of
:class:`DocumentRoute` reads it with :func:`~turnfsm.model._json.loads_json`
at :data:`~turnfsm.model._json.MAX_DOCUMENT_DEPTH`, as the message post
(``_hot.py``) and every file do, so that a body nested too deeply cannot be
read whatever the limit. Every router whose routes take a JSON body is made
with it (``APIRouter(route_class=DocumentRoute)``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from ..model._json import MAX_DOCUMENT_DEPTH, loads_json

__all__ = ["DocumentRequest", "DocumentRoute"]


class DocumentRequest(Request):
    """A request whose JSON body is decoded by ``loads_json`` (a body nested
    too deeply raises ``JSONTooDeep``, a ``ValueError``, which FastAPI
    answers as a body it cannot read)."""

    async def json(self) -> Any:
        return loads_json(await self.body(), MAX_DOCUMENT_DEPTH)


class DocumentRoute(APIRoute):
    """An ``APIRoute`` whose body, when it has one, is read through
    :class:`DocumentRequest`; a route with no body is left as it is."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def read_as_document(request: Request) -> Response:
            return await handler(DocumentRequest(request.scope, request.receive))

        return read_as_document
