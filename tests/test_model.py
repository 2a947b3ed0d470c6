"""The data model (turnfsm.model): lossless JSON, the OpenAI chat format, tool-call views."""

from __future__ import annotations

import dataclasses
import functools
import json
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest.mock import ANY

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit import examples  # tests/ is on sys.path (no tests/__init__.py)
from pydantic import ValidationError

from turnfsm import records
from turnfsm.model import (
    SCHEMA_VERSION,
    ApprovalStatus,
    Branch,
    ChatConfig,
    ChatContext,
    FilePart,
    ImagePart,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    MessageType,
    Role,
    SystemPrompt,
    TextPart,
    TokenUsage,
    ToolCallRequest,
    ToolCallResult,
    TurnProgress,
    to_chat_message,
    to_chat_messages,
    tool_result_content,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def meta(**kw: Any) -> MessageMetadata:
    return MessageMetadata(created_at=kw.pop("created_at", T0), **kw)


def msg(role: Role, text: str | None = None, **kw: Any) -> InternalMessage:
    content = kw.pop("content", [TextPart(text=text)] if text is not None else [])
    return InternalMessage(role=role, content=content, metadata=kw.pop("metadata", meta()), **kw)


def call(cid: str, status: ApprovalStatus = ApprovalStatus.PENDING, **kw: Any) -> ToolCallRequest:
    return ToolCallRequest(
        id=cid, tool_name=kw.pop("tool_name", "get_weather"), approval_status=status, **kw
    )


def result(cid: str, value: Any = "ok", success: bool = True) -> InternalMessage:
    return msg(
        Role.TOOL,
        tool_result=ToolCallResult(request_id=cid, result=value, success=success),
        message_type=MessageType.TOOL_RESULT,
    )


def assistant_calls(*calls: ToolCallRequest, text: str | None = None) -> InternalMessage:
    return msg(Role.ASSISTANT, text, tool_calls=list(calls), message_type=MessageType.TOOL_CALL)


def build(
    messages: list[InternalMessage],
    *,
    branch: str = "main",
    ctx: ChatContext | None = None,
    parent_message_id: str | None = None,
    prefix: str = "m",
) -> ChatContext:
    """A context whose ``branch`` holds ``messages`` (appended to ``ctx`` if given)."""
    ctx = ctx or ChatContext(id="ctx-1", created_at=T0, updated_at=T0)
    ids: list[str] = []
    if parent_message_id is not None:
        src = next(b for b in ctx.branches.values() if parent_message_id in b.message_ids)
        ids = src.message_ids[: src.message_ids.index(parent_message_id) + 1]
    prev = ids[-1] if ids else None
    for i, m in enumerate(messages):
        mid = f"{prefix}{i}"
        ctx.message_pool[mid] = MessageNode(id=mid, message=m, parent_id=prev)
        ids.append(mid)
        prev = mid
    ctx.branches[branch] = Branch(
        name=branch,
        message_ids=ids,
        parent_message_id=parent_message_id,
        forked_from="main" if parent_message_id else None,
    )
    return ctx


# --- JSON round trip ----------------------------------------------------------------------


def rich_context() -> ChatContext:
    ctx = ChatContext(
        id="ctx-rich",
        parent_id="ctx-parent",
        config=ChatConfig(
            model_id="gpt-4o-mini",
            mode="agent",
            parameters={"temperature": 0.2, "max_tokens": 512, "stop": ["\n\n"]},
            system_prompt_id="sp-1",
            agent_role="planner",
            workspace_path="/tmp/ws",
        ),
        current_state="AwaitingToolApproval",
        created_at=T0,
        updated_at=T0 + timedelta(minutes=5),
        version=7,
        event_seq=42,
        progress=TurnProgress(
            iteration=2, attempt=1, retry_at=1234.5, last_error="HTTP 429", started_call_ids=("c1",)
        ),
    )
    main = [
        msg(Role.SYSTEM, "be brief"),
        msg(
            Role.USER,
            content=[
                TextPart(text="what is in this picture and file?"),
                ImagePart(url="https://example.com/cat.png", detail="high"),
                ImagePart(url="data:image/png;base64,iVBORw0KGgo="),
                FilePart(name="notes.pdf", mime_type="application/pdf", data="JVBERi0xLjQK"),
                FilePart(name="blob.bin", data="AAEC"),
            ],
        ),
        msg(Role.FRONTEND_OPERATOR, "operator here: please use the tools"),
        assistant_calls(
            call("c1", ApprovalStatus.APPROVED, arguments={"city": "London"}, decided_by="policy"),
            call(
                "c2",
                ApprovalStatus.DENIED,
                arguments={"city": "Paris", "units": ["c", "f"]},
                decided_by="human",
                reason="not now",
            ),
            call("c3", ApprovalStatus.PENDING, raw_arguments="{not json", outcome_unknown=True),
            text="let me check",
        ),
        result("c1", {"temp_c": 15, "nested": {"list": [1, 2.5, None, True]}}),
        result("c2", "denied: not now", success=False),
        msg(
            Role.ASSISTANT,
            "It is 15 C.",
            thinking="the user wants the temperature",
            metadata=meta(
                model="gpt-4o-mini",
                usage=TokenUsage(
                    prompt_tokens=10, completion_tokens=5, total_tokens=15, cached_tokens=3
                ),
                attempt=2,
                iteration=1,
                finish_reason="stop",
                cancelled=True,
                extra={"latency_ms": 120, "partial": "It is"},
            ),
            message_type=MessageType.PLAN,
        ),
        msg(Role.ASSISTANT, "any question?", message_type=MessageType.QUESTION),
    ]
    build(main, ctx=ctx)
    ctx.branches["main"] = dataclasses.replace(
        ctx.branches["main"],
        **{
            "system_prompt": SystemPrompt(id="sp-1", content="You help."),
            "user_prompt": "Be kind.",
        },
    )
    build(
        [msg(Role.USER, "alternative")], ctx=ctx, branch="alt", parent_message_id="m1", prefix="a"
    )
    build([msg(Role.USER, "third")], ctx=ctx, branch="third", parent_message_id="m0", prefix="t")
    ctx.active_branch_name = "alt"
    return ctx


def test_json_round_trip_is_lossless() -> None:
    ctx = rich_context()
    text = records.to_json(ctx).decode()
    back = records.from_json(ChatContext, text)
    assert back == ctx
    assert records.to_json(back).decode() == text
    assert back.schema_version == SCHEMA_VERSION


def test_json_round_trip_through_python_json() -> None:
    ctx = rich_context()
    data = json.loads(json.dumps(records.to_python(ctx)))
    assert records.from_python(ChatContext, data) == ctx


def test_round_trip_keeps_part_kinds_statuses_and_results() -> None:
    back = records.from_json(ChatContext, records.to_json(rich_context()).decode())
    user = back.message_pool["m1"].message
    assert [type(p) for p in user.content] == [TextPart, ImagePart, ImagePart, FilePart, FilePart]
    asked = back.message_pool["m3"].message
    assert asked.tool_calls is not None
    assert [c.approval_status for c in asked.tool_calls] == [
        ApprovalStatus.APPROVED,
        ApprovalStatus.DENIED,
        ApprovalStatus.PENDING,
    ]
    assert asked.tool_calls[2].raw_arguments == "{not json"
    assert asked.tool_calls[2].outcome_unknown is True
    assert back.message_pool["m4"].message.tool_result == ToolCallResult(
        request_id="c1", result={"temp_c": 15, "nested": {"list": [1, 2.5, None, True]}}
    )
    assert back.message_pool["m5"].message.tool_result.success is False  # type: ignore[union-attr]
    answer = back.message_pool["m6"].message
    assert answer.thinking == "the user wants the temperature"
    assert answer.metadata.usage is not None
    assert answer.metadata.usage.total_tokens == 15
    assert answer.metadata.usage.extras == {"cached_tokens": 3}
    assert answer.metadata.cancelled is True
    assert answer.message_type is MessageType.PLAN
    assert back.message_pool["m2"].message.role is Role.FRONTEND_OPERATOR
    assert set(back.branches) == {"main", "alt", "third"}
    assert back.branches["alt"].parent_message_id == "m1"
    assert back.branches["alt"].message_ids == ["m0", "m1", "a0"]
    assert back.active_branch_name == "alt"
    assert back.progress.started_call_ids == ("c1",)
    assert back.created_at.tzinfo is not None


def test_json_uses_the_exact_enum_names() -> None:
    data = json.loads(records.to_json(rich_context()).decode())
    m3 = data["message_pool"]["m3"]["message"]
    assert [c["approval_status"] for c in m3["tool_calls"]] == ["Approved", "Denied", "Pending"]
    assert m3["message_type"] == "ToolCall"
    assert data["message_pool"]["m2"]["message"]["role"] == "frontend_operator"
    kinds = [p["type"] for p in data["message_pool"]["m1"]["message"]["content"]]
    assert kinds == ["text", "image", "image", "file", "file"]


def test_unknown_fields_are_refused() -> None:
    data = json.loads(records.to_json(rich_context()).decode())
    data["surprise"] = 1
    with pytest.raises(ValidationError):
        records.from_python(ChatContext, data)


def test_parts_prompts_and_progress_are_frozen() -> None:
    # shared by the copies the engine hands out (tests/engine/test_handed_out.py
    # shows that changing those cannot change the engine's context)
    frozen = [
        TextPart(text="hi"),
        ImagePart(url="https://x/a.png"),
        FilePart(name="a", data="AA=="),
        SystemPrompt(id="p", content="c"),
        TurnProgress(),
    ]
    for record in frozen:
        name = dataclasses.fields(record)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, name, getattr(record, name))


