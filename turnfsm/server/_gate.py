"""Every HTTP request's way in: the body limit and the request log."""

import time

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._numbers import whole_number
from ..errors import InvalidInput
from ._errors import error_response

__all__ = ["Gate"]

log = structlog.get_logger("turnfsm.server")


class Gate:
    """Every HTTP request's way in: ``413`` for a body over ``limit`` bytes
    (declared or streamed), and one structlog line per request (method, path,
    status, milliseconds). One middleware for both: each layer wraps every
    message of every request."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 0
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooBig
            return message

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            if self._declared(scope) > self.limit:
                await self._too_big(scope, receive, watched)
                return
            try:
                await self.app(scope, counted, watched)
            except _TooBig:
                if not status:
                    await self._too_big(scope, receive, watched)
        finally:
            log.info(
                "request",
                method=scope.get("method"),
                path=scope.get("path"),
                status=status,
                ms=round((time.perf_counter() - start) * 1000, 1),
            )

    @staticmethod
    def _declared(scope: Scope) -> int:
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    return whole_number(value, "header.content-length", 0, 10**18)
                except InvalidInput:
                    return 0  # the HTTP parser refused it already; the count still holds
        return 0

    async def _too_big(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = error_response(
            413, "body_too_large", f"the request body is over {self.limit} bytes"
        )
        await answer(scope, receive, send)


class _TooBig(Exception):
    pass
