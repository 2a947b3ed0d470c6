"""Every page reads in a phone's 390 px and a laptop's 1,280 px (``pytest -m
browser``): the page never scrolls sideways, no cell's text spills out of its
cell, a wide table or diagram scrolls inside its own box with its labels
whole, and the contexts list shows every column (docs/web.md)."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Tabs, Web, log_in

pytestmark = pytest.mark.browser

# cells whose text is wider than the cell (it spills over, or is cut)
SPILLED = """() => [...document.querySelectorAll('main :is(th, td, dd, .state, .badge)')]
  .filter(el => el.getClientRects().length && el.scrollWidth > el.clientWidth + 1)
  .map(el => el.tagName + ': ' + el.textContent.trim().slice(0, 60))"""
# text of a diagram outside the diagram's own drawing
CUT_LABELS = """() => [...document.querySelectorAll('main svg')].flatMap(svg => {
  const box = svg.getBoundingClientRect();
  return [...svg.querySelectorAll('text')].filter(t => {
    const r = t.getBoundingClientRect();
    return r.width > 0 && (r.left < box.left - 1 || r.right > box.right + 1
                           || r.top < box.top - 1 || r.bottom > box.bottom + 1);
  }).map(t => t.textContent);
})"""
# boxes that scroll sideways: they must be the page's scrolling boxes
SCROLLERS = """() => [...document.querySelectorAll('main *')]
  .filter(el => el.scrollWidth > el.clientWidth + 1
          && ['auto', 'scroll'].includes(getComputedStyle(el).overflowX))
  .map(el => el.className || el.tagName)"""


def _pages(web: Web, cid: str) -> list[str]:
    audit = f"/contexts/{cid}/audit"
    return ["/", f"/contexts/{cid}", audit, f"{audit}?turn=1", "/contexts/nope"]


@pytest.mark.parametrize("width", [390, 1280])
def test_every_page_reads_at(web: Web, tabs: Tabs, width: int) -> None:
    cid = web.conversation(f"Narrow at {width} px, a title long enough to wrap on a phone")
    with web.api() as api:  # a second turn, waiting: the diagram has more to draw
        api.post(
            f"/api/contexts/{cid}/messages?wait=true",
            json={"content": "And the weather in Rio de Janeiro?"},
        )
    page = tabs.new(width=width, height=800)
    log_in(page, web.url, "token-alice")
    for path in _pages(web, cid):
        page.goto(web.url + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow} px wider than a {width} px window"
        assert page.evaluate(SPILLED) == [], path
        assert page.evaluate(CUT_LABELS) == [], path
        scrollers = page.evaluate(SCROLLERS)
        assert all(s in ("scroll", "diagram") for s in scrollers), (path, scrollers)


def test_the_list_shows_every_column_at_390(web: Web, tabs: Tabs) -> None:
    cid = web.conversation("Columns on a phone")
    page = tabs.new(width=390, height=800)
    log_in(page, web.url, "token-alice")
    row = page.locator(f'tr[data-context="{cid}"]')
    for cell in row.locator("td").all():
        box: Any = cell.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
        assert cell.is_visible()
    text = row.inner_text()
    assert "Idle" in text and "demo" in text and "UTC" in text
    assert page.evaluate(SCROLLERS) == []  # the list itself does not scroll sideways


def test_the_diagram_is_readable_at_390(web: Web, tabs: Tabs) -> None:
    cid = web.conversation("Diagram on a phone")
    page = tabs.new(width=390, height=800)
    log_in(page, web.url, "token-alice")
    page.goto(f"{web.url}/contexts/{cid}/audit")
    label = page.locator("#run-path svg text", has_text="ProcessingLLMResponse").first
    box: Any = label.bounding_box()
    size = page.evaluate("(t) => t.getBoundingClientRect().height", label.element_handle())
    assert size >= 9, f"the diagram's labels are {size:.1f} px high"
    assert box is not None
    assert page.locator("#run-path").evaluate("el => el.scrollWidth > el.clientWidth")
