"""Exporting a context's branch in the formats the importers read (the session
JSON format, conversation entries, OpenAI messages): an import, an export and an
import again give the same messages, for every sample the import tests use and
for a conversation the engine had itself."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from typing import Any

import kit
import pytest
from canonical import WEATHER_CALLS, get_weather, get_weather_approved
from test_import_formats import FIXTURES, NOW, PNG_1PX, SAMPLES  # the import samples

from turnfsm import MemoryStore, records
from turnfsm.adapters.inbound import (
    MISSING_RESULT,
    detect_format,
    import_context,
    import_conversation_entries,
    import_openai_messages,
    import_session_records,
    parse_request,
)
from turnfsm.adapters.outbound import (
    EXPORT_FORMATS,
    export_context,
    export_conversation_entries,
    export_openai_messages,
    export_session_records,
)
from turnfsm.errors import BranchError, InvalidInput
from turnfsm.model import (
    ApprovalStatus,
    Branch,
    ChatContext,
    FilePart,
    ImagePart,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    Role,
    SystemPrompt,
    TextPart,
    ToolCallRequest,
    ToolCallResult,
    tool_result_content,
)

SAME_FORMAT = sorted(n for n, f in SAMPLES.items() if f in EXPORT_FORMATS)


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text("utf-8"))


def seq_ids(prefix: str = "id") -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter)}"


def imported(name: str) -> ChatContext:
    return import_context(load(name), SAMPLES[name], now=NOW, ids=seq_ids())  # type: ignore[arg-type]


def messages(ctx: ChatContext, branch: str | None = None) -> list[InternalMessage]:
    return [n.message for n in ctx.history(branch)]


def again(ctx: ChatContext, fmt: str, branch: str | None = None) -> ChatContext:
    """Export ``ctx`` in ``fmt``, through JSON text, and import it back."""
    data = json.loads(json.dumps(export_context(ctx, fmt, branch=branch)))  # type: ignore[arg-type]
    assert detect_format(data) == fmt
    return import_context(data, fmt, now=NOW, ids=seq_ids("again"))


# --- what each format keeps, as one comparable list ---------------------------------------


def _parts(msg: InternalMessage, fmt: str) -> tuple[Any, ...]:
    """The images and files of a message, as the format keeps them."""
    out: list[Any] = []
    for p in msg.content:
        if isinstance(p, TextPart):
            continue
        if fmt == "session":
            out.append(p.url if isinstance(p, ImagePart) else (p.name, p.mime_type, p.data))
        elif fmt == "entries":
            kept = isinstance(p, ImagePart) and msg.role is not Role.ASSISTANT
            if kept and p.url.startswith(("data:image/png;", "data:image/jpeg;")):  # type: ignore[union-attr]
                out.append(p.url)  # type: ignore[union-attr]
        elif msg.role is not Role.ASSISTANT:
            out.append(records.to_python(p, mode="python"))
    return tuple(out)


def conversation(ctx: ChatContext, fmt: str, branch: str | None = None) -> list[tuple[Any, ...]]:
    """The branch as ``fmt`` keeps it: each text, call and result in order, with
    what the format has a place for (see the exporters' docstrings)."""
    found = ctx.branches[branch or ctx.active_branch_name]
    history = messages(ctx, branch)
    results = {m.tool_result.request_id: m for m in history if m.tool_result is not None}
    out: list[tuple[Any, ...]] = []

    def result(msg: InternalMessage) -> tuple[Any, ...]:
        done = msg.tool_result
        assert done is not None
        if fmt == "openai":  # text, and no success flag: only a made-up result fails
            synthesized = msg.metadata.extra.get("synthesized") is True
            value = done.result if synthesized else tool_result_content(done.result)
            return ("result", done.request_id, value, not synthesized)
        return ("result", done.request_id, done.result, done.success, msg.metadata.created_at)

    prompt = "\n\n".join(
        p for p in (found.system_prompt and found.system_prompt.content, found.user_prompt) if p
    )
    if prompt and fmt != "entries":
        when = ctx.created_at if fmt == "session" else None
        out.append(("message", "system", prompt, (), None, when))
    for msg in history:
        role = msg.role
        if role is Role.TOOL:
            if fmt != "session":  # there, each result comes with its call
                out.append(result(msg))
            continue
        if role is Role.SYSTEM and fmt == "entries":
            continue
        if role is Role.FRONTEND_OPERATOR and fmt != "openai":
            role = Role.USER
        thinking = msg.thinking if fmt != "session" else None
        when = msg.metadata.created_at if fmt != "openai" else None
        if msg.content or not msg.tool_calls or thinking:
            out.append(("message", role.value, msg.text, _parts(msg, fmt), thinking, when))
        for c in msg.tool_calls or []:
            out.append(("call", c.id, c.tool_name, c.arguments, c.raw_arguments))
            if fmt == "session" and c.id in results:
                out.append(result(results[c.id]))
    return out


# --- round trips of every sample ----------------------------------------------------------


@pytest.mark.parametrize("name", SAME_FORMAT)
def test_a_sample_round_trips_through_its_own_format_unchanged(name: str) -> None:
    """Import, export in the same format, import again: the same messages, with the
    same metadata.extra, approval decisions and timestamps."""
    first = imported(name)
    second = again(first, SAMPLES[name])
    before, after = messages(first), messages(second)
    if name == "session_records.json":
        # a bare list of records has no session id: the export gives the context's,
        # which the second import keeps like any session's
        assert after[0].metadata.extra.pop("source") == {"id": first.id, "title": None}
    assert after == before
    prompts = [c.active_branch.system_prompt for c in (first, second)]
    assert [p.content if p else None for p in prompts[1:]] == [
        p.content if p else None for p in prompts[:1]
    ]
    assert second.config.model_id == first.config.model_id
    if SAMPLES[name] == "session":
        assert (second.created_at, second.updated_at) == (first.created_at, first.updated_at)


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_sample_keeps_what_each_format_holds(name: str, fmt: str) -> None:
    """Every sample, exported in every format and imported back, keeps its texts,
    calls and results as far as the format has a place for them."""
    first = imported(name)
    second = again(first, fmt)
    assert conversation(second, fmt) == conversation(first, fmt)
    assert second.open_tool_calls() == []


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_an_export_of_the_export_is_the_same(fmt: str) -> None:
    """Exporting what an export imported gives the same document: nothing drifts."""
    for name in sorted(SAMPLES):
        once = export_context(again(imported(name), fmt), fmt)  # type: ignore[arg-type]
        twice = export_context(again(again(imported(name), fmt), fmt), fmt)  # type: ignore[arg-type]
        assert twice == once, name


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_kept_fields_travel_to_every_format_and_back(fmt: str) -> None:
    """What an import kept of a message it did not map comes back on that message,
    whichever format it went through."""
    back = messages(again(imported("openai.json"), fmt))
    [stopping] = [m for m in back if m.text == "Understood, stopping."]
    assert stopping.metadata.extra == {"refusal": None}
    back = messages(again(imported("session.json"), fmt))
    [porto] = [m for m in back if m.tool_calls and m.tool_calls[0].id == "call_porto_02"]
    assert porto.metadata.extra == {"duration_ms": 30000}
    [user] = [m for m in back if m.text.startswith("What's the weather")]
    assert user.metadata.extra["binary_content"] == [{"identifier": "itinerary-photo"}, {}]


# --- the session JSON format --------------------------------------------------------------


def test_session_top_level_fields_come_back() -> None:
    original = load("session.json")
    out = export_session_records(imported("session.json"))
    assert {k: out[k] for k in ("id", "title")} == {k: original[k] for k in ("id", "title")}
    assert out["created_at"] == "2025-03-14T09:00:00Z"
    assert out["updated_at"] == "2025-03-14T09:02:41Z"
    assert [r["type"] for r in out["records"]] == [r["type"] for r in original["records"]]
    porto = out["records"][4]
    assert porto == {**original["records"][4], "timestamp": "2025-03-14T09:00:46Z"}
    photo, pdf = out["records"][1]["binary_content"]
    assert photo == original["records"][1]["binary_content"][0]
    assert pdf == original["records"][1]["binary_content"][1]


def test_session_title_is_the_contexts_own_when_it_has_one() -> None:
    ctx = imported("session.json")
    titled = dataclasses.replace(ctx, **{"config": dataclasses.replace(ctx.config, title="Mine")})
    assert export_session_records(titled)["title"] == "Mine"
    engine_ctx = imported("openai.json")
    assert export_session_records(engine_ctx)["title"] is None
    assert export_session_records(engine_ctx)["id"] == engine_ctx.id


def test_session_binary_forms_and_an_operator() -> None:
    ctx = import_openai_messages(
        [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "name": "frontend_operator",
                "content": [
                    {"type": "text", "text": "see"},
                    {"type": "image_url", "image_url": f"data:image/png;base64,{PNG_1PX}"},
                    {"type": "image_url", "image_url": "data:text/plain;base64,aGk="},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://x/a.png", "detail": "high"},
                    },
                    {
                        "type": "file",
                        "file": {"filename": "a.txt", "file_data": "data:text/plain;base64,aGk="},
                    },
                ],
            },
        ],
        now=NOW,
        ids=seq_ids(),
    )
    system, user = export_session_records(ctx)["records"]
    assert system == {
        "type": "message",
        "role": "system",
        "content": "Be brief.",
        "binary_content": [],
        "timestamp": "2030-01-02T03:04:05Z",
    }
    assert user["role"] == "user"  # the format has no frontend operator
    assert user["binary_content"] == [
        {"data": PNG_1PX, "media_type": "image/png", "kind": "binary"},
        {"url": "data:text/plain;base64,aGk=", "kind": "image-url"},
        {"url": "https://x/a.png", "kind": "image-url"},
        {"data": "aGk=", "media_type": "text/plain", "identifier": "a.txt", "kind": "binary"},
    ]
    [back] = messages(import_session_records(export_session_records(ctx), now=NOW))[1:]
    assert back.content == [
        TextPart(text="see"),
        ImagePart(url=f"data:image/png;base64,{PNG_1PX}"),
        ImagePart(url="data:text/plain;base64,aGk="),
        ImagePart(url="https://x/a.png"),  # no place for the detail
        FilePart(name="a.txt", mime_type="text/plain", data="aGk="),
    ]


