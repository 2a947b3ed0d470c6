"""Hostile input, everywhere it can enter: API arguments, adapter answers, tool
outputs, stored files and rows, replay scripts and CLI arguments.

Each case holds the same three promises:

- no traceback: only a typed :class:`~turnfsm.errors.TurnFSMError` (or, from
  the command line, one line and a documented exit code) comes out;
- nothing unloadable: afterwards a fresh engine on the same SQLite file loads
  every context, and a context the input was refused for is unchanged;
- no hang: every case finishes inside a deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import decimal
import json
import math
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnfsm import Engine, State, records, tool
from turnfsm.errors import ContextNotFound, InvalidInput, StoreError, TurnFSMError
from turnfsm.model import LLMResponse, TextDelta, ThinkingDelta, ToolCallData, ToolCallDelta
from turnfsm.storage import FilesStore, SQLiteStore
from turnfsm.testing import ScriptedLLM

pytestmark = pytest.mark.anyio

DEADLINE = 20  # seconds; a case that takes longer is a hang
RESTING = {State.IDLE, State.AWAITING_TOOL_APPROVAL, State.PERMANENT_FAILURE}


def _deep(n: int, leaf: Any = 1) -> Any:
    value: Any = leaf
    for _ in range(n):
        value = {"a": value}
    return value


def _deep_list(n: int) -> Any:
    value: Any = []
    for _ in range(n):
        value = [value]
    return value


def _cycle() -> Any:
    loop: list[Any] = []
    loop.append(loop)
    return loop


async def _snapshot(path: Path) -> dict[str, str]:
    """Every stored context, as JSON, read by a store of its own (what a fresh
    engine reads through, without building the engine around it)."""
    store = SQLiteStore(path)
    try:
        out = {}
        for summary in await store.list_contexts():
            ctx = await store.load(summary.id)
            out[summary.id] = records.to_json(ctx).decode()
        return out
    finally:
        await store.aclose()


# --------------------------------------------------------------------------- API arguments

S = "\ud800"  # a lone surrogate

API_CASES: dict[str, Callable[[Engine, str], Any]] = {
    "send: None": lambda e, c: e.send(c, None),
    "send: int": lambda e, c: e.send(c, 123),
    "send: bytes": lambda e, c: e.send(c, b"hi"),
    "send: empty": lambda e, c: e.send(c, ""),
    "send: whitespace": lambda e, c: e.send(c, "   \n\t"),
    "send: surrogate": lambda e, c: e.send(c, f"hi {S}"),
    "send: list of str": lambda e, c: e.send(c, ["hi"]),
    "send: empty list": lambda e, c: e.send(c, []),
    "send: part text int": lambda e, c: e.send(c, [{"type": "text", "text": 1}]),
    "send: part unknown type": lambda e, c: e.send(c, [{"type": "bogus"}]),
    "send: part surrogate": lambda e, c: e.send(c, [{"type": "text", "text": S}]),
    "send: dict": lambda e, c: e.send(c, {"text": "hi"}),
    "send: role system": lambda e, c: e.send(c, "hi", role="system"),
    "send: role None": lambda e, c: e.send(c, "hi", role=None),
    "send: role int": lambda e, c: e.send(c, "hi", role=3),
    "send: cid int": lambda e, c: e.send(123, "hi"),
    "send: cid None": lambda e, c: e.send(None, "hi"),
    "send: cid empty": lambda e, c: e.send("", "hi"),
    "send: cid surrogate": lambda e, c: e.send(S, "hi"),
    "send: cid huge": lambda e, c: e.send("x" * 100_000, "hi"),
    "send: cid unknown": lambda e, c: e.send("no-such-context", "hi"),
    "send: cid list": lambda e, c: e.send([c], "hi"),
    "approve: int": lambda e, c: e.approve(c, 123),
    "approve: None": lambda e, c: e.approve(c, None),
    "approve: empty list": lambda e, c: e.approve(c, []),
    "approve: list of int": lambda e, c: e.approve(c, [1]),
    "approve: unknown": lambda e, c: e.approve(c, "nope"),
    "approve: surrogate": lambda e, c: e.approve(c, [S]),
    "approve: dict": lambda e, c: e.approve(c, {"c1": True}),
    "approve: bytes": lambda e, c: e.approve(c, b"c1"),
    "approve: not pending state": lambda e, c: e.approve(c, "c1"),
    "deny: reason int": lambda e, c: e.deny(c, "c1", reason=123),
    "deny: reason surrogate": lambda e, c: e.deny(c, "c1", reason=S),
    "deny: reason dict": lambda e, c: e.deny(c, "c1", reason={"a": 1}),
    "deny: call int": lambda e, c: e.deny(c, 5),
    "deny: call None": lambda e, c: e.deny(c, None),
    "deny: empty list": lambda e, c: e.deny(c, []),
    "answer: text int": lambda e, c: e.answer(c, "c1", 5),
    "answer: text None": lambda e, c: e.answer(c, "c1", None),
    "answer: text empty": lambda e, c: e.answer(c, "c1", ""),
    "answer: text surrogate": lambda e, c: e.answer(c, "c1", S),
    "answer: text list": lambda e, c: e.answer(c, "c1", ["a"]),
    "answer: text huge": lambda e, c: e.answer(c, "c1", "x" * 20_000_000),
    "answer: call int": lambda e, c: e.answer(c, 5, "a"),
    "answer: call None": lambda e, c: e.answer(c, None, "a"),
    "answer: call empty": lambda e, c: e.answer(c, "", "a"),
    "answer: call list": lambda e, c: e.answer(c, ["c1"], "a"),
    "answer: call surrogate": lambda e, c: e.answer(c, S, "a"),
    "answer: cid int": lambda e, c: e.answer(5, "c1", "a"),
    "answer: cid unknown": lambda e, c: e.answer("no-such-context", "c1", "a"),
    "answer: unknown call": lambda e, c: e.answer(c, "nope", "a"),
    "fork: at str": lambda e, c: e.fork(c, "b", at="1"),
    "fork: at below -1": lambda e, c: e.fork(c, "b", at=-2),
    "fork: at huge": lambda e, c: e.fork(c, "b", at=10**12),
    "fork: at bool": lambda e, c: e.fork(c, "b", at=True),
    "fork: at None": lambda e, c: e.fork(c, "b", at=None),
    "fork: at float": lambda e, c: e.fork(c, "b", at=1.5),
    "fork: name int": lambda e, c: e.fork(c, 123, at=0),
    "fork: name empty": lambda e, c: e.fork(c, "", at=0),
    "fork: name surrogate": lambda e, c: e.fork(c, S, at=0),
    "fork: name None": lambda e, c: e.fork(c, None, at=0),
    "fork: name existing": lambda e, c: e.fork(c, "main", at=0),
    "switch: int": lambda e, c: e.switch_branch(c, 123),
    "switch: unknown": lambda e, c: e.switch_branch(c, "nope"),
    "switch: None": lambda e, c: e.switch_branch(c, None),
    "switch: surrogate": lambda e, c: e.switch_branch(c, S),
    "retry: idle": lambda e, c: e.retry(c),
    "retry: cid int": lambda e, c: e.retry(7),
    "reset: idle": lambda e, c: e.reset(c),
    "reset: cid None": lambda e, c: e.reset(None),
    "cancel: cid int": lambda e, c: e.cancel(1),
    "resume: cid None": lambda e, c: e.resume(None),
    "resume: cid surrogate": lambda e, c: e.resume(S),
    "get_context: int": lambda e, c: e.get_context(1),
    "get_context: unknown": lambda e, c: e.get_context("nope"),
    "steps: None": lambda e, c: e.steps(None),
    "trace: int": lambda e, c: e.trace(5),
    "unload: None": lambda e, c: e.unload(None),
    "create: system_prompt int": lambda e, c: e.create_context(system_prompt=123),
    "create: system_prompt surrogate": lambda e, c: e.create_context(system_prompt=S),
    "create: user_prompt list": lambda e, c: e.create_context(user_prompt=["x"]),
    "create: model None": lambda e, c: e.create_context(model=None),
    "create: model int": lambda e, c: e.create_context(model=5),
    "create: mode int": lambda e, c: e.create_context(mode=5),
    "create: parameters list": lambda e, c: e.create_context(parameters=[1]),
    "create: parameters nan": lambda e, c: e.create_context(parameters={"t": math.nan}),
    "create: parameters deep": lambda e, c: e.create_context(parameters=_deep(300)),
    "create: parameters cycle": lambda e, c: e.create_context(parameters={"a": _cycle()}),
    "create: parameters int key": lambda e, c: e.create_context(parameters={1: "a"}),
    "create: parameters object": lambda e, c: e.create_context(parameters={"a": object()}),
    "create: parameters surrogate": lambda e, c: e.create_context(parameters={S: 1}),
    "create: context_id int": lambda e, c: e.create_context(context_id=5),
    "create: context_id surrogate": lambda e, c: e.create_context(context_id=S),
    "create: context_id existing": lambda e, c: e.create_context(context_id=c),
    "create: context_id slash": lambda e, c: e.create_context(context_id="../../etc"),
    "create: context_id newline": lambda e, c: e.create_context(context_id="a\nb"),
    "create: parent_id int": lambda e, c: e.create_context(parent_id=5),
    "create: workspace int": lambda e, c: e.create_context(workspace_path=5),
    "create: agent_role None": lambda e, c: e.create_context(agent_role=None),
}


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.mark.parametrize("case", sorted(API_CASES))
async def test_api_argument(case: str, store_path: Path) -> None:
    async with Engine(llm=ScriptedLLM([{"text": "ok"}]), store=SQLiteStore(store_path)) as engine:
        cid = await engine.create_context(system_prompt="hi")
    before = await _snapshot(store_path)
    async with Engine(llm=ScriptedLLM([{"text": "ok"}]), store=SQLiteStore(store_path)) as engine:
        with anyio.fail_after(DEADLINE):
            with contextlib.suppress(TurnFSMError):
                await API_CASES[case](engine, cid)
    after = await _snapshot(store_path)
    assert after[cid] == before[cid], f"{case}: the context changed"
    # A context created anyway must itself load (the snapshot just did) and be valid.
    for extra in set(after) - set(before):
        assert json.loads(after[extra])["current_state"] == "Idle"


@pytest.mark.parametrize(
    "case",
    [
        "send: None",
        "send: whitespace",
        "send: surrogate",
        "approve: int",
        "deny: reason int",
        "answer: text int",
        "answer: text empty",
        "answer: call list",
        "fork: at str",
        "create: system_prompt int",
        "create: parameters deep",
        "create: context_id surrogate",
    ],
)
async def test_api_argument_is_invalid_input(case: str) -> None:
    """The cases the boundary must name as InvalidInput (not merely some typed error)."""
    async with Engine(llm=ScriptedLLM([{"text": "ok"}])) as engine:
        cid = await engine.create_context()
        with pytest.raises(InvalidInput) as info:
            await API_CASES[case](engine, cid)
        assert info.value.where


async def test_deny_list_form_denies_each_call() -> None:
    @tool(approval="required")
    def act(x: int) -> int:
        """Do it."""
        return x

    llm = ScriptedLLM(
        [
            {
                "tool_calls": [
                    {"id": "c1", "name": "act", "arguments": {"x": 1}},
                    {"id": "c2", "name": "act", "arguments": {"x": 2}},
                ]
            },
            {"text": "done"},
        ]
    )
    async with Engine(llm=llm, tools=[act]) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        turn = await engine.deny(cid, ["c1", "c2"], reason="no")
        assert turn.state is State.IDLE
        ctx = await engine.get_context(cid)
        results = [n.message.tool_result for n in ctx.history() if n.message.tool_result]
        assert [r.success for r in results] == [False, False]


# --------------------------------------------------------------------------- adapter answers


class _Adapter:
    """An LLM adapter that yields whatever it is given, or raises."""

    def __init__(self, items: list[Any], then: Any = None) -> None:
        self.items = items
        self.then = then
        self.calls = 0

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        self.calls += 1
        if self.calls > 1:  # later calls (retries, follow-ups) answer plainly
            yield LLMResponse(text="recovered")
            return
        for item in self.items:
            if isinstance(item, BaseException):
                raise item
            yield item
        if self.then is not None:
            raise self.then


class _NotAnIterator:
    def __init__(self, value: Any) -> None:
        self.value = value

    def stream(self, request: Any) -> Any:
        return self.value


def _resp(**kw: Any) -> LLMResponse:
    return LLMResponse(**kw)


def _call(id: Any = "c1", name: Any = "echo", arguments: Any = None) -> ToolCallData:
    return ToolCallData(id=id, name=name, arguments={} if arguments is None else arguments)


ADAPTER_CASES: dict[str, Callable[[], Any]] = {
    "text int": lambda: _Adapter([_resp(text=123)]),
    "text None": lambda: _Adapter([_resp(text=None)]),
    "text bytes": lambda: _Adapter([_resp(text=b"hi")]),
    "text surrogate": lambda: _Adapter([_resp(text=f"a{S}b")]),
    "thinking surrogate": lambda: _Adapter([_resp(text="a", thinking="\udfff")]),
    "thinking int": lambda: _Adapter([_resp(text="a", thinking=5)]),
    "finish_reason int": lambda: _Adapter([_resp(text="a", finish_reason=123)]),
    "model int": lambda: _Adapter([_resp(text="a", model=5)]),
    "usage junk str": lambda: _Adapter([_resp(text="a", usage="junk")]),
    "usage wrong types": lambda: _Adapter([_resp(text="a", usage={"prompt_tokens": "x"})]),
    "usage nan": lambda: _Adapter([_resp(text="a", usage={"prompt_tokens": math.nan})]),
    "usage negative": lambda: _Adapter([_resp(text="a", usage={"prompt_tokens": -5})]),
    "usage deep": lambda: _Adapter([_resp(text="a", usage={"extra": _deep(300)})]),
    "tool_calls list": lambda: _Adapter([_resp(tool_calls=[_call()])]),
    "tool_calls None": lambda: _Adapter([_resp(tool_calls=None)]),
    "tool_calls of dicts": lambda: _Adapter([_resp(tool_calls=({"id": "c1"},))]),
    "tool id None": lambda: _Adapter([_resp(tool_calls=(_call(id=None),))]),
    "tool id empty": lambda: _Adapter([_resp(tool_calls=(_call(id=""),))]),
    "tool id int": lambda: _Adapter([_resp(tool_calls=(_call(id=7),))]),
    "tool id surrogate": lambda: _Adapter([_resp(tool_calls=(_call(id=S),))]),
    "tool name None": lambda: _Adapter([_resp(tool_calls=(_call(name=None),))]),
    "tool name int": lambda: _Adapter([_resp(tool_calls=(_call(name=1),))]),
    "tool name surrogate": lambda: _Adapter([_resp(tool_calls=(_call(name=S),))]),
    "tool name unknown": lambda: _Adapter([_resp(tool_calls=(_call(name="nope"),))]),
    "args int": lambda: _Adapter([_resp(tool_calls=(_call(arguments=123),))]),
    "args list": lambda: _Adapter([_resp(tool_calls=(_call(arguments=[1]),))]),
    "args bad json text": lambda: _Adapter([_resp(tool_calls=(_call(arguments="{"),))]),
    "args deep 200": lambda: _Adapter([_resp(tool_calls=(_call(arguments=_deep(200)),))]),
    "args deep 5000": lambda: _Adapter([_resp(tool_calls=(_call(arguments=_deep(5000)),))]),
    "args nan": lambda: _Adapter([_resp(tool_calls=(_call(arguments={"x": math.nan}),))]),
    "args surrogate key": lambda: _Adapter([_resp(tool_calls=(_call(arguments={S: 1}),))]),
    "args int key": lambda: _Adapter([_resp(tool_calls=(_call(arguments={1: 1}),))]),
    "args object": lambda: _Adapter([_resp(tool_calls=(_call(arguments={"x": object()}),))]),
    "args cycle": lambda: _Adapter([_resp(tool_calls=(_call(arguments={"x": _cycle()}),))]),
    "duplicate ids": lambda: _Adapter(
        [_resp(tool_calls=(_call(id="d1", name="echo"), _call(id="d1", name="guarded")))]
    ),
    "delta surrogate": lambda: _Adapter([TextDelta(S), _resp(text=S)]),
    "delta None": lambda: _Adapter([TextDelta(None), _resp(text="a")]),
    "delta int": lambda: _Adapter([TextDelta(5), _resp(text="a")]),
    "thinking delta int": lambda: _Adapter([ThinkingDelta(5), _resp(text="a")]),
    "tool delta bad index": lambda: _Adapter([ToolCallDelta(index="x"), _resp(text="a")]),
    "yields dict": lambda: _Adapter([{"text": "hi"}]),
    "yields None": lambda: _Adapter([None]),
    "yields str": lambda: _Adapter(["hello"]),
    "yields nothing": lambda: _Adapter([]),
    "two responses": lambda: _Adapter([_resp(text="a"), _resp(text="b")]),
    "delta after response": lambda: _Adapter([_resp(text="a"), TextDelta("b")]),
    "raises ValueError": lambda: _Adapter([ValueError("adapter bug")]),
    "raises KeyError": lambda: _Adapter([KeyError("k")]),
    "raises RecursionError": lambda: _Adapter([RecursionError("deep")]),
    "raises mid-stream": lambda: _Adapter([TextDelta("part")], then=RuntimeError("boom")),
    "raises TurnFSMError": lambda: _Adapter([TurnFSMError("odd")]),
    "raises StopAsyncIteration": lambda: _Adapter([StopAsyncIteration()]),
    "stream returns list": lambda: _NotAnIterator([_resp(text="a")]),
    "stream returns None": lambda: _NotAnIterator(None),
    "stream returns response": lambda: _NotAnIterator(_resp(text="a")),
    "llm has no stream": lambda: object(),
}


@tool
def echo(x: Any = None) -> dict[str, Any]:
    """Return the argument."""
    return {"ok": True}


@tool(approval="required")
def guarded() -> str:
    """Needs a human."""
    return "done"


async def _settle(engine: Engine, cid: str, turn: Any) -> None:
    """Drive a context from where the case left it back to Idle, through the API."""
    for _ in range(5):
        state = turn.state
        assert state in RESTING
        if state is State.IDLE:
            return
        if state is State.AWAITING_TOOL_APPROVAL:
            ids = [c.id for c in turn.pending_tool_calls]
            assert ids, "resting in AwaitingToolApproval with nothing pending"
            turn = await engine.approve(cid, ids)
        else:
            turn = await engine.retry(cid)
    raise AssertionError(f"the context did not settle: {turn.state}")


@pytest.mark.parametrize("case", sorted(ADAPTER_CASES))
async def test_adapter_answer(case: str, store_path: Path) -> None:
    llm = ADAPTER_CASES[case]()
    async with Engine(llm=llm, tools=[echo, guarded], store=SQLiteStore(store_path)) as engine:
        cid = await engine.create_context()
        with anyio.fail_after(DEADLINE):
            turn = await engine.send(cid, "hi")
        assert turn.state in RESTING, f"{case}: ended in {turn.state}"
    await _snapshot(store_path)  # loads afresh
    fallback = ScriptedLLM([{"text": "again"}] * 5)
    async with Engine(llm=fallback, tools=[echo, guarded], store=SQLiteStore(store_path)) as e2:
        with anyio.fail_after(DEADLINE):
            ctx = await e2.get_context(cid)
            assert State(ctx.current_state) in RESTING
            turn = await e2.send(cid, "and now?")
            await _settle(e2, cid, turn)
        assert State((await e2.get_context(cid)).current_state) is State.IDLE


async def test_duplicate_ids_are_never_falsely_audited(store_path: Path) -> None:
    llm = ADAPTER_CASES["duplicate ids"]()
    async with Engine(llm=llm, tools=[echo, guarded], store=SQLiteStore(store_path)) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "hi")
        ctx = await engine.get_context(cid)
        calls = [c for n in ctx.history() for c in (n.message.tool_calls or [])]
        assert len({c.id for c in calls}) == len(calls) == 2
        by_name = {c.tool_name: c for c in calls}
        assert by_name["guarded"].decided_by != "policy"
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert [c.tool_name for c in turn.pending_tool_calls] == ["guarded"]


# --------------------------------------------------------------------------- tool outputs


@dataclasses.dataclass
class _Point:
    x: int
    y: int


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr fails")

    def __str__(self) -> str:
        raise RuntimeError("str fails")


def _raise(exc: BaseException) -> Any:
    raise exc


TOOL_OUTPUTS: dict[str, Callable[[], Any]] = {
    "nan": lambda: math.nan,
    "inf": lambda: math.inf,
    "-inf in list": lambda: [1, -math.inf],
    "nan nested": lambda: {"a": {"b": math.nan}},
    "int keys": lambda: {1: "a", 2: "b"},
    "tuple keys": lambda: {(1, 2): "a"},
    "mixed keys colliding": lambda: {1: "a", "1": "b"},
    "set": lambda: {1, 2},
    "set nested": lambda: {"a": {1, 2}},
    "object": lambda: _Opaque(),
    "object with bad repr": lambda: _BadRepr(),
    "deep 200": lambda: _deep(200),
    "deep 3000": lambda: _deep(3000),
    "deep list 200": lambda: _deep_list(200),
    "cycle": _cycle,
    "surrogate": lambda: f"x{S}y",
    "surrogate key": lambda: {S: 1},
    "bytes": lambda: b"\xff\xfe",
    "huge string": lambda: "x" * (17 * 1024 * 1024),
    "generator": lambda: (i for i in range(3)),
    "dataclass": lambda: _Point(1, 2),
    "datetime": lambda: dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    "decimal": lambda: decimal.Decimal("1.10"),
    "complex": lambda: 1 + 2j,
    "None": lambda: None,
    "tuple": lambda: (1, 2),
    "empty string": lambda: "",
    "raises": lambda: _raise(ValueError("tool bug")),
    "raises RecursionError": lambda: _raise(RecursionError("deep")),
    "raises TurnFSMError": lambda: _raise(TurnFSMError("odd")),
    "bool subclass": lambda: True,
    "big int": lambda: 10**400,
}


@pytest.mark.parametrize("case", sorted(TOOL_OUTPUTS))
async def test_tool_output(case: str, store_path: Path) -> None:
    produce = TOOL_OUTPUTS[case]

    @tool
    def probe() -> Any:
        """Return something odd."""
        return produce()

    llm = ScriptedLLM(
        [{"tool_calls": [{"id": "c1", "name": "probe", "arguments": {}}]}, {"text": "done"}]
    )
    async with Engine(llm=llm, tools=[probe], store=SQLiteStore(store_path)) as engine:
        cid = await engine.create_context()
        with anyio.fail_after(DEADLINE):
            turn = await engine.send(cid, "hi")
        assert turn.state is State.IDLE, f"{case}: ended in {turn.state}"
    snap = await _snapshot(store_path)
    ctx = json.loads(snap[cid])
    results = [
        m["message"]["tool_result"]
        for m in ctx["message_pool"].values()
        if m["message"].get("tool_result")
    ]
    assert len(results) == 1, f"{case}: one result per call"


# --------------------------------------------------------------------------- stored data


async def _two_contexts(store: Any) -> tuple[str, str]:
    @tool(approval="required")
    def act() -> str:
        """Act."""
        return "ok"

    llm = ScriptedLLM([{"text": "hello"}, {"tool_calls": [{"id": "k", "name": "act"}]}])
    async with Engine(llm=llm, tools=[act], store=store) as engine:
        good = await engine.create_context()
        bad = await engine.create_context()
        await engine.send(good, "hi")
        await engine.send(bad, "hi")
    return good, bad


def _json_edit(path: Path, edit: Callable[[Any], Any]) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps(edit(data)))


def _set(key: str, value: Any) -> Callable[[Any], Any]:
    def edit(data: Any) -> Any:
        data[key] = value
        return data

    return edit


def _branch_field(field: str, value: Any) -> Callable[[Any], Any]:
    def edit(data: Any) -> Any:
        for branch in data["branches"].values() if isinstance(data["branches"], dict) else []:
            branch[field] = value
        return data

    return edit


FILES_DAMAGE: dict[str, Callable[[Path], None]] = {
    "metadata garbage": lambda d: (d / "metadata.json").write_bytes(b"\x00garbage{"),
    "metadata not utf8": lambda d: (d / "metadata.json").write_bytes(b"\xff\xfe\xfa"),
    "metadata empty": lambda d: (d / "metadata.json").write_bytes(b""),
    "metadata truncated": lambda d: (d / "metadata.json").write_bytes(
        (d / "metadata.json").read_bytes()[:40]
    ),
    "metadata a list": lambda d: (d / "metadata.json").write_text("[]"),
    "metadata missing": lambda d: (d / "metadata.json").unlink(),
    "branches wrong type": lambda d: _json_edit(d / "metadata.json", _set("branches", 5)),
    "branches a list": lambda d: _json_edit(d / "metadata.json", _set("branches", [1, 2])),
    "message_ids not a list": lambda d: _json_edit(
        d / "metadata.json", _branch_field("message_ids", "abc")
    ),
    "message_ids ints": lambda d: _json_edit(
        d / "metadata.json", _branch_field("message_ids", [1, 2])
    ),
    "active branch dangling": lambda d: _json_edit(
        d / "metadata.json", _set("active_branch", "gone")
    ),
    "active branch int": lambda d: _json_edit(d / "metadata.json", _set("active_branch", 3)),
    "state unknown": lambda d: _json_edit(d / "metadata.json", _set("current_state", "Nope")),
    "version str": lambda d: _json_edit(d / "metadata.json", _set("version", "x")),
    "version null": lambda d: _json_edit(d / "metadata.json", _set("version", None)),
    "config wrong type": lambda d: _json_edit(d / "metadata.json", _set("config", "x")),
    "schema too new": lambda d: _json_edit(d / "metadata.json", _set("schema_version", 999)),
    "steps unknown state": lambda d: (d / "steps.jsonl").write_text(
        (d / "steps.jsonl").read_text().replace("Idle", "Nowhere", 1)
    ),
    "steps garbage": lambda d: (d / "steps.jsonl").write_bytes(b"not json\n\xff\n"),
    "steps wrong shape": lambda d: (d / "steps.jsonl").write_text('{"version": "x"}\n'),
    "message file garbage": lambda d: next((d / "messages").glob("*.json")).write_bytes(b"\xff"),
    "message file wrong role": lambda d: _json_edit(
        next((d / "messages").glob("*.json")), lambda m: {**m, "message": {"role": "alien"}}
    ),
    "message file missing": lambda d: next((d / "messages").glob("*.json")).unlink(),
}


@pytest.mark.parametrize("case", sorted(FILES_DAMAGE))
async def test_damaged_files_store(case: str, tmp_path: Path) -> None:
    root = tmp_path / "files"
    good, bad = await _two_contexts(FilesStore(root))
    folder = root / "contexts" / bad
    FILES_DAMAGE[case](folder)
    damaged = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    store = FilesStore(root)
    # A folder without metadata.json is no context at all (it is what a
    # create cut short left behind): absent, not damaged.
    refused = (StoreError, ContextNotFound) if case == "metadata missing" else StoreError
    with anyio.fail_after(DEADLINE):
        with pytest.raises(refused) as info:
            await store.load(bad)
            await store.steps(bad)
        assert str(info.value)
        try:
            summaries = await store.list_contexts()
        except StoreError:
            summaries = None
        if summaries is not None:
            assert good in {s.id for s in summaries}
        ctx = await store.load(good)
        assert ctx.id == good
        recovery = Engine(store=store)
        await recovery.recover()
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == damaged


_CTX = "(SELECT seq FROM contexts WHERE id = ?)"


def _sql(sql: str, *params: Any) -> Callable[[sqlite3.Connection, str], None]:
    def run(db: sqlite3.Connection, cid: str) -> None:
        db.execute(sql.replace("{ctx}", _CTX), (*params, cid))

    return run


SQLITE_DAMAGE: dict[str, Callable[[sqlite3.Connection, str], None]] = {
    "state unknown": _sql("UPDATE contexts SET state = ? WHERE id = ?", "Nope"),
    "state empty": _sql("UPDATE contexts SET state = ? WHERE id = ?", ""),
    "config garbage": _sql("UPDATE contexts SET config = ? WHERE id = ?", "{"),
    "progress wrong shape": _sql("UPDATE contexts SET progress = ? WHERE id = ?", "[1]"),
    "created_at garbage": _sql("UPDATE contexts SET created_at = ? WHERE id = ?", "yesterday"),
    "schema too new": _sql("UPDATE contexts SET schema_version = ? WHERE id = ?", 999),
    "branch body garbage": _sql("UPDATE branches SET body = ? WHERE ctx = {ctx}", "]"),
    "branch message dangling": _sql(
        "UPDATE branch_messages SET message_id = ? WHERE ctx = {ctx}", "gone"
    ),
    "step state unknown": _sql("UPDATE steps SET to_state = ? WHERE ctx = {ctx}", "Nope"),
    "version text": _sql("UPDATE contexts SET version = ? WHERE id = ?", "x"),
    "active branch dangling": _sql("UPDATE contexts SET active_branch = ? WHERE id = ?", "gone"),
    "message json garbage": _sql("UPDATE messages SET body = ? WHERE ctx = {ctx}", "{not json"),
    "message json wrong shape": _sql(
        "UPDATE messages SET body = ? WHERE ctx = {ctx}", '{"role": 5}'
    ),
    "message json not utf8": _sql("UPDATE messages SET body = ? WHERE ctx = {ctx}", b"\xff\xfe"),
    "message json deep": _sql(
        "UPDATE messages SET body = ? WHERE ctx = {ctx}", "[" * 5000 + "]" * 5000
    ),
}


@pytest.mark.parametrize("case", sorted(SQLITE_DAMAGE))
async def test_damaged_sqlite_rows(case: str, store_path: Path) -> None:
    good, bad = await _two_contexts(SQLiteStore(store_path))
    db = sqlite3.connect(store_path)
    try:
        SQLITE_DAMAGE[case](db, bad)
    except sqlite3.OperationalError as exc:  # the schema names differ: say so, do not pass
        pytest.fail(f"the damage for {case!r} no longer matches the schema: {exc}")
    db.commit()
    db.close()
    store = SQLiteStore(store_path)
    with anyio.fail_after(DEADLINE):
        with pytest.raises(StoreError):
            await store.load(bad)
            await store.steps(bad)
        assert (await store.load(good)).id == good
        await Engine(store=store).recover()
    await store.aclose()


# --------------------------------------------------------------------------- replay scripts

_GOOD_SCRIPT = {
    "format": "turnfsm-script/1",
    "steps": [{"user": "hi"}, {"llm": {"text": "hello"}}],
}


def _script(**changes: Any) -> str:
    return json.dumps({**_GOOD_SCRIPT, **changes})


SCRIPTS: dict[str, str | bytes] = {
    "empty file": b"",
    "binary": bytes(range(256)),
    "not utf8": b'{"format": "\xff"}',
    "truncated": _script()[:30],
    "a list": "[]",
    "a number": "42",
    "null": "null",
    "deep nesting": "[" * 100_000 + "]" * 100_000,
    "deep objects": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "no format": json.dumps({"steps": []}),
    "format wrong": _script(format="turnfsm-script/99"),
    "format int": _script(format=1),
    "steps missing": json.dumps({"format": "turnfsm-script/1"}),
    "steps a dict": _script(steps={"user": "hi"}),
    "steps empty": _script(steps=[]),
    "step unknown key": _script(steps=[{"dance": 1}]),
    "step two keys": _script(steps=[{"user": "hi", "llm": {"text": "x"}}]),
    "user int": _script(steps=[{"user": 5}, {"llm": {"text": "x"}}]),
    "user surrogate escape": '{"format": "turnfsm-script/1", "steps": [{"user": "\\ud800"},'
    ' {"llm": {"text": "x"}}]}',
    "llm text surrogate escape": '{"format": "turnfsm-script/1", "steps": [{"user": "hi"},'
    ' {"llm": {"text": "\\udfff"}}]}',
    "llm text int": _script(steps=[{"user": "hi"}, {"llm": {"text": 5}}]),
    "llm tool args deep": _script(
        steps=[
            {"user": "hi"},
            {"llm": {"tool_calls": [{"id": "c", "name": "t", "arguments": _deep(300)}]}},
        ]
    ),
    "tool result NaN": '{"format": "turnfsm-script/1", "tools": [{"name": "t"}], "steps": ['
    '{"user": "hi"}, {"llm": {"tool_calls": [{"id": "c", "name": "t"}]}},'
    ' {"tool": {"id": "c", "result": NaN}}, {"llm": {"text": "x"}}]}',
    "llm missing answer": _script(steps=[{"user": "hi"}]),
    "expect unknown state": _script(
        steps=[{"user": "hi"}, {"llm": {"text": "x"}}, {"expect": {"state": "Nope"}}]
    ),
    "config wrong type": _script(config="fast"),
    "config max_iterations negative": _script(config={"max_iterations": -1}),
    "retry absurd": _script(config={"retry": {"max_attempts": 10**9}}),
    "tools wrong type": _script(tools="all"),
    "tool approval unknown": _script(tools=[{"name": "t", "approval": "maybe"}]),
    "duplicate keys": '{"format": "turnfsm-script/1", "format": "x", "steps": []}',
}


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_replay_script(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from turnfsm.cli import main

    path = tmp_path / "script.json"
    data = SCRIPTS[case]
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    code = _run_cli(main, ["replay", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert code in (0, 1, 2), f"{case}: exit {code}"
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err


# --------------------------------------------------------------------------- CLI arguments


def _run_cli(main: Callable[[list[str]], int], argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's usage errors
        return exc.code if isinstance(exc.code, int) else 2


CLI_CASES: dict[str, list[str]] = {
    "unknown command": ["dance"],
    "store unknown scheme": ["contexts", "list", "--store", "redis://localhost/0"],
    "store bare path": ["contexts", "list", "--store", "just/a/path"],
    "store postgresql": ["contexts", "list", "--store", "postgresql://u@h/db"],
    "store damaged url": ["contexts", "list", "--store", "sqlite://"],
    "store surrogate": ["contexts", "list", "--store", f"sqlite:///{S}.db"],
    "store missing file": ["contexts", "list", "--store", "sqlite:///{tmp}/missing.db"],
    "store not sqlite": ["contexts", "list", "--store", "sqlite:///{tmp}/notes.txt"],
    "show unknown context": ["contexts", "show", "nope", "--store", "sqlite:///{tmp}/s.db"],
    "audit unknown context": ["audit", "export", "nope", "--store", "sqlite:///{tmp}/s.db"],
    "demo empty message": ["demo", "-m", "", "--store", "sqlite:///{tmp}/d.db"],
    "demo whitespace message": ["demo", "-m", "   ", "--store", "sqlite:///{tmp}/d.db"],
    "demo negative delay": ["demo", "--delay", "-1", "--store", "sqlite:///{tmp}/d.db"],
    "demo nan delay": ["demo", "--delay", "nan", "--store", "sqlite:///{tmp}/d.db"],
    "demo huge delay": ["demo", "--delay", "1e308", "--store", "sqlite:///{tmp}/d.db"],
    "replay missing path": ["replay", "{tmp}/no-such.json"],
    "replay empty folder": ["replay", "{tmp}/empty"],
    "replay a device": ["replay", "/dev/null"],
    "diagram bad format": ["diagram", "--format", "gif"],
    "import missing": ["import", "{tmp}/none.json", "--store", "sqlite:///{tmp}/i.db"],
    "import not json": ["import", "{tmp}/notes.txt", "--store", "sqlite:///{tmp}/i.db"],
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_cli_arguments(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from turnfsm.cli import main

    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("not a database, not json\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in CLI_CASES[case]]
    code = _run_cli(main, argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert code == 2, f"{case}: exit {code}: {err}"
    assert not (tmp_path / "missing.db").exists(), "a read-only command created a store"
