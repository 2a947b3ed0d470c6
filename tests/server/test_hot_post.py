"""The message post of every turn (``turnfsm.server._hot.MessagePost``): the
common request answered without FastAPI's dependency machinery, every other
one by the declared route, with the same answers either way."""

from __future__ import annotations

import ast
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import TOKENS, demo_engine, loopback_tls, serve_in_thread

_VOLATILE = {"date", "server", "content-length"}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from turnfsm.server import ServerConfig, create_app
    from turnfsm.server._hot import MessagePost

    db = tmp_path_factory.mktemp("hot") / "s.db"
    app = create_app(lambda: demo_engine(db), ServerConfig(tokens=dict(TOKENS), max_body=4_000))
    assert isinstance(app.router.routes[0], MessagePost)
    yield from serve_in_thread(app)


def _client(url: str, token: str = "token-alice") -> httpx.Client:
    return httpx.Client(
        verify=loopback_tls(),
        base_url=url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def _rest(client: httpx.Client, cid: str) -> None:
    for _ in range(200):
        state = client.get(f"/api/contexts/{cid}/state").json()
        if state["state"] == "Idle" and not state["running"]:
            return
        time.sleep(0.02)
    raise AssertionError("the context did not rest")


def _posted(client: httpx.Client, cid: str, body: Any, query: str = "", **kw: Any) -> Any:
    r = client.post(f"/api/contexts/{cid}/messages{query}", content=body, **kw)
    return r.status_code, {k: v for k, v in r.headers.items() if k not in _VOLATILE}, r.json()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times FastAPI solved a route's dependencies."""
    import fastapi.routing

    calls: list[int] = []
    real = vars(fastapi.routing)["solve_dependencies"]

    async def solve(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return await real(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", solve)
    return calls


def test_the_common_post_skips_fastapis_machinery_and_answers_as_the_declared_route(
    url: str, counted: list[int]
) -> None:
    json_type = {"Content-Type": "application/json"}
    with _client(url) as c:
        cid = c.post("/api/contexts", json={"system_prompt": "x"}).json()["id"]
        counted.clear()
        fast = _posted(c, cid, json.dumps({"content": "hi"}), headers=json_type)
        assert counted == []  # taken by MessagePost
        _rest(c, cid)
        counted.clear()
        # the same post with a query string: the declared route's answer
        slow = _posted(c, cid, json.dumps({"content": "hi"}), "?wait=false", headers=json_type)
        assert counted != []
        _rest(c, cid)
        assert fast[0] == slow[0] == 202
        assert fast[1] == slow[1]  # the same headers (Gate's included)
        assert set(fast[2]) == set(slow[2]) == {"context_id", "message_id", "state"}
        assert fast[2]["context_id"] == cid and fast[2]["message_id"] != slow[2]["message_id"]
        page = c.get(f"/api/contexts/{cid}/messages").json()["messages"]
        users = [m["message"]["content"] for m in page if m["message"]["role"] == "user"]
        assert len(users) == 2 and users[0] == users[1]


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b'{"content": 5}', {"Content-Type": "application/json"}),  # does not validate
        (b'{"content": "hi", "extra": 1}', {"Content-Type": "application/json"}),
        (b'{"content": "hi", "role": "system"}', {"Content-Type": "application/json"}),
        (b'{"content": "hi", "output_retries": -1}', {"Content-Type": "application/json"}),
        (b"{not json", {"Content-Type": "application/json"}),
        (b"\xff\xfe", {"Content-Type": "application/json"}),
        (b'{"content": "h\xffi"}', {"Content-Type": "application/json"}),  # not UTF-8
        (b'{"content": "\\ud800"}', {"Content-Type": "application/json"}),  # a lone surrogate
        (b"", {"Content-Type": "application/json"}),
        (b"[" * 100_000, {"Content-Type": "application/json"}),  # over the body limit
        (b'{"content": "hi"}', {"Content-Type": "text/plain"}),
        (b'{"content": "hi"}', {}),
    ],
)
def test_what_the_fast_path_leaves_is_answered_by_the_declared_route(
    url: str, body: bytes, headers: dict[str, str]
) -> None:
    with _client(url) as c:
        cid = c.post("/api/contexts", json={"system_prompt": "x"}).json()["id"]
        # ?wait=false sends the request to the declared route: the reference answer
        declared = _posted(c, cid, body, "?wait=false", headers=headers)
        _rest(c, cid)
        fast = _posted(c, cid, body, headers=headers)
        _rest(c, cid)
        assert fast[0] == declared[0]
        assert fast[1] == declared[1]
        if fast[0] == 202:
            assert set(fast[2]) == set(declared[2])
        else:
            assert fast[2] == declared[2]