def test_session_leftover_binary_fields_go_back_into_their_item() -> None:
    records = [
        {
            "type": "message",
            "role": "user",
            "content": "",
            "binary_content": [
                {"data": "aGk=", "mime_type": "text/plain", "media_type": "x/y", "name": "n"},
                {"data": "aGk=", "media_type": "text/plain", "name": "a", "filename": "b"},
            ],
            "timestamp": "2025-01-01T00:00:00Z",
        }
    ]
    ctx = import_session_records(records, now=NOW, ids=seq_ids())
    out = export_session_records(ctx)
    [record] = out["records"]
    assert record["binary_content"][0]["media_type"] == "x/y"
    assert record["binary_content"][0]["mime_type"] == "text/plain"
    back = import_session_records(out, now=NOW, ids=seq_ids())
    assert messages(back)[0].content == messages(ctx)[0].content
    assert messages(back)[0].metadata.extra == {
        "binary_content": [{"media_type": "x/y"}, {"filename": "b"}],
        "source": {"id": ctx.id, "title": None},
    }


# --- conversation entries -----------------------------------------------------------------


def test_entries_cancelled_uses_and_their_prompt_are_one_user_message() -> None:
    original = load("entries.json")["entries"]
    out = export_conversation_entries(imported("entries.json"))["entries"]
    assert len(out) == len(original)
    cancelled = out[4]["user"]
    assert cancelled["content"] == original[4]["user"]["content"]
    assert cancelled["images"] == [{"format": "png", "source": {"Bytes": "iVBORw0KGgo="}}]
    assert out[1]["assistant"]["ToolUse"]["tool_uses"][1]["orig_args"] == {
        "mode": "Line",
        "path": "./src/main.rs",
    }
    assert out[2]["user"]["content"] == original[2]["user"]["content"]


