"""What enters through the public API or from a tool: refused with InvalidInput
naming the argument (nothing stored changes), or, for a tool's result,
converted visibly; in every case the stored context loads back.

Each test runs against MemoryStore and against SQLite; with SQLite a fresh
engine on the same file loads the context, so "the store can load it back"
is checked on the store itself, not on the engine's loaded copy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from turnfsm import (
    ApprovalStatus,
    ChatContext,
    Engine,
    InvalidInput,
    RetryPolicy,
    Tool,
    TurnCompleted,
    tool,
)
from turnfsm.adapters.inbound import import_context, parse_request
from turnfsm.events import ToolResult
from turnfsm.model import MAX_ID_LENGTH, MAX_JSON_BYTES, MAX_JSON_DEPTH
from turnfsm.records import FilePart, ImagePart, TextPart
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds
from turnfsm.tools import ToolError

pytestmark = pytest.mark.anyio


def nested(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def call(cid: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": arguments}


@tool(approval="required")
def book(city: str) -> str:
    """Book a trip."""
    return f"booked {city}"


@dataclasses.dataclass
class Reading:
    at: datetime
    value: float


class Report(BaseModel):
    city: str
    temps: list[float]


@tool
def produce(kind: str) -> Any:
    """Return a value of some kind."""
    values: dict[str, Any] = {
        "nan": {"mean": math.nan, "range": [math.inf, -math.inf]},
        "int_keys": {1: "one", None: "nothing", 2.5: "half"},
        "tuple_keys": {(1, 2): "pair"},
        "set": {"tags": {"a", "b"}},
        "object": {"handle": object()},
        "deep": nested(200),
        "deeper": nested(5000),
        "max_depth": nested(MAX_JSON_DEPTH - 1),
        "surrogate": {"text": "caf\udce9", "k\ud800": 1},
        "text": "broken \ud800 text",
        "model": Report(city="Oslo", temps=[1.5, 2.0]),
        "dataclass": Reading(at=datetime(2024, 5, 1, 12, 0), value=math.nan),
        "tuple": (1, "two"),
        "plain": {"city": "Oslo", "temp_c": 15},
    }
    return values[kind]


@tool
def fail(why: str) -> str:
    """Fail with a message."""
    raise ToolError(why + " \udc80")


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return None if request.param == "memory" else f"sqlite:///{tmp_path / 'chats.db'}"


class Harness:
    """An engine on ``store_url`` and a way to read what the store holds."""

    def __init__(self, store_url: str | None, answers: Any, tools: list[Tool]) -> None:
        self.url = store_url
        self.llm = ScriptedLLM(answers)
        self.engine = Engine(
            llm=self.llm,
            tools=tools,
            store=store_url,
            clock=FakeClock(),
            ids=SequentialIds(),
        )

    async def stored(self, cid: str) -> ChatContext:
        """The context as the store holds it (a fresh engine for SQLite)."""
        if self.url is None:
            return await self.engine.get_context(cid)
        async with Engine(store=self.url) as fresh:
            return await fresh.get_context(cid)

    async def refused(
        self, cid: str, action: Callable[[], Awaitable[Any]], where: str
    ) -> InvalidInput:
        """``action`` raises InvalidInput naming ``where``; nothing stored changed."""
        before = await self.engine.get_context(cid)
        stored_before = await self.stored(cid)
        with pytest.raises(InvalidInput) as info:
            await action()
        assert info.value.where == where, str(info.value)
        assert await self.engine.get_context(cid) == before
        assert await self.stored(cid) == stored_before
        return info.value


@pytest.fixture
async def at_approval(store_url: str | None) -> AsyncIterator[tuple[Harness, str]]:
    """A context waiting for approval of c1 and c2 (both calls to ``book``)."""
    h = Harness(
        store_url,
        [{"tool_calls": [call("c1", "book", city="Oslo"), call("c2", "book", city="Rome")]}]
        + [{"text": "done"}] * 3,
        [book],
    )
    async with h.engine:
        cid = await h.engine.create_context(system_prompt="You book trips.")
        turn = await h.engine.send(cid, "book both")
        assert [c.id for c in turn.pending_tool_calls] == ["c1", "c2"]
        yield h, cid


@pytest.fixture
async def idle(store_url: str | None) -> AsyncIterator[tuple[Harness, str]]:
    h = Harness(store_url, [{"text": "A1"}, {"text": "A2"}], [])
    async with h.engine:
        cid = await h.engine.create_context()
        await h.engine.send(cid, "Q1")
        yield h, cid


# --------------------------------------------------------------------------- deny / approve


async def test_deny_with_a_reason_that_is_not_text(at_approval: tuple[Harness, str]) -> None:
    h, cid = at_approval
    await h.refused(cid, lambda: h.engine.deny(cid, "c1", reason=123), "reason")  # type: ignore[arg-type]
    await h.refused(cid, lambda: h.engine.deny(cid, "c1", reason=["x"]), "reason")  # type: ignore[arg-type]
    await h.refused(cid, lambda: h.engine.deny(cid, "c1", reason="no \ud800"), "reason")
    # the context still works, and the store still loads it
    turn = await h.engine.deny(cid, "c1", reason="too far")
    assert [c.id for c in turn.pending_tool_calls] == ["c2"]
    stored = await h.stored(cid)
    (c1,) = [c for c in stored.history()[1].message.tool_calls or () if c.id == "c1"]
    assert (c1.approval_status, c1.reason) == (ApprovalStatus.DENIED, "too far")


async def test_deny_takes_a_list_like_approve(at_approval: tuple[Harness, str]) -> None:
    h, cid = at_approval
    turn = await h.engine.deny(cid, ["c1", "c2"], reason="not today")
    assert turn.state == "Idle"
    stored = await h.stored(cid)
    results = [n.message.tool_result for n in stored.history() if n.message.tool_result]
    assert [(r.request_id, r.success) for r in results] == [("c1", False), ("c2", False)]
    assert all(r.result["error"] == "denied: not today" for r in results)


@pytest.mark.parametrize(
    ("method", "argument", "where"),
    [
        ("approve", 123, "call_ids"),
        ("approve", None, "call_ids"),
        ("approve", [], "call_ids"),
        ("approve", ["c1", 7], "call_ids[1]"),
        ("approve", [""], "call_ids[0]"),
        ("approve", b"c1", "call_ids"),
        ("approve", {"c1": True}, "call_ids"),
        ("approve", "c\ud800", "call_ids"),
        ("deny", 123, "call_id"),
        ("deny", [], "call_id"),
        ("deny", ["c1", None], "call_id[1]"),
        ("deny", "", "call_id"),
    ],
)
async def test_bad_call_ids(
    at_approval: tuple[Harness, str], method: str, argument: Any, where: str
) -> None:
    h, cid = at_approval
    await h.refused(cid, lambda: getattr(h.engine, method)(cid, argument), where)
    assert [c.id for c in (await h.stored(cid)).pending_tool_calls()] == ["c1", "c2"]


# --------------------------------------------------------------------------- send


@pytest.mark.parametrize(
    ("content", "where"),
    [
        (None, "content"),
        (123, "content"),
        (b"bytes", "content"),
        ({"type": "text", "text": "hi"}, "content"),
        ("lone \ud800", "content"),
        ([TextPart(text="ok"), TextPart(text="bad \udfff")], "content[1].text"),
        ([ImagePart(url="https://x/\ud800.png")], "content[0].url"),
        ([FilePart(name="a\ud800", data="AA==")], "content[0].name"),
        ([FilePart(name="a", data="AA==", mime_type="x/\udc00")], "content[0].mime_type"),
        ([TextPart(text=None)], "content[0].text"),
        ([ImagePart(url="https://x", detail="huge")], "content[0].detail"),
    ],
)
async def test_bad_content(idle: tuple[Harness, str], content: Any, where: str) -> None:
    h, cid = idle
    await h.refused(cid, lambda: h.engine.send(cid, content), where)
    assert len(h.llm.requests) == 1


@pytest.mark.parametrize("role", [None, 1, ["user"], "assistant"])
async def test_bad_role(idle: tuple[Harness, str], role: Any) -> None:
    h, cid = idle
    await h.refused(cid, lambda: h.engine.send(cid, "hi", role), "role")


async def test_send_names_the_message_with_the_id_given(idle: tuple[Harness, str]) -> None:
    h, cid = idle
    mid = h.engine.new_id()
    turn = await h.engine.send(cid, "Q2", message_id=mid)
    assert turn.message_ids[0] == mid
    stored = await h.stored(cid)
    assert stored.message_pool[mid].message.content[0].text == "Q2"  # type: ignore[union-attr]
    assert stored.active_branch.message_ids[-2] == mid
    assert h.engine.new_id() != mid  # the factory moved on


@pytest.mark.parametrize("bad", [123, "", "a\nb", "x" * (MAX_ID_LENGTH + 1)])
async def test_send_refuses_a_bad_message_id(idle: tuple[Harness, str], bad: Any) -> None:
    h, cid = idle
    await h.refused(cid, lambda: h.engine.send(cid, "Q2", message_id=bad), "message_id")


async def test_send_refuses_a_message_id_the_context_holds(idle: tuple[Harness, str]) -> None:
    h, cid = idle
    taken = (await h.engine.get_context(cid)).active_branch.message_ids[0]
    err = await h.refused(cid, lambda: h.engine.send(cid, "Q2", message_id=taken), "message_id")
    assert taken in str(err)
    assert len(h.llm.requests) == 1  # no model call for the refused message


# --------------------------------------------------------------------------- ids everywhere

BAD_IDS: list[Any] = [None, 123, "", "x" * (MAX_ID_LENGTH + 1), "a\nb", "a\x00", "a\ud800"]


def _calls(engine: Engine, bad: Any) -> dict[str, Callable[[], Any]]:
    return {
        "get_context": lambda: engine.get_context(bad),
        "send": lambda: engine.send(bad, "hi"),
        "approve": lambda: engine.approve(bad, "c1"),
        "deny": lambda: engine.deny(bad, "c1"),
        "retry": lambda: engine.retry(bad),
        "reset": lambda: engine.reset(bad),
        "cancel": lambda: engine.cancel(bad),
        "resume": lambda: engine.resume(bad),
        "fork": lambda: engine.fork(bad, "alt", 0),
        "switch_branch": lambda: engine.switch_branch(bad, "main"),
        "steps": lambda: engine.steps(bad),
        "trace": lambda: engine.trace(bad),
        "unload": lambda: engine.unload(bad),
        "request_cancel": lambda: engine.request_cancel(bad),
        "subscribe": lambda: engine.subscribe(bad),
    }


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_every_method_checks_the_context_id(idle: tuple[Harness, str], bad: Any) -> None:
    h, cid = idle
    for name, action in _calls(h.engine, bad).items():

        async def run(action: Callable[[], Any] = action) -> None:
            result = action()
            if isinstance(result, Awaitable):
                await result

        err = await h.refused(cid, run, "context_id")
        assert err.where == "context_id", name
    assert h.engine.loaded_contexts == [cid]


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_branch_names(idle: tuple[Harness, str], bad: Any) -> None:
    h, cid = idle
    await h.refused(cid, lambda: h.engine.fork(cid, bad, 0), "name")
    await h.refused(cid, lambda: h.engine.switch_branch(cid, bad), "name")
    assert list((await h.stored(cid)).branches) == ["main"]


@pytest.mark.parametrize("at", ["1", 1.0, True, None])
async def test_fork_index_is_an_int(idle: tuple[Harness, str], at: Any) -> None:
    h, cid = idle
    await h.refused(cid, lambda: h.engine.fork(cid, "alt", at), "at")


async def test_a_long_but_legal_branch_name_round_trips(idle: tuple[Harness, str]) -> None:
    h, cid = idle
    name = "b" * MAX_ID_LENGTH
    await h.engine.fork(cid, name, 1)
    assert (await h.stored(cid)).active_branch_name == name


# --------------------------------------------------------------------------- create_context


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        ({"system_prompt": 123}, "system_prompt"),
        ({"system_prompt": "be \ud800 nice"}, "system_prompt"),
        ({"user_prompt": ["x"]}, "user_prompt"),
        ({"user_prompt": "\udc00"}, "user_prompt"),
        ({"model": None}, "model"),
        ({"model": "gpt\n4"}, "model"),
        ({"mode": 1}, "mode"),
        ({"agent_role": "a" * (MAX_ID_LENGTH + 1)}, "agent_role"),
        ({"workspace_path": 5}, "workspace_path"),
        ({"workspace_path": "/tmp/\x00x"}, "workspace_path"),
        ({"parameters": [("temperature", 1)]}, "parameters"),
        ({"parameters": {"temperature": math.nan}}, "parameters.temperature"),
        ({"parameters": {"stop": ["a", "\ud800"]}}, "parameters.stop[1]"),
        ({"parameters": {1: "x"}}, "parameters"),
        ({"parameters": {"deep": nested(200)}}, "parameters.deep" + "[0]" * 63),
        ({"parameters": {"obj": object()}}, "parameters.obj"),
        ({"parent_id": 5}, "parent_id"),
        ({"context_id": ""}, "context_id"),
        ({"context_id": "x" * 201}, "context_id"),
        ({"context_id": "a\tb"}, "context_id"),
    ],
)
async def test_bad_create_context(
    store_url: str | None, kwargs: dict[str, Any], where: str
) -> None:
    h = Harness(store_url, [], [])
    async with h.engine:
        with pytest.raises(InvalidInput) as info:
            await h.engine.create_context(**kwargs)
        assert info.value.where == where
        assert await h.engine.store.list_ids() == []


async def test_good_create_context_round_trips(store_url: str | None) -> None:
    h = Harness(store_url, [], [])
    async with h.engine:
        cid = await h.engine.create_context(
            system_prompt="ünïcode 😀",
            parameters={"temperature": 0.5, "stop": ["\n"], "nested": nested(MAX_JSON_DEPTH - 2)},
            context_id="ctx " + "x" * (MAX_ID_LENGTH - 4),
        )
        stored = await h.stored(cid)
        assert stored.config.parameters["nested"] == nested(MAX_JSON_DEPTH - 2)
        assert stored.active_branch.system_prompt is not None
        assert stored.active_branch.system_prompt.content == "ünïcode 😀"


async def test_an_id_factory_that_breaks_the_rule(store_url: str | None) -> None:
    for bad in [7, "", "a\nb", "x" * 300]:
        engine = Engine(llm=ScriptedLLM([]), store=store_url, ids=lambda bad=bad: bad)
        async with engine:
            with pytest.raises(InvalidInput) as info:
                await engine.create_context()
            assert info.value.where == "ids"
            assert await engine.store.list_ids() == []


# --------------------------------------------------------------------------- Engine(...)


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        ({"max_iterations": 0}, "max_iterations"),
        ({"max_iterations": True}, "max_iterations"),
        ({"max_iterations": "20"}, "max_iterations"),
        ({"max_iterations": 2.5}, "max_iterations"),
        ({"max_loaded": 0}, "max_loaded"),
        ({"max_loaded": None}, "max_loaded"),
        ({"max_loaded_messages": 0}, "max_loaded_messages"),
        ({"max_loaded_messages": 1.5}, "max_loaded_messages"),
        ({"subscriber_buffer": 0}, "subscriber_buffer"),
        ({"subscriber_buffer": "big"}, "subscriber_buffer"),
        ({"tool_history_rounds": -1}, "tool_history_rounds"),
        ({"tool_history_rounds": False}, "tool_history_rounds"),
        ({"retry": 3}, "retry"),
        ({"store": 42}, "store"),
        ({"enhancers": [object()]}, "enhancers[0]"),
        ({"enhancers": "abc"}, "enhancers"),
        ({"ids": "id-"}, "ids"),
    ],
)
def test_bad_engine_arguments(kwargs: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Engine(**kwargs)
    assert info.value.where == where


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"max_retry_after": -1}, "max_retry_after"),
        ({"max_retry_after": math.nan}, "max_retry_after"),
        ({"wait": 2}, "wait"),
    ],
)
def test_bad_retry_policy(kwargs: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidInput) as info:
        RetryPolicy(**kwargs)
    assert info.value.where == where


# --------------------------------------------------------------------------- tool results


async def run_tool(store_url: str | None, kind: str) -> tuple[Harness, ChatContext]:
    """One call of ``produce(kind)``, then a text answer; the stored context."""
    h = Harness(
        store_url,
        [{"tool_calls": [call("c1", "produce", kind=kind)]}, {"text": "done"}],
        [produce],
    )
    async with h.engine:
        cid = await h.engine.create_context()
        turn = await h.engine.send(cid, "go")
        assert turn.state == "Idle" and turn.text == "done"  # the conversation goes on
        return h, await h.stored(cid)


def tool_message(ctx: ChatContext) -> Any:
    (node,) = [n for n in ctx.history() if n.message.tool_result is not None]
    return node.message


@pytest.mark.parametrize(
    ("kind", "result", "conversions"),
    [
        (
            "nan",
            {"mean": "NaN", "range": ["Infinity", "-Infinity"]},
            [
                "$.mean: NaN stored as the string 'NaN'",
                "$.range[0]: Infinity stored as the string 'Infinity'",
                "$.range[1]: -Infinity stored as the string '-Infinity'",
            ],
        ),
        (
            "int_keys",
            {"1": "one", "null": "nothing", "2.5": "half"},
            [
                "$: key 1 stored as the string '1'",
                "$: key None stored as the string 'null'",
                "$: key 2.5 stored as the string '2.5'",
            ],
        ),
        (
            "surrogate",
            {"text": "caf\ufffd", "k\ufffd": 1},
            [
                "$.text: 1 lone surrogate(s) replaced by U+FFFD",
                "$: a key's lone surrogate(s) replaced by U+FFFD",
            ],
        ),
        ("text", "broken \ufffd text", ["$: 1 lone surrogate(s) replaced by U+FFFD"]),
        (
            "dataclass",
            {"at": "2024-05-01T12:00:00", "value": "NaN"},
            ["$.value: NaN stored as the string 'NaN'"],
        ),
        ("model", {"city": "Oslo", "temps": [1.5, 2.0]}, None),
        ("tuple", [1, "two"], None),
        ("plain", {"city": "Oslo", "temp_c": 15}, None),
        ("max_depth", nested(MAX_JSON_DEPTH - 1), None),
    ],
)
async def test_tool_results_are_converted_visibly(
    store_url: str | None, kind: str, result: Any, conversions: list[str] | None
) -> None:
    h, ctx = await run_tool(store_url, kind)
    msg = tool_message(ctx)
    assert msg.tool_result.success is True
    assert msg.tool_result.result == result
    if conversions is None:
        assert "conversions" not in msg.metadata.extra
    else:
        assert msg.metadata.extra["conversions"] == conversions
    # the model saw the converted result
    tool_turn = [m for m in h.llm.requests[1].messages if m["role"] == "tool"]
    assert len(tool_turn) == 1 and "\ud800" not in tool_turn[0]["content"]


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("tuple_keys", "$: key (1, 2) (tuple) is not a string"),
        ("set", "$.tags: a set has no order in JSON"),
        ("object", "$.handle: a value of type object has no JSON form"),
        ("deep", "nested deeper than 64 levels"),
        ("deeper", "nested deeper than 64 levels"),
    ],
)
async def test_tool_results_with_no_json_form_fail_the_call(
    store_url: str | None, kind: str, words: str
) -> None:
    h, ctx = await run_tool(store_url, kind)
    msg = tool_message(ctx)
    assert msg.tool_result.success is False
    error = msg.tool_result.result["error"]
    assert error.startswith("tool 'produce' returned a value that cannot be stored as JSON: ")
    assert words in error
    # the model is told
    (sent,) = [m for m in h.llm.requests[1].messages if m["role"] == "tool"]
    assert words in sent["content"]


async def test_a_tool_error_message_with_a_lone_surrogate(store_url: str | None) -> None:
    h = Harness(store_url, [{"tool_calls": [call("c1", "fail", why="x")]}, {"text": "ok"}], [fail])
    async with h.engine:
        cid = await h.engine.create_context()
        await h.engine.send(cid, "go")
        msg = tool_message(await h.stored(cid))
    assert msg.tool_result.success is False
    assert msg.tool_result.result == {"error": "x \ufffd"}
    assert msg.metadata.extra["conversions"] == ["$.error: 1 lone surrogate(s) replaced by U+FFFD"]


async def test_tool_result_event_carries_the_converted_value(store_url: str | None) -> None:
    h = Harness(
        store_url, [{"tool_calls": [call("c1", "produce", kind="nan")]}, {"text": "ok"}], [produce]
    )
    async with h.engine:
        cid = await h.engine.create_context()
        events = []
        async with h.engine.subscribe(cid) as sub:
            await h.engine.send(cid, "go")
            with anyio.fail_after(5):
                async for ev in sub:
                    events.append(ev)
                    if isinstance(ev, TurnCompleted):
                        break
    results = [ev for ev in events if isinstance(ev, ToolResult)]
    assert [ev.result for ev in results] == [{"mean": "NaN", "range": ["Infinity", "-Infinity"]}]


# --------------------------------------------------------------------------- imports


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ([{"role": "user", "content": "hi \ud800"}], "$[0].content"),
        ({"messages": [{"role": "user", "content": "hi"}], "model": math.nan}, "$.model"),
        # the source itself is at most MAX_JSON_DEPTH deep: "$[0]" and ".x" are two levels
        ([{"role": "user", "content": "hi", "x": nested(100)}], "$[0].x" + "[0]" * 62),
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a": {"b": NaN}}'},
                        }
                    ],
                },
            ],
            "$[1].tool_calls[0].function.arguments.a.b",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a": "\\ud800"}'},
                        }
                    ],
                },
            ],
            "$[1].tool_calls[0].function.arguments.a",
        ),
        ({"records": [{"type": "message", "role": "user", "content": "\udc00"}]}, None),
    ],
)
def test_imports_hold_to_the_rules(data: Any, where: str | None) -> None:
    with pytest.raises(InvalidInput) as info:
        import_context(data)
    if where is not None:
        assert info.value.where == where
    else:
        assert info.value.where.startswith("$.records[0]")


def test_import_id_factory_is_held_to_the_id_rule() -> None:
    with pytest.raises(InvalidInput) as info:
        import_context([{"role": "user", "content": "hi"}], ids=lambda: "a\nb")
    assert info.value.where == "ids"


def test_deeply_nested_argument_text_is_kept_raw_not_a_crash() -> None:
    text = "[" * 100_000 + "]" * 100_000
    ctx = import_context(
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": text}}
                ],
            },
        ]
    )
    (c1,) = ctx.history()[1].message.tool_calls or ()
    assert c1.raw_arguments == text and c1.arguments == {}


def test_request_body_with_a_lone_surrogate() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_request({"messages": [{"role": "user", "content": "\ud800"}]})
    assert info.value.where == "$.messages[0].content"


# --------------------------------------------------------------------------- error texts


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


class _Raising:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def enhance(self, request: Any, context: Any) -> Any:
        raise self.exc


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (ValueError("bad \ud800"), "enhancer _Raising failed: ValueError: bad \ufffd"),
        (
            _Unprintable(),
            "enhancer _Raising failed: _Unprintable: <the message could not be printed>",
        ),
    ],
)
async def test_an_enhancer_error_is_stored_as_text(
    store_url: str | None, exc: Exception, error: str
) -> None:
    engine = Engine(llm=ScriptedLLM([{"text": "x"}]), enhancers=[_Raising(exc)], store=store_url)
    h = Harness(store_url, [], [])
    h.engine = engine
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
        assert turn.state == "PermanentFailure"
        assert (await h.stored(cid)).progress.last_error == error


async def test_a_tool_exception_that_cannot_be_printed(store_url: str | None) -> None:
    @tool
    def broken() -> str:
        """Raise something odd."""
        raise _Unprintable()

    h = Harness(store_url, [{"tool_calls": [call("c1", "broken")]}, {"text": "ok"}], [broken])
    async with h.engine:
        cid = await h.engine.create_context()
        await h.engine.send(cid, "go")
        msg = tool_message(await h.stored(cid))
    assert msg.tool_result.success is False
    assert msg.tool_result.result == {"error": "_Unprintable: <_Unprintable could not be printed>"}


def test_other_constructors_refuse_bad_numbers() -> None:
    from turnfsm.enhancers import ToolCallHistory

    for bad in ["3", True, -1, None]:
        with pytest.raises(InvalidInput) as info:
            ToolCallHistory(bad)
        assert info.value.where == "calls"
    with pytest.raises(InvalidInput) as info2:
        Engine(clock=object())  # type: ignore[arg-type]
    assert info2.value.where == "clock"


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [({"format": ["openai"]}, "format"), ({"now": "2024-01-01"}, "now"), ({"ids": 5}, "ids")],
)
def test_import_arguments(kwargs: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidInput) as info:
        import_context([{"role": "user", "content": "hi"}], **kwargs)
    assert info.value.where == where


async def test_a_message_over_the_size_limit(idle: tuple[Harness, str]) -> None:
    h, cid = idle
    half = "é" * (MAX_JSON_BYTES // 4 + 1)  # each part under the limit, both over it
    parts = [TextPart(text=half), TextPart(text=half)]
    err = await h.refused(cid, lambda: h.engine.send(cid, parts), "content")
    assert "over the limit" in err.reason
    await h.refused(cid, lambda: h.engine.send(cid, "x" * (MAX_JSON_BYTES + 1)), "content")
