"""Importing conversations kept in other formats (the session JSON format,
alternating conversation entries, the contextManagement request body and OpenAI
messages) into a ChatContext, and the ``turnfsm import`` command."""

from __future__ import annotations

import argparse
import copy
import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import turnfsm.storage
from turnfsm import records
from turnfsm.adapters.inbound import (
    MISSING_RESULT,
    count_tool_calls,
    detect_format,
    import_context,
    import_conversation_entries,
    import_openai_messages,
    import_request_body,
    import_session_records,
)
from turnfsm.cli import _import as cli_import
from turnfsm.errors import InvalidInput, StoreError
from turnfsm.model import (
    ApprovalStatus,
    ChatContext,
    FilePart,
    ImagePart,
    InternalMessage,
    MessageType,
    Role,
    TextPart,
    ToolCallRequest,
    to_chat_messages,
)

FIXTURES = Path(__file__).parent / "fixtures" / "import"
MALFORMED = FIXTURES / "malformed"
NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg"
    "AAAABJRU5ErkJggg=="
)

SAMPLES = {
    "session.json": "session",
    "session_records.json": "session",
    "entries.json": "entries",
    "entries_plain.json": "entries",
    "openai.json": "openai",
    "openai_body.json": "openai",
    "request_context_management.json": "request",
    "request_frontend_operator.json": "request",
    "request_legacy.json": "request",
}


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text("utf-8"))


def seq_ids() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"id-{next(counter)}"


def messages(ctx: ChatContext) -> list[InternalMessage]:
    return [n.message for n in ctx.history()]


def imp(fn: Callable[..., ChatContext], data: Any) -> ChatContext:
    return fn(data, now=NOW, ids=seq_ids())


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, sec: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, sec, tzinfo=UTC)


# --- properties every import has ----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_detect_format_of_each_sample(name: str) -> None:
    assert detect_format(load(name)) == SAMPLES[name]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_import_is_an_idle_context_on_main(name: str) -> None:
    ctx = import_context(load(name), now=NOW, ids=seq_ids())
    assert ctx.current_state == "Idle"
    assert list(ctx.branches) == ["main"]
    assert ctx.active_branch_name == "main"
    assert ctx.id == "id-1"
    ids = ctx.active_branch.message_ids
    assert len(ids) == len(ctx.message_pool) > 0
    assert len(set(ids)) == len(ids)
    # chained by parent_id, like the engine appends
    assert [ctx.message_pool[i].parent_id for i in ids] == [None, *ids[:-1]]
    assert ctx.open_tool_calls() == []
    assert ctx.created_at <= ctx.updated_at


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_tool_call_has_exactly_one_result_right_after_its_batch(name: str) -> None:
    ctx = import_context(load(name), now=NOW)
    history = messages(ctx)
    for i, msg in enumerate(history):
        if not msg.tool_calls:
            continue
        asked = [c.id for c in msg.tool_calls]
        following = list(itertools.takewhile(lambda m: m.role is Role.TOOL, history[i + 1 :]))
        answered = [m.tool_result.request_id for m in following if m.tool_result is not None]
        assert sorted(answered) == sorted(asked), (name, i)
    results = [m.tool_result.request_id for m in history if m.tool_result is not None]
    assert len(results) == len(set(results)) == count_tool_calls(ctx)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_import_round_trips_as_json_and_has_a_chat_view(name: str) -> None:
    ctx = import_context(load(name), now=NOW, ids=seq_ids())
    assert records.from_json(ChatContext, records.to_json(ctx).decode()) == ctx
    chat = to_chat_messages(messages(ctx))
    assert len(chat) == len(ctx.message_pool)


def test_default_ids_are_uuid_hex_and_default_now_is_aware() -> None:
    before = datetime.now(UTC)
    ctx = import_openai_messages([{"role": "user", "content": "hi"}])
    assert len(ctx.id) == 32 and int(ctx.id, 16) >= 0
    assert ctx.created_at >= before and ctx.created_at.tzinfo is not None
    assert ctx.id not in ctx.message_pool


def test_a_naive_now_is_taken_as_utc() -> None:
    ctx = import_openai_messages(
        [{"role": "user", "content": "hi"}], now=datetime(2030, 1, 1, 12), ids=seq_ids()
    )
    assert ctx.created_at == utc(2030, 1, 1, 12)


# --- the session JSON format: session records ---------------------------------------------


def test_session_sample_messages_and_roles() -> None:
    ctx = imp(import_session_records, load("session.json"))
    history = messages(ctx)
    assert [(m.role, m.message_type) for m in history] == [
        (Role.SYSTEM, MessageType.TEXT),
        (Role.USER, MessageType.TEXT),
        (Role.ASSISTANT, MessageType.TEXT),
        (Role.ASSISTANT, MessageType.TOOL_CALL),
        (Role.TOOL, MessageType.TOOL_RESULT),
        (Role.ASSISTANT, MessageType.TOOL_CALL),
        (Role.TOOL, MessageType.TOOL_RESULT),
        (Role.ASSISTANT, MessageType.TEXT),
        (Role.USER, MessageType.TEXT),
        (Role.ASSISTANT, MessageType.TEXT),
    ]
    # system records stay messages (they carry a timestamp): no branch system prompt
    assert ctx.active_branch.system_prompt is None
    assert history[0].text == "You are a helpful travel assistant."


def test_session_timestamps_come_from_the_source() -> None:
    ctx = imp(import_session_records, load("session.json"))
    assert ctx.created_at == utc(2025, 3, 14, 9, 0, 0)
    assert ctx.updated_at == utc(2025, 3, 14, 9, 2, 41)
    history = messages(ctx)
    assert history[1].metadata.created_at == utc(2025, 3, 14, 9, 0, 12)
    # the call and its result share the record's timestamp
    assert history[5].metadata.created_at == history[6].metadata.created_at
    assert history[5].metadata.created_at == utc(2025, 3, 14, 9, 0, 46)
    assert all(m.metadata.created_at != NOW for m in history)