def test_history_follows_the_branch() -> None:
    ctx = rich_context()
    assert [n.id for n in ctx.history()] == ["m0", "m1", "a0"]
    assert [n.id for n in ctx.history("third")] == ["m0", "t0"]
    assert ctx.active_branch.name == "alt"


# --- OpenAI chat format -------------------------------------------------------------------


def test_system_message() -> None:
    assert to_chat_message(msg(Role.SYSTEM, "be brief")) == {
        "role": "system",
        "content": "be brief",
    }


def test_user_message_joins_text_parts() -> None:
    m = msg(Role.USER, content=[TextPart(text="a"), TextPart(text="b")])
    assert to_chat_message(m) == {"role": "user", "content": "ab"}


def test_frontend_operator_speaks_as_named_user() -> None:
    assert to_chat_message(msg(Role.FRONTEND_OPERATOR, "hi")) == {
        "role": "user",
        "name": "frontend_operator",
        "content": "hi",
    }


def test_assistant_text() -> None:
    assert to_chat_message(msg(Role.ASSISTANT, "hello")) == {
        "role": "assistant",
        "content": "hello",
    }


def test_empty_assistant_message_has_empty_content() -> None:
    assert to_chat_message(msg(Role.ASSISTANT)) == {"role": "assistant", "content": ""}