def test_entries_thinking_and_result_blocks_come_back() -> None:
    data = [
        {
            "user": "go",
            "assistant": {
                "Response": {
                    "message_id": "m",
                    "content": "4",
                    "thinking": {"text": "2+2", "signature": "s"},
                }
            },
        },
        {"assistant": {"content": "ok", "thinking": "plain", "model": "m1"}},
        {"assistant": {"content": "", "thinking": {"redacted": True}}, "turn": 3},
        {
            "assistant": {
                "content": "",
                "tool_uses": [
                    {"id": "a", "name": "f", "args": "not json"},
                    {"id": "b", "name": "f", "args": {}},
                    {"id": "c", "name": "f", "args": {}},
                    {"id": "d", "name": "f", "args": {}},
                ],
            }
        },
        {
            "user": {
                "content": {
                    "ToolUseResults": {
                        "tool_use_results": [
                            {
                                "tool_use_id": "a",
                                "content": [{"Text": "x"}, {"Json": 1}],
                                "status": "Success",
                            },
                            {"tool_use_id": "b", "content": [], "status": "Error"},
                            {"tool_use_id": "c", "content": [{"Json": [1]}], "status": "Success"},
                            {"tool_use_id": "d", "content": [{"Json": None}], "status": "Success"},
                        ]
                    }
                },
                "extra_field": 7,
            }
        },
    ]
    first = import_conversation_entries(data, now=NOW, ids=seq_ids())
    second = again(first, "entries")
    assert messages(second) == messages(first)
    results = [m.tool_result.result for m in messages(first) if m.tool_result]
    assert results == [[{"Text": "x"}, {"Json": 1}], [], [1], None]
    assert messages(second)[2].metadata.extra == {"model": "m1"}
    assert messages(second)[3].metadata.extra == {
        "entry": {"turn": 3},
        "thinking": {"redacted": True},
    }


