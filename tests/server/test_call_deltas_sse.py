"""A tool call's arguments as they stream, on ``GET /api/contexts/{id}/events``:
``ToolCallArgumentsDelta`` frames with their seq as ``id:``, replayed to a
stream that resumes with ``Last-Event-ID`` as every event is, and never stored."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_events import Sse, read_events, until
from .test_rest import create
from .ui_server import ADD, BOOK, UiServer, serve, tool_turn


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[UiServer]:
    yield from serve(tmp_path)


def _pieces(events: list[Sse]) -> dict[str, str]:
    joined: dict[str, str] = {}
    for e in events:
        if e.event == "ToolCallArgumentsDelta":
            call = e.data["call_id"]
            joined[call] = joined.get(call, "") + e.data["delta"]
    return joined


def test_pieces_on_the_stream_and_on_resume(ui: UiServer) -> None:
    ui.model.script(*tool_turn()[:2])
    with ui.client() as c:
        cid = create(c)
        with c.stream("GET", f"/api/contexts/{cid}/events") as r:
            events = read_events(r)
            c.post(f"/api/contexts/{cid}/messages", json={"content": "add, then book"})
            got = [e for e in until(events, "TurnCompleted") if e.event != "Heartbeat"]
        pieces = [e for e in got if e.event == "ToolCallArgumentsDelta"]
        assert len(pieces) > 6
        assert all(e.data["kind"] == e.event for e in pieces)
        assert {(e.data["call_id"], e.data["tool_name"]) for e in pieces} == {
            ("call_add", "add"),
            ("call_book", "book"),
        }
        joined = _pieces(got)
        assert json.loads(joined["call_add"]) == ADD and json.loads(joined["call_book"]) == BOOK
        assert [int(e.id or 0) for e in got] == list(range(1, len(got) + 1))  # id: the seq

        # resumed from before the first piece: the same pieces, the same ids
        before = int(pieces[0].id or 0) - 1
        with c.stream(
            "GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": str(before)}
        ) as r:
            again = [e for e in until(read_events(r), "TurnCompleted") if e.event != "Heartbeat"]
        assert [(e.id, e.data) for e in again if e.event == "ToolCallArgumentsDelta"] == [
            (e.id, e.data) for e in pieces
        ]
    # sent, never stored: the event log keeps none of them
    with sqlite3.connect(ui.db) as db:
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            if "kind" in columns:
                kinds = {k for (k,) in db.execute(f"SELECT DISTINCT kind FROM {table}")}
                assert "ToolCallArgumentsDelta" not in kinds, table