def test_session_binary_content_becomes_image_and_file_parts() -> None:
    user = messages(imp(import_session_records, load("session.json")))[1]
    text, image, pdf = user.content
    assert isinstance(text, TextPart) and text.text.startswith("What's the weather")
    assert image == ImagePart(url=f"data:image/png;base64,{PNG_1PX}")
    assert pdf == FilePart(
        name="itinerary.pdf",
        mime_type="application/pdf",
        data="JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoK",
    )
    # the image's identifier has no place on an image part: kept in metadata.extra
    assert user.metadata.extra == {"binary_content": [{"identifier": "itinerary-photo"}, {}]}


def test_each_tool_call_record_is_its_own_approved_batch() -> None:
    history = messages(imp(import_session_records, load("session.json")))
    lisbon, lisbon_result, porto, porto_result = history[3:7]
    assert lisbon.tool_calls == [
        ToolCallRequest(
            id="call_lisbon_01",
            tool_name="get_weather",
            arguments={"city": "Lisbon", "day": "tomorrow"},
            approval_status=ApprovalStatus.APPROVED,
        )
    ]
    assert lisbon.content == []
    assert lisbon_result.tool_result is not None
    assert lisbon_result.tool_result.request_id == "call_lisbon_01"
    assert lisbon_result.tool_result.result == {"city": "Lisbon", "temp_c": 19, "sky": "sunny"}
    assert lisbon_result.tool_result.success is True
    assert porto.tool_calls is not None and porto.tool_calls[0].id == "call_porto_02"
    assert porto_result.tool_result is not None
    assert porto_result.tool_result.result == "weather service timed out"
    assert porto_result.tool_result.success is False
    # an unknown field of the record is kept
    assert porto.metadata.extra == {"duration_ms": 30000}


def test_session_title_is_the_context_title_and_its_id_is_kept() -> None:
    ctx = imp(import_session_records, load("session.json"))
    assert ctx.config.title == "Weather and a packing list"
    first = messages(ctx)[0]
    assert first.metadata.extra == {"source": {"id": "7f3c2a1e-5b9d-4c8e-a1f2-3d4e5f6a7b8c"}}


@pytest.mark.parametrize("title", ["two\nlines", "", 7, "x" * 1001])
def test_a_session_title_that_is_not_one_line_of_text_is_kept_as_it_was(title: object) -> None:
    data = load("session.json") | {"title": title}
    ctx = imp(import_session_records, data)
    assert ctx.config.title is None
    assert messages(ctx)[0].metadata.extra["source"]["title"] == title


def test_bare_record_list_with_json_string_arguments_and_offsets() -> None:
    ctx = imp(import_session_records, load("session_records.json"))
    history = messages(ctx)
    assert [m.role for m in history] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    assert history[3].tool_calls is not None
    assert history[3].tool_calls[0].arguments == {"user_id": 42}
    assert history[3].tool_calls[0].raw_arguments is None
    plus2 = timezone(timedelta(hours=2))
    assert ctx.created_at == datetime(2025, 5, 2, 14, 10, tzinfo=plus2)
    assert ctx.updated_at == datetime(2025, 5, 2, 14, 10, 4, tzinfo=plus2)
    assert all("source" not in m.metadata.extra for m in history)


def test_session_without_timestamps_uses_now() -> None:
    ctx = imp(
        import_session_records,
        {"records": [{"type": "message", "role": "user", "content": "hi"}]},
    )
    assert ctx.created_at == ctx.updated_at == NOW
    assert messages(ctx)[0].metadata.created_at == NOW


def test_tool_record_arguments_that_are_not_an_object_are_kept_raw() -> None:
    rec = {"type": "tool_call", "tool_call_id": "c", "tool_name": "t", "success": True}
    ctx = imp(import_session_records, [{**rec, "arguments": "{not json"}])
    [call] = messages(ctx)[0].tool_calls or []
    assert (call.arguments, call.raw_arguments) == ({}, "{not json")
    ctx = imp(import_session_records, [{**rec, "arguments": "[1, 2]"}])
    [call] = messages(ctx)[0].tool_calls or []
    assert (call.arguments, call.raw_arguments) == ({}, "[1, 2]")
    # no arguments and no result: an empty call, a null result
    ctx = imp(import_session_records, [rec])
    history = messages(ctx)
    assert history[0].tool_calls == [
        ToolCallRequest(id="c", tool_name="t", approval_status=ApprovalStatus.APPROVED)
    ]
    assert history[1].tool_result is not None and history[1].tool_result.result is None


def test_binary_content_forms() -> None:
    items = [
        f"data:image/png;base64,{PNG_1PX}",
        "data:text/plain;base64,aGVsbG8=",
        {"url": "https://example.com/a.png", "kind": "image-url"},
        {"data": "aGVsbG8=", "mime_type": "text/plain", "name": "hello.txt"},
        {"data": "aGVsbG8=", "media_type": "text/csv"},
    ]
    rec = {"type": "message", "role": "user", "content": "", "binary_content": items}
    [msg] = messages(imp(import_session_records, [rec]))
    assert msg.content == [
        ImagePart(url=items[0]),
        FilePart(name="attachment-2", mime_type="text/plain", data="aGVsbG8="),
        ImagePart(url="https://example.com/a.png"),
        FilePart(name="hello.txt", mime_type="text/plain", data="aGVsbG8="),
        FilePart(name="attachment-5", mime_type="text/csv", data="aGVsbG8="),
    ]
    assert "binary_content" not in msg.metadata.extra