@pytest.mark.anyio
async def test_entries_a_batch_a_human_denied_is_cancelled_tool_uses() -> None:
    engine, _, _ = kit.make_engine(
        [
            {
                "tool_calls": [
                    {"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}}
                ]
            },
            {"text": "As you wish."},
        ],
        tools=[get_weather_approved],
    )
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "Weather in Oslo?")
        await engine.deny(cid, "call_1", reason="not now")
        ctx = await engine.get_context(cid)
    entries = export_conversation_entries(ctx)["entries"]
    assert [list(e["user"]["content"]) if e["user"] else None for e in entries] == [
        ["Prompt"],
        ["CancelledToolUses"],
    ]
    [result] = entries[1]["user"]["content"]["CancelledToolUses"]["tool_use_results"]
    assert result["status"] == "Error"
    back = again(ctx, "entries")
    [call] = messages(back)[1].tool_calls or []
    assert (call.approval_status, call.decided_by) == (ApprovalStatus.DENIED, "human")
    assert conversation(back, "entries") == conversation(ctx, "entries")


# --- OpenAI messages ----------------------------------------------------------------------


def test_openai_is_a_list_unless_an_object_was_imported() -> None:
    listed = export_openai_messages(imported("openai.json"))
    assert isinstance(listed, list)
    assert listed[0] == {
        "role": "system",
        "content": "You are a concise assistant for a hardware shop.",
    }
    assert listed[3] == load("openai.json")[3]
    assert [m["tool_call_id"] for m in listed if m["role"] == "tool"] == [
        "call_stock_1",
        "call_stock_2",  # call_stock_3 had no result: none is written
    ]
    body = export_openai_messages(imported("openai_body.json"))
    assert body == load("openai_body.json")


def test_openai_export_is_what_the_openai_importer_reads() -> None:
    for name in sorted(SAMPLES):
        data = json.loads(json.dumps(export_openai_messages(imported(name))))
        assert detect_format(data) == "openai", name
        import_openai_messages(data, now=NOW)
        listed = data["messages"] if isinstance(data, dict) else data
        for m in listed:
            if m["role"] == "assistant" and "tool_calls" in m:
                assert all(isinstance(c["function"]["arguments"], str) for c in m["tool_calls"])


# --- a conversation the engine had --------------------------------------------------------


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    WEATHER_CALLS.clear()