def test_assistant_with_tool_calls() -> None:
    m = assistant_calls(
        call("c1", arguments={"city": "Zürich", "days": 2}),
        call("c2", tool_name="now"),
    )
    out = to_chat_message(m)
    assert out == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "arguments": out["tool_calls"][0]["function"]["arguments"],
                },
            },
            {"id": "c2", "type": "function", "function": {"name": "now", "arguments": "{}"}},
        ],
    }
    args = out["tool_calls"][0]["function"]["arguments"]
    assert isinstance(args, str)
    assert json.loads(args) == {"city": "Zürich", "days": 2}
    assert "Zürich" in args  # not \u-escaped


def test_assistant_with_text_and_tool_calls_keeps_the_text() -> None:
    out = to_chat_message(assistant_calls(call("c1"), text="checking"))
    assert out["content"] == "checking"
    assert [c["id"] for c in out["tool_calls"]] == ["c1"]


def test_assistant_tool_call_with_raw_arguments_sends_them_verbatim() -> None:
    out = to_chat_message(assistant_calls(call("c1", raw_arguments="{broken")))
    assert out["tool_calls"][0]["function"]["arguments"] == "{broken"


def test_assistant_thinking_is_not_sent() -> None:
    out = to_chat_message(msg(Role.ASSISTANT, "x", thinking="secret"))
    assert out == {"role": "assistant", "content": "x"}


@pytest.mark.parametrize(
    ("value", "content"),
    [
        ({"temp_c": 15, "city": "Zürich"}, '{"temp_c":15,"city":"Zürich"}'),
        ("plain text", "plain text"),
        ([1, 2], "[1,2]"),
        (None, "null"),
        (3.5, "3.5"),
        (True, "true"),
    ],
)
def test_tool_message(value: Any, content: str) -> None:
    out = to_chat_message(result("c9", value))
    assert out == {"role": "tool", "tool_call_id": "c9", "content": content}
    assert tool_result_content(value) == content


def test_failed_tool_result_is_still_a_tool_message() -> None:
    out = to_chat_message(result("c9", {"error": "boom"}, success=False))
    assert out["role"] == "tool"
    assert out["tool_call_id"] == "c9"
    assert json.loads(out["content"]) == {"error": "boom"}


def test_tool_result_content_falls_back_to_str_for_unknown_types() -> None:
    assert tool_result_content({"at": T0}) == json.dumps({"at": str(T0)}, separators=(",", ":"))