# --- alternating conversation entries -----------------------------------------------------


def test_entries_sample_order_and_roles() -> None:
    history = messages(imp(import_conversation_entries, load("entries.json")))
    assert [m.role for m in history] == [
        Role.USER,
        Role.ASSISTANT,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.TOOL,
        Role.ASSISTANT,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.USER,
        Role.ASSISTANT,
    ]
    assert history[0].text == "What is 2+2?"
    assert history[0].metadata.created_at == datetime(
        2025, 6, 10, 8, 15, 0, 123000, tzinfo=timezone(timedelta(hours=2))
    )
    # the chat CLI records no timestamp on assistant messages
    assert history[1].metadata.created_at == NOW
    assert history[1].metadata.extra == {"message_id": "b1f5e0c2-0001"}


def test_entries_keep_additional_and_env_context() -> None:
    history = messages(imp(import_conversation_entries, load("entries.json")))
    assert "additional_context" not in history[0].metadata.extra  # it was empty
    assert history[0].metadata.extra["env_context"]["env_state"]["operating_system"] == "linux"
    assert history[2].metadata.extra["additional_context"].startswith("--- CONTEXT ENTRY BEGIN")
    # the prompt itself is stored as said, without the context
    assert history[2].text == "List the files in src and read main.rs"


def test_entries_tool_uses_are_one_batch_answered_by_the_next_user_entry() -> None:
    history = messages(imp(import_conversation_entries, load("entries.json")))
    ask = history[3]
    assert ask.message_type is MessageType.TOOL_CALL
    assert ask.text == "I'll look at the src folder and open main.rs."
    assert [(c.id, c.tool_name, c.arguments, c.approval_status) for c in ask.tool_calls or []] == [
        ("tooluse_ls_1", "fs_read", {"mode": "Directory", "path": "src"}, ApprovalStatus.APPROVED),
        (
            "tooluse_cat_2",
            "fs_read",
            {"mode": "Line", "path": "src/main.rs"},
            ApprovalStatus.APPROVED,
        ),
    ]
    # orig_args that differ from args are kept
    assert ask.metadata.extra["tool_uses"] == [
        {},
        {"orig_args": {"mode": "Line", "path": "./src/main.rs"}},
    ]
    ls, cat = history[4].tool_result, history[5].tool_result
    assert ls is not None and cat is not None
    assert (ls.request_id, ls.result, ls.success) == (
        "tooluse_ls_1",
        {"entries": ["main.rs", "cart.rs"]},
        True,
    )
    assert cat.result == "fn main() {\n    shop::run();\n}\n"


def test_entries_cancelled_tool_use_is_denied_by_the_human() -> None:
    history = messages(imp(import_conversation_entries, load("entries.json")))
    ask, result, prompt = history[8], history[9], history[10]
    assert ask.content == []
    [call] = ask.tool_calls or []
    assert call.approval_status is ApprovalStatus.DENIED
    assert call.decided_by == "human"
    assert call.reason == "Tool use was cancelled by the user"
    assert result.tool_result is not None and result.tool_result.success is False
    assert prompt.text == "No wait, keep it. Show me this screenshot instead."
    # the image bytes came as an array of byte values
    assert prompt.content[1] == ImagePart(url="data:image/png;base64,iVBORw0KGgo=")


def test_plain_entries_strings_and_null_assistant() -> None:
    history = messages(imp(import_conversation_entries, load("entries_plain.json")))
    assert [(m.role, m.text) for m in history] == [
        (Role.USER, "Hello"),
        (Role.ASSISTANT, "Hi! How can I help you?"),
        (Role.USER, "How are you?"),
        (Role.ASSISTANT, "Fine, thanks."),
        (Role.USER, "Goodbye"),
    ]
    assert history[2].metadata.created_at == utc(2025, 6, 11, 10)
    assert history[3].metadata.extra == {"message_id": "m-2"}


def test_entries_tool_use_without_result_and_unknown_entry_fields() -> None:
    data = [
        {
            "user": "run it",
            "assistant": {"content": "", "tool_uses": [{"id": "t1", "name": "run", "args": {}}]},
            "turn": 1,
        }
    ]
    history = messages(imp(import_conversation_entries, data))
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert history[0].metadata.extra == {"entry": {"turn": 1}}
    assert history[2].tool_result is not None
    assert history[2].tool_result.result == MISSING_RESULT
    assert history[2].tool_result.success is False


def test_entries_thinking() -> None:
    data = [
        {
            "assistant": {
                "Response": {
                    "message_id": "m",
                    "content": "4",
                    "thinking": {"text": "2+2", "signature": "s"},
                }
            }
        },
        {"assistant": {"content": "ok", "thinking": "plain"}},
    ]
    history = messages(imp(import_conversation_entries, data))
    assert history[0].thinking == "2+2"
    assert history[0].metadata.extra == {"message_id": "m", "thinking": {"signature": "s"}}
    assert history[1].thinking == "plain"


# --- OpenAI chat messages -----------------------------------------------------------------


def test_openai_system_prompt_goes_to_the_branch() -> None:
    ctx = imp(import_openai_messages, load("openai.json"))
    prompt = ctx.active_branch.system_prompt
    assert prompt is not None
    assert prompt.content == "You are a concise assistant for a hardware shop."
    assert ctx.config.system_prompt_id == prompt.id == "id-2"
    assert all(m.role is not Role.SYSTEM for m in messages(ctx))


