"""The web view's turn controls and lists in a real Chromium (``pytest -m
browser``): Retry and Reset on a failed turn, Stop on a streaming answer, each
with and without JavaScript; the contexts page's order and pages; a pending
call shown once; the live status in words (docs/web.md)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import Tabs, Web, log_in

pytestmark = pytest.mark.browser


def _state(web: Web, cid: str) -> str:
    with web.api(None) as api:
        return str(api.get(f"/api/contexts/{cid}/state").json()["state"])


def _wait_idle(web: Web, cid: str) -> None:
    for _ in range(200):
        if _state(web, cid) == "Idle":
            return
        time.sleep(0.05)
    raise AssertionError(f"{cid} never came back to Idle: {_state(web, cid)}")


def _failed(web: Web, text: str) -> str:
    """A context whose turn failed for good (the model refused ``text`` once)."""
    with web.api(None) as api:
        cid = str(api.post("/api/contexts", json={"title": text}).json()["id"])
        api.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": text})
    assert _state(web, cid) == "PermanentFailure"
    return cid


def _texts(web: Web, cid: str) -> list[tuple[str, str]]:
    with web.api(None) as api:
        out = api.get(f"/api/contexts/{cid}/messages").json()["messages"]
    return [(m["message"]["role"], m["message"]["content"][0]["text"]) for m in out]


@pytest.mark.parametrize("javascript", [True, False])
def test_retry_a_failed_turn(moody_web: Web, tabs: Tabs, javascript: bool) -> None:
    cid = _failed(moody_web, f"Fail, then retry (script {javascript})")
    page = tabs.new(javascript=javascript)
    page.goto(f"{moody_web.url}/contexts/{cid}")
    alert = page.locator("#failed")
    assert "The turn failed: HTTP 400: the model refused the request" in alert.inner_text()
    page.get_by_role("button", name="Retry").click()
    if not javascript:  # the form answers once the turn started: the page is read again
        page.wait_for_url(f"{moody_web.url}/contexts/{cid}")
        _wait_idle(moody_web, cid)
        page.reload()
    page.locator("#conversation").get_by_text("I am the demo model.").wait_for()
    assert page.locator("#failed").count() == 0
    assert _state(moody_web, cid) == "Idle"
    assert _texts(moody_web, cid)[-1][0] == "assistant"


@pytest.mark.parametrize("javascript", [True, False])
def test_reset_a_failed_turn(moody_web: Web, tabs: Tabs, javascript: bool) -> None:
    cid = _failed(moody_web, f"Fail, then reset (script {javascript})")
    page = tabs.new(javascript=javascript)
    page.goto(f"{moody_web.url}/contexts/{cid}")
    page.get_by_role("button", name="Reset").click()
    page.locator("#failed").wait_for(state="detached")
    assert page.locator("#state").inner_text() == "Idle"
    assert _state(moody_web, cid) == "Idle"
    assert [role for role, _ in _texts(moody_web, cid)] == ["user"]  # nothing answered


def test_no_failed_turn_no_retry(moody_web: Web, tabs: Tabs) -> None:
    page = tabs.new()
    with moody_web.api(None) as api:
        cid = str(api.post("/api/contexts", json={"title": "Fine"}).json()["id"])
    page.goto(f"{moody_web.url}/contexts/{cid}")
    assert page.get_by_role("button", name="Retry").count() == 0
    assert page.get_by_role("button", name="Reset").count() == 0
    assert page.locator("#stop-form").is_hidden()


def test_stop_a_streaming_answer(moody_web: Web, tabs: Tabs) -> None:
    with moody_web.api(None) as api:
        cid = str(api.post("/api/contexts", json={"title": "Stop me"}).json()["id"])
    page = tabs.new()
    page.goto(f"{moody_web.url}/contexts/{cid}")
    page.locator("body[data-live=open]").wait_for()
    stop = page.get_by_role("button", name="Stop")
    assert stop.is_hidden()
    page.get_by_label("Message", exact=True).fill("Slow story, please")
    page.get_by_role("button", name="Send").click()
    page.locator("#live").get_by_text("word2").wait_for()
    assert page.locator("#live-status").inner_text() == "The model is answering"
    stop.click()
    page.locator("#conversation").get_by_text("Cancelled").wait_for()
    assert stop.is_hidden()
    assert page.locator("#live-status").inner_text() == "Stopped; ready for a message"
    role, kept = _texts(moody_web, cid)[-1]
    assert role == "assistant" and kept.startswith("word0 word1 word2") and "word99" not in kept


def test_stop_without_javascript(moody_web: Web, tabs: Tabs) -> None:
    with moody_web.api(None) as api:
        cid = str(api.post("/api/contexts", json={"title": "Stop, no script"}).json()["id"])
        r = api.post(f"/api/contexts/{cid}/messages", json={"content": "Slow, no script"})
        assert r.status_code == 202
    page = tabs.new(javascript=False)
    page.goto(f"{moody_web.url}/contexts/{cid}")  # loaded while the answer streams
    assert _state(moody_web, cid) != "Idle"
    page.get_by_role("button", name="Stop").click()
    page.wait_for_url(f"{moody_web.url}/contexts/{cid}")
    assert page.locator("#state").inner_text() == "Idle"
    assert (
        page.get_by_role("button", name="Stop").count() == 0
        or page.locator("#stop-form").is_hidden()
    )
    assert page.locator("#conversation").get_by_text("Cancelled").count() == 1


def test_new_conversation_comes_first_and_the_list_has_pages(open_web: Web, tabs: Tabs) -> None:
    with open_web.api(None) as api:
        made = [str(api.post("/api/contexts", json={}).json()["id"]) for _ in range(25)]
        total = len(api.get("/api/contexts").json()["contexts"])
    page = tabs.new(width=390, height=800)
    page.goto(f"{open_web.url}/")
    create = page.get_by_role("button", name="Create")
    assert create.bounding_box()["y"] < 800  # on the first screen, before the list
    form_y = page.locator("#new-h").bounding_box()["y"]
    assert form_y < page.locator("#contexts").bounding_box()["y"]
    rows = page.locator("#contexts tbody tr")
    assert rows.count() == 20 < total
    # an untitled row shows its id once
    newest = page.locator(f'tr[data-context="{made[-1]}"]')
    assert newest.inner_text().count(made[-1]) == 1
    assert "untitled" in newest.inner_text()
    page.get_by_role("link", name="Older").click()
    assert page.locator("#contexts tbody tr").count() == min(20, total - 20)
    assert page.locator(f'tr[data-context="{made[-1]}"]').count() == 0
    page.get_by_role("link", name="Newer").click()
    assert page.locator(f'tr[data-context="{made[-1]}"]').count() == 1


def test_a_pending_call_is_shown_once(web: Web, tabs: Tabs) -> None:
    cid = web.conversation("Shown once", approve=False)
    page = tabs.new()
    log_in(page, web.url, "token-alice")
    page.goto(f"{web.url}/contexts/{cid}")
    with web.api() as api:
        call_id = api.get(f"/api/contexts/{cid}/state").json()["pending_tool_calls"][0]["id"]
    assert page.locator(f'[data-call="{call_id}"]').count() == 1
    assert page.locator(".args").count() == 1  # its arguments, once
    link = page.get_by_role("link", name="waiting for your decision, below")
    assert link.get_attribute("href") == f"#decide-{call_id}"
    assert page.locator(f"#decide-{call_id}").get_by_role("button", name="Approve get_weather")
    page.get_by_role("button", name="Approve get_weather").click()
    page.locator("#conversation").get_by_text("The weather in Paris is").wait_for()
    assert page.locator(f'[data-call="{call_id}"]').count() == 1  # now in the message
    assert "approved by human" in page.locator(f'[data-call="{call_id}"]').inner_text()


def test_the_live_status_says_it_in_words(web: Web, tabs: Tabs) -> None:
    cid = web.conversation("In words")
    page = tabs.new()
    log_in(page, web.url, "token-alice")
    page.goto(f"{web.url}/contexts/{cid}")
    page.locator("body[data-live=open]").wait_for()
    seen: list[Any] = []
    page.on("console", lambda m: seen.append(m.text))
    page.evaluate(
        """() => { window.__said = [];
        const el = document.getElementById('live-status');
        new MutationObserver(() => window.__said.push(el.textContent))
          .observe(el, {childList: true, characterData: true, subtree: true}); }"""
    )
    page.get_by_label("Message", exact=True).fill("Hello again")
    page.get_by_role("button", name="Send").click()
    page.locator("#conversation").get_by_text("Hello again").wait_for()
    page.locator("#state:text('Idle')").wait_for()
    for _ in range(100):
        said = page.evaluate("window.__said")
        if said and said[-1].startswith("Answered"):
            break
        page.wait_for_timeout(50)
    said = [s for s in page.evaluate("window.__said") if s not in ("sending…", "sent")]
    assert said[-1] == "Answered; ready for a message", said
    assert "The model is answering" in said, said
    for s in said:
        assert "(" not in s and "_" not in s and "LLM" not in s, said  # no raw names
