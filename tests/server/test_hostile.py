"""Hostile HTTP, at the class: every number a client gives, every route's
headers, every route's ``Host`` check, every body-taking route's limit, the
``Last-Event-ID`` a server has not reached, and every error code the server
sends against the table of ``docs/server.md``."""

from __future__ import annotations

import ast
import functools
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from turnfsm import Engine
from turnfsm._numbers import whole_number
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.cli._demo import get_weather
from turnfsm.errors import InvalidInput

from .conftest import TOKENS, Running, demo_engine, loopback_tls, serve_in_thread
from .test_events import read_events, until
from .test_rest import create

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "turnfsm" / "server"
BAD_NUMBERS = [
    "\u00b2",  # superscript two: str.isdigit() takes it, int() does not
    "\u0665",  # Arabic-Indic five: int() reads it as 5
    "\u0663\u0662",
    "\uff15",  # fullwidth five
    "+5",
    " 5",
    "5_0",
    "5.0",
    "-1",
    "0x5",
    "1e3",
    "5" * 5000,  # over Python's limit on the digits of an int
]


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """No tokens: one tenant, the loopback only."""
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path_factory.mktemp("open") / "server.db"
    app = create_app(lambda: demo_engine(db), ServerConfig(max_body=64_000, heartbeat=0.5))
    for url in serve_in_thread(app):
        yield Running(url, db)


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path_factory.mktemp("slow") / "server.db"

    def factory() -> Engine:
        return Engine(llm=DemoLLM(delay=0.05), tools=[get_weather], store=f"sqlite:///{db}")

    app = create_app(factory, ServerConfig(tokens=dict(TOKENS), max_turns_per_tenant=4))
    for url in serve_in_thread(app):
        yield Running(url, db)


@functools.cache
def openapi_paths() -> dict[str, Any]:
    """The OpenAPI document's paths of an app as created, built once for the
    module: building the document is most of what listing the routes costs,
    and the tests only read it."""
    from turnfsm.server import create_app

    app = create_app(lambda: demo_engine(Path("unused.db")))
    paths: dict[str, Any] = app.openapi()["paths"]
    return paths


def every_route() -> list[tuple[str, str]]:
    """(method, path) of every route the app serves: the OpenAPI document's,
    the web view's, the documentation's."""
    from turnfsm.server._web._routes import router as web_router

    out = [(method.upper(), path) for path, ops in openapi_paths().items() for method in ops]
    out += [(m, r.path) for r in web_router.routes for m in sorted(r.methods)]  # type: ignore[attr-defined]
    out += [("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/redoc"), ("GET", "/nowhere")]
    return sorted(set(out))


def filled(path: str, cid: str) -> str:
    return (
        path.replace("{context_id}", cid)
        .replace("{session_id}", cid)
        .replace("{message_id}", "m-none")
        .replace("{name}", "web.css")
    )


def answer(c: httpx.Client, method: str, url: str, **kw: Any) -> httpx.Response:
    """The response's head (a stream is closed once its head is read)."""
    with c.stream(method, url, **kw) as r:
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            r.read()
        return r


# ---------------------------------------------------------------------- numbers


def test_whole_numbers_are_ascii_digits_in_a_range() -> None:
    assert whole_number("0", "x", 0, 10) == 0
    assert whole_number("0010", "x", 0, 9999) == 10
    assert whole_number(b"65535", "x", 0, 65535) == 65535
    for bad in [*BAD_NUMBERS, "", "11", "65536"]:
        with pytest.raises(InvalidInput) as info:
            whole_number(bad, "query.limit", 0, 10)
        assert info.value.where == "query.limit"
        assert len(str(info.value)) < 200  # a 5,000-digit value is not echoed whole


def test_no_other_reading_of_client_numbers() -> None:
    """``str.isdigit`` (which takes ``²``) and ``int()`` on what a client sent
    appear nowhere in the server or the CLI: they read numbers through
    ``whole_number``."""
    found = []
    for path in [*SERVER.rglob("*.py"), *(ROOT / "turnfsm" / "cli").rglob("*.py")]:
        text = path.read_text("utf-8")
        for lineno, line in enumerate(text.splitlines(), 1):
            if ".isdigit()" in line or re.search(
                r"\bint\([^)]*(request|header|param|query|value|text|cursor|line)", line
            ):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("bad", BAD_NUMBERS)