def test_openai_parts_calls_results_and_operator() -> None:
    history = messages(imp(import_openai_messages, load("openai.json")))
    assert history[0].content == [
        TextPart(text="Which of these drills is in stock?"),
        ImagePart(url="https://example.com/drills.jpg", detail="low"),
    ]
    ask = history[1]
    assert ask.content == [] and ask.message_type is MessageType.TOOL_CALL
    good, bad = ask.tool_calls or []
    assert (good.arguments, good.raw_arguments) == ({"sku": "DR-100"}, None)
    assert (bad.arguments, bad.raw_arguments) == ({}, '{"sku": "DR-200"')
    assert good.approval_status is bad.approval_status is ApprovalStatus.APPROVED
    assert history[2].tool_result is not None
    assert history[2].tool_result.result == '{"sku": "DR-100", "in_stock": 3}'
    assert history[2].tool_result.success is True
    operator = history[6]
    assert operator.role is Role.FRONTEND_OPERATOR and operator.metadata.extra == {}
    assert history[7].metadata.extra == {"refusal": None}
    assert history[8].content[1] == FilePart(
        name="invoice.pdf", mime_type="application/pdf", data="JVBERi0xLjQK"
    )
    assert history[9].thinking == "The user shared an invoice; acknowledge it."


def test_openai_call_without_result_gets_the_missing_result() -> None:
    history = messages(imp(import_openai_messages, load("openai.json")))
    ask, missing, after = history[4], history[5], history[6]
    [call] = ask.tool_calls or []
    assert call.id == "call_stock_3"
    assert (call.approval_status, call.decided_by, call.reason) == (
        ApprovalStatus.DENIED,
        "system",
        "missing",
    )
    assert missing.role is Role.TOOL and missing.tool_result is not None
    assert missing.tool_result.request_id == "call_stock_3"
    assert missing.tool_result.result == {
        "error": "no result in the imported history",
        "status": "missing",
    }
    assert missing.tool_result.success is False
    assert missing.metadata.extra == {"synthesized": True}
    assert after.role is Role.FRONTEND_OPERATOR


def test_openai_missing_results_go_after_the_real_ones_at_the_end_too() -> None:
    data = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                for i in range(3)
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
    ]
    history = messages(imp(import_openai_messages, data))
    assert [m.tool_result.request_id for m in history[2:] if m.tool_result] == ["c1", "c0", "c2"]
    assert [m.tool_result.success for m in history[2:] if m.tool_result] == [True, False, False]
    statuses = [c.approval_status for c in history[1].tool_calls or []]
    assert statuses == [ApprovalStatus.DENIED, ApprovalStatus.APPROVED, ApprovalStatus.DENIED]


def test_openai_object_form_model_developer_and_other_fields() -> None:
    ctx = imp(import_openai_messages, load("openai_body.json"))
    assert ctx.config.model_id == "gpt-4o-mini"
    assert ctx.active_branch.system_prompt is None
    first = messages(ctx)[0]
    assert first.role is Role.SYSTEM
    assert first.metadata.extra == {"openai_role": "developer", "source": {"temperature": 0.2}}


def test_openai_history_round_trips_through_the_chat_view() -> None:
    """Importing a well-formed OpenAI list and viewing it in chat format again gives
    the same list (the system prompt aside, which lives on the branch)."""
    original: list[dict[str, Any]] = [
        {"role": "user", "content": "weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "w", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "b",
                    "type": "function",
                    "function": {"name": "w", "arguments": "not json"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "b", "content": "bad arguments"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and this?"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        },
        {"role": "user", "name": "frontend_operator", "content": "user left"},
        {"role": "assistant", "content": "Paris is sunny."},
    ]
    ctx = imp(import_openai_messages, [{"role": "system", "content": "sys"}, *original])
    assert to_chat_messages(messages(ctx)) == original


def test_openai_tool_content_as_text_parts_and_name_kept() -> None:
    data = [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c",
            "name": "f",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        },
        {"role": "user", "name": "ana", "content": "thanks"},
        {"role": "system", "content": "late system note"},
    ]
    history = messages(imp(import_openai_messages, data))
    assert history[1].tool_result is not None and history[1].tool_result.result == "ab"
    assert history[1].metadata.extra == {"name": "f"}
    assert history[2].role is Role.USER and history[2].metadata.extra == {"name": "ana"}
    assert history[3].role is Role.SYSTEM  # not first: stays a message


def test_openai_only_a_system_message() -> None:
    ctx = imp(
        import_openai_messages,
        [{"role": "system", "content": [{"type": "text", "text": "Be kind."}]}],
    )
    assert ctx.message_pool == {}
    assert ctx.active_branch.system_prompt is not None
    assert ctx.active_branch.system_prompt.content == "Be kind."
    assert ctx.created_at == ctx.updated_at == NOW


def test_openai_annotated_first_system_message_stays_a_message() -> None:
    ctx = imp(import_openai_messages, [{"role": "system", "content": "x", "name": "policy"}])
    assert ctx.active_branch.system_prompt is None
    assert messages(ctx)[0].metadata.extra == {"name": "policy"}


# --- the contextManagement request body (and the legacy messages body) -------------------


def test_request_body_context_management() -> None:
    ctx = imp(import_request_body, load("request_context_management.json"))
    history = messages(ctx)
    assert [m.text for m in history] == [
        "Hello",
        "Hi! How can I help you?",
        "Add a task to buy milk",
    ]
    assert history[-1].metadata.extra["current"] is True
    assert ctx.created_at == utc(2025, 7, 7, 10, 29)
    assert ctx.updated_at == utc(2025, 7, 7, 10, 30)


def test_request_body_frontend_operator_and_legacy() -> None:
    fo = messages(imp(import_request_body, load("request_frontend_operator.json")))
    assert fo[-1].role is Role.FRONTEND_OPERATOR
    assert fo[-1].metadata.extra["user_timezone"] == "Europe/Berlin"
    legacy = imp(import_request_body, load("request_legacy.json"))
    assert [m.role for m in messages(legacy)] == [Role.USER, Role.ASSISTANT, Role.USER]
    assert legacy.created_at == NOW


# --- malformed sources --------------------------------------------------------------------

REC = {"type": "message", "role": "user", "content": "hi"}
TOOL = {"type": "tool_call", "tool_call_id": "c1", "tool_name": "t", "result": 1, "success": True}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}