async def engine_conversation() -> ChatContext:
    engine, _, _ = kit.make_engine(
        [
            {
                "text": "Let me look.",
                "thinking": "two cities",
                "tool_calls": [
                    {"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}},
                    {"id": "call_2", "name": "get_weather", "arguments": {"city": "Rome"}},
                ],
            },
            {"text": "15 C in both."},
            {"chunks": ["You are ", "welcome."]},
        ],
        tools=[get_weather],
    )
    async with engine:
        cid = await engine.create_context(system_prompt="You are terse.")
        await engine.send(cid, "Weather in Oslo and Rome?")
        await engine.send(cid, "Thanks")
        return await engine.get_context(cid)


@pytest.mark.anyio
@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
async def test_an_engine_conversation_round_trips(fmt: str) -> None:
    ctx = await engine_conversation()
    assert sorted(c["city"] for c in WEATHER_CALLS) == ["Oslo", "Rome"]  # run concurrently
    back = again(ctx, fmt)
    assert conversation(back, fmt) == conversation(ctx, fmt)
    texts = [(m.role, m.text) for m in messages(back) if m.text]
    assert texts[-3:] == [
        (Role.ASSISTANT, "15 C in both."),
        (Role.USER, "Thanks"),
        (Role.ASSISTANT, "You are welcome."),
    ]
    calls = [c for m in messages(back) for c in m.tool_calls or []]
    assert [(c.id, c.tool_name, c.arguments) for c in calls] == [
        ("call_1", "get_weather", {"city": "Oslo"}),
        ("call_2", "get_weather", {"city": "Rome"}),
    ]
    results = {m.tool_result.request_id: m.tool_result for m in messages(back) if m.tool_result}
    expected = {"city": "Oslo", "temp_c": 15}
    if fmt == "openai":  # tool content is text there
        assert results["call_1"].result == '{"city":"Oslo","temp_c":15}'
    else:
        assert results["call_1"].result == expected
    assert results["call_1"].success is True


@pytest.mark.anyio
async def test_an_engine_conversation_in_each_format() -> None:
    ctx = await engine_conversation()
    session = export_session_records(ctx)
    assert [(r["type"], r.get("role"), r.get("tool_call_id")) for r in session["records"]] == [
        ("message", "system", None),
        ("message", "user", None),
        ("message", "assistant", None),
        ("tool_call", None, "call_1"),
        ("tool_call", None, "call_2"),
        ("message", "assistant", None),
        ("message", "user", None),
        ("message", "assistant", None),
    ]
    assert session["records"][0]["content"] == "You are terse."
    openai = export_openai_messages(ctx)
    assert isinstance(openai, list)
    assert openai[2]["reasoning_content"] == "two cities"
    assert openai[2]["content"] == "Let me look."
    # without its tool rounds, the list is a conversation a request body carries
    legacy = {"messages": [openai[0], openai[1], openai[5], openai[6]]}
    assert parse_request(legacy).current.content == "Thanks"
    entries = export_conversation_entries(ctx)["entries"]
    assert [sorted(e) for e in entries] == [["assistant", "user"]] * 3
    assert entries[0]["assistant"]["ToolUse"]["thinking"] == "two cities"


@pytest.mark.anyio
async def test_pending_calls_are_exported_as_missing_results() -> None:
    engine, _, _ = kit.make_engine(
        [{"tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Rome"}}]}],
        tools=[get_weather_approved],
    )
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "Weather in Rome?")
        ctx = await engine.get_context(cid)
    assert [c.id for c in ctx.pending_tool_calls()] == ["call_1"]
    [_, record] = export_session_records(ctx)["records"]
    assert (record["result"], record["success"]) == (MISSING_RESULT, False)
    for fmt in EXPORT_FORMATS:
        back = messages(again(ctx, fmt))
        assert back[-1].tool_result is not None, fmt
        assert back[-1].tool_result.result == MISSING_RESULT, fmt
        assert back[-1].tool_result.success is False, fmt


# --- branches and bad arguments -----------------------------------------------------------


@pytest.mark.anyio
async def test_a_named_branch_is_exported_and_an_unknown_one_refused() -> None:
    engine, _, _ = kit.make_engine([{"text": "Paris."}, {"text": "Rome."}], store=MemoryStore())
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "Capital of France?")
        await engine.fork(cid, "italy", -1)
        await engine.send(cid, "Capital of Italy?")
        await engine.switch_branch(cid, "main")
        ctx = await engine.get_context(cid)
    for fmt in EXPORT_FORMATS:
        main = [m.text for m in messages(again(ctx, fmt))]
        italy = [m.text for m in messages(again(ctx, fmt, branch="italy"))]
        assert (main, italy) == (["Capital of France?", "Paris."], ["Capital of Italy?", "Rome."])
        with pytest.raises(BranchError, match=r"no branch named 'spain' \(branches: italy, main\)"):
            export_context(ctx, fmt, branch="spain")  # type: ignore[arg-type]


def test_bad_arguments_are_invalid_input() -> None:
    ctx = imported("openai.json")
    with pytest.raises(InvalidInput) as info:
        export_context(ctx, "yaml")  # type: ignore[arg-type]
    assert info.value.where == "format" and "session, entries, openai" in info.value.reason
    with pytest.raises(InvalidInput) as info:
        export_context({"id": "x"}, "session")  # type: ignore[arg-type]
    assert info.value.where == "ctx"
    with pytest.raises(InvalidInput) as info:
        export_context(ctx, "session", branch=3)  # type: ignore[arg-type]
    assert info.value.where == "branch"


def test_fields_a_format_fills_win_over_kept_ones() -> None:
    """A kept field named like one the target format fills is not written (it could
    not be read back); other kept fields are; turnfsm's own notes never are."""
    ctx = import_session_records(
        [
            {"type": "message", "role": "user", "content": "hi", "name": "ana"},
            {
                "type": "message",
                "role": "assistant",
                "content": "ok",
                "tool_calls": "not an array",
                "reasoning_content": 5,
            },
            {
                "type": "tool_call",
                "tool_call_id": "c",
                "tool_name": "t",
                "success": True,
                "function_call": 1,
                "conversions": [],
            },
        ],
        now=NOW,
        ids=seq_ids(),
    )
    listed = export_openai_messages(ctx)
    assert listed == [
        {"role": "user", "content": "hi", "name": "ana"},
        {"role": "assistant", "content": "ok"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "null"},
    ]
    for fmt in EXPORT_FORMATS:
        again(ctx, fmt)  # every export imports back


