"""The web view: server-rendered pages for operators and auditors (``docs/web.md``).

Pages read the engine and the store directly (as the API does) and are plain
HTML: lists, messages, diagrams and the audit log read without JavaScript.
One small script (``web/web.js``) adds the live parts: streamed text, the
running-turn count, form posts without a page load. Everything is served
from ``turnfsm/server/web/``; a page makes no request to any other host
(its ``Content-Security-Policy`` says so to the browser too).

Access: the API's bearer tokens. ``/login`` stores a token in an HttpOnly,
SameSite=Strict cookie; pages take that cookie or an ``Authorization``
header. Every form POST must come from a page of this server: its
``Origin`` (else ``Referer``) must be this server's own origin (``403``
otherwise), also with no tokens configured. Another tenant's context is
the same ``404`` page as one that does not exist.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlsplit

import anyio
import jinja2
from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.types import Message, Receive, Scope, Send

from ..audit import AuditRecord, audit_jsonl, audit_records, verify_audit_log
from ..errors import ContextNotFound, InvalidInput, RenderError, TurnFSMError
from ..model import ApprovalStatus, ChatContext, MessageNode, ToolCallRequest
from ..model._message import FilePart, ImagePart
from ..render import (
    PathDiff,
    RunPath,
    declared_edges,
    declared_nodes,
    diff_paths,
    dot_source,
    path_from_steps,
    render_svg,
    sequence_diagram,
    turn_starts,
)
from ..states import CHANGES, RESTING
from ..storage import StepLog
from ..tools import QuestionTool
from ._errors import ApiError, status_of
from ._tenants import DEFAULT_TENANT, tenant_of_token

if TYPE_CHECKING:
    from ._app import Hub, ServerConfig

__all__ = [
    "COOKIE",
    "SeqRow",
    "addressed_directly",
    "branch_paths",
    "same_origin",
    "sequence_rows",
    "web_router",
]

WEB_DIR = Path(__file__).parent / "web"
COOKIE = "turnfsm_token"
"""The cookie ``/login`` sets: the bearer token, for the browser session."""
ASSETS = {
    "web.css": "text/css; charset=utf-8",
    "web.js": "text/javascript; charset=utf-8",
}
PAGE_SIZE = 50
MAX_TREE = 200
"""Sub-contexts shown in a context's tree, at most."""
RESTING_NAMES = sorted(str(s) for s in RESTING)
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


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


def addressed_directly(host: str) -> bool:
    """Whether ``host`` (a ``Host`` header) is an IP address or ``localhost``.

    A server with no tokens serves its pages only then: a page of another site
    whose name was made to resolve to this machine (DNS rebinding) comes with
    its own name in ``Host`` and is refused."""
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


@dataclass(frozen=True, slots=True)
class SeqRow:
    """One line of a sequence diagram as a table row.

    ``kind`` is ``arrow`` (``source`` to ``target``; ``style`` is ``call``,
    ``reply`` or ``failed``) or ``note`` (over ``source`` to ``target``)."""

    kind: str
    source: str
    target: str
    text: str
    style: str = ""

    def span(self, participants: Sequence[str]) -> tuple[int, int]:
        """The first column and how many columns the row covers."""
        a, b = participants.index(self.source), participants.index(self.target)
        return min(a, b), abs(a - b) + 1

    def direction(self, participants: Sequence[str]) -> str:
        a, b = participants.index(self.source), participants.index(self.target)
        return "right" if b >= a else "left"


_ARROW = re.compile(r"^(?P<a>[\w]+)\s*(?P<op>-->>|->>|--x|-x)\s*(?P<b>[\w]+)\s*:\s?(?P<text>.*)$")
_NOTE = re.compile(r"^Note over (?P<a>[\w]+)(?:\s*,\s*(?P<b>[\w]+))?\s*:\s?(?P<text>.*)$")
_ENTITY = re.compile(r"#(lt|gt|\d+);")


def _unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        return {"lt": "<", "gt": ">"}.get(code) or chr(int(code))

    return _ENTITY.sub(one, text)