def test_every_number_a_client_gives_is_422_naming_it(server: Running, bad: str) -> None:
    with server.client() as c:
        cid = create(c)
        for path in ("/api/contexts", f"/api/contexts/{cid}/messages", "/sessions"):
            for name in ("cursor", "limit"):
                r = c.get(path, params={name: bad})
                assert r.status_code == 422, (path, name, r.text)
                error = r.json()["error"]
                assert error["code"] == "invalid_input"
                assert error["where"] == f"query.{name}", error
        if bad == " 5":
            return  # a header's leading space is not part of its value (RFC 9110)
        with c.stream(
            "GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": bad.encode()}
        ) as r:
            r.read()
            assert r.status_code == 422, r.text
            assert r.json()["error"]["where"] == "header.last-event-id"


def test_cli_numbers_are_read_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    from turnfsm.cli import main

    for flag, bad in [("--port", "\u00b2"), ("--port", "+80"), ("--max-body", "9" * 5000)]:
        assert main(["serve", flag, bad]) == 2
        assert "whole number" in capsys.readouterr().err


# ---------------------------------------------------------------------- Last-Event-ID


def test_an_id_ahead_of_the_context_gets_a_resync_and_the_stream_goes_on(
    server: Running,
) -> None:
    with server.client() as c:
        cid = create(c)
        done = c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "hello"})
        assert done.status_code == 200, done.text
        with c.stream("GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": "0"}) as r:
            last = max(int(e.id or 0) for e in until(read_events(r), "TurnCompleted"))
        ahead = str(last + 1000)
        with c.stream("GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": ahead}) as r:
            events = read_events(r)
            first = next(e for e in events if e.event != "Heartbeat")
            assert first.event == "Resync"
            assert first.id == str(last)  # the id the client keeps from now on
            assert first.data["last_seq"] == last and first.data["state"] == "Idle"
            c.post(f"/api/contexts/{cid}/messages", json={"content": "again"})
            later = [e for e in until(events, "TurnCompleted") if e.event != "Heartbeat"]
        assert int(later[0].id or 0) == last + 1  # the stream goes on from there


# ---------------------------------------------------------------------- bodies


def body_routes() -> list[tuple[str, str, bool]]:
    """(method, path, whether it reads a body) of every POST and PUT route:
    those of the OpenAPI document with a request body, and the web view's
    forms (all but ``/logout``)."""
    reads = {
        (method.upper(), path)
        for path, ops in openapi_paths().items()
        for method, op in ops.items()
        if "requestBody" in op
    }
    reads |= {
        (m, p)
        for m, p in every_route()
        if m == "POST" and not p.startswith(("/api", "/v1", "/sessions", "/chat", "/logout"))
    }
    return [(m, p, (m, p) in reads) for m, p in every_route() if m in ("POST", "PUT")]


def test_every_body_over_the_limit_is_413_declared_or_streamed(server: Running) -> None:
    big = b'{"content": "' + b"x" * 70_000 + b'"}'

    def chunked() -> Iterator[bytes]:
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    routes = body_routes()
    assert sum(reads for _, _, reads in routes) >= 15
    with server.client() as c:
        cid = create(c)
        for method, path, reads in routes:
            url = filled(path, cid)
            form = not path.startswith(("/api", "/v1", "/sessions", "/chat"))
            kind = "application/x-www-form-urlencoded" if form else "application/json"
            headers = {"content-type": kind, "origin": server.url}
            # declared: refused before any route; streamed (chunked): when read
            for content in (big, chunked()) if reads else (big,):
                r = c.request(method, url, content=content, headers=headers)
                assert r.status_code == 413, (method, path, r.status_code, r.text[:200])
                assert r.json()["error"]["code"] == "body_too_large"


