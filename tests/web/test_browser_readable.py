"""Text the web view must keep readable (``pytest -m browser``): the contexts
list's caption on a phone's 390 px reads as a line, not a word per line; the
run-path diagram's edge labels on a laptop's 1,280 px are as large as the
page's small print, not shrunk with the diagram to fit the column."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .conftest import Tabs, Web, log_in

pytestmark = pytest.mark.browser

MIN_LABEL_PX = 11.0
"""The smallest text the diagram may show, in CSS pixels (the figure's caption
is 0.9rem, 14.4 px; Graphviz's edge labels are 9 pt, 12 px at scale 1)."""


def _shot(page: Any, tmp_path: Path, name: str) -> None:
    """A screenshot for people (under ``$TURNFSM_SHOTS`` when set, else the tmp dir)."""
    folder = Path(os.environ.get("TURNFSM_SHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=False)


def test_the_lists_caption_is_a_line_at_390(web: Web, tabs: Tabs, tmp_path: Path) -> None:
    web.conversation("Caption on a phone")
    page = tabs.new(width=390, height=800)
    log_in(page, web.url, "token-alice")
    caption = page.locator("#contexts caption")
    text = caption.inner_text()
    assert text.endswith("most recent first"), text
    box: Any = caption.bounding_box()
    line = page.evaluate(
        "(el) => parseFloat(getComputedStyle(el).lineHeight)", caption.element_handle()
    )
    _shot(page, tmp_path, "contexts-390")
    assert box is not None and box["width"] >= 300, f"the caption is {box} wide"
    assert box["height"] <= 2 * line + 1, f"{text!r} takes {box['height'] / line:.1f} lines"


@pytest.mark.parametrize("width", [1280, 390])
def test_the_diagrams_edge_labels_are_readable(
    web: Web, tabs: Tabs, tmp_path: Path, width: int
) -> None:
    cid = web.conversation(f"Diagram labels at {width} px")
    page = tabs.new(width=width, height=900)
    log_in(page, web.url, "token-alice")
    page.goto(f"{web.url}/contexts/{cid}/audit")
    figure = page.locator("#run-path")
    figure.scroll_into_view_if_needed()
    _shot(page, tmp_path, f"audit-{width}")
    # every text of the drawing (states, triggers on the edges, counts, the
    # title), at the size it is drawn: its font size times the drawing's scale
    sizes = page.evaluate(
        """() => [...document.querySelectorAll('#run-path svg text')].map(t => [
             t.textContent,
             parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a])"""
    )
    assert any(text.startswith("user_message") for text, _ in sizes), sizes
    small = [(text, round(s, 1)) for text, s in sizes if s < MIN_LABEL_PX]
    assert small == [], f"text under {MIN_LABEL_PX} px at {width} px wide: {small[:8]}"
    # the page does not scroll sideways: the figure does, opened on the current state
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert figure.evaluate("el => el.scrollWidth > el.clientWidth")
    current: Any = page.locator("#run-path #s_Idle").bounding_box()
    frame: Any = figure.bounding_box()
    assert current is not None and frame is not None
    assert frame["x"] <= current["x"], (frame, current)
    assert current["x"] + current["width"] <= frame["x"] + frame["width"], (frame, current)
