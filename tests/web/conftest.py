"""The web view's fixtures: a real uvicorn on 127.0.0.1 with two tenants, and
(for ``browser`` tests) a real headless Chromium driven by Playwright.

The browser is Debian's ``/usr/bin/chromium`` (``$TURNFSM_CHROMIUM`` names
another), launched through ``executable_path``: Playwright never downloads
one. A browser test that fails leaves a screenshot of each page it opened
under its pytest tmp dir (``failure-N.png``).
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from kit import skip_without  # tests/ is on sys.path

pytest.importorskip("jinja2")

from server.conftest import loopback_tls, serve_in_thread

from turnfsm import Engine
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.cli._demo import get_weather
from turnfsm.errors import PermanentLLMError
from turnfsm.model import LLMChunk, LLMRequest, LLMResponse, TextDelta

skip_without("fastapi")

TOKENS = {"token-alice": "alice", "token-bob": "bob"}
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DELAY = 0.05
"""Seconds between the demo model's streamed chunks: long enough to see them arrive."""


@dataclass
class Web:
    url: str
    db: Path

    def api(self, token: str | None = "token-alice") -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(verify=loopback_tls(), base_url=self.url, headers=headers, timeout=30)

    def page_client(self, token: str | None = "token-alice") -> httpx.Client:
        """A client as a browser tab is: the login cookie, our own Origin on POSTs."""
        cookies = {"turnfsm_token": token} if token else {}
        return httpx.Client(
            verify=loopback_tls(),
            base_url=self.url,
            cookies=cookies,
            headers={"Origin": self.url},
            timeout=30,
        )

    def conversation(self, title: str, *, approve: bool = True) -> str:
        """A context of alice's with a weather question (its call approved, or pending)."""
        with self.api() as api:
            cid = str(api.post("/api/contexts", json={"title": title}).json()["id"])
            turn = api.post(
                f"/api/contexts/{cid}/messages?wait=true",
                json={"content": "What's the weather in Paris?"},
            ).json()
            if approve:
                ids = [c["id"] for c in turn["pending_tool_calls"]]
                r = api.post(f"/api/contexts/{cid}/tools/approve?wait=true", json={"approve": ids})
                assert r.status_code == 200, r.text
        return cid


class MoodyLLM(DemoLLM):
    """The demo model, with two moods for the failed-turn and Stop buttons: a
    message starting "Fail" fails for good the first time (a ``400``), and is
    answered when tried again; one starting "Slow" streams a long answer, a
    piece every 0.2 s."""

    def __init__(self) -> None:
        super().__init__(delay=DELAY)
        self.failed: set[str] = set()

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        last = request.messages[-1]
        text = last.get("content") if last["role"] == "user" else None
        if isinstance(text, str) and text.startswith("Fail") and text not in self.failed:
            self.failed.add(text)
            raise PermanentLLMError("the model refused the request", status=400)
        if isinstance(text, str) and text.startswith("Slow"):
            for i in range(100):
                await anyio.sleep(0.2)
                yield TextDelta(f"word{i} ")
            yield LLMResponse(text="".join(f"word{i} " for i in range(100)), model="demo")
            return
        async for chunk in super().stream(request):
            yield chunk


def _engine(db: Path) -> Engine:
    return Engine(llm=DemoLLM(delay=DELAY), tools=[get_weather], store=f"sqlite:///{db}")


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path_factory.mktemp("web") / "web.db"
    app = create_app(lambda: _engine(db), ServerConfig(tokens=dict(TOKENS), heartbeat=0.5))
    for url in serve_in_thread(app):
        yield Web(url, db)


@pytest.fixture(scope="module")
def moody_web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """A server with no tokens whose model fails once or streams slowly (:class:`MoodyLLM`)."""
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path_factory.mktemp("web-moody") / "web.db"
    engine = lambda: Engine(llm=MoodyLLM(), tools=[get_weather], store=f"sqlite:///{db}")  # noqa: E731
    app = create_app(engine, ServerConfig(heartbeat=0.5))
    for url in serve_in_thread(app):
        yield Web(url, db)


@pytest.fixture(scope="module")
def open_web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """A server with no tokens: one tenant, no login (the loopback default)."""
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path_factory.mktemp("web-open") / "web.db"
    app = create_app(lambda: _engine(db), ServerConfig(heartbeat=0.5))
    for url in serve_in_thread(app):
        yield Web(url, db)


# ---------------------------------------------------------------------- the browser


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = os.environ.get("TURNFSM_CHROMIUM", "/usr/bin/chromium")
    if not Path(executable).exists():
        pytest.skip(f"no Chromium at {executable} (apt-get install chromium)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Tabs:
    """Browser contexts opened by one test; each page is screenshot if it fails."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser
        self.contexts: list[Any] = []

    def new(self, *, javascript: bool = True, width: int = 1280, height: int = 900) -> Any:
        context = self.browser.new_context(
            java_script_enabled=javascript, viewport={"width": width, "height": height}
        )
        context.set_default_timeout(20_000)
        self.contexts.append(context)
        return context.new_page()

    def screenshots(self, folder: Path) -> None:
        n = 0
        for context in self.contexts:
            for page in context.pages:
                n += 1
                try:
                    page.screenshot(path=str(folder / f"failure-{n}.png"), full_page=True)
                except Exception as exc:  # a page that crashed: say so, keep going
                    (folder / f"failure-{n}.txt").write_text(f"no screenshot: {exc}")

    def close(self) -> None:
        for context in self.contexts:
            context.close()


@pytest.fixture
def tabs(browser: Any, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tabs]:
    opened = Tabs(browser)
    try:
        yield opened
    finally:
        if request.node.stash.get(_FAILED, False):
            opened.screenshots(tmp_path)
            print(f"screenshots of the failed test's pages: {tmp_path}")
        opened.close()


def log_in(page: Any, url: str, token: str) -> None:
    page.goto(f"{url}/")
    assert re.search(r"/login\?next=", page.url), page.url
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{url}/")