def sequence_rows(mermaid: str) -> tuple[list[str], list[SeqRow], str]:
    """The participants, the rows and the heading comment of a ``sequenceDiagram``
    as :func:`turnfsm.render.sequence_diagram` writes it (arrows and notes only).

    Raises :class:`RenderError` for a line it does not know, naming it."""
    participants: list[str] = []
    rows: list[SeqRow] = []
    heading = ""
    for n, raw in enumerate(mermaid.splitlines(), 1):
        line = raw.strip()
        if not line or line == "sequenceDiagram":
            continue
        if line.startswith("%%"):
            heading = heading or line.lstrip("% ").strip()
            continue
        if line.startswith("participant "):
            participants.append(line.split(None, 1)[1].strip())
            continue
        m = _ARROW.match(line)
        if m is not None:
            style = {"->>": "call", "-->>": "reply"}.get(m.group("op"), "failed")
            rows.append(SeqRow("arrow", m["a"], m["b"], _unescape(m["text"]), style))
            continue
        m = _NOTE.match(line)
        if m is not None:
            rows.append(SeqRow("note", m["a"], m["b"] or m["a"], _unescape(m["text"])))
            continue
        raise RenderError(f"sequence diagram line {n} is not an arrow or a note: {line!r}")
    for row in rows:
        for who in (row.source, row.target):
            if who not in participants:
                participants.append(who)
    return participants, rows, heading


def branch_paths(steps: Sequence[StepLog], branches: Sequence[str]) -> dict[str, RunPath]:
    """The path each branch went through: the transitions committed while it was
    the active branch, after those of the branch it was forked from up to the
    fork (a fork makes the new branch active; a switch changes the active one).
    The first branch is ``main`` (or the first of ``branches``)."""
    first = "main" if "main" in branches or not branches else branches[0]
    taken: dict[str, list[StepLog]] = {first: []}
    active = first
    for step in steps:
        if step.trigger in CHANGES:
            detail = step.detail or {}
            name = detail.get("branch")
            if step.trigger == "branch_forked" and isinstance(name, str):
                source = str(detail.get("forked_from") or active)
                taken[name] = list(taken.get(source, []))
                active = name
            elif step.trigger == "branch_switched" and isinstance(name, str):
                taken.setdefault(name, [])
                active = name
            continue
        taken.setdefault(active, []).append(step)
    return {name: path_from_steps(taken.get(name, [])) for name in branches}


def _svg_body(svg: bytes) -> str:
    """The ``<svg>`` element of Graphviz's output, for inlining in a page."""
    text = svg.decode("utf-8", "replace")
    start = text.find("<svg")
    return text[start:] if start >= 0 else ""


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)


# ---------------------------------------------------------------------- views of messages


@dataclass
class CallView:
    id: str
    name: str
    arguments: str
    status: str
    decided_by: str | None
    reason: str | None
    pending: bool
    question: str | None = None
    choices: tuple[str, ...] = ()


@dataclass
class MessageView:
    id: str
    role: str
    kind: str
    text: str
    at: str
    model: str | None
    thinking: str | None = None
    reasoning: list[str] = field(default_factory=list)
    refusal: str | None = None
    marks: list[str] = field(default_factory=list)
    attachments: list[str] = field(default_factory=list)
    calls: list[CallView] = field(default_factory=list)
    result_for: str | None = None
    result: str | None = None
    result_ok: bool = True


_OUTCOME_MARK = {
    "refusal": "refused",
    "length": "truncated: cut at the token limit",
    "content_filter": "truncated: cut or withheld by the provider's content filter",
    "incomplete": "incomplete",
}


def _call_view(call: ToolCallRequest, tools: Any) -> CallView:
    args = call.raw_arguments if call.raw_arguments is not None else _pretty(call.arguments)
    view = CallView(
        id=call.id,
        name=call.tool_name,
        arguments=args,
        status=str(call.approval_status).lower(),
        decided_by=call.decided_by,
        reason=call.reason,
        pending=call.approval_status is ApprovalStatus.PENDING,
    )
    tool = tools.get(call.tool_name)
    if isinstance(tool, QuestionTool):
        asked = tool.ask(call)
        if asked is not None:
            view.question, view.choices = asked.question, asked.choices
    return view