BAD: list[tuple[str, Callable[..., ChatContext], Any, str, str]] = [
    # (id, importer, data, where, part of the reason)
    ("session not object", import_session_records, "x", "$", "must be an object, not a string"),
    ("session no records", import_session_records, {"id": "s"}, "$.records", "missing"),
    (
        "session records not list",
        import_session_records,
        {"records": {}},
        "$.records",
        "must be an array",
    ),
    ("session empty", import_session_records, {"records": []}, "$.records", "nothing to import"),
    (
        "record not object",
        import_session_records,
        [REC, 3],
        "$[1]",
        "must be an object, not a number",
    ),
    ("record no type", import_session_records, [{"role": "user"}], "$[0].type", "missing"),
    (
        "record bad type",
        import_session_records,
        [{**REC, "type": "note"}],
        "$[0].type",
        "unknown record type 'note'",
    ),
    (
        "record role tool",
        import_session_records,
        {"records": [REC, REC, REC, {**REC, "role": "tool"}]},
        "$.records[3].role",
        "not 'tool'",
    ),
    ("record no role", import_session_records, [{"type": "message"}], "$[0].role", "missing"),
    (
        "record content number",
        import_session_records,
        [{**REC, "content": 5}],
        "$[0].content",
        "must be a string",
    ),
    (
        "record bad timestamp",
        import_session_records,
        [{**REC, "timestamp": "noon"}],
        "$[0].timestamp",
        "not a timestamp",
    ),
    (
        "record timestamp bool",
        import_session_records,
        [{**REC, "timestamp": True}],
        "$[0].timestamp",
        "ISO 8601",
    ),
    (
        "binary not list",
        import_session_records,
        [{**REC, "binary_content": "x"}],
        "$[0].binary_content",
        "must be an array",
    ),
    (
        "binary no media type",
        import_session_records,
        [{**REC, "binary_content": [{"data": "aGk="}]}],
        "$[0].binary_content[0].media_type",
        "missing",
    ),
    (
        "binary bad base64",
        import_session_records,
        [{**REC, "binary_content": [{"data": "@@", "media_type": "image/png"}]}],
        "$[0].binary_content[0].data",
        "base64",
    ),
    (
        "binary document url",
        import_session_records,
        [{**REC, "binary_content": [{"url": "https://x/a.pdf", "kind": "document-url"}]}],
        "$[0].binary_content[0].kind",
        "only image URLs",
    ),
    (
        "binary plain url string",
        import_session_records,
        [{**REC, "binary_content": ["https://x/a.png"]}],
        "$[0].binary_content[0]",
        "data URL",
    ),
    (
        "binary empty object",
        import_session_records,
        [{**REC, "binary_content": [{}]}],
        "$[0].binary_content[0]",
        "needs 'data'",
    ),
    (
        "tool no id",
        import_session_records,
        [{k: v for k, v in TOOL.items() if k != "tool_call_id"}],
        "$[0].tool_call_id",
        "missing",
    ),
    (
        "tool name number",
        import_session_records,
        [{**TOOL, "tool_name": 1}],
        "$[0].tool_name",
        "must be a string",
    ),
    (
        "tool no success",
        import_session_records,
        [{k: v for k, v in TOOL.items() if k != "success"}],
        "$[0].success",
        "missing",
    ),
    (
        "tool success string",
        import_session_records,
        [{**TOOL, "success": "yes"}],
        "$[0].success",
        "true or false",
    ),
    (
        "tool args list",
        import_session_records,
        [{**TOOL, "arguments": [1]}],
        "$[0].arguments",
        "object or a JSON string",
    ),
    (
        "tool duplicate id",
        import_session_records,
        [TOOL, REC, TOOL],
        "$[2].tool_call_id",
        "duplicate tool call id 'c1' (first at $[0].tool_call_id)",
    ),
    (
        "reserved extra key",
        import_session_records,
        {"id": "s", "records": [{**REC, "source": "web"}]},
        "$.records[0].source",
        "used by the importer",
    ),
    ("entries empty", import_conversation_entries, [], "$", "nothing to import"),
    (
        "entries no list",
        import_conversation_entries,
        {"entries": None},
        "$.entries",
        "must be an array, not null",
    ),
    (
        "entry empty",
        import_conversation_entries,
        [{"user": None}],
        "$[0]",
        "needs a 'user' or an 'assistant'",
    ),
    (
        "entry user number",
        import_conversation_entries,
        [{"user": 1}],
        "$[0].user",
        "must be an object",
    ),
    (
        "entry user no content",
        import_conversation_entries,
        [{"user": {"timestamp": None}}],
        "$[0].user",
        "needs 'content'",
    ),
    (
        "entry bad variant",
        import_conversation_entries,
        [{"user": {"content": {"Question": {}}}}],
        "$[0].user.content",
        "must be one of",
    ),
    (
        "entry prompt missing",
        import_conversation_entries,
        [{"user": {"content": {"Prompt": {}}}}],
        "$[0].user.content.Prompt.prompt",
        "missing",
    ),
    (
        "entry prompt extra",
        import_conversation_entries,
        [{"user": {"content": {"Prompt": {"prompt": "x", "y": 1}}}}],
        "$[0].user.content.Prompt",
        "unexpected fields: y",
    ),
    (
        "entry orphan result",
        import_conversation_entries,
        [
            {
                "user": {
                    "content": {
                        "ToolUseResults": {
                            "tool_use_results": [
                                {"tool_use_id": "g", "content": [], "status": "Success"}
                            ]
                        }
                    }
                }
            }
        ],
        "$[0].user.content.ToolUseResults.tool_use_results[0].tool_use_id",
        "no tool call with id 'g'",
    ),
    (
        "entry bad status",
        import_conversation_entries,
        [
            {"assistant": {"content": "", "tool_uses": [{"id": "t", "name": "n", "args": {}}]}},
            {
                "user": {
                    "content": {
                        "ToolUseResults": {
                            "tool_use_results": [
                                {"tool_use_id": "t", "content": [], "status": "Maybe"}
                            ]
                        }
                    }
                }
            },
        ],
        "$[1].user.content.ToolUseResults.tool_use_results[0].status",
        "'Success' or 'Error'",
    ),
    (
        "entry bad block",
        import_conversation_entries,
        [
            {"assistant": {"content": "", "tool_uses": [{"id": "t", "name": "n", "args": {}}]}},
            {
                "user": {
                    "content": {
                        "ToolUseResults": {
                            "tool_use_results": [
                                {"tool_use_id": "t", "content": [{"Image": 1}], "status": "Error"}
                            ]
                        }
                    }
                }
            },
        ],
        "$[1].user.content.ToolUseResults.tool_use_results[0].content[0]",
        '{"Text": ...}',
    ),
    (
        "entry second result",
        import_conversation_entries,
        [
            {"assistant": {"content": "", "tool_uses": [{"id": "t", "name": "n", "args": {}}]}},
            {
                "user": {
                    "content": {
                        "ToolUseResults": {
                            "tool_use_results": [
                                {"tool_use_id": "t", "content": [], "status": "Error"},
                                {"tool_use_id": "t", "content": [], "status": "Error"},
                            ]
                        }
                    }
                }
            },
        ],
        "$[1].user.content.ToolUseResults.tool_use_results[1].tool_use_id",
        "a second result",
    ),
    (
        "entry ToolUse no tool_uses",
        import_conversation_entries,
        [{"assistant": {"ToolUse": {"content": ""}}}],
        "$[0].assistant.ToolUse.tool_uses",
        "missing",
    ),
    (
        "entry tool use no name",
        import_conversation_entries,
        [{"assistant": {"content": "", "tool_uses": [{"id": "t"}]}}],
        "$[0].assistant.tool_uses[0].name",
        "missing",
    ),
    (
        "entry image format",
        import_conversation_entries,
        [{"user": {"prompt": "x", "images": [{"format": "bmp", "source": {"Bytes": "aGk="}}]}}],
        "$[0].user.images[0].format",
        "unknown image format 'bmp'",
    ),
    (
        "entry image bytes",
        import_conversation_entries,
        [{"user": {"prompt": "x", "images": [{"format": "png", "source": {"Bytes": [300]}}]}}],
        "$[0].user.images[0].source.Bytes",
        "byte values",
    ),
    ("openai empty", import_openai_messages, [], "$", "nothing to import"),
    (
        "openai not list",
        import_openai_messages,
        {"messages": "hi"},
        "$.messages",
        "must be an array",
    ),
    ("openai no role", import_openai_messages, [{"content": "hi"}], "$[0].role", "missing"),
    (
        "openai function role",
        import_openai_messages,
        [{"role": "function", "name": "f", "content": "1"}],
        "$[0].role",
        "deprecated 'function' role",
    ),
    (
        "openai user no content",
        import_openai_messages,
        [{"role": "user"}],
        "$[0].content",
        "missing",
    ),
    (
        "openai audio part",
        import_openai_messages,
        [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
        "$[0].content[0].type",
        "unsupported content part type 'input_audio'",
    ),
    (
        "openai part no type",
        import_openai_messages,
        [{"role": "user", "content": [{"text": "x"}]}],
        "$[0].content[0].type",
        "missing",
    ),
    (
        "openai part extra field",
        import_openai_messages,
        [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}]}],
        "$[0].content[0]",
        "unexpected fields in a 'text' part: cache_control",
    ),
    (
        "openai image detail",
        import_openai_messages,
        [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "u", "detail": "max"}}],
            }
        ],
        "$[0].content[0].image_url.detail",
        "'auto', 'low' or 'high'",
    ),
    (
        "openai file id",
        import_openai_messages,
        [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}],
        "$[0].content[0].file",
        "file_id",
    ),
    (
        "openai file not data url",
        import_openai_messages,
        [{"role": "user", "content": [{"type": "file", "file": {"file_data": "JVBERi0="}}]}],
        "$[0].content[0].file.file_data",
        "data URL",
    ),
    (
        "openai call no id",
        import_openai_messages,
        [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}],
        "$[0].tool_calls[0].id",
        "missing",
    ),
    (
        "openai call custom type",
        import_openai_messages,
        [{"role": "assistant", "tool_calls": [{**CALL, "type": "custom"}]}],
        "$[0].tool_calls[0].type",
        "must be 'function'",
    ),
    (
        "openai call no name",
        import_openai_messages,
        [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}],
        "$[0].tool_calls[0].function.name",
        "missing",
    ),
    (
        "openai call args number",
        import_openai_messages,
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": 3}}],
            }
        ],
        "$[0].tool_calls[0].function.arguments",
        "object or a JSON string",
    ),
    (
        "openai function_call",
        import_openai_messages,
        [{"role": "assistant", "function_call": {"name": "f"}}],
        "$[0].function_call",
        "deprecated",
    ),
    (
        "openai orphan tool",
        import_openai_messages,
        [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "1"}],
        "$[1].tool_call_id",
        "no tool call with id 'x'",
    ),
    (
        "openai late tool",
        import_openai_messages,
        [
            {"role": "assistant", "tool_calls": [CALL]},
            {"role": "user", "content": "hm"},
            {"role": "tool", "tool_call_id": "c1", "content": "1"},
        ],
        "$[2].tool_call_id",
        "not right after the assistant message that asked for it ($[0].tool_calls[0].id)",
    ),
    (
        "openai duplicate result",
        import_openai_messages,
        [
            {"role": "assistant", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "1"},
            {"role": "tool", "tool_call_id": "c1", "content": "2"},
        ],
        "$[2].tool_call_id",
        "a second result for tool call 'c1'",
    ),
    (
        "openai duplicate call",
        import_openai_messages,
        [{"role": "assistant", "tool_calls": [CALL, CALL]}],
        "$[0].tool_calls[1].id",
        "duplicate tool call id",
    ),
    (
        "openai tool image",
        import_openai_messages,
        [
            {"role": "assistant", "tool_calls": [CALL]},
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [{"type": "image_url", "image_url": "u"}],
            },
        ],
        "$[1].content[0]",
        "only text parts",
    ),
    (
        "openai model number",
        import_openai_messages,
        {"model": 4, "messages": [REC]},
        "$.model",
        "must be a string",
    ),
    ("request not object", import_request_body, [], "request body", "must be a JSON object"),
    (
        "request bad role",
        import_request_body,
        {"messages": [{"role": "robot", "content": "x"}]},
        "request body",
        "messages[0].role: Input should be",
    ),
]


