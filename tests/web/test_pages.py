"""The web view over plain HTTP (no browser): pages render, tenants stay apart,
the login cookie, the Origin check on form posts (docs/web.md)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import quote

import httpx
from server.conftest import loopback_tls, serve_in_thread

from .conftest import TOKENS, Web, _engine


def test_pages_render_for_their_tenant(web: Web) -> None:
    cid = web.conversation("Pages render")
    with web.page_client() as tab:
        listing = tab.get("/")
        assert listing.status_code == 200
        assert "Pages render" in listing.text
        assert f'data-context="{cid}"' in listing.text
        page = tab.get(f"/contexts/{cid}")
        assert page.status_code == 200
        assert "What&#39;s the weather in Paris?" in page.text
        assert "The weather in Paris is" in page.text
        assert 'class="tool-call"' in page.text and "approved by human" in page.text
        audit = tab.get(f"/contexts/{cid}/audit")
        assert audit.status_code == 200
        assert 'id="verdict" class="verdict ok"' in audit.text
        assert "<svg" in audit.text
        assert 'id="e_AwaitingToolApproval__approvals_resolved"' in audit.text
        assert 'id="sequence"' in audit.text and "approver to engine:" in audit.text
        log = tab.get(f"/contexts/{cid}/audit.jsonl")
        assert log.status_code == 200
        assert log.headers["content-disposition"].startswith("attachment;")
        with web.api() as api:
            assert log.text == api.get(f"/api/contexts/{cid}/audit").text


def test_every_page_says_no_external_request(web: Web) -> None:
    with web.page_client() as tab:
        page = tab.get("/")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    for url in re.findall(r'(?:href|src|action)="([^"]+)"', page.text):
        assert url.startswith(("/", "#")), url


def test_another_tenant_gets_404_everywhere(web: Web) -> None:
    cid = web.conversation("Alice only", approve=False)
    with web.page_client("token-bob") as bob:
        listing = bob.get("/")
        assert listing.status_code == 200
        assert "Alice only" not in listing.text and cid not in listing.text
        for path in ("", "/audit", "/audit.jsonl", "/events"):
            r = bob.get(f"/contexts/{cid}{path}")
            assert r.status_code == 404, path
            assert "Alice only" not in r.text and "weather" not in r.text
        missing = bob.get("/contexts/no-such-context")
        assert missing.status_code == 404
        assert _main(missing.text) == _main(bob.get(f"/contexts/{cid}").text)  # never a hint
        call_id = _pending_call(web, cid)
        for path, data in (
            ("send", {"content": "hi"}),
            ("decide", {"call_id": call_id, "decision": "approve"}),
            ("retry", {}),
            ("reset", {}),
            ("cancel", {}),
        ):
            assert bob.post(f"/contexts/{cid}/{path}", data=data).status_code == 404
    with web.api() as api:
        state = api.get(f"/api/contexts/{cid}/state").json()
    assert state["state"] == "AwaitingToolApproval"  # bob's approve did nothing


def test_without_a_token_pages_ask_to_log_in(web: Web) -> None:
    with web.page_client(None) as anon:
        r = anon.get("/contexts/x/audit?turn=1", follow_redirects=False)
        assert r.status_code == 303
        assert r.headers["location"] == "/login?next=" + quote("/contexts/x/audit?turn=1")
        assert anon.get("/events").status_code == 401
        assert anon.post("/contexts", data={"title": "x"}).status_code == 401
    with web.page_client("not-a-token") as wrong:
        assert wrong.get("/", follow_redirects=False).status_code == 303


def test_login_sets_a_strict_session_cookie(web: Web) -> None:
    from turnfsm.server._web import COOKIE

    with httpx_client(web) as tab:
        bad = tab.post("/login", data={"token": "token-nobody", "next": "/"})
        assert bad.status_code == 401
        assert "set-cookie" not in bad.headers
        ok = tab.post("/login", data={"token": "token-alice", "next": "/?state=Idle"})
        assert ok.status_code == 303
        assert ok.headers["location"] == "/?state=Idle"
        cookie = ok.headers["set-cookie"]
        parts = [p.strip().lower() for p in cookie.split(";")]
        assert parts[0] == f"{COOKIE}=token-alice"
        assert {"httponly", "samesite=strict", "path=/"} <= set(parts)
        assert not any(p.startswith(("max-age", "expires")) for p in parts)  # the session only
        assert tab.get("/").status_code == 200  # the cookie now opens the pages
        out = tab.post("/logout")
        assert out.status_code == 303
        assert tab.get("/", follow_redirects=False).status_code == 303


def test_login_goes_back_to_this_server_only(web: Web) -> None:
    with httpx_client(web) as tab:
        for nxt in ("https://evil.example/", "//evil.example/x", "/\\evil"):
            r = tab.post("/login", data={"token": "token-alice", "next": nxt})
            assert r.headers["location"] == "/", nxt


def test_form_posts_from_another_origin_are_refused(web: Web) -> None:
    from turnfsm.server._web import COOKIE

    cid = web.conversation("Origin check", approve=False)
    call_id = _pending_call(web, cid)
    cookies = {COOKIE: "token-alice"}
    approve = {"call_id": call_id, "decision": "approve"}
    before = _count(web, "token-alice")
    for headers in (
        {},
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Referer": "https://evil.example/page"},
        {"Origin": web.url.replace("127.0.0.1", "localhost")},
    ):
        with httpx_client(web, cookies=cookies, headers=headers) as tab:
            r = tab.post(f"/contexts/{cid}/decide", data=approve)
            assert r.status_code == 403, headers
            assert "Origin" in r.text
            assert tab.post("/contexts", data={"title": "forged"}).status_code == 403
            assert tab.post("/login", data={"token": "token-bob"}).status_code == 403
            for control in ("retry", "reset", "cancel"):  # a cancel would end the wait
                assert tab.post(f"/contexts/{cid}/{control}").status_code == 403, control
    with web.api() as api:
        assert api.get(f"/api/contexts/{cid}/state").json()["state"] == "AwaitingToolApproval"
    assert _count(web, "token-alice") == before  # no context was made
    # the same post from a page of the server (a Referer, when a browser sends no Origin)
    ours = {"Referer": f"{web.url}/contexts/{cid}"}
    with httpx_client(web, cookies=cookies, headers=ours) as tab:
        r = tab.post(f"/contexts/{cid}/decide", data=approve)
        assert r.status_code == 303


def test_the_page_forms_drive_a_turn(web: Web) -> None:
    with web.page_client() as tab:
        made = tab.post("/contexts", data={"title": "Forms"})
        assert made.status_code == 303
        cid = made.headers["location"].rsplit("/", 1)[1]
        sent = tab.post(
            f"/contexts/{cid}/send",
            data={"content": "What's the weather in Rome?"},
            headers={"X-Turnfsm-Web": "fetch"},
        )
        assert sent.status_code == 200 and sent.json() == {"ok": True}
        call_id = _pending_call(web, cid)
        page = tab.get(f"/contexts/{cid}").text
        assert f'name="call_id" value="{call_id}"' in page
        assert 'value="deny"' in page
        denied = tab.post(
            f"/contexts/{cid}/decide",
            data={"call_id": call_id, "decision": "deny", "reason": "not today"},
        )
        assert denied.status_code == 303
        _wait_idle(web, cid)
        page = tab.get(f"/contexts/{cid}").text
        assert "denied by human" in page and "Reason: not today" in page
        busy = tab.post(f"/contexts/{cid}/decide", data={"call_id": call_id, "decision": "approve"})
        assert busy.status_code == 409  # the call is no longer pending: an error page
        assert "tool call not pending" in busy.text


def test_no_tokens_no_login(open_web: Web) -> None:
    with httpx_client(open_web, headers={"Origin": open_web.url}) as tab:
        assert tab.get("/").status_code == 200
        assert "Log out" not in tab.get("/").text
        made = tab.post("/contexts", data={"title": "Loopback"})
        assert made.status_code == 303
        assert "Loopback" in tab.get("/").text
    with httpx_client(open_web, headers={}) as forged:  # still no post without our Origin
        assert forged.post("/contexts", data={"title": "x"}).status_code == 403
    rebound = {"Host": "evil.example", "Origin": "http://evil.example"}
    before = _count(open_web, None)
    with httpx_client(open_web, headers=rebound) as other_name:  # DNS rebinding
        page = other_name.get("/")
        assert page.status_code == 403 and "Loopback" not in page.text
        assert other_name.post("/contexts", data={"title": "x"}).status_code == 403
    assert _count(open_web, None) == before


def test_static_assets_only_by_name(web: Web) -> None:
    with web.page_client(None) as anon:
        assert anon.get("/static/web.css").headers["content-type"].startswith("text/css")
        assert anon.get("/static/web.js").status_code == 200
        assert anon.get("/static/base.html").status_code == 404
        assert anon.get("/static/..%2F_web.py").status_code == 404


# ---------------------------------------------------------------------- helpers


def httpx_client(web: Web, **kwargs: object) -> httpx.Client:
    headers = kwargs.pop("headers", {"Origin": web.url})
    return httpx.Client(
        verify=loopback_tls(), base_url=web.url, headers=headers, timeout=30, **kwargs
    )  # type: ignore[arg-type]


def _count(web: Web, token: str | None) -> int:
    with web.api(token) as api:
        return len(api.get("/api/contexts", params={"limit": 500}).json()["contexts"])


def _main(html: str) -> str:
    return html.split('<main id="main">', 1)[1]


def _pending_call(web: Web, cid: str) -> str:
    # a form's send answers once the turn took its first step; the turn goes on
    # to the approval point in the server's task, so wait until it rests there
    deadline = time.monotonic() + 20
    with web.api() as api:
        while True:
            state = api.get(f"/api/contexts/{cid}/state").json()
            if not state["running"] or time.monotonic() > deadline:
                break
            time.sleep(0.02)
    assert state["state"] == "AwaitingToolApproval", state
    calls = state["pending_tool_calls"]
    assert calls, "expected a pending call"
    return str(calls[0]["id"])


def _wait_idle(web: Web, cid: str) -> None:
    deadline = time.monotonic() + 20
    with web.api() as api:
        while time.monotonic() < deadline:
            state = api.get(f"/api/contexts/{cid}/state").json()
            if state["state"] == "Idle" and not state["running"]:
                return
            time.sleep(0.05)
    raise AssertionError(f"{cid} did not come to rest")


def test_the_page_forms_go_where_the_api_goes(tmp_path: Path) -> None:
    """A page's form makes a context as POST /api/contexts does, and its message
    is handed to the workers as a posted one is (no worker runs here)."""
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path / "workers.db"
    app = create_app(
        lambda: _engine(db), ServerConfig(tokens=dict(TOKENS), heartbeat=0.5, turns="workers")
    )
    for url in serve_in_thread(app):
        web = Web(url, db)
        with web.page_client() as tab, web.api() as api:
            made = tab.post("/contexts", data={"title": "Handed off"})
            assert made.status_code == 303
            cid = made.headers["location"].rsplit("/", 1)[1]
            ctx = api.get(f"/api/contexts/{cid}").json()
            assert ctx["model"] == ServerConfig().model == "demo"  # the server's model
            sent = tab.post(f"/contexts/{cid}/send", data={"content": "What's the weather?"})
            assert sent.status_code == 303
            state = api.get(f"/api/contexts/{cid}/state").json()
            assert state["state"] == "ProcessingUserMessage" and not state["running"]
            messages = api.get(f"/api/contexts/{cid}/messages").json()["messages"]
            assert [m["message"]["role"] for m in messages][-1] == "user"


def test_a_page_number_that_is_not_one_is_refused_naming_it(web: Web) -> None:
    """``?offset=`` and ``?turn=`` are read as every number a client gives: a
    value that is not ASCII digits in range is the 422 page, naming the
    parameter; an empty one is the page's default."""
    cid = web.conversation("Page numbers")
    with web.page_client() as tab:
        for path, name in (("/", "offset"), (f"/contexts/{cid}/audit", "turn")):
            for bad in ("\u00b2", "-1", "x", "9" * 5000):
                r = tab.get(path, params={name: bad})
                assert r.status_code == 422, (path, bad, r.status_code)
                assert name in r.text and "whole number" in r.text
            assert tab.get(path, params={name: ""}).status_code == 200
            assert tab.get(path, params={name: "1"}).status_code == 200


def test_a_context_page_lists_the_tools_it_is_offered(web: Web) -> None:
    with web.api() as api:
        every = api.post("/api/contexts", json={"system_prompt": "weather"}).json()["id"]
        none = api.post("/api/contexts", json={"system_prompt": "x", "tools": []}).json()["id"]
    with web.page_client() as tab:
        page = tab.get(f"/contexts/{every}").text
        bare = tab.get(f"/contexts/{none}").text
    offered = page.split('<section aria-labelledby="tools-h" id="tools">', 1)[1].split(
        "</section>"
    )[0]
    assert "<code>get_weather</code>" in offered and "(required)" in offered
    assert "Current weather for a city." in offered
    listed = bare.split('id="tools"', 1)[1].split("</section>")[0]
    assert "get_weather" not in listed and "None." in listed  # its own allow-list is empty
