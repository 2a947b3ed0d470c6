"""``/docs`` and ``/redoc`` read offline: every asset is this server's, under a
Content-Security-Policy of this server only (docs/server.md, "API docs")."""

from __future__ import annotations

import re
from typing import Any

import pytest

from .conftest import Tabs, Web

OPERATIONS = (
    "/api/contexts/{context_id}/messages",
    "/api/contexts/{context_id}/retry",
    "/v1/chat/completions",
)


def _offline(tabs: Tabs, web: Web) -> tuple[Any, list[str], list[str]]:
    """A tab where every request to another site fails, and what it asked for
    there and what the browser refused (its console's policy messages)."""
    page = tabs.new()
    elsewhere: list[str] = []
    refused: list[str] = []

    def only_here(route: Any) -> None:
        if route.request.url.startswith(web.url + "/"):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.context.route("**/*", only_here)
    page.on(
        "console",
        lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None,
    )
    return page, elsewhere, refused


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_docs_pages_load_only_this_server(open_web: Web, path: str) -> None:
    with open_web.api(None) as c:
        r = c.get(path)
        assert r.status_code == 200
        csp = r.headers["content-security-policy"]
        assert "script-src 'self';" in csp and "default-src 'none'" in csp
        assert "unsafe" not in csp and "http" not in csp and "*" not in csp
        assert "cdn" not in r.text and "//" not in r.text.replace("<!doctype", "")
        for src in ("swagger-ui-bundle.js", "swagger-ui.css", "api-docs.js"):
            if path == "/docs":
                assert f"/docs/assets/{src}" in r.text
                asset = c.get(f"/docs/assets/{src}")
                assert asset.status_code == 200 and len(asset.content) > 100, src
        assert c.get("/docs/assets/core.py").status_code == 404
        assert c.get("/docs/assets/..%2Fcore.py").status_code == 404


@pytest.mark.browser
def test_docs_list_the_operations_offline(open_web: Web, tabs: Tabs) -> None:
    page, elsewhere, refused = _offline(tabs, open_web)
    page.goto(f"{open_web.url}/docs")
    page.locator(".opblock").first.wait_for()
    listed = page.locator(".opblock-summary-path").all_inner_texts()
    paths = {p.replace("\u200b", "").strip() for p in listed}
    for op in OPERATIONS:
        assert op in paths, sorted(paths)
    assert page.locator(".opblock").count() >= 30
    assert elsewhere == [] and refused == []
    # an operation opens, with its parameters
    page.locator(".opblock-summary", has_text="/api/contexts/{context_id}/retry").first.click()
    page.get_by_role("button", name="Try it out").first.wait_for()


@pytest.mark.browser
def test_redoc_lists_the_operations_offline(open_web: Web, tabs: Tabs) -> None:
    page, elsewhere, refused = _offline(tabs, open_web)
    page.goto(f"{open_web.url}/redoc")
    page.get_by_role("heading", name=re.compile(r"^turnfsm \(")).wait_for()
    assert page.get_by_text("Something went wrong").count() == 0
    text = page.locator("body").inner_text()
    for tag in ("contexts", "messages", "turns", "openai"):
        assert tag in text
    assert elsewhere == []
    # what the policy kept out: ReDoc's search worker (a blob:) and its badge
    # from its own site; never a style or script of the page itself
    assert all("worker" in m or "cdn.redoc.ly" in m for m in refused), refused