def test_tenants_and_unknown_contexts_as_the_declared_route(url: str) -> None:
    with _client(url) as alice, _client(url, "token-bob") as bob, _client(url, "nope") as nobody:
        cid = alice.post("/api/contexts", json={"system_prompt": "x"}).json()["id"]
        body = json.dumps({"content": "hi"})
        json_type = {"Content-Type": "application/json"}
        for client, target in [(bob, cid), (alice, "no-such-context"), (nobody, cid)]:
            fast = _posted(client, target, body, headers=json_type)
            declared = _posted(client, target, body, "?wait=false", headers=json_type)
            assert fast[0] in (401, 404)
            assert fast == declared
        # a body that does not validate is still a missing token's 401 first
        bad = _posted(nobody, cid, b'{"content": 5}', headers=json_type)
        assert bad[0] == 401
        assert bad == _posted(nobody, cid, b'{"content": 5}', "?wait=false", headers=json_type)
        # a context's other routes on the same path are not taken
        assert alice.get(f"/api/contexts/{cid}/messages").status_code == 200
        r = alice.put(f"/api/contexts/{cid}/messages", json={"content": "hi"})
        assert r.status_code == 405
        assert (
            alice.post(f"/api/contexts/{cid}/x/messages", json={"content": "x"}).status_code == 404
        )


def test_the_hot_route_is_the_declared_one_for_openapi(tmp_path: Path) -> None:
    from turnfsm.server import ServerConfig, create_app
    from turnfsm.server._hot import MessagePost

    app = create_app(lambda: demo_engine(tmp_path / "s.db"), ServerConfig())
    hot = app.router.routes[0]
    assert isinstance(hot, MessagePost) and not hot.include_in_schema
    paths = app.openapi()["paths"]
    assert "post" in paths["/api/contexts/{context_id}/messages"]


@pytest.mark.parametrize(
    ("root_path", "path"),
    [
        ("", "/api/contexts/c1/messages"),
        ("/svc", "/svc/api/contexts/c1/messages"),  # mounted: the path keeps the prefix
        ("/svc", "/api/contexts/c1/messages"),  # a proxy that strips it
        ("/api", "/api/contexts/c1/messages"),  # the route's own start is the root
        ("/sv", "/svc/api/contexts/c1/messages"),  # not a whole segment: kept
        ("/svc/api/contexts/c1/messages", "/svc/api/contexts/c1/messages"),
        ("/svc", "/svc/api/contexts/a/b/messages"),
        ("/svc", "/svc/api/contexts//messages"),
    ],
)
def test_the_hot_route_matches_where_the_declared_route_does(
    tmp_path: Path, root_path: str, path: str
) -> None:
    """Under a root path (a mount, a proxy's prefix) the hot route takes the
    posts the declared route would, with the same context id."""
    from starlette.routing import Match

    from turnfsm.server import ServerConfig, create_app
    from turnfsm.server._hot import MessagePost

    app = create_app(lambda: demo_engine(tmp_path / "s.db"), ServerConfig())
    hot = app.router.routes[0]
    assert isinstance(hot, MessagePost)
    scope = {"type": "http", "method": "POST", "root_path": root_path, "path": path}
    match, child = hot.matches(dict(scope))
    expected, declared = hot.declared.matches(dict(scope))
    assert match == expected
    if expected is Match.FULL:
        assert child["path_params"] == declared["path_params"]


def test_the_hot_route_uses_no_private_starlette_module() -> None:
    from turnfsm.server import _hot

    source = Path(_hot.__file__).read_text(encoding="utf-8")
    imported = [
        node.module or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
    ] + [
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    assert imported and not [m for m in imported if m.startswith(("starlette._", "fastapi._"))]


@pytest.mark.parametrize("message_id", ["m-1", "é" * 40])
def test_the_202_is_the_response_starlette_makes_of_its_json(message_id: str) -> None:
    from starlette.responses import Response

    from turnfsm.server._api import Accepted, answered
    from turnfsm.server._models import AcceptedOut

    out = AcceptedOut(context_id="c-1", message_id=message_id, state="ProcessingUserMessage")
    general = Response(out.model_dump_json(), 202, media_type="application/json")
    made = answered(out)
    assert isinstance(made, Accepted)
    assert (made.status_code, made.body, made.raw_headers, made.background) == (
        general.status_code,
        general.body,
        general.raw_headers,
        general.background,
    )