ODD_EXTRA: dict[str, Any] = {
    # turnfsm's own keys holding what no import would put there
    **{"source": 5, "binary_content": "x", "tool_uses": {"a": 1}, "thinking": [1]},
    **{"additional_context": 7, "message_id": 3, "entry": "e", "openai_role": "developer"},
    **{"synthesized": "no", "conversions": None},
    # and the names of fields the formats fill themselves
    **{"records": 1, "content": 2, "role": "x", "tool_call_id": 1, "user": 1, "assistant": 2},
    **{"name": 3, "prompt": 9, "function_call": 1, "reasoning_content": 2, "timestamp": "bad"},
    **{"images": 3, "tool_calls": 4, "type": 5, "status": 1, "tool_use_id": 2, "args": 1},
}


def test_whatever_a_context_holds_every_export_imports_back() -> None:
    """Odd extras, an operator with a file, an image in an assistant message and in a
    result, arguments that are not an object, a result that answers no call: the
    export leaves out what has no place and never writes what cannot be read back."""

    def msg(role: Role, **fields: Any) -> InternalMessage:
        meta = MessageMetadata(created_at=NOW, extra=dict(ODD_EXTRA))
        return InternalMessage(role=role, metadata=meta, **fields)

    def call(cid: str, **fields: Any) -> ToolCallRequest:
        return ToolCallRequest(id=cid, tool_name="f", **fields)

    def result(cid: str, value: Any, **fields: Any) -> InternalMessage:
        return msg(Role.TOOL, tool_result=ToolCallResult(request_id=cid, result=value), **fields)

    history = [
        msg(Role.SYSTEM, content=[TextPart(text="sys")]),
        msg(
            Role.FRONTEND_OPERATOR,
            content=[
                TextPart(text="a"),
                ImagePart(url="data:image/gif;base64,R0lG"),
                FilePart(name="f", data="aGk="),
            ],
        ),
        msg(Role.USER),
        msg(
            Role.ASSISTANT,
            content=[TextPart(text="t"), ImagePart(url="https://x/a.png")],
            thinking="th",
            tool_calls=[
                call("c1", arguments={"a": 1}, approval_status=ApprovalStatus.DENIED),
                call("c2", raw_arguments="[1]", approval_status=ApprovalStatus.APPROVED),
            ],
        ),
        result("c1", {"x": 1.5}, content=[ImagePart(url=f"data:image/png;base64,{PNG_1PX}")]),
        result("c2", [{"Text": 1}]),
        msg(Role.ASSISTANT, tool_calls=[call("c3")]),
        result("elsewhere", None),
        msg(Role.USER, content=[TextPart(text="u")]),
    ]
    pool = {
        f"m{i}": MessageNode(id=f"m{i}", message=m, parent_id=f"m{i - 1}" if i else None)
        for i, m in enumerate(history)
    }
    prompt = SystemPrompt(id="p", content="P")
    ctx = ChatContext(
        id="odd",
        message_pool=pool,
        branches={"main": Branch(name="main", message_ids=list(pool), system_prompt=prompt)},
        created_at=NOW,
        updated_at=NOW,
    )
    for fmt in EXPORT_FORMATS:
        back = messages(again(ctx, fmt))
        results = [m.tool_result.request_id for m in back if m.tool_result is not None]
        assert results == ["c1", "c2", "c3"], fmt  # c3 given the missing result
        assert [m.text for m in back if m.role is not Role.TOOL][-1] == "u"


def test_a_refusal_goes_out_and_back_as_a_refusal() -> None:
    """The OpenAI messages export writes a refusal as ``refusal`` (content null),
    and its import reads it back into the message's own field."""
    data = [
        {"role": "user", "content": "Help me pick a lock."},
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
    ]
    ctx = import_openai_messages(data, now=NOW, ids=seq_ids())
    out = export_openai_messages(ctx)
    assert isinstance(out, list)
    assert out[-1] == {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    back = messages(again(ctx, "openai"))
    assert back[-1].refusal == "I can't help with that." and back[-1].outcome == "refusal"
