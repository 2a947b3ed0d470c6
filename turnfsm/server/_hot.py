"""The message post of every turn, taken without FastAPI's request machinery.

``POST /api/contexts/{context_id}/messages`` is the one request a
conversation makes per turn. FastAPI answers it through its general path: a
``Request`` and its dependencies solved one by one (the hub, the tenant, the
context, the body, the query), the body validated through a field made for
it, the endpoint's answer checked for a response model. :class:`MessagePost`
takes the common case directly: a JSON body (``Content-Type:
application/json``) that :class:`~turnfsm.server._models.MessageIn`
validates, no query string. It does what the declared route does, in its
order (the tenant and the context first, then the message), with the same
calls (:func:`~turnfsm.server._deps.owned`,
:func:`~turnfsm.server._calls.post_message`,
:func:`~turnfsm.server._api.answered`), and raises what they raise to the
app's error handlers, as the declared route does. Anything else (another
content type, a body that is not JSON or does not validate, ``?wait=``,
FastAPI's own telemetry on the request) goes to the declared route with the
body as it was read, so that its answers, errors included, are FastAPI's.
"""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.requests import Request
from starlette.routing import BaseRoute, Match
from starlette.types import Message, Receive, Scope, Send

from ..model._json import MAX_DOCUMENT_DEPTH, loads_json
from ._api import answered
from ._calls import post_message
from ._deps import hub_of, owned
from ._models import MessageIn

__all__ = ["MessagePost"]

_PREFIX = "/api/contexts/"
_SUFFIX = "/messages"
_JSON = b"application/json"


class MessagePost(BaseRoute):
    """``POST /api/contexts/{context_id}/messages``, matched before every
    other route (``_app.py``): the declared route's answers, without its
    general machinery when the request is the common one. Kept out of the
    OpenAPI document (the declared route is in it)."""

    def __init__(self, declared: APIRoute) -> None:
        self.declared = declared
        self.path = declared.path
        self.path_format = declared.path_format  # what FastAPI's telemetry names
        self.name = declared.name
        self.methods = {"POST"}
        self.endpoint = declared.endpoint
        self.include_in_schema = False

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or scope["method"] != "POST":
            return Match.NONE, {}
        path = _route_path(scope)
        if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
            return Match.NONE, {}
        context_id = path[len(_PREFIX) : -len(_SUFFIX)]
        if not context_id or "/" in context_id:
            return Match.NONE, {}
        params = dict(scope.get("path_params") or {})
        params["context_id"] = context_id
        return Match.FULL, {"endpoint": self.endpoint, "path_params": params, "route": self}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope.get("query_string")
            or scope.get("fastapi.telemetry") is not None
            or not _json_typed(scope)
        ):
            scope["route"] = self.declared
            await self.declared.handle(scope, receive, send)
            return
        body = await _body(receive)
        message = _message(body)
        if message is None:  # FastAPI says what is wrong with it, as it would
            scope["route"] = self.declared
            await self.declared.handle(scope, _replay(body, receive), send)
            return
        request = Request(scope, receive)
        context_id = await owned(scope["path_params"]["context_id"], request)
        answer = answered(
            await post_message(
                hub_of(request),
                context_id,
                message.content,
                message.role,
                output_schema=message.output_schema,
                output_retries=message.output_retries,
            )
        )
        await answer(scope, receive, send)


def _route_path(scope: Scope) -> str:
    """The path the app's routes match: ``path`` without the ``root_path``
    (the prefix the app is mounted or proxied under) when it starts with it
    as whole segments, as Starlette's router computes it for every other
    route, so that this one matches where the declared route would."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if not root or not path.startswith(root):
        return path
    rest = path[len(root) :]
    if not rest:
        return ""
    return rest if rest[0] == "/" else path


def _json_typed(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return bool(value.lower() == _JSON)
    return False


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away: the route's to say
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _message(body: bytes) -> MessageIn | None:
    """The body as FastAPI reads it (``json.loads``, then the model in Python
    mode), or None when it would not pass or is nested deeper than a document
    may be (FastAPI then answers it, as it answers any body this leaves)."""
    try:
        if body[:2] == b'{"':  # json.loads would decode it as UTF-8: done here, unsniffed
            data: Any = loads_json(body.decode("utf-8", "surrogatepass"), MAX_DOCUMENT_DEPTH)
        else:
            data = loads_json(body, MAX_DOCUMENT_DEPTH)
        return MessageIn.model_validate(data)
    except (ValueError, ValidationError):  # decode errors, too deep included, are ValueErrors
        return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body already read given again first."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