def test_image_part_becomes_image_url_part() -> None:
    m = msg(
        Role.USER,
        content=[
            TextPart(text="look"),
            ImagePart(url="https://example.com/a.png", detail="low"),
            ImagePart(url="data:image/png;base64,AAA="),
        ],
    )
    assert to_chat_message(m) == {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {
                "type": "image_url",
                "image_url": {"url": "https://example.com/a.png", "detail": "low"},
            },
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA="}},
        ],
    }


def test_file_part_becomes_file_part() -> None:
    m = msg(Role.USER, content=[FilePart(name="a.pdf", mime_type="application/pdf", data="JVBE")])
    assert to_chat_message(m) == {
        "role": "user",
        "content": [
            {
                "type": "file",
                "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBE"},
            }
        ],
    }


def test_frontend_operator_with_image() -> None:
    m = msg(Role.FRONTEND_OPERATOR, content=[ImagePart(url="https://x/y.png")])
    out = to_chat_message(m)
    assert out["role"] == "user"
    assert out["name"] == "frontend_operator"
    assert out["content"] == [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]


def test_to_chat_messages_is_message_by_message() -> None:
    history = [n.message for n in rich_context().history("main")]
    assert to_chat_messages(history) == [to_chat_message(m) for m in history]
    assert [m["role"] for m in to_chat_messages(history)] == [
        "system",
        "user",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "assistant",
    ]


def test_chat_format_is_json_serialisable() -> None:
    history = [n.message for n in rich_context().history("main")]
    json.dumps(to_chat_messages(history))


# --- tool-call views on hand-built histories ----------------------------------------------


def test_empty_history_has_no_tool_batch() -> None:
    ctx = build([])
    assert ctx.last_tool_batch() is None
    assert ctx.open_tool_calls() == []
    assert ctx.pending_tool_calls() == []


def test_text_answer_has_no_tool_batch() -> None:
    ctx = build([msg(Role.USER, "hi"), msg(Role.ASSISTANT, "hello")])
    assert ctx.last_tool_batch() is None
    assert ctx.open_tool_calls() == []


def test_fresh_batch_is_all_open() -> None:
    calls = [
        call("c1", ApprovalStatus.PENDING),
        call("c2", ApprovalStatus.APPROVED),
        call("c3", ApprovalStatus.DENIED),
        call("c4", ApprovalStatus.PENDING),
    ]
    ctx = build([msg(Role.USER, "go"), assistant_calls(*calls)])
    batch = ctx.last_tool_batch()
    assert batch is not None
    node, answered = batch
    assert node.id == "m1"
    assert answered == []
    assert [c.id for c in ctx.open_tool_calls()] == ["c1", "c2", "c3", "c4"]
    assert [c.id for c in ctx.pending_tool_calls()] == ["c1", "c4"]


def test_partly_answered_batch() -> None:
    calls = [call("c1"), call("c2", ApprovalStatus.APPROVED), call("c3")]
    ctx = build([msg(Role.USER, "go"), assistant_calls(*calls), result("c2"), result("c1")])
    batch = ctx.last_tool_batch()
    assert batch is not None
    node, answered = batch
    assert node.id == "m1"
    assert sorted(answered) == ["c1", "c2"]
    assert [c.id for c in ctx.open_tool_calls()] == ["c3"]
    assert [c.id for c in ctx.pending_tool_calls()] == ["c3"]


def test_fully_answered_batch_has_no_open_calls() -> None:
    ctx = build(
        [assistant_calls(call("c1"), call("c2")), result("c1"), result("c2", success=False)]
    )
    batch = ctx.last_tool_batch()
    assert batch is not None
    assert sorted(batch[1]) == ["c1", "c2"]
    assert ctx.open_tool_calls() == []
    assert ctx.pending_tool_calls() == []


def test_only_the_newest_batch_counts() -> None:
    ctx = build(
        [
            assistant_calls(call("old1"), call("old2")),
            result("old1"),
            assistant_calls(call("new1"), call("new2", ApprovalStatus.APPROVED)),
            result("new2"),
        ]
    )
    batch = ctx.last_tool_batch()
    assert batch is not None
    assert batch[0].id == "m2"
    assert batch[1] == ["new2"]
    assert [c.id for c in ctx.open_tool_calls()] == ["new1"]


def test_a_later_text_answer_closes_the_view() -> None:
    ctx = build([assistant_calls(call("c1")), result("c1"), msg(Role.ASSISTANT, "done")])
    assert ctx.last_tool_batch() is None
    assert ctx.open_tool_calls() == []


def test_a_later_user_message_closes_the_view() -> None:
    ctx = build([assistant_calls(call("c1")), msg(Role.USER, "never mind")])
    assert ctx.last_tool_batch() is None
    assert ctx.pending_tool_calls() == []


