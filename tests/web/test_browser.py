"""The web view in a real headless Chromium (``pytest -m browser``): a real
uvicorn on 127.0.0.1 with two tenants, Debian's Chromium driven by Playwright."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Tabs, Web, log_in

pytestmark = pytest.mark.browser

# what the page's script saw of an element's text, every time it changed
RECORD = """(selector) => {
  window.__seen = [];
  const el = document.querySelector(selector);
  new MutationObserver(() => window.__seen.push(el.textContent))
    .observe(el, {childList: true, characterData: true, subtree: true});
}"""
TAKEN = "#1565c0"
NOT_TAKEN = "#cfd8dc"


def wait_until(page: Any, script: str, seconds: float = 20) -> None:
    """Poll ``script`` in the page until it is true (``wait_for_function`` evaluates
    strings, which the pages' Content-Security-Policy forbids)."""
    for _ in range(int(seconds / 0.05)):
        if page.evaluate(script):
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"never true: {script}: {page.evaluate('window.__seen')}")


def edge_stroke(page: Any, edge_id: str) -> str:
    return str(page.locator(f"#run-path svg g#{edge_id} path").first.get_attribute("stroke"))


def test_a_turn_from_the_page_and_its_audit(web: Web, tabs: Tabs) -> None:
    page = tabs.new()
    log_in(page, web.url, "token-alice")
    page.get_by_label("Title (optional)").fill("Browser weather")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(f"{web.url}/contexts/*")
    context_url = page.url
    assert page.locator("h1").inner_text() == "Browser weather"

    # a message sent from the page; its answer streams in piece by piece
    page.locator("body[data-live=open]").wait_for()
    page.evaluate(RECORD, "#live")
    page.get_by_label("Message", exact=True).fill("Hello there")
    page.get_by_role("button", name="Send").click()
    answer = "I am the demo model. Ask me about the weather in a city."
    page.locator("#conversation").get_by_text(answer).wait_for()
    seen = [s for s in page.evaluate("window.__seen") if s]
    assert any(answer.startswith(s) and s != answer for s in seen), seen  # a partial answer
    assert len(set(seen)) >= 3, seen
    assert page.locator("#state").inner_text() == "Idle"

    # a tool call waits; the Approve button runs it
    page.get_by_label("Message", exact=True).fill("What's the weather in Paris?")
    page.get_by_role("button", name="Send").click()
    approve = page.get_by_role("button", name="Approve get_weather")
    approve.wait_for()
    assert page.locator("#state").inner_text() == "AwaitingToolApproval"
    approve.click()
    page.locator("#conversation").get_by_text("The weather in Paris is").wait_for()
    assert page.locator("#conversation").get_by_text("approved by human").count() == 1
    assert page.get_by_role("button", name="Approve get_weather").count() == 0

    # the audit page: the edges taken are drawn over the machine, the log verifies
    page.get_by_role("link", name="Audit").click()
    page.wait_for_url(f"{context_url}/audit")
    page.locator("#run-path svg").wait_for()
    for taken in (
        "e_Idle__user_message",
        "e_AwaitingLLMResponse__stream_started",
        "e_ProcessingLLMResponse__needs_approval",
        "e_AwaitingToolApproval__approvals_resolved",
        "e_ExecutingTools__tools_done",
    ):
        assert edge_stroke(page, taken) == TAKEN, taken
    assert "x2" in str(page.locator("#run-path svg g#e_Idle__user_message text").text_content())
    for never in ("e_AwaitingLLMResponse__llm_failed_transient", "e_PermanentFailure__reset"):
        assert edge_stroke(page, never) == NOT_TAKEN, never
    verdict = page.locator("#verdict")
    assert "Verified" in verdict.inner_text()
    assert "ending in Idle; 1 tool calls, all resolved" in verdict.inner_text()
    assert page.locator("#sequence").get_by_text("approve call_").count() >= 1

    # the other tenant sees none of it
    other = tabs.new()
    log_in(other, web.url, "token-bob")
    assert other.locator("#contexts").count() == 0
    assert other.get_by_text("Browser weather").count() == 0
    for url in (context_url, f"{context_url}/audit"):
        response = other.goto(url)
        assert response is not None and response.status == 404
        assert other.get_by_text("Browser weather").count() == 0
        assert other.locator("h1").inner_text() == "Not found"