@pytest.mark.parametrize(
    ("importer", "data", "where", "reason"),
    [case[1:] for case in BAD],
    ids=[case[0] for case in BAD],
)
def test_malformed_source_names_the_json_path(
    importer: Callable[..., ChatContext], data: Any, where: str, reason: str
) -> None:
    before = copy.deepcopy(data)
    with pytest.raises(InvalidInput) as info:
        importer(data, now=NOW, ids=seq_ids())
    assert info.value.where == where, str(info.value)
    assert reason in info.value.reason, str(info.value)
    assert data == before  # the source is never changed


MALFORMED_FILES = {
    "session_bad_role.json": "$.records[3].role",
    "session_bad_timestamp.json": "$.records[0].timestamp",
    "session_duplicate_call.json": "$[1].tool_call_id",
    "session_bad_base64.json": "$.records[0].binary_content[0].data",
    "entries_unknown_result.json": (
        "$[1].user.content.ToolUseResults.tool_use_results[0].tool_use_id"
    ),
    "entries_bad_variant.json": "$[0].user.content",
    "openai_bad_part.json": "$[0].content[1].type",
    "openai_orphan_tool.json": "$[1].tool_call_id",
    "request_bad_role.json": "request body",
    "unknown_shape.json": "$",
}


@pytest.mark.parametrize("name", sorted(MALFORMED_FILES))
def test_malformed_sample_files(name: str) -> None:
    data = json.loads((MALFORMED / name).read_text("utf-8"))
    with pytest.raises(InvalidInput) as info:
        import_context(data, now=NOW)
    assert info.value.where == MALFORMED_FILES[name]