def test_assistant_with_empty_tool_call_list_is_not_a_batch() -> None:
    ctx = build([msg(Role.ASSISTANT, "hm", tool_calls=[])])
    assert ctx.last_tool_batch() is None


def test_views_follow_the_active_branch() -> None:
    ctx = build([msg(Role.USER, "go"), assistant_calls(call("c1"))])
    build([msg(Role.ASSISTANT, "plain")], ctx=ctx, branch="alt", parent_message_id="m0", prefix="a")
    assert [c.id for c in ctx.pending_tool_calls()] == ["c1"]
    ctx.active_branch_name = "alt"
    assert ctx.last_tool_batch() is None
    assert ctx.pending_tool_calls() == []


def test_views_do_not_mutate_the_context() -> None:
    ctx = build([assistant_calls(call("c1"), call("c2")), result("c1")])
    before = records.to_json(ctx).decode()
    ctx.last_tool_batch()
    ctx.open_tool_calls()
    ctx.pending_tool_calls()
    assert records.to_json(ctx).decode() == before


def test_the_view_keeps_a_batchs_results_in_the_order_of_its_calls() -> None:
    """A question answered first is stored first; the view orders it after the
    results of the calls asked before it, and leaves other sequences alone."""
    from turnfsm.model import append_chat

    asked = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": i, "type": "function"} for i in ("a", "b", "c")],
    }
    chat: list[dict[str, Any]] = [{"role": "user", "content": "hi"}, asked]
    for call in ("c", "a", "b"):
        append_chat(chat, {"role": "tool", "tool_call_id": call, "content": call})
    assert [m.get("tool_call_id") for m in chat[2:]] == ["a", "b", "c"]
    # a result of no call of the batch goes last, as it comes
    append_chat(chat, {"role": "tool", "tool_call_id": "zz", "content": ""})
    assert chat[-1]["tool_call_id"] == "zz"
    # a tool message after a user message is appended as it is
    plain: list[dict[str, Any]] = [{"role": "user", "content": "x"}]
    append_chat(plain, {"role": "tool", "tool_call_id": "a", "content": ""})
    assert [m["role"] for m in plain] == ["user", "tool"]


def test_validation_errors_name_the_place_as_before() -> None:
    # an unknown key is "Extra inputs are not permitted" (extra_forbidden), at its path
    data = json.loads(records.to_json(rich_context()))
    node = next(iter(data["message_pool"].values()))
    node["message"]["content"] = [{"type": "text", "text": "x", "bold": True}]
    node["message"]["metadata"]["created_at"] = 5
    data["colour"] = "red"
    with pytest.raises(ValidationError) as info:
        records.from_json(ChatContext, json.dumps(data), strict=True)
    errors = sorted(
        (e["type"], ".".join(map(str, e["loc"])), e["msg"]) for e in info.value.errors()
    )
    mid = node["id"]
    assert errors == [
        ("datetime_type", f"message_pool.{mid}.message.metadata.created_at", ANY),
        ("extra_forbidden", "colour", "Extra inputs are not permitted"),
        (
            "extra_forbidden",
            f"message_pool.{mid}.message.content.0.text.bold",
            "Extra inputs are not permitted",
        ),
    ]


_JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and the infinities included
    | st.text()
    | st.datetimes(),  # no JSON form: default=str for results, a TypeError for arguments
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5) | st.integers() | st.booleans(), inner, max_size=4)
    ),
    max_leaves=12,
)


def _outcome(encode: Any, value: Any) -> Any:
    try:
        return encode(value)
    except Exception as exc:  # the same kind of error, with the same words
        return (type(exc), str(exc))


@given(_JSONISH)
@settings(max_examples=examples(300), deadline=None)
def test_the_view_encodes_json_as_json_dumps_does(value: Any) -> None:
    """The chat view's encoders skip ``JSONEncoder.encode``'s Python frames:
    for any value they give the text (or the error) ``json.dumps`` gives."""
    from turnfsm.model import _chat_format

    result = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"), default=str)
    arguments = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"))
    assert _outcome(_chat_format._encode_result, value) == _outcome(result, value)
    assert _outcome(_chat_format._encode_arguments, value) == _outcome(arguments, value)


def test_the_view_encoders_refuse_a_cycle_as_json_dumps_does() -> None:
    from turnfsm.model import _chat_format

    cycle: list[Any] = [1]
    cycle.append(cycle)
    for encode in (_chat_format._encode_result, _chat_format._encode_arguments):
        with pytest.raises(ValueError, match="Circular reference detected"):
            encode(cycle)