def test_deny_with_a_reason(web: Web, tabs: Tabs) -> None:
    cid = web.conversation("Browser deny", approve=False)
    page = tabs.new()
    log_in(page, web.url, "token-alice")
    page.goto(f"{web.url}/contexts/{cid}")
    page.get_by_label("Reason (sent to the model when you deny)").fill("not in this test")
    page.get_by_role("button", name="Deny").click()
    page.locator("#conversation").get_by_text("I could not get the weather").wait_for()
    assert page.locator("#conversation").get_by_text("denied by human").count() == 1
    assert page.locator("#conversation").get_by_text("Reason: not in this test").count() == 1


def test_the_running_count_is_live(web: Web, tabs: Tabs) -> None:
    cid = web.conversation("Browser count")
    page = tabs.new()
    log_in(page, web.url, "token-alice")
    assert page.locator("#running-count").inner_text() == "0"
    page.evaluate(RECORD, "#running-count")
    page.locator("body[data-live=open]").wait_for()  # the page's stream is open
    with web.api() as api:
        r = api.post(f"/api/contexts/{cid}/messages", json={"content": "Tell me a story"})
        assert r.status_code == 202
    wait_until(page, "window.__seen.includes('1') && window.__seen.at(-1) === '0'")
    row = page.locator(f'tr[data-context="{cid}"] .state')
    assert row.inner_text() == "Idle"


def test_pages_read_without_javascript(web: Web, tabs: Tabs) -> None:
    cid = web.conversation("No script")
    page = tabs.new(javascript=False)
    log_in(page, web.url, "token-alice")  # a plain form post
    assert page.locator(f'tr[data-context="{cid}"]').get_by_text("No script").count() == 1
    page.goto(f"{web.url}/contexts/{cid}")
    conversation = page.locator("#conversation")
    assert conversation.get_by_text("What's the weather in Paris?").count() == 1
    assert conversation.get_by_text("The weather in Paris is").count() == 1
    assert conversation.locator(".tool-call").count() == 1
    page.goto(f"{web.url}/contexts/{cid}/audit")
    assert page.locator("#run-path svg").is_visible()
    assert edge_stroke(page, "e_AwaitingToolApproval__approvals_resolved") == TAKEN
    assert "Verified" in page.locator("#verdict").inner_text()
    assert page.locator("#sequence tbody tr").count() > 5
    assert page.locator("#records tbody tr").count() > 5
    # and a message sent with the plain form, without a script
    page.goto(f"{web.url}/contexts/{cid}")
    page.get_by_label("Message", exact=True).fill("Thanks!")
    page.get_by_role("button", name="Send").click()
    page.wait_for_url(f"{web.url}/contexts/{cid}")
    with web.api() as api:
        texts = [
            m["message"]["content"][0]["text"]
            for m in api.get(f"/api/contexts/{cid}/messages").json()["messages"]
            if m["message"]["role"] == "user"
        ]
    assert texts[-1] == "Thanks!"


@pytest.mark.parametrize("width", [390, 1280])
def test_no_page_scrolls_sideways(web: Web, tabs: Tabs, width: int) -> None:
    cid = web.conversation(f"Layout at {width} px, with a long title to wrap somewhere")
    page = tabs.new(width=width, height=800)
    log_in(page, web.url, "token-alice")
    for path in ("/", f"/contexts/{cid}", f"/contexts/{cid}/audit"):
        page.goto(web.url + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow} px wider than a {width} px window"


def test_keyboard_reaches_the_decision_buttons(web: Web, tabs: Tabs) -> None:
    cid = web.conversation("Keyboard", approve=False)
    page = tabs.new()
    log_in(page, web.url, "token-alice")
    page.goto(f"{web.url}/contexts/{cid}")
    names = []
    for _ in range(30):
        page.keyboard.press("Tab")
        names.append(page.evaluate("document.activeElement.textContent.trim()"))
        if names[-1] == "Approve get_weather":
            break
    assert "Approve get_weather" in names, names
    page.keyboard.press("Enter")
    page.locator("#conversation").get_by_text("The weather in Paris is").wait_for()