@pytest.mark.parametrize(
    "body",
    [b'{"content": "\xff\xfe"}', b"[" * 10_000 + b"]" * 10_000],
    ids=["not-utf8", "deep"],
)
def test_unreadable_json_is_422(server: Running, body: bytes) -> None:
    with server.client() as c:
        cid = create(c)
        for path in (f"/api/contexts/{cid}/messages", "/api/contexts", "/v1/chat/completions"):
            r = c.post(path, content=body, headers={"content-type": "application/json"})
            assert r.status_code == 422, (path, r.text[:200])
            assert r.json()["error"]["code"] == "invalid_input"


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _chat(inner: str) -> str:
    """A chat completion request with ``inner`` three levels down, in a field
    the route ignores."""
    return '{"model": "m", "messages": [{"role": "user", "content": "hi", "x": ' + inner + "}]}"


@pytest.mark.parametrize("limit", [1000, 20_000], ids=["default-limit", "raised-limit"])
def test_a_body_nested_too_deeply_cannot_be_read_on_any_route_under_any_limit(
    server: Running, limit: int
) -> None:
    """Every route taking a JSON body reads it as a document (at most 128
    levels), whatever the recursion limit (the server runs in this process):
    FastAPI's own ``json.loads`` read such a body under a raised limit and
    answered a later check's error, or took it."""
    json_routes = sorted(
        (method.upper(), path)
        for path, ops in openapi_paths().items()
        for method, op in ops.items()
        if "application/json" in op.get("requestBody", {}).get("content", {})
    )
    assert len(json_routes) >= 15
    cannot_be_read = "body: cannot be read (not UTF-8, nested too deeply, or malformed)"
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        with server.client() as c:
            cid = create(c)
            headers = {"content-type": "application/json", "origin": server.url}
            for body in (_nested(10_000), _chat(_nested(5_000)), _chat(_nested(126))):
                for method, path in json_routes:
                    r = c.request(method, filled(path, cid), content=body, headers=headers)
                    assert r.status_code == 422, (method, path, r.status_code, r.text[:200])
                    assert r.json()["error"]["message"] == cannot_be_read, (method, path)
            # as deep as a document may be: read, and answered as before
            r = c.post("/v1/chat/completions", content=_chat(_nested(125)), headers=headers)
            assert r.status_code == 200, r.text[:200]
    finally:
        sys.setrecursionlimit(before)


# ---------------------------------------------------------------------- turn slots


