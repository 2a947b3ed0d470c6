"""Every HTTP request's way in: the ``Host`` check, the body limit, the
headers every answer carries, the request log and the caller's trace context."""

import functools
import ipaddress
import time

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._numbers import whole_number
from ..errors import InvalidInput
from ..observability._asgi import TraceContextMiddleware
from ._errors import error_response

__all__ = ["HEADERS", "NOT_HTML_CSP", "Gate", "addressed_directly"]

log = structlog.get_logger("turnfsm.server")

NOT_HTML_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
"""The Content-Security-Policy of every answer that is not a page: nothing it
holds may run or load anything (an SVG diagram opened on its own, say). The
pages set their own (``_web/_access.py``), as do ``/docs`` and ``/redoc``
(``_docs.py``: this server's scripts only)."""
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)
"""Headers every answer gets unless it has them already (the pages' own)."""
_CSP = (b"content-security-policy", NOT_HTML_CSP.encode())
_NAMES = frozenset(name for name, _ in HEADERS) | {_CSP[0], b"content-type"}


class Gate:
    """Every HTTP request's way in, one middleware for all (each layer wraps
    every message of every request):

    - with no tokens (``open_host_check``), a request whose ``Host`` is not an
      IP address or ``localhost`` is refused, ``403 host_not_allowed``: a page
      of another site whose name was made to resolve to this machine (DNS
      rebinding) comes with its own name, and must reach no route at all;
    - ``413`` for a body over ``limit`` bytes, declared or streamed (a
      chunked body is counted as it is read, and whatever the route would
      have answered on the cut body is replaced);
    - the headers of :data:`HEADERS` (and :data:`NOT_HTML_CSP` on what is not
      HTML) on every answer that does not set them;
    - one structlog line per request (method, path, status, milliseconds);
    - a request with a ``traceparent`` is served under the trace context it
      names (:class:`~turnfsm.observability.TraceContextMiddleware`, taken
      here only for such a request: every other one goes through one layer
      less, its headers read once for all of these).
    """

    def __init__(self, app: ASGIApp, limit: int, open_host_check: bool = False) -> None:
        self.app = app
        self.traced: ASGIApp = TraceContextMiddleware(app)
        """``app`` under the request's trace context."""
        self.limit = limit
        self.open_host_check = open_host_check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        host, declared, app = self._read_headers(scope)
        status = 0
        seen = 0
        over = False
        replaced = False

        async def counted() -> Message:
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    over = True
                    raise _TooBig
            return message

        async def sent(message: Message) -> None:  # the Gate's own answers
            nonlocal status
            if message["type"] == "http.response.start":
                status = _started(message)
            await send(message)

        async def watched(message: Message) -> None:  # the app's
            nonlocal replaced, status
            if over and not status:
                # the route answered a body cut at the limit (FastAPI's 400
                # "error parsing the body", a 500): 413 instead
                replaced = True
                await self._too_big(scope, receive, sent)
                return
            if replaced:
                return
            if message["type"] == "http.response.start":
                status = _started(message)
            await send(message)

        try:
            if self.open_host_check and not addressed_directly(host):
                answer = error_response(
                    403,
                    "host_not_allowed",
                    "with no tokens, the server answers only to an IP address or localhost "
                    "in Host (see docs/server.md)",
                )
                await answer(scope, receive, sent)
                return
            if declared > self.limit:
                await self._too_big(scope, receive, sent)
                return
            try:
                await app(scope, counted, watched)
            except _TooBig:  # raised through the route: nothing was answered
                over = True
            if over and not status:
                await self._too_big(scope, receive, sent)
        finally:
            log.info(
                "request",
                method=scope.get("method"),
                path=scope.get("path"),
                status=status,
                ms=round((time.perf_counter() - start) * 1000, 1),
            )

    def _read_headers(self, scope: Scope) -> tuple[str, int, ASGIApp]:
        """In one pass over the request's headers: its ``Host``, its declared
        length, and the app to call (:attr:`traced` when it has a
        ``traceparent``)."""
        host: str | None = None
        declared: int | None = None
        app = self.app
        for name, value in scope.get("headers", ()):
            if name == b"host":
                if host is None:
                    host = value.decode("latin-1")
            elif name == b"content-length":
                if declared is None:
                    try:
                        declared = whole_number(value, "header.content-length", 0, 10**18)
                    except InvalidInput:
                        declared = 0  # the HTTP parser refused it already; the count still holds
            elif name == b"traceparent":
                app = self.traced
        return host or "", declared or 0, app

    async def _too_big(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = error_response(
            413, "body_too_large", f"the request body is over {self.limit} bytes"
        )
        await answer(scope, receive, send)


@functools.lru_cache(maxsize=256)
def addressed_directly(host: str) -> bool:
    """Whether ``host`` (a ``Host`` header) is an IP address or ``localhost``.

    A server with no tokens answers only then: a page of another site
    whose name was made to resolve to this machine (DNS rebinding) comes with
    its own name in ``Host`` and is refused, on every route (:class:`Gate`).
    Kept per host, a bounded few: a client sends the same ``Host`` on every
    request, and parsing it as an address is most of a request's check."""
    name = host
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else ""
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    if name.lower() == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _started(message: Message) -> int:
    """A response's start, given the headers it lacks: its status."""
    message["headers"] = _with_headers(message.get("headers") or [])
    return int(message["status"])


def _with_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` and those of :data:`HEADERS` it lacks (CSP too, unless HTML)."""
    have: set[bytes] = set()
    html = False
    for name, value in headers:
        low = name.lower()
        if low in _NAMES:
            have.add(low)
            if low == b"content-type" and value.startswith(b"text/html"):
                html = True
    out = list(headers)
    out += _lacking(frozenset(have), html)
    return out


@functools.lru_cache(maxsize=64)
def _lacking(have: frozenset[bytes], html: bool) -> tuple[tuple[bytes, bytes], ...]:
    """The headers an answer with the headers ``have`` (of those the Gate
    adds) lacks: a few dozen sets at most, each worked out once."""
    out = tuple(pair for pair in HEADERS if pair[0] not in have)
    if not html and _CSP[0] not in have:
        out += (_CSP,)
    return out


class _TooBig(Exception):
    pass
