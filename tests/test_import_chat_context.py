"""The architecture's context document (a ChatContext as its fields, written by
another program) imported as it is: ids, branches, prompts, state; every
problem an InvalidInput naming its JSON path."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnfsm import Engine, records
from turnfsm.adapters.inbound import detect_format, import_chat_context, import_context
from turnfsm.cli import main
from turnfsm.engine import Mode
from turnfsm.errors import InvalidInput
from turnfsm.model import ApprovalStatus, MessageType, Role
from turnfsm.storage import open_store
from turnfsm.testing import ScriptedLLM

DOC = json.loads((Path(__file__).parent / "fixtures" / "import" / "chat_context.json").read_text())
NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def doc() -> dict[str, Any]:
    return copy.deepcopy(DOC)


def test_the_document_is_detected_and_kept_as_it_is() -> None:
    assert detect_format(doc()) == "chatcontext"
    ctx = import_context(doc(), now=NOW)
    assert ctx.id == DOC["id"] and ctx.parent_id is None
    assert (ctx.config.model_id, ctx.config.mode, ctx.config.parameters) == (
        "gpt-4",
        "code",
        {"temperature": 0.2},
    )
    assert ctx.config.system_prompt_id == "default"
    assert ctx.config.workspace_path == "/path/to/workspace"
    assert set(ctx.branches) == {"main", "terse"} and ctx.active_branch_name == "main"
    main_branch, terse = ctx.branches["main"], ctx.branches["terse"]
    assert main_branch.message_ids == ["msg-1", "msg-2", "msg-3", "msg-4"]
    assert main_branch.system_prompt is not None
    assert main_branch.system_prompt.content == "You are a helpful weather assistant."
    assert (terse.parent_message_id, terse.user_prompt) == ("msg-3", "Be terse.")
    assert ctx.current_state == "Idle"
    assert ctx.created_at == datetime(2025, 11, 9, 10, 0, tzinfo=UTC)
    assert ctx.updated_at == datetime(2025, 11, 9, 10, 5, tzinfo=UTC)
    history = ctx.history()
    assert [n.message.role for n in history] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    assert [n.parent_id for n in history] == [None, "msg-1", "msg-2", "msg-3"]
    call = history[1].message.tool_calls
    assert call is not None and call[0].approval_status is ApprovalStatus.APPROVED
    assert call[0].arguments == {"city": "London"}
    assert history[1].message.message_type is MessageType.TOOL_CALL  # derived
    result = history[2].message.tool_result
    assert result is not None and result.success and result.result["temp_c"] == 15
    # an externally tagged part, a null metadata (the context's creation time)
    assert history[3].message.text == "The weather in London is 15°C and cloudy."
    assert history[3].message.metadata.created_at == ctx.created_at
    # a field turnfsm has no place for is kept in metadata.extra, never dropped
    assert history[3].message.metadata.extra == {"ui_hint": "weather-card"}
    assert ctx.history("terse")[-1].message.text == "London: 15°C, cloudy."


def test_the_imported_context_is_stored_loaded_and_takes_a_turn(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(DOC))
    assert main(["import", str(path), "--store", url]) == 0

    async def go() -> None:
        llm = ScriptedLLM([{"text": "Still 15°C."}])
        modes = [Mode("chat"), Mode("code")]  # the document's mode is one of the engine's
        async with Engine(llm=llm, store=open_store(url), modes=modes) as engine:
            stored = await engine.get_context(DOC["id"])
            assert (
                records.to_python(stored)["branches"]
                == records.to_python(import_chat_context(doc(), now=NOW))["branches"]
            )
            turn = await engine.send(DOC["id"], "And now?")
            assert turn.state.value == "Idle"
            ctx = await engine.get_context(DOC["id"])
            assert [n.id for n in ctx.history()][:4] == DOC["branches"]["main"]["message_ids"]
            assert ctx.history()[-1].message.text == "Still 15°C."

    anyio.run(go)


def test_a_context_awaiting_approval_is_kept_at_rest() -> None:
    d = doc()
    d["message_pool"]["msg-2"]["message"]["tool_calls"][0]["approval_status"] = "pending"
    d["branches"]["main"]["message_ids"] = ["msg-1", "msg-2"]
    del d["branches"]["terse"]
    d["current_state"] = "AwaitingToolApproval"
    ctx = import_chat_context(d, now=NOW)
    assert [c.id for c in ctx.pending_tool_calls()] == ["call-1"]


Change = Callable[[dict[str, Any]], None]


def _set(path: list[str | int], value: Any) -> Change:
    def change(d: dict[str, Any]) -> None:
        target: Any = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _open_call(d: dict[str, Any]) -> None:
    d["branches"]["main"]["message_ids"] = ["msg-1", "msg-2"]
    del d["branches"]["terse"]


BAD: list[tuple[str, Change, str, str]] = [
    (
        "role",
        _set(["message_pool", "msg-1", "message", "role"], "robot"),
        '$.message_pool["msg-1"].message.role',
        "'robot' is not a role",
    ),
    (
        "status",
        _set(["message_pool", "msg-2", "message", "tool_calls", 0, "approval_status"], "Maybe"),
        '$.message_pool["msg-2"].message.tool_calls[0].approval_status',
        "not an approval status",
    ),
    (
        "missing message",
        _set(["branches", "terse", "message_ids", 3], "msg-9"),
        "$.branches.terse.message_ids[3]",
        "no message 'msg-9'",
    ),
    (
        "mid-turn",
        _set(["current_state"], "StreamingLLMResponse"),
        "$.current_state",
        "the middle of a turn",
    ),
    ("unknown state", _set(["current_state"], "Dreaming"), "$.current_state", "not a state"),
    (
        "open call while idle",
        _open_call,
        '$.message_pool["msg-2"].message.tool_calls[0]',
        "has no result, but the context is Idle",
    ),
    (
        "timestamp",
        _set(["message_pool", "msg-3", "message", "metadata", "created_at"], "yesterday"),
        '$.message_pool["msg-3"].message.metadata.created_at',
        "not a timestamp",
    ),
    (
        "part",
        _set(["message_pool", "msg-1", "message", "content", 0], {"type": "video"}),
        '$.message_pool["msg-1"].message.content[0].type',
        "'video' is not text, image or file",
    ),
    ("active", _set(["active_branch_name"], "gone"), "$.active_branch_name", "no branch"),
    (
        "usage",
        _set(["message_pool", "msg-2", "message", "metadata", "usage"], "lots"),
        '$.message_pool["msg-2"].message.metadata.usage',
        "",
    ),
]


@pytest.mark.parametrize(("change", "where", "says"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_an_invalid_input_naming_its_json_path(
    change: Change, where: str, says: str
) -> None:
    d = doc()
    change(d)
    with pytest.raises(InvalidInput) as caught:
        import_context(d, "chatcontext", now=NOW)
    assert caught.value.where == where
    assert says in str(caught.value)


def test_the_cli_says_the_json_path_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = doc()
    d["message_pool"]["msg-1"]["message"]["role"] = "robot"
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(d))
    assert main(["import", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert '$.message_pool["msg-1"].message.role' in err and "'robot' is not a role" in err
