"""The web view's live line shows a tool call's arguments as the model streams
them (``ToolCallArgumentsDelta``), in a real Chromium (``pytest -m browser``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from server.ui_server import Reply, UiServer, serve, text_stream
from server.ui_server import tool_call_stream as calls

from .conftest import Tabs, log_in

pytestmark = pytest.mark.browser

ARGS = {"a": 2, "b": 40}


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[UiServer]:
    yield from serve(tmp_path)


def test_the_live_line_shows_the_arguments_as_they_come(ui: UiServer, tabs: Tabs) -> None:
    slow = Reply(events=calls([("call_add", "add", ARGS)], piece=2), event_delay=0.15)
    ui.model.script(slow, Reply(events=text_stream(["42."])))
    with ui.client() as c:
        cid = c.post("/api/contexts", json={}).json()["id"]
    page = tabs.new()
    log_in(page, ui.url, "token-alice")
    page.goto(f"{ui.url}/contexts/{cid}")
    page.wait_for_function("() => window.EventSource !== undefined")
    with ui.client() as c:
        c.post(f"/api/contexts/{cid}/messages", json={"content": "add"})
    # part of the arguments, before the call is complete
    page.wait_for_function(
        "() => document.getElementById('live').textContent.startsWith('add({\"a\": 2')"
    )
    seen = page.inner_text("#live")
    assert seen.startswith("add(") and len(seen) < len('add({"a": 2, "b": 40}') + 1