def test_a_request_refused_as_busy_takes_no_turn_slot(slow: Running) -> None:
    with slow.client() as c:
        busy, other = create(c), create(c)
        results: list[int] = []
        start = threading.Barrier(20)

        def post() -> None:
            with slow.client() as mine:
                start.wait()
                r = mine.post(f"/api/contexts/{busy}/messages", json={"content": "a story"})
                results.append(r.status_code)

        threads = [threading.Thread(target=post) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(results) == [202] + [409] * 19, results
        # the tenant still has its other slots for another context
        r = c.post(f"/api/contexts/{other}/messages", json={"content": "hello"})
        assert r.status_code == 202, r.text


@pytest.mark.anyio
async def test_refusals_as_busy_take_no_slot_even_all_at_once() -> None:
    """Nineteen calls launched in one step of the event loop on a context
    where a call runs (as twenty posts at once reach the hub): each is
    refused as busy, none as over the limit, and only the running turn holds
    a slot."""
    import anyio

    from turnfsm.errors import ContextBusy
    from turnfsm.server import ServerConfig
    from turnfsm.server._calls import create_context
    from turnfsm.server._errors import ApiError
    from turnfsm.server._hub import Hub

    def factory() -> Engine:
        return Engine(llm=DemoLLM(delay=0.05), tools=[get_weather], store="memory://")

    hub = Hub(factory, ServerConfig(max_turns_per_tenant=4, recover_on_start=False))
    async with hub.lifespan():
        cid = await create_context(hub, "default", system_prompt="You talk.")
        await hub.launch(cid, lambda: hub.engine.send(cid, "a story"), wait=False)
        refused: list[str] = []

        async def again() -> None:
            try:
                await hub.launch(cid, lambda: hub.engine.send(cid, "again"), wait=False)
                refused.append("accepted")
            except ContextBusy:
                refused.append("busy")
            except ApiError as exc:
                refused.append(exc.code)

        async with anyio.create_task_group() as tg:
            for _ in range(19):
                tg.start_soon(again)
        assert refused == ["busy"] * 19
        assert hub.turn_limit.running("default") == 1
        other = await create_context(hub, "default", system_prompt="You talk.")
        await hub.launch(other, lambda: hub.engine.send(other, "hello"), wait=True)


# ---------------------------------------------------------------------- Host


def test_with_no_tokens_every_route_checks_the_host(open_server: Running) -> None:
    routes = every_route()
    assert len(routes) > 40
    with httpx.Client(verify=loopback_tls(), base_url=open_server.url, timeout=30) as c:
        cid = create(c)
        before = c.get("/api/contexts").json()["contexts"]
        rebound = {"Host": "evil.example", "Origin": "http://evil.example"}
        for method, path in routes:
            r = answer(c, method, filled(path, cid), headers=rebound, json={})
            assert r.status_code == 403, (method, path, r.status_code)
            assert r.json()["error"]["code"] == "host_not_allowed"
        assert c.get("/api/contexts").json()["contexts"] == before  # nothing made or deleted
        for host in ("127.0.0.1", "localhost:8000", "[::1]:80"):
            assert c.get("/api/contexts", headers={"Host": host}).status_code == 200


def test_with_tokens_the_token_decides_not_the_host(server: Running) -> None:
    with server.client() as c:
        r = c.get("/api/contexts", headers={"Host": "turnfsm.example.com"})
        assert r.status_code == 200, r.text


# ---------------------------------------------------------------------- headers


def test_every_response_has_the_headers_of_the_pages(server: Running) -> None:
    with server.client() as c:
        cid, gone = create(c), create(c)
        for method, path in every_route():
            url = filled(path, gone if method == "DELETE" else cid)
            r = answer(c, method, url, json={})
            where = (method, path, r.status_code)
            assert r.headers.get("x-content-type-options") == "nosniff", where
            assert r.headers.get("referrer-policy") == "same-origin", where
            assert "cache-control" in r.headers, where
            csp = r.headers.get("content-security-policy", "")  # pages and /docs too
            assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp, where
        for fmt in ("svg", "mermaid"):
            r = c.get(f"/api/contexts/{cid}/diagram", params={"format": fmt})
            assert "default-src 'none'" in r.headers["content-security-policy"]
        r = c.get("/api/contexts/nope")  # an error answer too
        assert r.status_code == 404 and r.headers["x-content-type-options"] == "nosniff"


# ---------------------------------------------------------------------- the error table


def codes_sent() -> set[tuple[int, str]]:
    """Every (status, code) the server's source can answer with."""
    from turnfsm.server._errors import _STATUS

    found = {(status, code) for _, status, code in _STATUS}
    for path in SERVER.rglob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name not in ("ApiError", "error_response") or len(node.args) < 2:
                continue
            status, code = node.args[0], node.args[1]
            if isinstance(status, ast.Constant) and isinstance(code, ast.Constant):
                found.add((int(status.value), str(code.value)))
    found |= {(400, "turnfsm_error"), (404, "not_found"), (405, "method_not_allowed")}
    return found


def test_the_error_table_lists_every_code_the_server_sends() -> None:
    text = (ROOT / "docs" / "server.md").read_text("utf-8")
    table = text.split("## Errors", 1)[1].split("\n## ", 1)[0]
    rows: dict[int, str] = {}
    for line in table.splitlines():
        m = re.match(r"\| (\d{3}) \| (.*?) \|", line)
        if m:
            rows[int(m.group(1))] = rows.get(int(m.group(1)), "") + m.group(2)
    sent = codes_sent()
    assert len(sent) > 25
    missing = [f"{s} {c}" for s, c in sorted(sent) if f"`{c}`" not in rows.get(s, "")]
    assert not missing, "codes the server sends that docs/server.md's table lacks: " + ", ".join(
        missing
    )
    assert "`http_error`" in table  # any other refusal of the HTTP layer, with its status