def _message_view(node: MessageNode, tools: Any) -> MessageView:
    msg = node.message
    meta = msg.metadata
    view = MessageView(
        id=node.id,
        role=str(msg.role),
        kind=str(msg.message_type),
        text=msg.text,
        at=meta.created_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
        model=meta.model,
        thinking=msg.thinking or None,
        reasoning=[s for item in msg.reasoning or () for s in item.summary],
        refusal=msg.refusal,
    )
    outcome = msg.outcome
    if outcome is not None and outcome != "refusal":
        mark = _OUTCOME_MARK.get(outcome, outcome)
        if outcome == "incomplete" and meta.incomplete_reason:
            mark += f" ({meta.incomplete_reason})"
        view.marks.append(mark)
    if meta.cancelled:
        view.marks.append("cancelled: the partial text is kept")
    for part in msg.content:
        if isinstance(part, ImagePart):
            view.attachments.append(f"image: {part.url[:200]}")  # named, never loaded
        elif isinstance(part, FilePart):
            view.attachments.append(f"file: {part.name} ({part.mime_type})")
    view.calls = [_call_view(c, tools) for c in msg.tool_calls or ()]
    tr = msg.tool_result
    if tr is not None:
        view.result_for = tr.request_id
        view.result = tr.result if isinstance(tr.result, str) else _pretty(tr.result)
        view.result_ok = tr.success
    return view


# ---------------------------------------------------------------------- responses


def _api_scope(
    scope: Scope, method: str, path: str, token: str | None, headers: list[tuple[bytes, bytes]]
) -> Scope:
    """A request to the API made in-process: ``path`` with ``token`` as its
    bearer token, over the connection of the page's request (``scope``)."""
    path, _, query = path.partition("?")
    kept = [(k, v) for k, v in headers if k not in (b"authorization", b"cookie")]
    if token is not None:
        kept.append((b"authorization", f"Bearer {token}".encode()))
    inner: dict[str, Any] = {
        key: scope[key]
        for key in ("type", "asgi", "http_version", "scheme", "root_path", "client", "server")
        if key in scope
    }
    inner.update(
        method=method,
        path=path,
        raw_path=path.encode(),
        query_string=query.encode(),
        headers=kept,
        state=dict(scope.get("state", {})),
    )
    return inner


class _Redispatch(Response):
    """Hands the request to the app again as the API's ``path``, with ``token``
    as its bearer token: the page's event streams are the API's own streams
    (``Last-Event-ID`` included), which an ``EventSource`` cannot send a header to."""

    def __init__(self, path: str, token: str | None) -> None:
        super().__init__()
        self.path = path
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        inner = _api_scope(scope, "GET", self.path, self.token, list(scope.get("headers", [])))
        await scope["app"](inner, receive, send)


