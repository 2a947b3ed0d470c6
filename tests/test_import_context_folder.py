"""Context folders another program wrote (metadata.json, message_index.json,
messages/{id}.json), imported as they are: ids, branches, calls, results,
state; fields turnfsm has no place for kept in metadata.extra; every problem a
ContextFolderError naming the file and the JSON path; nothing in the folder
ever changed.

The fixture ``data/contexts/uuid`` holds the layout document's own examples of
``metadata.json`` and ``message_index.json`` as the document gives them, with
the two message files they name; the other contexts are the variations a real
folder has (branches, tool calls and results, a pending call, unknown fields,
an unknown message type, a file the layout does not name, no index, no
messages folder)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from turnfsm.adapters.inbound import (
    ContextFolderError,
    context_folders,
    import_context_folder,
    import_context_folders,
)
from turnfsm.errors import InvalidInput
from turnfsm.model import ApprovalStatus, MessageType, Role, TokenUsage

DATA = Path(__file__).parent / "fixtures" / "context_folder" / "data"
DOC = "uuid"
TOOLS = "3f2b8c1e-9a4d-4e6b-8c2f-1d7e5a9b0c41"
PENDING = "b7e4c2a9-5d1f-4a3e-b8c6-0f9e8d7c6b52"
EMPTY = "e1d2c3b4-a596-4877-8899-aabbccddeeff"
M = [f"8a1d6f0e-2b3c-4d5e-9f60-7a8b9c0d1e2{i}" for i in range(1, 7)]


def at(y: int, mo: int, d: int, h: int, mi: int, s: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, s, tzinfo=UTC)


def tree_digest(root: Path) -> dict[str, str]:
    """Every file and folder under ``root`` (dot-names too): its bytes' hash, or ``dir``."""
    return {
        str(p.relative_to(root)): "dir"
        if p.is_dir()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A copy of the fixture's data folder, to damage."""
    copy = tmp_path / "data"
    shutil.copytree(DATA, copy)
    return copy


# ---------------------------------------------------------------------- what is kept


def test_the_documents_own_example_is_imported_as_written() -> None:
    ctx = import_context_folder(DATA / "contexts" / DOC)
    assert ctx.id == "uuid" and ctx.parent_id is None
    cfg = ctx.config
    assert (cfg.model_id, cfg.mode, cfg.parameters, cfg.system_prompt_id) == (
        "gpt-4",
        "code",
        {},
        "default",
    )
    assert (cfg.agent_role, cfg.workspace_path) == ("assistant", "/path/to/workspace")
    assert list(ctx.branches) == ["main"] and ctx.active_branch_name == "main"
    main = ctx.branches["main"]
    assert (main.message_ids, main.parent_message_id) == (["msg-1", "msg-2"], None)
    assert ctx.current_state == "Idle"
    assert (ctx.created_at, ctx.updated_at) == (at(2025, 11, 9, 10, 0), at(2025, 11, 9, 10, 5))
    first, second = ctx.history()
    assert [first.message.role, second.message.role] == [Role.USER, Role.ASSISTANT]
    assert [first.message.message_type, second.message.message_type] == [MessageType.TEXT] * 2
    # msg-1's file has no metadata: its time is the index's
    assert first.message.metadata.created_at == at(2025, 11, 9, 10, 0)
    assert second.message.metadata.created_at == at(2025, 11, 9, 10, 1)
    assert (second.parent_id, second.message.metadata.model) == ("msg-1", "gpt-4")
    assert second.message.text.startswith("There are two")


def test_branches_calls_results_and_unknown_fields_are_kept() -> None:
    ctx = import_context_folder(DATA / "contexts" / TOOLS)
    assert ctx.id == TOOLS
    assert ctx.branches["main"].message_ids == M[:5]
    short = ctx.branches["short"]
    assert (short.message_ids, short.parent_message_id) == ([*M[:4], M[5]], M[3])
    prompt = ctx.branches["main"].system_prompt
    assert prompt is not None and (prompt.id, prompt.content) == (
        "weather",
        "You answer weather questions.",
    )
    pool = ctx.message_pool
    calls = pool[M[1]].message.tool_calls
    assert calls is not None
    assert [(c.id, c.tool_name, c.arguments, c.approval_status) for c in calls] == [
        ("call_a1", "get_weather", {"city": "London"}, ApprovalStatus.APPROVED),
        ("call_a2", "get_weather", {"city": "Paris"}, ApprovalStatus.APPROVED),
    ]
    assert pool[M[1]].message.message_type is MessageType.TOOL_CALL
    assert pool[M[1]].message.metadata.usage == TokenUsage(120, 30, 150)
    results = [pool[m].message.tool_result for m in M[2:4]]
    assert [(r.request_id, r.result["temp_c"], r.success) for r in results if r] == [
        ("call_a1", 15, True),
        ("call_a2", 18, True),
    ]
    assert {pool[m].message.message_type for m in M[2:4]} == {MessageType.TOOL_RESULT}
    assert ctx.open_tool_calls() == []
    extra = [pool[m].message.metadata.extra for m in M]
    # the context's and its config's unknown fields, with the first message
    assert extra[0]["source"] == {
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "config": {"auto_generate_title": True},
    }
    assert extra[0]["index"] == {"preview": "Weather in London and Paris?"}
    assert extra[4] == {"rich_type": {"kind": "weather_card", "cities": 2}}
    # a message type none of turnfsm's: the message's own kind, the original kept
    assert pool[M[5]].message.message_type is MessageType.TEXT
    assert extra[5] == {"message_type": "summary"}


def test_a_pending_call_without_an_index_rests_awaiting_approval() -> None:
    ctx = import_context_folder(DATA / "contexts" / PENDING)
    assert ctx.current_state == "AwaitingToolApproval"
    assert [(c.id, c.tool_name) for c in ctx.pending_tool_calls()] == [("call_rm", "delete_path")]


def test_metadata_alone_is_a_context_without_messages() -> None:
    ctx = import_context_folder(DATA / "contexts" / EMPTY)
    assert (ctx.id, ctx.message_pool, ctx.branches["main"].message_ids) == (EMPTY, {}, [])


@pytest.mark.parametrize("where", ["data", "contexts", "one"])
def test_a_data_folder_its_contexts_folder_or_one_context(where: str) -> None:
    path = {"data": DATA, "contexts": DATA / "contexts", "one": DATA / "contexts" / TOOLS}[where]
    found = import_context_folders(path)
    expected = [TOOLS] if where == "one" else sorted([DOC, TOOLS, PENDING, EMPTY])
    assert [f.folder.name for f in found] == expected
    assert [f.context.id for f in found if f.context] == expected
    assert all(f.error is None for f in found)
    tools = next(f for f in found if f.folder.name == TOOLS)
    assert tools.not_read == ("system_prompt.json",)


def test_nothing_in_the_folder_changes() -> None:
    before = tree_digest(DATA)
    import_context_folders(DATA)
    assert tree_digest(DATA) == before


def test_a_folder_of_no_context_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    with pytest.raises(ContextFolderError) as info:
        context_folders(tmp_path)
    assert info.value.file == tmp_path / "metadata.json"
    assert "neither a context folder" in str(info.value)
    (tmp_path / "contexts").mkdir()
    with pytest.raises(ContextFolderError, match="holds no context folder"):
        context_folders(tmp_path)


# ---------------------------------------------------------------------- what is refused

Damage = Callable[[Path], None]


def edit(change: Callable[[Any], Any]) -> Damage:
    def damage(path: Path) -> None:
        data = json.loads(path.read_text())
        path.write_text(json.dumps(change(data) or data))

    return damage


def set_at(*keys: str | int, value: Any) -> Callable[[Any], None]:
    def change(data: Any) -> None:
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = value

    return change


def drop(*keys: str | int) -> Callable[[Any], None]:
    def change(data: Any) -> None:
        for key in keys[:-1]:
            data = data[key]
        del data[keys[-1]]

    return change


def write(text: str) -> Damage:
    return lambda path: path.write_text(text)


MSG1 = "messages/msg-1.json"
MSG2 = "messages/msg-2.json"
INDEX = "message_index.json"
META = "metadata.json"

CASES: list[tuple[str, str, Damage, str, str]] = [
    ("metadata not JSON", META, write('{"id": "uuid",'), "$", "not JSON"),
    ("metadata an array", META, write("[]"), "$", "must be an object, not an array"),
    ("metadata without id", META, edit(drop("id")), "$.id", "missing"),
    ("metadata without branches", META, edit(drop("branches")), "$.branches", "missing"),
    (
        "branches of the wrong type",
        META,
        edit(set_at("branches", value=[])),
        "$.branches",
        "must be an object",
    ),
    (
        "a branch without message_ids",
        META,
        edit(drop("branches", "main", "message_ids")),
        "$.branches.main.message_ids",
        "missing",
    ),
    (
        "a branch naming an unknown message",
        META,
        edit(set_at("branches", "main", "message_ids", 1, value="msg-9")),
        "$.branches.main.message_ids[1]",
        "no message 'msg-9': there is no file messages/msg-9.json",
    ),
    (
        "a branch forked at an unknown message",
        META,
        edit(set_at("branches", "main", "parent_message_id", value="msg-0")),
        "$.branches.main.parent_message_id",
        "no message 'msg-0'",
    ),
    (
        "a state in the middle of a turn",
        META,
        edit(set_at("current_state", value="StreamingLLMResponse")),
        "$.current_state",
        "the middle of a turn",
    ),
    ("a time that is not one", META, edit(set_at("created_at", value="soon")), "$.created_at", ""),
    (
        "a turnfsm files store's own context",
        META,
        edit(set_at("schema_version", value=1)),
        "$.schema_version",
        "turnfsm files store",
    ),
    ("message not JSON", MSG2, write("{"), "$", "not JSON"),
    ("message not UTF-8", MSG2, lambda p: p.write_bytes(b"\xff\xfe"), "$", "not UTF-8"),
    ("message without a message", MSG1, edit(drop("message")), "$.message", "missing"),
    ("message without a role", MSG1, edit(drop("message", "role")), "$.message.role", "missing"),
    (
        "role of the wrong type",
        MSG2,
        edit(set_at("message", "role", value=7)),
        "$.message.role",
        "must be a string",
    ),
    (
        "an unknown role",
        MSG2,
        edit(set_at("message", "role", value="robot")),
        "$.message.role",
        "'robot' is not a role",
    ),
    (
        "content of the wrong type",
        MSG2,
        edit(set_at("message", "content", value=5)),
        "$.message.content",
        "must be an array",
    ),
    (
        "a call without a tool name",
        MSG2,
        edit(set_at("message", "tool_calls", value=[{"id": "c1", "arguments": {}}])),
        "$.message.tool_calls[0].tool_name",
        "missing",
    ),
    (
        "a message of another id",
        MSG2,
        edit(set_at("id", value="msg-7")),
        "$.id",
        "the file is named msg-2.json",
    ),
    ("index not JSON", INDEX, write("nope"), "$", "not JSON"),
    ("index without messages", INDEX, write("{}"), "$.messages", "missing"),
    (
        "an index entry with no file",
        INDEX,
        edit(lambda d: d["messages"].append({"id": "msg-3", "role": "user"})),
        "$.messages[2].id",
        "no message 'msg-3': there is no file messages/msg-3.json",
    ),
    (
        "an index entry without an id",
        INDEX,
        edit(drop("messages", 0, "id")),
        "$.messages[0].id",
        "missing",
    ),
    (
        "an index role that disagrees",
        INDEX,
        edit(set_at("messages", 0, "role", value="assistant")),
        "$.messages[0].role",
        "but messages/msg-1.json says 'user'",
    ),
    (
        "an index field that cannot be stored",
        INDEX,
        edit(set_at("generated_by", value=float("nan"))),
        "$.generated_by",
        "",
    ),
    (
        "a message field that cannot be stored",
        MSG2,
        edit(set_at("message", "score", value=float("inf"))),
        "$.message.score",
        "",
    ),
    (
        "an index time that disagrees",
        INDEX,
        edit(set_at("messages", 1, "created_at", value="2025-11-09T11:01:00Z")),
        "$.messages[1].created_at",
        "but messages/msg-2.json says",
    ),
]


@pytest.mark.parametrize(
    ("file", "damage", "where", "reason"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_a_broken_file_is_named_with_its_json_path_and_left_alone(
    data: Path, file: str, damage: Damage, where: str, reason: str
) -> None:
    folder = data / "contexts" / DOC
    damage(folder / file)
    before = tree_digest(data)
    with pytest.raises(ContextFolderError) as info:
        import_context_folder(folder)
    err = info.value
    assert isinstance(err, InvalidInput)
    assert (err.file, err.where) == (folder / file, where), str(err)
    assert reason in err.reason
    assert str(err).startswith(f"{folder / file}: {where}: ")
    assert tree_digest(data) == before


def test_a_missing_message_file_named_by_the_index_is_an_index_error(data: Path) -> None:
    folder = data / "contexts" / DOC
    (folder / MSG2).unlink()
    with pytest.raises(ContextFolderError) as info:
        import_context_folder(folder)
    assert (info.value.file, info.value.where) == (folder / INDEX, "$.messages[1].id")


def test_a_bad_context_in_a_data_folder_leaves_the_others_imported(data: Path) -> None:
    bad = data / "contexts" / PENDING
    edit(drop("message", "role"))(bad / "messages" / "c0ffee00-1111-4222-8333-444455556662.json")
    (data / "contexts" / "stray").mkdir()
    found = {f.folder.name: f for f in import_context_folders(data)}
    assert sorted(n for n, f in found.items() if f.context) == sorted([DOC, TOOLS, EMPTY])
    err = found[PENDING].error
    assert err is not None and err.where == "$.message.role"
    stray = found["stray"].error
    assert stray is not None and stray.file == data / "contexts" / "stray" / "metadata.json"


def test_two_folders_of_one_id_import_the_first(data: Path) -> None:
    shutil.copytree(data / "contexts" / DOC, data / "contexts" / "zz-copy")
    found = import_context_folders(data)
    copy = found[-1]
    assert copy.folder.name == "zz-copy" and copy.context is None and copy.error is not None
    assert (copy.error.where, "also the id of") == ("$.id", "also the id of")
    assert str(data / "contexts" / DOC) in copy.error.reason


def test_files_the_layout_does_not_name_are_listed_not_read(data: Path) -> None:
    folder = data / "contexts" / DOC
    (folder / "messages" / "notes.txt").write_text("not a message")
    (folder / "messages" / ".msg-1.json.tmp").write_text("{")
    (folder / "attachments").mkdir()
    (found,) = import_context_folders(folder)
    assert found.error is None and found.context is not None
    assert found.not_read == ("attachments", "messages/.msg-1.json.tmp", "messages/notes.txt")
    assert sorted(found.context.message_pool) == ["msg-1", "msg-2"]
    (folder / "message_index.json").unlink()
    (folder / "message_index.json").mkdir()
    (again,) = import_context_folders(folder)
    assert "message_index.json" in again.not_read
