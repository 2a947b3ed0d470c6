"""The audit page gives one count of a context's steps, from its audit log's
records: the verification banner and the run-path diagram's title say the same,
and say which of the steps are transitions (drawn) and which are changes (a
title set, a branch made), which the diagram does not draw."""

from __future__ import annotations

import html
import re
import shutil

import pytest

from .conftest import Web

pytestmark = pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz")


def _banner(page: str) -> str:
    found = re.search(r'<p id="verdict"[^>]*>([\s\S]*?)</p>', page)
    assert found is not None, page
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).split())


def _diagram_title(page: str) -> str:
    found = re.search(r'<figure class="diagram" id="run-path"[^>]*>([\s\S]*?)</figure>', page)
    assert found is not None, page
    texts = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", found.group(1))]
    titled = [t for t in texts if t.startswith("context ")]
    assert len(titled) == 1, texts
    return titled[0]


def test_the_banner_and_the_diagram_give_one_count(web: Web) -> None:
    cid = web.conversation("Counted once")
    with web.api() as api:
        assert api.put(f"/api/contexts/{cid}", json={"title": "Counted, renamed"}).is_success
        steps = api.get(f"/api/contexts/{cid}/audit").text.strip().split("\n")
    transitions = sum('"config_updated"' not in line for line in steps)
    assert transitions == len(steps) - 1  # the title's change is a step, not a transition
    counted = f"{len(steps)} steps: {transitions} transitions and 1 change"
    with web.page_client() as tab:
        page = tab.get(f"/contexts/{cid}/audit").text
    assert _banner(page).startswith(f"Verified — ok: {counted}, declared edges only")
    assert _diagram_title(page) == f"context {cid} (now Idle, {counted})"


def test_without_changes_the_count_is_plain(web: Web) -> None:
    cid = web.conversation("No changes")
    with web.api() as api:
        steps = api.get(f"/api/contexts/{cid}/audit").text.strip().split("\n")
    with web.page_client() as tab:
        page = tab.get(f"/contexts/{cid}/audit").text
    assert f"ok: {len(steps)} steps, declared edges only" in _banner(page)
    assert _diagram_title(page) == f"context {cid} (now Idle, {len(steps)} steps)"
