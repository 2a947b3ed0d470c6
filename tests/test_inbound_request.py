"""The inbound request bodies (the contextManagement body and the legacy messages
body): both formats, one internal structure,
and descriptive errors for bodies that fit neither."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from turnfsm.adapters.inbound import (
    InboundMessage,
    InboundRequest,
    format_error_path,
    parse_request,
)
from turnfsm.errors import InvalidInput
from turnfsm.model import Role, TextPart, to_chat_messages

FIXTURES = Path(__file__).parent / "fixtures" / "import"
NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text("utf-8"))


def cm_body(**current: Any) -> dict[str, Any]:
    return {"contextManagement": {"currentMessage": {"role": "user", "content": "hi", **current}}}


# --- the two formats ----------------------------------------------------------------------


def test_context_management_body_of_the_seed() -> None:
    req = parse_request(load("request_context_management.json"))
    assert req.format == "context_management"
    assert req.current == InboundMessage(
        role=Role.USER,
        content="Add a task to buy milk",
        timestamp=datetime(2025, 7, 7, 10, 30, tzinfo=UTC),
        message_id="msg-123",
    )
    assert [(m.role, m.content, m.message_id) for m in req.history] == [
        (Role.USER, "Hello", "msg-122"),
        (Role.ASSISTANT, "Hi! How can I help you?", "msg-122-response"),
    ]
    assert req.user_language == "en"
    assert req.user_timezone == "America/New_York"


def test_legacy_body_of_the_seed_last_message_is_current() -> None:
    req = parse_request(load("request_legacy.json"))
    assert req.format == "legacy"
    assert req.current.role is Role.USER
    assert req.current.content == "Add a task to buy milk"
    assert [m.content for m in req.history] == ["Hello", "Hi! How can I help you?"]
    assert req.user_timezone == "America/New_York"


def test_both_formats_give_the_same_structure() -> None:
    cm = parse_request(load("request_context_management.json"))
    legacy = parse_request(load("request_legacy.json"))
    strip = {"timestamp": None, "message_id": None}
    assert cm.current.model_copy(update=strip) == legacy.current
    assert [m.model_copy(update=strip) for m in cm.history] == legacy.history
    assert cm.model_dump(exclude={"current", "history", "format"}) == legacy.model_dump(
        exclude={"current", "history", "format"}
    )


def test_defaults_language_en_no_timezone_no_context() -> None:
    req = parse_request(cm_body())
    assert req.user_language == "en"
    assert req.user_timezone is None
    assert req.history == []
    legacy = parse_request({"messages": [{"role": "user", "content": "hi"}]})
    assert (legacy.user_language, legacy.user_timezone, legacy.history) == ("en", None, [])


def test_frontend_operator_current_message_in_both_formats() -> None:
    req = parse_request(load("request_frontend_operator.json"))
    assert req.current.role is Role.FRONTEND_OPERATOR
    legacy = parse_request(
        {
            "messages": [
                {"role": "user", "content": "hello"},
                {"role": "frontend_operator", "content": "user opened settings"},
            ]
        }
    )
    assert legacy.current.role is Role.FRONTEND_OPERATOR


def test_history_may_hold_system_and_operator_messages() -> None:
    req = parse_request(
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "frontend_operator", "content": "opened the cart"},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": "checkout"},
            ]
        }
    )
    assert [m.role for m in req.history] == [Role.SYSTEM, Role.FRONTEND_OPERATOR, Role.ASSISTANT]


def test_timestamp_without_offset_is_utc() -> None:
    req = parse_request(cm_body(timestamp="2025-07-07T10:30:00"))
    assert req.current.timestamp == datetime(2025, 7, 7, 10, 30, tzinfo=UTC)
    offset = parse_request(cm_body(timestamp="2025-07-07T12:30:00+02:00"))
    assert offset.current.timestamp == req.current.timestamp


def test_inbound_request_round_trips_as_json() -> None:
    req = parse_request(load("request_frontend_operator.json"))
    assert InboundRequest.model_validate_json(req.model_dump_json()) == req


# --- to_messages --------------------------------------------------------------------------


def test_to_messages_history_then_current_flagged() -> None:
    messages = parse_request(load("request_context_management.json")).to_messages(now=NOW)
    assert [(m.role, m.text) for m in messages] == [
        (Role.USER, "Hello"),
        (Role.ASSISTANT, "Hi! How can I help you?"),
        (Role.USER, "Add a task to buy milk"),
    ]
    assert [m.metadata.created_at for m in messages] == [
        datetime(2025, 7, 7, 10, 29, tzinfo=UTC),
        datetime(2025, 7, 7, 10, 29, 30, tzinfo=UTC),
        datetime(2025, 7, 7, 10, 30, tzinfo=UTC),
    ]
    assert messages[0].metadata.extra == {"message_id": "msg-122"}
    assert messages[-1].metadata.extra == {
        "message_id": "msg-123",
        "current": True,
        "user_language": "en",
        "user_timezone": "America/New_York",
    }


def test_frontend_operator_keeps_its_role_and_no_prefix_is_stored() -> None:
    messages = parse_request(load("request_frontend_operator.json")).to_messages(now=NOW)
    current = messages[-1]
    assert current.role is Role.FRONTEND_OPERATOR
    assert current.metadata.extra["current"] is True
    assert current.content == [
        TextPart(text="The user switched to the task list view; summarise open tasks.")
    ]
    assert all("CURRENT MESSAGE" not in m.text for m in messages)
    # the chat-format view speaks for the operator as a named user
    assert to_chat_messages(messages)[-1] == {
        "role": "user",
        "name": "frontend_operator",
        "content": current.text,
    }


def test_to_messages_uses_now_without_timestamps() -> None:
    messages = parse_request(load("request_legacy.json")).to_messages(now=NOW)
    assert {m.metadata.created_at for m in messages} == {NOW}
    assert "message_id" not in messages[0].metadata.extra
    assert messages[-1].metadata.extra == {
        "current": True,
        "user_language": "en",
        "user_timezone": "America/New_York",
    }


def test_to_messages_without_timezone_and_default_now() -> None:
    before = datetime.now(UTC)
    [msg] = parse_request(cm_body()).to_messages()
    assert msg.metadata.extra == {"current": True, "user_language": "en"}
    assert msg.metadata.created_at >= before


def test_empty_history_content_gives_no_text_part() -> None:
    req = parse_request(
        {"messages": [{"role": "assistant", "content": ""}, {"role": "user", "content": "x"}]}
    )
    assert req.to_messages(now=NOW)[0].content == []


# --- bodies that fit neither format -------------------------------------------------------

ROLE_MSG = "Input should be 'user' or 'frontend_operator'"
NO_MESSAGES = "messages: Field required"  # the legacy view of a CM body

MALFORMED: list[tuple[str, Any, list[str]]] = [
    ("empty object", {}, ["contextManagement: Field required", "messages: Field required"]),
    (
        "current role assistant",
        cm_body(role="assistant"),
        [f"contextManagement.currentMessage.role: {ROLE_MSG}", "messages: Field required"],
    ),
    (
        "current role missing",
        {"contextManagement": {"currentMessage": {"content": "hi"}}},
        ["contextManagement.currentMessage.role: Field required"],
    ),
    (
        "current message missing",
        {"contextManagement": {"conversationContext": []}},
        ["contextManagement.currentMessage: Field required", NO_MESSAGES],
    ),
    (
        "current content missing",
        {"contextManagement": {"currentMessage": {"role": "user"}}},
        ["contextManagement.currentMessage.content: Field required"],
    ),
    (
        "current content empty",
        cm_body(content=""),
        ["contextManagement.currentMessage.content: String should have at least 1 character"],
    ),
    (
        "content is a number",
        cm_body(content=42),
        ["contextManagement.currentMessage.content: Input should be a valid string"],
    ),
    (
        "messageId is a number",
        cm_body(messageId=7),
        ["contextManagement.currentMessage.messageId: Input should be a valid string"],
    ),
    (
        "bad timestamp",
        cm_body(timestamp=True),
        ["contextManagement.currentMessage.timestamp: Input should be a valid datetime"],
    ),
    (
        "contextManagement not an object",
        {"contextManagement": "hi"},
        ["contextManagement: Input should be an object"],
    ),
    (
        "conversationContext not a list",
        {
            "contextManagement": {
                "currentMessage": {"role": "user", "content": "x"},
                "conversationContext": {},
            }
        },
        ["contextManagement.conversationContext: Input should be a valid list"],
    ),
    (
        "context message with unknown role",
        {
            "contextManagement": {
                "currentMessage": {"role": "user", "content": "x"},
                "conversationContext": [
                    {"role": "user", "content": "a"},
                    {"role": "bot", "content": "b"},
                ],
            }
        },
        ["contextManagement.conversationContext[1].role: Input should be 'user', 'assistant'"],
    ),
    (
        "empty messages list",
        {"messages": []},
        ["messages: List should have at least 1 item", "contextManagement: Field required"],
    ),
    (
        "messages not a list",
        {"messages": "hello"},
        ["messages: Input should be a valid list"],
    ),
    (
        "last legacy message is the assistant's",
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
        [
            "messages: the last message is the current one: its role must be 'user' or "
            "'frontend_operator', not 'assistant' (messages[1].role)"
        ],
    ),
    (
        "last legacy message empty",
        {"messages": [{"role": "user", "content": ""}]},
        ["it needs some text (messages[0].content)"],
    ),
    (
        "legacy message without role",
        {"messages": [{"content": "hi"}]},
        ["messages[0].role: Field required"],
    ),
    (
        "userLanguage null",
        {**cm_body(), "userLanguage": None},
        ["userLanguage: Input should be a valid string"],
    ),
    (
        "userTimezone a number",
        {"messages": [{"role": "user", "content": "hi"}], "userTimezone": 2},
        ["userTimezone: Input should be a valid string"],
    ),
    (
        "snake_case keys",
        {"context_management": {"current_message": {"role": "user", "content": "hi"}}},
        ["contextManagement: Field required", NO_MESSAGES],
    ),
]


@pytest.mark.parametrize(
    ("body", "expected"), [(b, e) for _, b, e in MALFORMED], ids=[n for n, _, _ in MALFORMED]
)
def test_malformed_body_lists_each_format_problem(body: Any, expected: list[str]) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_request(body)
    err = info.value
    assert err.where == "request body"
    text = str(err)
    assert "\n" not in text
    assert "as a contextManagement body: [" in text
    assert "as a legacy messages body: [" in text
    for piece in expected:
        assert piece in text, f"{piece!r} not in {text!r}"


def test_the_error_sorts_problems_under_their_format() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_request(cm_body(role="assistant"))
    cm_part, legacy_part = str(info.value).split("as a legacy messages body:")
    assert f"contextManagement.currentMessage.role: {ROLE_MSG}" in cm_part
    assert "messages: Field required" in legacy_part
    assert "currentMessage" not in legacy_part


@pytest.mark.parametrize("body", [[], ["messages"], "hello", 3, None, True])
def test_non_object_body(body: Any) -> None:
    with pytest.raises(InvalidInput, match=r"^request body: must be a JSON object, not "):
        parse_request(body)


def test_invalid_input_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="fits neither format"):
        parse_request({})


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        ((), "$"),
        (("messages",), "messages"),
        (("messages", 2, "role"), "messages[2].role"),
        (("contextManagement", "currentMessage", "role"), "contextManagement.currentMessage.role"),
        ((0, "x"), "[0].x"),
    ],
)
def test_format_error_path(loc: tuple[int | str, ...], path: str) -> None:
    assert format_error_path(loc) == path