async def _call_api(
    scope: Scope, method: str, path: str, token: str | None, body: Any = None
) -> tuple[int, Any]:
    """The status and JSON answer of the API to one in-process request."""
    payload = b"" if body is None else json.dumps(body).encode()
    host = [(k, v) for k, v in scope.get("headers", []) if k == b"host"]
    headers = [
        *host,
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    inner = _api_scope(scope, method, path, token, headers)
    sent = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await anyio.sleep_forever()  # the caller stays until the answer is complete
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await scope["app"](inner, receive, send)
    raw = b"".join(chunks)
    return status, json.loads(raw) if raw else None


class _PageError(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message


class _Login(Exception):
    """The page needs a token: to the login form."""


_NOT_FOUND = ("Not found", "There is no such page.")


def web_router(hub: Hub, config: ServerConfig) -> APIRouter:
    """The web view's routes (``docs/web.md``), included by ``create_app``."""
    router = APIRouter(include_in_schema=False)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(WEB_DIR),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["quote"] = lambda s: quote(str(s), safe="")
    login_needed = bool(config.tokens)

    def render(request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        body = env.get_template(name).render(
            request_path=request.url.path, login_needed=login_needed, **values
        )
        return HTMLResponse(body, status_code=status, headers=_HEADERS)

    def token_of(request: Request) -> str | None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        return request.cookies.get(COOKIE) or None

    async def api(request: Request, method: str, path: str, body: Any = None) -> Any:
        """The API's answer, asked in-process with the page's token: the view lists
        and creates contexts through the API, so tenancy is the API's own. A list
        is read to its end (every page); an error becomes the page's error."""
        token = token_of(request)
        if method == "GET":
            items: list[Any] = []
            cursor: str | None = ""
            while cursor is not None:
                at = f"{path}?limit=500&cursor={cursor}"
                status, data = await _call_api(request.scope, method, at, token)
                if status != 200:
                    break
                items.extend(data["contexts"])
                cursor = data.get("next_cursor")
            else:
                return items
        else:
            status, data = await _call_api(request.scope, method, path, token, body)
            if status < 400:
                return data
        error = (data or {}).get("error", {}) if isinstance(data, dict) else {}
        if status == 401:
            raise _Login
        raise _PageError(
            status,
            str(error.get("code", "error")).replace("_", " "),
            str(error.get("message", "the request failed")),
        )

    def tenant_of(request: Request) -> str | None:
        if not config.tokens:
            return DEFAULT_TENANT
        token = token_of(request)
        return tenant_of_token(config.tokens, token) if token else None

    def own_host(request: Request) -> str:
        return request.headers.get("host", "")

    def wants_json(request: Request) -> bool:
        return request.headers.get("x-turnfsm-web") == "fetch"

    def pages(
        fn: Callable[..., Awaitable[Response]],
    ) -> Callable[..., Awaitable[Response]]:
        """Errors as pages: the login form, 404 (never a hint), the engine's errors."""

        @functools.wraps(fn)
        async def wrapped(request: Request, *args: Any, **kwargs: Any) -> Response:
            if not config.tokens and not addressed_directly(own_host(request)):
                return error(
                    request,
                    403,
                    "Refused",
                    "with no tokens, the pages answer only to an IP address or localhost",
                )
            try:
                return await fn(request, *args, **kwargs)
            except _Login:
                if request.method != "GET" or wants_json(request):
                    return error(request, 401, "Log in", "a valid token is required")
                query = f"?{request.url.query}" if request.url.query else ""
                nxt = quote(request.url.path + query)
                return RedirectResponse(f"/login?next={nxt}", status_code=303)
            except _PageError as exc:
                return error(request, exc.status, exc.title, exc.message)
            except ContextNotFound:
                return error(request, 404, *_NOT_FOUND)
            except ApiError as exc:
                return error(request, exc.status, exc.code.replace("_", " "), exc.message)
            except TurnFSMError as exc:
                status, code = status_of(exc)
                return error(request, status, code.replace("_", " "), str(exc))

        return wrapped

    def error(request: Request, status: int, title: str, message: str) -> Response:
        if wants_json(request):
            return Response(
                json.dumps({"error": {"title": title, "message": message}}),
                status_code=status,
                media_type="application/json",
                headers=_HEADERS,
            )
        back = None
        referer = request.headers.get("referer", "")
        if request.method == "POST" and same_origin(own_host(request), {"referer": referer}):
            back = urlsplit(referer).path or "/"
        return render(request, "error.html", status=status, title=title, message=message, back=back)

    def who(request: Request) -> str:
        found = tenant_of(request)
        if found is None:
            raise _Login
        return found

    def check_origin(request: Request) -> None:
        if not same_origin(own_host(request), request.headers):
            raise _PageError(
                403,
                "Refused",
                "this form must be sent from a page of this server (its Origin did not match)",
            )

    async def owned(request: Request, context_id: str) -> tuple[str, ChatContext]:
        tenant = who(request)
        if not _ID.match(context_id):
            raise ContextNotFound(context_id)
        await hub.check(context_id, tenant)
        return tenant, await hub.engine.store.load(context_id)

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
        if wants_json(request):
            return Response('{"ok":true}', media_type="application/json", headers=_HEADERS)
        return RedirectResponse(to, status_code=303)

    # -------------------------------------------------------------- assets and login

    @router.get("/static/{name}")
    async def static(name: str) -> Response:
        if name not in ASSETS:
            return Response("not found", status_code=404, media_type="text/plain")
        body = (WEB_DIR / name).read_bytes()
        return Response(
            body,
            media_type=ASSETS[name],
            headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
        )

    @router.get("/login")
    @pages
    async def login_form(request: Request) -> Response:
        return render(
            request, "login.html", next=_safe_next(request.query_params.get("next")), failed=False
        )

    @router.post("/login")
    @pages
    async def login(request: Request) -> Response:
        check_origin(request)
        data = await form(request)
        token = data.get("token", "").strip()
        nxt = _safe_next(data.get("next"))
        if not config.tokens:
            return RedirectResponse(nxt, status_code=303)
        if not token or tenant_of_token(config.tokens, token) is None:
            return render(request, "login.html", status=401, next=nxt, failed=True)
        resp = RedirectResponse(nxt, status_code=303)
        resp.set_cookie(
            COOKIE,
            token,
            httponly=True,
            samesite="strict",
            path="/",
            secure=request.url.scheme == "https",
        )
        return resp

    @router.post("/logout")
    @pages
    async def logout(request: Request) -> Response:
        check_origin(request)
        resp = RedirectResponse("/login" if config.tokens else "/", status_code=303)
        resp.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return resp

    # -------------------------------------------------------------- the contexts page

    @router.get("/")
    @pages
    async def contexts_page(request: Request) -> Response:
        who(request)
        wanted = request.query_params.get("state") or None
        try:
            offset = max(0, int(request.query_params.get("offset") or 0))
        except ValueError:
            offset = 0
        mine = await api(request, "GET", "/api/contexts")
        running = sorted(s["id"] for s in mine if s["state"] not in RESTING_NAMES)
        shown = sorted(
            (s for s in mine if wanted is None or s["state"] == wanted),
            key=lambda s: str(s["updated_at"]),
            reverse=True,
        )
        rows = [  # the list's summaries: no context is loaded
            {
                "id": s["id"],
                "state": s["state"],
                "title": s["title"] or "",
                "model": s["model"] or "",
                "updated": datetime.fromisoformat(s["updated_at"]).strftime(
                    "%Y-%m-%d %H:%M:%S UTC"
                ),
                "parent": s["parent_id"],
            }
            for s in shown[offset : offset + PAGE_SIZE]
        ]
        states = sorted({*(str(n.state) for n in declared_nodes())})
        return render(
            request,
            "contexts.html",
            rows=rows,
            states=states,
            wanted=wanted,
            running=running,
            total=len(shown),
            offset=offset,
            page_size=PAGE_SIZE,
            resting=RESTING_NAMES,
        )

    @router.post("/contexts")
    @pages
    async def create(request: Request) -> Response:
        check_origin(request)
        who(request)
        data = await form(request)
        body = {
            key: value for key in ("title", "system_prompt") if (value := data.get(key, "").strip())
        }
        made = await api(request, "POST", "/api/contexts", body)
        return RedirectResponse(f"/contexts/{quote(str(made['id']), safe='')}", status_code=303)

    # -------------------------------------------------------------- a context's page

    @router.get("/contexts/{context_id}")
    @pages
    async def context_page(request: Request, context_id: str) -> Response:
        _, ctx = await owned(request, context_id)
        branch = request.query_params.get("branch") or ctx.active_branch_name
        if branch not in ctx.branches:
            raise _PageError(404, "No such branch", f"this context has no branch {branch!r}")
        tools = hub.engine.tools
        messages = [_message_view(n, tools) for n in ctx.history(branch)]
        pending = (
            [_call_view(c, tools) for c in ctx.pending_tool_calls()]
            if ctx.current_state == "AwaitingToolApproval"
            else []
        )
        tree = await _tree(context_id)
        return render(
            request,
            "context.html",
            ctx=ctx,
            branch=branch,
            branches=sorted(ctx.branches),
            messages=messages,
            approvals=[c for c in pending if c.question is None],
            questions=[c for c in pending if c.question is not None],
            tree=tree,
            resting=RESTING_NAMES,
            running=context_id in hub.running,
        )

    async def _tree(context_id: str) -> list[dict[str, Any]]:
        count = 0

        async def level(cid: str, depth: int) -> list[dict[str, Any]]:
            nonlocal count
            out: list[dict[str, Any]] = []
            if depth > 8:
                return out
            for child in await hub.engine.children(cid):
                count += 1
                if count > MAX_TREE:
                    break
                out.append(
                    {
                        "id": child.context_id,
                        "state": child.state,
                        "title": child.title or "",
                        "finished": child.finished,
                        "children": await level(child.context_id, depth + 1),
                    }
                )
            return out

        return await level(context_id, 0)

    @router.post("/contexts/{context_id}/send")
    @pages
    async def send(request: Request, context_id: str) -> Response:
        check_origin(request)
        await owned(request, context_id)
        data = await form(request)
        content = data.get("content", "")
        if not content.strip():
            raise InvalidInput("content", "the message is empty")
        engine = hub.engine
        await hub.launch(context_id, lambda: engine.send(context_id, content), wait=False)
        return done(request, f"/contexts/{quote(context_id, safe='')}")

    @router.post("/contexts/{context_id}/decide")
    @pages
    async def decide(request: Request, context_id: str) -> Response:
        check_origin(request)
        await owned(request, context_id)
        data = await form(request)
        call_id = data.get("call_id", "")
        decision = data.get("decision", "")
        reason = data.get("reason", "").strip() or None
        engine = hub.engine
        if decision == "approve":
            await hub.launch(context_id, lambda: engine.approve(context_id, [call_id]), wait=False)
        elif decision == "deny":
            await hub.launch(
                context_id, lambda: engine.deny(context_id, [call_id], reason), wait=False
            )
        else:
            raise InvalidInput("decision", f"approve or deny, not {decision!r}")
        return done(request, f"/contexts/{quote(context_id, safe='')}")

    @router.post("/contexts/{context_id}/answer")
    @pages
    async def answer(request: Request, context_id: str) -> Response:
        check_origin(request)
        await owned(request, context_id)
        data = await form(request)
        call_id, text = data.get("call_id", ""), data.get("text", "")
        engine = hub.engine
        await hub.launch(context_id, lambda: engine.answer(context_id, call_id, text), wait=False)
        return done(request, f"/contexts/{quote(context_id, safe='')}")

    @router.post("/contexts/{context_id}/branch")
    @pages
    async def make_active(request: Request, context_id: str) -> Response:
        check_origin(request)
        await owned(request, context_id)
        name = (await form(request)).get("name", "")
        await hub.engine.switch_branch(context_id, name)
        return done(request, f"/contexts/{quote(context_id, safe='')}")

    # -------------------------------------------------------------- event streams

    @router.get("/contexts/{context_id}/events")
    @pages
    async def context_events(request: Request, context_id: str) -> Response:
        if tenant_of(request) is None:  # a stream is not sent to the login form
            return error(request, 401, "Log in", "a valid token is required")
        await owned(request, context_id)
        return _Redispatch(f"/api/contexts/{context_id}/events", token_of(request))

    @router.get("/events")
    @pages
    async def tenant_events(request: Request) -> Response:
        if tenant_of(request) is None:
            return error(request, 401, "Log in", "a valid token is required")
        return _Redispatch("/api/events", token_of(request))

    # -------------------------------------------------------------- the audit page

    async def audit_text(ctx: ChatContext) -> tuple[list[AuditRecord], str]:
        steps = await hub.engine.steps(ctx.id)
        records = audit_records(ctx.id, steps, ctx.message_pool.values())
        return records, audit_jsonl(records)

    @router.get("/contexts/{context_id}/audit.jsonl")
    @pages
    async def audit_download(request: Request, context_id: str) -> Response:
        _, ctx = await owned(request, context_id)
        _, text = await audit_text(ctx)
        return Response(
            text,
            media_type="application/jsonl",
            headers={
                "Content-Disposition": f'attachment; filename="audit-{context_id}.jsonl"',
                "Cache-Control": "no-store",
                "X-Content-Type-Options": "nosniff",
            },
        )

    @router.get("/contexts/{context_id}/audit")
    @pages
    async def audit_page(request: Request, context_id: str) -> Response:
        _, ctx = await owned(request, context_id)
        steps = await hub.engine.steps(context_id)
        records = audit_records(ctx.id, steps, ctx.message_pool.values())
        lines = [ln for ln in audit_jsonl(records).split("\n") if ln]
        verdict = verify_audit_log(lines)
        path = path_from_steps(steps, start=ctx.created_at)
        title = f"context {context_id} (now {ctx.current_state}, {len(path.steps)} steps)"
        svg, svg_error = "", None
        try:
            svg = _svg_body(
                await anyio.to_thread.run_sync(
                    render_svg, dot_source(path, times=True, title=title)
                )
            )
        except RenderError as exc:
            svg_error = str(exc)
        visits, spent = path.visits(), path.time_in_states()
        state_rows = [
            {
                "name": str(n.state),
                "visits": visits[str(n.state)],
                "time": _seconds(spent.get(str(n.state))),
                "current": str(n.state) == path.current,
            }
            for n in declared_nodes()
        ]
        counts = path.edge_counts()
        edge_rows = [
            {
                "source": str(e.source),
                "trigger": str(e.trigger),
                "dest": str(e.dest),
                "count": counts[e.key],
                "meaning": e.meaning,
            }
            for e in declared_edges()
            if counts[e.key]
        ]
        # the sequence diagram of one turn (the last by default)
        starts = turn_starts(records)
        turn = _int(request.query_params.get("turn"), len(starts))
        seq: dict[str, Any] | None = None
        if starts:
            turn = min(max(turn, 1), len(starts))
            mermaid = sequence_diagram(records, ctx.message_pool, turn=turn)
            try:
                participants, rows, heading = sequence_rows(mermaid)
            except RenderError:  # a line the table does not draw: the text alone
                participants, rows, heading = [], [], ""
            seq = {
                "participants": participants,
                "rows": rows,
                "heading": heading,
                "mermaid": mermaid,
            }
        # two branches' paths
        names = sorted(ctx.branches)
        a = request.query_params.get("a") or ctx.active_branch_name
        others = [n for n in names if n != a]
        b = request.query_params.get("b") or (others[0] if others else a)
        diff: dict[str, Any] | None = None
        if a in ctx.branches and b in ctx.branches:
            paths = branch_paths(steps, names)
            result: PathDiff = diff_paths(paths[a], paths[b])
            diff = {
                "a": a,
                "b": b,
                "report": result.report(a, b),
                "rows": _diff_rows(paths[a], paths[b], result),
            }
        return render(
            request,
            "audit.html",
            ctx=ctx,
            svg=svg,
            svg_error=svg_error,
            state_rows=state_rows,
            edge_rows=edge_rows,
            verdict=verdict,
            verdict_text=_verdict_text(verdict),
            records=records,
            turns=list(range(1, len(starts) + 1)),
            turn=turn,
            seq=seq,
            branches=names,
            diff=diff,
            undeclared=path.undeclared(),
        )

    return router


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _safe_next(value: str | None) -> str:
    """Where to go after logging in: a path of this server only."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


def _verdict_text(result: Any) -> str:
    """What ``turnfsm audit verify`` prints for the log (docs/cli.md)."""
    if not result.ok:
        return f"line {result.line}: {result.reason}"
    calls = f"{result.tool_calls} tool calls, all resolved"
    if result.open_calls:
        calls = (
            f"{result.tool_calls} tool calls, {len(result.open_calls)} still waiting in "
            f"{result.final_state}"
        )
    return f"ok: {result.steps} steps, declared edges only, ending in {result.final_state}; {calls}"


def _diff_rows(a: RunPath, b: RunPath, result: PathDiff) -> list[dict[str, Any]]:
    ea = [(a.states[0], ""), *((s.to_state, s.trigger) for s in a.steps)]
    eb = [(b.states[0], ""), *((s.to_state, s.trigger) for s in b.steps)]
    rows = []
    for i in range(max(len(ea), len(eb))):
        rows.append(
            {
                "index": i,
                "a": f"{ea[i][0]}" + (f" (via {ea[i][1]})" if i < len(ea) and ea[i][1] else "")
                if i < len(ea)
                else "(ended)",
                "b": f"{eb[i][0]}" + (f" (via {eb[i][1]})" if i < len(eb) and eb[i][1] else "")
                if i < len(eb)
                else "(ended)",
                "differs": result.index is not None and i >= result.index,
            }
        )
    return rows
