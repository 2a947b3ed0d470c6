"""Who may see a page of the web view, and how a page answers (``docs/web.md``).

Access: the API's bearer tokens. ``/login`` stores a token in an HttpOnly,
SameSite=Strict cookie (:data:`COOKIE`); pages take that cookie or an
``Authorization`` header. Every form POST must come from a page of this
server: its ``Origin`` (else ``Referer``) must be this server's own origin
(``403`` otherwise), also with no tokens configured. Another tenant's context
is the same ``404`` page as one that does not exist. :func:`pages` turns the
errors of a page into pages (or the login form). With no tokens, a request
whose ``Host`` is a name (DNS rebinding) is refused before any route, the
pages' as every other (``_gate.py``, :func:`addressed_directly`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlsplit

from fastapi import Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from ...errors import ContextNotFound, InvalidInput, TurnFSMError
from ...model import ChatContext
from .._deps import hub_of
from .._errors import ApiError, status_of
from .._gate import addressed_directly
from .._tenants import DEFAULT_TENANT, tenant_of_token

if TYPE_CHECKING:
    import jinja2

__all__ = [
    "COOKIE",
    "HEADERS",
    "WEB_DIR",
    "Login",
    "PageError",
    "addressed_directly",
    "check_origin",
    "context_form",
    "done",
    "error",
    "form",
    "mine",
    "owned",
    "pages",
    "render",
    "safe_next",
    "same_origin",
    "tenant_of",
    "token_of",
    "who",
]

WEB_DIR = Path(__file__).parent.parent / "web"
"""The templates, the style sheet and the script."""
COOKIE = "turnfsm_token"
"""The cookie ``/login`` sets: the bearer token, for the browser session."""
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
_NOT_FOUND = ("Not found", "There is no such page.")


@functools.cache
def _templates() -> jinja2.Environment:
    """The pages' templates, made (and ``jinja2`` imported) for the first page
    served, not when the server starts."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(WEB_DIR),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["quote"] = lambda s: quote(str(s), safe="")
    return env


# ---------------------------------------------------------------------- pure helpers


def same_origin(host: str, headers: Mapping[str, str]) -> bool:
    """Whether a form POST comes from a page of this server: its ``Origin``
    header (else its ``Referer``) names ``host``, the ``Host`` (``name[:port]``)
    the request came to. The scheme is not compared, so a proxy that ends TLS in
    front of the server changes nothing. Neither header, or ``Origin: null``:
    refused."""
    given = headers.get("origin")
    if given == "null":
        return False
    source = given if given is not None else headers.get("referer")
    if not source or not host:
        return False
    parts = urlsplit(source)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


def safe_next(value: str | None) -> str:
    """Where to go after logging in: a path of this server only."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


# ---------------------------------------------------------------------- errors as pages


class PageError(Exception):
    """The page answers with an error page: ``status``, ``title``, ``message``."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message


class Login(Exception):
    """The page needs a token: to the login form."""


def render(request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
    """The template ``name`` as the page's answer."""
    body = (
        _templates()
        .get_template(name)
        .render(
            request_path=request.url.path,
            login_needed=bool(hub_of(request).config.tokens),
            **values,
        )
    )
    return HTMLResponse(body, status_code=status, headers=HEADERS)


def _own_host(request: Request) -> str:
    return request.headers.get("host", "")


def _wants_json(request: Request) -> bool:
    return request.headers.get("x-turnfsm-web") == "fetch"


def error(request: Request, status: int, title: str, message: str) -> Response:
    """An error page (JSON for the script's own posts)."""
    if _wants_json(request):
        return Response(
            json.dumps({"error": {"title": title, "message": message}}),
            status_code=status,
            media_type="application/json",
            headers=HEADERS,
        )
    back = None
    referer = request.headers.get("referer", "")
    if request.method == "POST" and same_origin(_own_host(request), {"referer": referer}):
        back = urlsplit(referer).path or "/"
    return render(request, "error.html", status=status, title=title, message=message, back=back)


def pages(
    fn: Callable[..., Awaitable[Response]],
) -> Callable[..., Awaitable[Response]]:
    """Errors as pages: the login form, 404 (never a hint), the engine's errors."""

    @functools.wraps(fn)
    async def wrapped(request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            return await fn(request, *args, **kwargs)
        except Login:
            if request.method != "GET" or _wants_json(request):
                return error(request, 401, "Log in", "a valid token is required")
            query = f"?{request.url.query}" if request.url.query else ""
            nxt = quote(request.url.path + query)
            return RedirectResponse(f"/login?next={nxt}", status_code=303)
        except PageError as exc:
            return error(request, exc.status, exc.title, exc.message)
        except ContextNotFound:
            return error(request, 404, *_NOT_FOUND)
        except ApiError as exc:
            return error(request, exc.status, exc.code.replace("_", " "), exc.message)
        except TurnFSMError as exc:
            status, code = status_of(exc)
            return error(request, status, code.replace("_", " "), str(exc))

    return wrapped


# ---------------------------------------------------------------------- the caller


def token_of(request: Request) -> str | None:
    """The request's bearer token: its ``Authorization`` header, else the cookie."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.cookies.get(COOKIE) or None


def tenant_of(request: Request) -> str | None:
    """The caller's tenant (None: no valid token)."""
    tokens = hub_of(request).config.tokens
    if not tokens:
        return DEFAULT_TENANT
    token = token_of(request)
    return tenant_of_token(tokens, token) if token else None


def who(request: Request) -> str:
    """The caller's tenant, else to the login form."""
    found = tenant_of(request)
    if found is None:
        raise Login
    return found


def check_origin(request: Request) -> None:
    """A form post from a page of this server, else ``403``."""
    if not same_origin(_own_host(request), request.headers):
        raise PageError(
            403,
            "Refused",
            "this form must be sent from a page of this server (its Origin did not match)",
        )


async def mine(request: Request, context_id: str) -> str:
    """The context, when the caller's tenant owns it (else the ``404`` page)."""
    tenant = who(request)
    if not _ID.match(context_id):
        raise ContextNotFound(context_id)
    await hub_of(request).check(context_id, tenant)
    return context_id


async def context_form(request: Request, context_id: str) -> dict[str, str]:
    """A form posted about one context: from a page of this server, on a
    context the caller's tenant owns, its fields read (a form with no fields
    is read too, so that a body over the limit is refused)."""
    check_origin(request)
    await mine(request, context_id)
    return await form(request)


async def owned(request: Request, context_id: str) -> ChatContext:
    """The context (loaded), when the caller's tenant owns it."""
    await mine(request, context_id)
    return await hub_of(request).engine.store.load(context_id)


async def form(request: Request) -> dict[str, str]:
    """The fields of a form post (``application/x-www-form-urlencoded``, the
    only kind the pages send; the body limit applies as for the API)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise InvalidInput("body", f"a form post, not {kind or 'no content type'!r}")
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("body", "the form is not UTF-8") from None
    return dict(parse_qsl(text, keep_blank_values=True))


def done(request: Request, to: str) -> Response:
    """A form's answer: to ``to`` (or ``{"ok": true}`` for the script's posts)."""
    if _wants_json(request):
        return Response('{"ok":true}', media_type="application/json", headers=HEADERS)
    return RedirectResponse(to, status_code=303)