def test_request_bad_role_lists_both_formats() -> None:
    with pytest.raises(InvalidInput) as info:
        import_request_body(json.loads((MALFORMED / "request_bad_role.json").read_text()))
    text = str(info.value)
    assert (
        "contextManagement.currentMessage.role: Input should be 'user' or 'frontend_operator'"
        in text
    )
    assert "messages: Field required" in text


# --- detection ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        ({"records": []}, "session"),
        ([{"type": "tool_call"}], "session"),
        ({"entries": []}, "entries"),
        ([{"assistant": "hi"}], "entries"),
        ([{"user": None, "assistant": None}], "entries"),
        ([{"role": "user", "content": "hi"}], "openai"),
        ({"messages": [{"role": "user", "content": "x"}], "model": "m"}, "openai"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "openai"),
        ({"messages": [{"role": "user", "content": "x"}]}, "request"),
        ({"messages": [], "userLanguage": "en"}, "request"),
        ({"contextManagement": {}}, "request"),
    ],
)
def test_detect_format_by_shape(data: Any, fmt: str) -> None:
    assert detect_format(data) == fmt


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ([], "empty array"),
        ({}, "an object of no known format"),
        ("hello", "a string of no known format"),
        (None, "null of no known format"),
        ([1, 2], "an array of no known format"),
        ([{"from": "human"}], "an array of no known format"),
    ],
)
def test_detect_format_refuses_unknown_shapes(data: Any, reason: str) -> None:
    with pytest.raises(InvalidInput) as info:
        detect_format(data)
    assert info.value.where == "$"
    assert reason in info.value.reason
    if reason != "empty array":
        assert "conversation entries" in info.value.reason


def test_import_context_with_a_given_format_uses_that_importer() -> None:
    data = load("request_legacy.json")
    assert import_context(data, "request", now=NOW).message_pool
    with pytest.raises(InvalidInput) as info:
        import_context(data, "session", now=NOW)
    assert info.value.where == "$.records"
    with pytest.raises(InvalidInput, match="format"):
        import_context(data, "yaml", now=NOW)  # type: ignore[arg-type]


# --- an imported context is a working context ---------------------------------------------


@pytest.mark.anyio
async def test_engine_continues_an_imported_conversation() -> None:
    from turnfsm import Engine, MemoryStore
    from turnfsm.testing import ScriptedLLM

    ctx = import_openai_messages(load("openai.json"), now=NOW)
    store = MemoryStore()
    await store.create(ctx)
    llm = ScriptedLLM([{"text": "Anything else?"}])
    engine = Engine(llm=llm, store=store)
    turn = await engine.send(ctx.id, "What did DR-100 cost?")
    assert turn.state == "Idle"
    [request] = llm.requests
    sent = request.messages
    assert sent[0] == {
        "role": "system",
        "content": "You are a concise assistant for a hardware shop.",
    }
    assert {
        "role": "tool",
        "tool_call_id": "call_stock_1",
        "content": '{"sku": "DR-100", "in_stock": 3}',
    } in sent
    assert sent[-1] == {"role": "user", "content": "What did DR-100 cost?"}
    after = await engine.get_context(ctx.id)
    assert len(after.message_pool) == len(ctx.message_pool) + 2


