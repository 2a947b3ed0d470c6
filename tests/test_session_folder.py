"""A folder of session files, ``{id}.json`` each, read into contexts and written
back: the application's fields, the file name as the context id, one bad file
reported without stopping the others, what the format cannot hold listed, and
an export then an import giving the same messages.

The fixtures in ``fixtures/sessions`` are the examples of the application's
data-structure document, verbatim in their fields:

- ``0b7e6c1a-...json``: the entity diagram's ``Session`` (``id``, ``title``,
  ``created_at``, ``updated_at``) with records of every field the diagram gives a
  ``MessageRecord`` (``type``, ``role`` system|user|assistant, ``content``,
  ``binary_content``, ``timestamp``) and a ``ToolCallRecord`` (``type``,
  ``tool_call_id``, ``tool_name``, ``arguments``, ``result``, ``success``,
  ``timestamp``);
- ``1c8f7d2b-...json``: the storage box's records, ``{type: 'message', role,
  content}`` and ``{type: 'tool_call', tool_call_id, tool_name, arguments,
  result, success}``, with no other field;
- ``2d9a8e3c-...json``: the truncation example's history, Msg1, Tool1 and
  Result1, Msg2, Tool2 and Result2, Msg3, Tool3 and Result3.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import string
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit import examples  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm.adapters.inbound.importers import (
    SessionFileError,
    import_session_records,
    read_session_file,
    read_session_folder,
)
from turnfsm.adapters.outbound import left_out, write_session_file
from turnfsm.adapters.outbound.exporters import write_atomically
from turnfsm.errors import InvalidInput
from turnfsm.model import (
    ApprovalStatus,
    Branch,
    ChatContext,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    Role,
    TextPart,
    ToolCallRequest,
    ToolCallResult,
)

SESSIONS = Path(__file__).parent / "fixtures" / "sessions"
ER_SESSION = SESSIONS / "0b7e6c1a-2f4d-4e8a-9c3b-5d6e7f8a9b0c.json"
STORAGE_BOX = SESSIONS / "1c8f7d2b-3a5e-4f9b-8d4c-6e7f8a9b0c1d.json"
TRUNCATION = SESSIONS / "2d9a8e3c-4b6f-4a0c-9e5d-7f8a9b0c1d2e.json"
NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)

# the fields the document gives each structure
SESSION_FIELDS = {"id", "title", "created_at", "updated_at", "records"}
MESSAGE_FIELDS = {"type", "role", "content", "binary_content", "timestamp"}
TOOL_FIELDS = {"type", "tool_call_id", "tool_name", "arguments", "result", "success", "timestamp"}
STORAGE_MESSAGE = {"type", "role", "content"}
STORAGE_TOOL = {"type", "tool_call_id", "tool_name", "arguments", "result", "success"}


def load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def conversation(ctx: ChatContext) -> list[tuple[Any, ...]]:
    """The active branch as the session format keeps it: texts, calls, results, times."""
    out: list[tuple[Any, ...]] = []
    for node in ctx.history():
        m = node.message
        when = m.metadata.created_at
        if m.tool_result is not None:
            r = m.tool_result
            out.append(("result", r.request_id, r.result, r.success, when))
            continue
        if m.content or not m.tool_calls:
            out.append(("message", m.role.value, m.text, when))
        for c in m.tool_calls or []:
            args = c.raw_arguments if c.raw_arguments is not None else c.arguments
            out.append(("call", c.id, c.tool_name, args))
    return out


def export_then_read(ctx: ChatContext, folder: Path) -> ChatContext:
    done = write_session_file(folder, ctx)
    assert done.file == folder / f"{ctx.id}.json"
    return read_session_file(done.file, now=NOW)


# --- the document's examples ---------------------------------------------------------------


def test_the_fixtures_hold_exactly_the_documents_fields() -> None:
    er = load(ER_SESSION)
    assert set(er) == SESSION_FIELDS
    kinds = {r["type"]: set(r) for r in er["records"]}
    assert kinds == {"message": MESSAGE_FIELDS, "tool_call": TOOL_FIELDS}
    assert {r["role"] for r in er["records"] if r["type"] == "message"} == {
        "system",
        "user",
        "assistant",
    }
    box = load(STORAGE_BOX)["records"]
    assert {frozenset(r) for r in box} == {frozenset(STORAGE_MESSAGE), frozenset(STORAGE_TOOL)}
    rounds = load(TRUNCATION)["records"]
    assert [r.get("content") or r.get("result") for r in rounds[:-1]] == [
        "Msg1",
        "Result1",
        "Msg2",
        "Result2",
        "Msg3",
        "Result3",
    ]


def test_the_folder_gives_one_context_per_file_named_by_it() -> None:
    got = list(read_session_folder(SESSIONS, now=NOW))
    assert [g.error for g in got] == [None, None, None]
    assert [g.context.id for g in got if g.context] == [
        ER_SESSION.stem,
        STORAGE_BOX.stem,
        TRUNCATION.stem,
    ]
    er = got[0].context
    assert er is not None
    assert er.config.title == "Core data structures: a session and its records"
    assert conversation(er) == [
        ("message", "system", "You are a helpful assistant.", datetime(2025, 6, 2, 8, tzinfo=UTC)),
        (
            "message",
            "user",
            "What is the weather in Paris?",
            datetime(2025, 6, 2, 8, 0, 5, tzinfo=UTC),
        ),
        ("call", "call_1", "get_weather", {"city": "Paris"}),
        (
            "result",
            "call_1",
            {"temp_c": 21, "sky": "clear"},
            True,
            datetime(2025, 6, 2, 8, 0, 7, tzinfo=UTC),
        ),
        (
            "message",
            "assistant",
            "It is clear in Paris, 21 C.",
            datetime(2025, 6, 2, 8, 0, 9, tzinfo=UTC),
        ),
    ]


@pytest.mark.parametrize("fixture", [ER_SESSION, STORAGE_BOX, TRUNCATION], ids=lambda p: p.stem[:8])
def test_each_example_is_written_back_in_the_documents_fields(
    fixture: Path, tmp_path: Path
) -> None:
    ctx = read_session_file(fixture, now=NOW)
    back = export_then_read(ctx, tmp_path)
    assert conversation(back) == conversation(ctx)
    written = load(tmp_path / fixture.name)
    assert set(written) == SESSION_FIELDS
    assert written["id"] == load(fixture)["id"]
    for record in written["records"]:
        fields = MESSAGE_FIELDS if record["type"] == "message" else TOOL_FIELDS
        assert set(record) == fields, record
        # ISO 8601 in UTC, as the application's datetime fields read it
        assert datetime.fromisoformat(record["timestamp"]).utcoffset() == timedelta(0)
    original = load(fixture)["records"]
    tools = [(r["tool_call_id"], r["result"], r["success"]) for r in original if "success" in r]
    assert [
        (r["tool_call_id"], r["result"], r["success"])
        for r in written["records"]
        if r["type"] == "tool_call"
    ] == tools


# --- bad files -----------------------------------------------------------------------------


def test_a_bad_file_names_itself_and_its_json_path_and_the_others_still_come(
    tmp_path: Path,
) -> None:
    shutil.copy(ER_SESSION, tmp_path / "a.json")
    (tmp_path / "b.json").write_text(
        json.dumps({"records": [{"type": "message", "role": "user"}, {"type": "tool_call"}]})
    )
    (tmp_path / "c.json").write_text('{"records": [')
    (tmp_path / "d.json").write_bytes(b'{"records": "\xff"}')
    (tmp_path / ".e.json").write_text(ER_SESSION.read_text())
    shutil.copy(STORAGE_BOX, tmp_path / "z.json")
    (tmp_path / "notes.txt").write_text("not a session")
    (tmp_path / "sub.json").mkdir()
    got = {g.file.name: g for g in read_session_folder(tmp_path, now=NOW)}
    assert sorted(got) == [".e.json", "a.json", "b.json", "c.json", "d.json", "z.json"]
    assert [n for n, g in got.items() if g.context is not None] == ["a.json", "z.json"]
    errors = {n: g.error for n, g in got.items() if g.error is not None}
    assert all(
        isinstance(e, SessionFileError) and isinstance(e, InvalidInput) for e in errors.values()
    )
    assert {n: (e.file, e.path) for n, e in errors.items() if e} == {
        ".e.json": (tmp_path / ".e.json", "$"),
        "b.json": (tmp_path / "b.json", "$.records[1].tool_call_id"),
        "c.json": (tmp_path / "c.json", "$"),
        "d.json": (tmp_path / "d.json", "$"),
    }
    assert "cannot be a context id: starts with a dot" in str(errors[".e.json"])
    assert str(errors["b.json"]).startswith(f"{tmp_path / 'b.json'}: $.records[1].tool_call_id: ")
    assert "tool_call_id" in str(errors["b.json"])
    assert "not JSON" in str(errors["c.json"])
    assert "not UTF-8" in str(errors["d.json"])


def test_an_id_that_cannot_be_a_file_name_is_refused_and_nothing_written(tmp_path: Path) -> None:
    ctx = dataclasses.replace(read_session_file(ER_SESSION, now=NOW), id="../escape")
    with pytest.raises(InvalidInput, match="cannot be a file name: holds a path separator"):
        write_session_file(tmp_path, ctx)
    assert list(tmp_path.iterdir()) == []
    assert list(tmp_path.parent.glob("escape.json")) == []


def test_the_file_name_and_the_documents_id_always_agree(tmp_path: Path) -> None:
    """A session imported as one file gets a context id of its own; its export
    is named by that id and says so inside, as ``{id}.json`` must."""
    ctx = import_session_records(load(ER_SESSION), now=NOW)
    assert ctx.id != ER_SESSION.stem
    done = write_session_file(tmp_path, ctx)
    assert done.file.name == f"{ctx.id}.json"
    assert next(iter(load(done.file))) == "id"
    assert load(done.file)["id"] == ctx.id
    assert done.left_out == (
        f"the session id {ER_SESSION.stem!r} kept from an import (written as the file's name)",
    )


# --- what the format cannot hold ------------------------------------------------------------


def _msg(role: Role, **fields: Any) -> InternalMessage:
    return InternalMessage(role=role, metadata=MessageMetadata(created_at=NOW), **fields)


def test_what_the_format_cannot_hold_is_listed(tmp_path: Path) -> None:
    history = [
        _msg(Role.USER, content=[TextPart(text="book it")]),
        _msg(
            Role.ASSISTANT,
            thinking="which day?",
            tool_calls=[
                ToolCallRequest(
                    id="c1",
                    tool_name="book",
                    approval_status=ApprovalStatus.DENIED,
                    decided_by="human",
                ),
                ToolCallRequest(id="c2", tool_name="book", approval_status=ApprovalStatus.PENDING),
            ],
        ),
        _msg(
            Role.TOOL, tool_result=ToolCallResult(request_id="c1", result="denied", success=False)
        ),
    ]
    pool = {
        f"m{i}": MessageNode(id=f"m{i}", message=m, parent_id=f"m{i - 1}" if i else None)
        for i, m in enumerate(history)
    }
    ctx = ChatContext(
        id="held",
        message_pool=pool,
        branches={
            "main": Branch(name="main", message_ids=list(pool)),
            "retry": Branch(name="retry", message_ids=["m0"], forked_from="main"),
        },
        current_state="AwaitingToolApproval",
        created_at=NOW,
        updated_at=NOW,
    )
    assert left_out(ctx) == [
        "1 other branch: retry",
        "1 approval decision: c1 Denied by human",
        "thinking of 1 message",
        "1 call with no result yet, written with the missing result: c2",
        "the state AwaitingToolApproval",
    ]
    done = write_session_file(tmp_path, ctx)
    assert done.left_out == tuple(left_out(ctx))
    assert done.records == 3  # the user message and the two calls
    plain = read_session_file(ER_SESSION, now=NOW)
    assert left_out(plain) == []


# --- the atomic write -----------------------------------------------------------------------


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "s.json"
    target.write_text('{"old": true}')
    real_write = os.write

    def half_then_full_disk(fd: int, data: Any) -> int:
        if len(data) > 4:
            return real_write(fd, bytes(data[:4]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(target, b'{"new": true, "padding": "' + b"x" * 100 + b'"}')
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]
    assert load(target) == {"old": True}


# --- export then import, over generated conversations -----------------------------------------

_TEXT = st.text(string.ascii_letters + string.digits + " .,!?é€😀\n", min_size=1, max_size=30)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
_SECONDS = st.integers(0, 10**6)


@st.composite
def _record(draw: st.DrawFn, index: int) -> dict[str, Any]:
    at = (datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=draw(_SECONDS))).isoformat()
    if draw(st.booleans()):
        return {
            "type": "message",
            "role": draw(st.sampled_from(["system", "user", "assistant"])),
            "content": draw(_TEXT),
            "binary_content": [],
            "timestamp": at,
        }
    return {
        "type": "tool_call",
        "tool_call_id": f"call_{index}",
        "tool_name": draw(st.sampled_from(["search", "get_weather", "book"])),
        "arguments": draw(st.dictionaries(_TEXT, _JSON, max_size=3)),
        "result": draw(_JSON),
        "success": draw(st.booleans()),
        "timestamp": at,
    }


@st.composite
def _session(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 8))
    return {
        "id": draw(st.uuids()).hex,
        "title": draw(st.none() | _TEXT.filter(lambda t: "\n" not in t)),
        "created_at": "2025-01-01T00:00:00Z",
        "updated_at": "2025-01-02T00:00:00Z",
        "records": [draw(_record(i)) for i in range(n)],
    }


@settings(max_examples=examples(40), deadline=None)
@given(sessions=st.lists(_session(), min_size=1, max_size=3, unique_by=lambda s: s["id"]))
def test_export_then_import_gives_the_same_messages(sessions: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as out:
        for s in sessions:
            (Path(src) / f"{s['id']}.json").write_text(json.dumps(s), "utf-8")
        first = [g.context for g in read_session_folder(Path(src), now=NOW)]
        for ctx in first:
            assert ctx is not None
            write_session_file(Path(out), ctx)
        second = {g.file.stem: g.context for g in read_session_folder(Path(out), now=NOW)}
        assert sorted(second) == sorted(s["id"] for s in sessions)
        for ctx in first:
            assert ctx is not None
            back = second[ctx.id]
            assert back is not None
            assert conversation(back) == conversation(ctx)
            assert back.config.title == ctx.config.title
            assert (back.created_at, back.updated_at) == (ctx.created_at, ctx.updated_at)
        for s in sessions:  # and the records themselves, field for field
            written = load(Path(out) / f"{s['id']}.json")
            assert written["records"] == [
                {**r, "timestamp": _utc(r["timestamp"])} for r in s["records"]
            ]


def _utc(stamp: str) -> str:
    """A timestamp as the export writes it: ISO 8601, UTC as ``Z``."""
    return datetime.fromisoformat(stamp).isoformat().replace("+00:00", "Z")