# --- the command --------------------------------------------------------------------------


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="turnfsm")
    sub = parser.add_subparsers(dest="command")
    cli_import.add_parser(sub)
    args = parser.parse_args(["import", *argv])
    code: int = args.run(args)
    return code


def test_cli_prints_the_id_and_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli([str(FIXTURES / "session.json")]) == 0
    out, err = capsys.readouterr()
    ident, summary = out.splitlines()
    assert len(ident) == 32
    assert summary == "session: 10 messages, 2 tool calls, 1 branch (not stored: give --store URL)"
    assert err == ""


def test_cli_json_prints_the_whole_context(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli([str(FIXTURES / "openai.json"), "--json"]) == 0
    ctx = records.from_json(ChatContext, capsys.readouterr().out)
    assert count_tool_calls(ctx) == 3
    assert ctx.active_branch.system_prompt is not None


def test_cli_explicit_format_and_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO((FIXTURES / "request_legacy.json").read_text()))
    assert run_cli(["-", "--format", "request"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("request: 3 messages, 0 tool calls")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([str(MALFORMED / "session_bad_role.json")], "$.records[3].role: must be 'system'"),
        ([str(MALFORMED / "request_bad_role.json")], "contextManagement.currentMessage.role"),
        ([str(MALFORMED / "unknown_shape.json")], "$: an object of no known format"),
        ([str(MALFORMED / "not_json.json")], "not JSON: Expecting value at line 2 column 1"),
        ([str(MALFORMED / "nope.json")], "cannot read"),
        ([str(FIXTURES / "session.json"), "--format", "openai"], "$.messages: missing"),
    ],
)
def test_cli_malformed_input_one_line_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("turnfsm import: ")
    assert expected in err


class FakeStore:
    def __init__(self, fail: bool = False) -> None:
        self.created: list[ChatContext] = []
        self.closed = False
        self.fail = fail

    async def create(self, context: ChatContext) -> None:
        if self.fail:
            raise StoreError(f"context {context.id!r} already exists")
        self.created.append(context)

    async def aclose(self) -> None:
        self.closed = True


def test_cli_store_creates_the_context(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stores: dict[str, FakeStore] = {}

    def open_store(url: str) -> FakeStore:
        stores[url] = FakeStore()
        return stores[url]

    monkeypatch.setattr(turnfsm.storage, "open_store", open_store, raising=False)
    assert run_cli([str(FIXTURES / "entries.json"), "--store", "fake://x"]) == 0
    ident, summary = capsys.readouterr().out.splitlines()
    store = stores["fake://x"]
    assert [c.id for c in store.created] == [ident]
    assert store.closed
    assert summary == "entries: 12 messages, 3 tool calls, 1 branch; stored in fake://x"


def test_cli_store_refusal_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FakeStore(fail=True)
    monkeypatch.setattr(turnfsm.storage, "open_store", lambda url: store, raising=False)
    assert run_cli([str(FIXTURES / "entries.json"), "--store", "fake://x"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "already exists" in err and store.closed
    assert err.count("\n") == 1


def test_cli_store_without_open_store_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(turnfsm.storage, "open_store", raising=False)
    assert run_cli([str(FIXTURES / "entries.json"), "--store", "sqlite:///x.db"]) == 2
    assert "open_store" in capsys.readouterr().err


def test_cli_store_with_the_real_open_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    open_store = getattr(turnfsm.storage, "open_store", None)
    if open_store is None:
        pytest.skip("turnfsm.storage.open_store is not there yet")
    url = f"sqlite:///{tmp_path / 'imported.db'}"
    assert run_cli([str(FIXTURES / "session.json"), "--store", url]) == 0
    ident = capsys.readouterr().out.splitlines()[0]

    import anyio

    async def load() -> ChatContext:
        store = open_store(url)
        try:
            ctx: ChatContext = await store.load(ident)
        finally:
            close = getattr(store, "aclose", None)
            if close is not None:
                await close()
        return ctx

    ctx = anyio.run(load)
    assert len(ctx.message_pool) == 10
    assert ctx.current_state == "Idle"


def test_cli_store_bad_url_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    if getattr(turnfsm.storage, "open_store", None) is None:
        pytest.skip("turnfsm.storage.open_store is not there yet")
    assert run_cli([str(FIXTURES / "session.json"), "--store", "no-scheme"]) == 2
    assert "no-scheme" in capsys.readouterr().err


def test_openai_refusal_is_the_messages_refusal() -> None:
    """A refusal text is the assistant message's own field (apart from its text),
    so every provider gets it back as a refusal; a null one is kept as given."""
    data = [
        {"role": "user", "content": "Help me pick a lock."},
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
        {"role": "user", "content": "Then a recipe?"},
        {"role": "assistant", "content": "Sure: pancakes.", "refusal": None},
    ]
    refused, answered = messages(imp(import_openai_messages, data))[1::2]
    assert refused.refusal == "I can't help with that."
    assert refused.text == "" and refused.metadata.extra == {}
    assert refused.outcome == "refusal"
    assert answered.refusal is None and answered.metadata.extra == {"refusal": None}
    with pytest.raises(InvalidInput, match=r"\$\[1\]\.refusal"):
        imp(import_openai_messages, [data[0], {"role": "assistant", "refusal": 3}])
