"""Sub-contexts: ``spawn``, ``finish``, ``children``, ``delete_context``, the
tool allow-list, on a memory store and on a real SQLite file (docs/architecture.md,
"Sub-contexts")."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import kit
import pytest

from turnfsm import (
    ChatContext,
    ContextNotFound,
    Engine,
    FinalAnswer,
    InvalidInput,
    LLMSummarizer,
    NotAtRest,
    Role,
    SQLiteStore,
    State,
    ask_user,
    subtask,
    tool,
)
from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log
from turnfsm.engine import DEFAULT_SUMMARY_PROMPT, context_tree
from turnfsm.engine._subcontexts._approvals import no_child_waits
from turnfsm.engine._subcontexts._records import start_child_finished
from turnfsm.errors import SubContextError
from turnfsm.model import SUMMARY_KEY
from turnfsm.states import Change
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

pytestmark = pytest.mark.anyio

RAN: list[str] = []


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    RAN.append(f"lookup:{key}")
    return f"value of {key}"


@tool
def erase(key: str) -> str:
    """Erase a key."""
    RAN.append(f"erase:{key}")
    return "erased"


@tool(approval="required")
def publish(text: str) -> str:
    """Publish a text (a human approves)."""
    return "published"


TOOLS = [lookup, erase, publish]


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return None if request.param == "memory" else f"sqlite:///{tmp_path / 'ctx.db'}"


@pytest.fixture
async def made(store_url: str | None) -> AsyncIterator[kit.Made]:
    RAN.clear()
    m = kit.make_engine([], tools=TOOLS, store=store_url)
    async with m.engine:
        yield m


def scripted(*items: dict[str, Any]) -> ScriptedLLM:
    return ScriptedLLM(list(items))


async def verify(engine: Engine, cid: str) -> list[Any]:
    """The context's audit log verifies and accounts for every message; returns the records."""
    ctx = await engine.get_context(cid)
    records = audit_records(cid, await engine.steps(cid), ctx.message_pool.values())
    result = verify_audit_log(audit_jsonl(records).splitlines())
    assert result.ok, (result.line, result.reason)
    assert {m for r in records for m in r.message_ids} == set(ctx.message_pool)
    return records


async def parent_with_a_turn(engine: Engine) -> str:
    cid = await engine.create_context(system_prompt="You plan.", model="m-parent", title="Plan")
    await engine.send(cid, "Plan a trip")
    return cid


# --------------------------------------------------------------------------- spawn


async def test_spawn_runs_the_task_in_a_child_linked_to_its_parent(made: kit.Made) -> None:
    engine = made.engine
    made.engine.llm = scripted({"text": "Where to?"}, {"text": "Paris is sunny."})
    parent = await parent_with_a_turn(engine)
    child = await engine.spawn(
        parent, "Find the weather in Paris", system_prompt="You research.", title="Weather"
    )
    assert child.turn.state is State.IDLE and child.turn.text == "Paris is sunny."
    ctx = await engine.get_context(child.context_id)
    assert ctx.parent_id == parent
    assert ctx.config.model_id == "m-parent" and ctx.config.title == "Weather"
    assert [n.message.text for n in ctx.history()] == [
        "Find the weather in Paris",
        "Paris is sunny.",
    ]
    assert ctx.active_branch.system_prompt is not None
    assert ctx.active_branch.system_prompt.content == "You research."
    last = (await engine.steps(parent))[-1]
    assert last.trigger == Change.CHILD_SPAWNED and last.from_state == last.to_state == "Idle"
    assert last.detail == {
        "child_id": child.context_id,
        "task": "Find the weather in Paris",
        "title": "Weather",
    }
    [info] = await engine.children(parent)
    assert (info.context_id, info.state, info.title, info.finished) == (
        child.context_id,
        "Idle",
        "Weather",
        False,
    )
    assert await engine.children(child.context_id) == []
    records = await verify(engine, parent)
    assert records[-1].trigger == "child_spawned" and records[-1].message_ids == ()


async def test_spawn_refuses_bad_arguments_and_stores_nothing(made: kit.Made) -> None:
    engine = made.engine
    parent = await engine.create_context()
    with pytest.raises(ContextNotFound):
        await engine.spawn("nope", "task")
    with pytest.raises(InvalidInput) as bad:
        await engine.spawn("", "task")
    assert bad.value.where == "parent_id"
    with pytest.raises(InvalidInput) as bad:
        await engine.spawn(parent, "   ")
    assert bad.value.where == "task"
    with pytest.raises(InvalidInput) as bad:
        await engine.spawn(parent, "task", tools=["lookup", "launch"])
    assert bad.value.where == "tools[1]" and "launch" in bad.value.reason
    with pytest.raises(InvalidInput) as bad:
        await engine.spawn(parent, "task", tools="lookup")  # type: ignore[arg-type]
    assert bad.value.where == "tools"
    with pytest.raises(InvalidInput) as bad:
        await engine.spawn(parent, "task", title="two\nlines")
    assert bad.value.where == "title"
    assert [s.id for s in await engine.store.list_contexts()] == [parent]
    assert await engine.steps(parent) == []


async def test_create_context_checks_the_parent(made: kit.Made) -> None:
    engine = made.engine
    with pytest.raises(ContextNotFound):
        await engine.create_context(parent_id="missing")
    assert await engine.store.list_contexts() == []
    parent = await engine.create_context()
    child = await engine.create_context(parent_id=parent)
    assert [c.context_id for c in await engine.children(parent)] == [child]


async def test_spawn_from_a_parent_that_waits_for_approval(made: kit.Made) -> None:
    engine = made.engine
    engine.llm = scripted(
        {"tool_calls": [{"id": "p1", "name": "publish", "arguments": {"text": "x"}}]},
        {"text": "child done"},
    )
    parent = await engine.create_context()
    turn = await engine.send(parent, "publish x")
    assert turn.state is State.AWAITING_TOOL_APPROVAL
    child = await engine.spawn(parent, "check x first")
    assert child.turn.text == "child done"
    assert (await engine.get_context(parent)).current_state == "AwaitingToolApproval"
    # the summary waits for Idle: it would split the call from its result
    with pytest.raises(SubContextError) as refused:
        await engine.finish(child.context_id, summarizer=FinalAnswer())
    assert refused.value.context_id == parent and "Idle" in str(refused.value)
    assert (await engine.get_context(child.context_id)).parent_id == parent
    await verify(engine, parent)


# --------------------------------------------------------------------------- finish


async def test_finish_appends_an_llm_summary_and_deletes_the_child(made: kit.Made) -> None:
    engine = made.engine
    llm = scripted(
        {"text": "Where to?"},
        {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"key": "paris"}}]},
        {"text": "Paris: 21C."},
        {"text": "Paris is 21C and sunny."},  # the summary
    )
    engine.llm = llm
    parent = await parent_with_a_turn(engine)
    child = await engine.spawn(parent, "Weather in Paris?")
    child_ctx = await engine.get_context(child.context_id)
    done = await engine.finish(child.context_id)

    request = llm.requests[-1]
    assert request.context_id == child.context_id and request.model == "m-parent"
    assert request.messages[-1] == {"role": "user", "content": DEFAULT_SUMMARY_PROMPT}
    assert request.messages[0] == {"role": "user", "content": "Weather in Paris?"}
    assert request.tools == []

    assert done.context_id == parent and done.child_id == child.context_id
    assert done.summary == "Paris is 21C and sunny." and done.kept is False
    ctx = await engine.get_context(parent)
    last = ctx.history()[-1]
    assert last.id == done.message_id
    assert last.message.role is Role.ASSISTANT and last.message.text == done.summary
    assert last.message.metadata.extra[SUMMARY_KEY] == {
        "child_id": child.context_id,
        "message_ids": child_ctx.active_branch.message_ids,
        "summarizer": "llm",
    }
    assert len(child_ctx.active_branch.message_ids) == 4  # task, call, result, answer
    step = (await engine.steps(parent))[-1]
    assert step.trigger == Change.CHILD_FINISHED
    assert step.detail == {
        "child_id": child.context_id,
        "message_id": done.message_id,
        "kept": False,
    }
    with pytest.raises(ContextNotFound):
        await engine.get_context(child.context_id)
    assert await engine.children(parent) == []
    records = await verify(engine, parent)
    assert records[-1].trigger == "child_finished"
    assert records[-1].message_ids == (done.message_id,)
    assert records[-1].actor == "user"

    # the parent's next request carries the summary as its own (assistant) text
    engine.llm = scripted({"text": "Pack sunglasses."})
    turn = await engine.send(parent, "What do I pack?")
    sent = engine.llm.requests[-1].messages  # type: ignore[union-attr]
    assert sent[-2:] == [
        {"role": "assistant", "content": "Paris is 21C and sunny."},
        {"role": "user", "content": "What do I pack?"},
    ]
    assert turn.text == "Pack sunglasses."
    await verify(engine, parent)


async def test_finish_with_keep_archives_the_child(made: kit.Made) -> None:
    engine = made.engine
    engine.llm = scripted({"text": "Found: 42."})
    parent = await engine.create_context()
    child = await engine.spawn(parent, "Find the answer", title="Answer")
    done = await engine.finish(child.context_id, summarizer=FinalAnswer(), keep=True)
    assert done.kept and done.summary == "Found: 42."
    kept = await engine.get_context(child.context_id)
    assert kept.config.archived and kept.current_state == "Idle"
    link = (await engine.get_context(parent)).message_pool[done.message_id]
    assert link.message.metadata.extra[SUMMARY_KEY]["summarizer"] == "final_answer"
    assert link.message.metadata.extra[SUMMARY_KEY]["title"] == "Answer"
    [info] = await engine.children(parent)
    assert info.finished and info.context_id == child.context_id
    step = (await engine.steps(child.context_id))[-1]
    assert step.trigger == Change.ARCHIVED
    assert step.detail == {"parent_id": parent, "message_id": done.message_id}
    with pytest.raises(SubContextError) as refused:
        await engine.send(child.context_id, "one more thing")
    assert "no more input" in str(refused.value)
    with pytest.raises(SubContextError):
        await engine.finish(child.context_id)
    with pytest.raises(SubContextError):
        await engine.spawn(child.context_id, "a grandchild")
    assert (await engine.get_context(child.context_id)).version == kept.version
    await verify(engine, parent)
    await verify(engine, child.context_id)


async def test_a_plain_callable_summarises(made: kit.Made) -> None:
    engine = made.engine
    engine.llm = scripted({"text": "a"}, {"text": "b"})
    parent = await engine.create_context()
    child = await engine.spawn(parent, "t")
    seen: list[ChatContext] = []

    async def count(ctx: ChatContext) -> str:
        seen.append(ctx)
        return f"{len(ctx.history())} messages"

    done = await engine.finish(child.context_id, summarizer=count)
    assert done.summary == "2 messages" and seen[0].id == child.context_id
    sync = await engine.spawn(parent, "u")
    done = await engine.finish(sync.context_id, summarizer=lambda ctx: "sync " + ctx.id)
    assert done.summary == f"sync {sync.context_id}"
    ctx = await engine.get_context(parent)
    assert [n.message.text for n in ctx.history()] == ["2 messages", f"sync {sync.context_id}"]
    assert [s.trigger for s in await engine.steps(parent)] == [
        "child_spawned",
        "child_finished",
        "child_spawned",
        "child_finished",
    ]
    await verify(engine, parent)


async def test_finish_refusals_change_nothing(made: kit.Made) -> None:
    engine = made.engine
    engine.llm = scripted(
        {"tool_calls": [{"id": "p1", "name": "publish", "arguments": {"text": "x"}}]},
        {"text": "child answer"},
    )
    root = await engine.create_context()
    with pytest.raises(SubContextError) as refused:
        await engine.finish(root)
    assert "not a sub-context" in str(refused.value)
    with pytest.raises(ContextNotFound):
        await engine.finish("nope")
    with pytest.raises(InvalidInput) as bad:
        await engine.finish(root, keep="yes")  # type: ignore[arg-type]
    assert bad.value.where == "keep"
    with pytest.raises(InvalidInput) as bad:
        await engine.finish(root, summarizer=42)  # type: ignore[arg-type]
    assert bad.value.where == "summarizer"

    waiting = await engine.spawn(root, "publish x")
    assert waiting.turn.state is State.AWAITING_TOOL_APPROVAL
    with pytest.raises(SubContextError) as refused:
        await engine.finish(waiting.context_id, summarizer=FinalAnswer())
    assert "AwaitingToolApproval" in str(refused.value)

    other = await engine.spawn(root, "answer")
    before = await engine.get_context(root)
    with pytest.raises(SubContextError) as refused:
        await engine.finish(other.context_id, summarizer=lambda ctx: "  ")
    assert "empty" in str(refused.value)
    with pytest.raises(SubContextError):
        await engine.finish(other.context_id, summarizer=lambda ctx: 3)  # type: ignore[arg-type,return-value]
    # an LLM summary with no LLM left to ask
    engine.llm = None
    with pytest.raises(SubContextError) as refused:
        await engine.finish(other.context_id, summarizer=LLMSummarizer())
    assert "no LLM" in str(refused.value)
    assert (await engine.get_context(root)).version == before.version
    assert (await engine.get_context(other.context_id)).parent_id == root


async def test_a_failed_summary_call_changes_nothing(made: kit.Made) -> None:
    engine = made.engine
    engine.llm = scripted({"text": "done"}, {"error": {"status": 400}})
    parent = await engine.create_context()
    child = await engine.spawn(parent, "t")
    version = (await engine.get_context(parent)).version
    from turnfsm import LLMError

    with pytest.raises(LLMError):
        await engine.finish(child.context_id)
    assert (await engine.get_context(parent)).version == version
    assert (await engine.get_context(child.context_id)).current_state == "Idle"


async def test_finish_again_after_a_stop_between_its_commits(made: kit.Made) -> None:
    """The summary reached the parent but the child was not deleted (the process
    stopped): ``finish`` completes it and adds no second summary."""
    engine = made.engine
    engine.llm = scripted({"text": "result"})
    parent = await engine.create_context()
    child = await engine.spawn(parent, "t")
    child_ctx = await engine.get_context(child.context_id)
    d = engine._d
    await d.run(
        parent,
        functools.partial(start_child_finished, d, child_ctx, "result", "final_answer", False),
    )
    done = await engine.finish(child.context_id, summarizer=lambda ctx: "never asked")
    assert done.summary == "result"
    ctx = await engine.get_context(parent)
    assert [n.message.text for n in ctx.history()] == ["result"]
    with pytest.raises(ContextNotFound):
        await engine.get_context(child.context_id)
    await verify(engine, parent)


# --------------------------------------------------------------------------- trees


async def test_delete_refuses_a_parent_with_live_children(made: kit.Made) -> None:
    engine = made.engine
    engine.llm = scripted({"text": "a"}, {"text": "b"}, {"text": "c"})
    parent = await engine.create_context()
    live = await engine.spawn(parent, "live")
    grandchild = await engine.spawn(live.context_id, "deeper")
    with pytest.raises(SubContextError) as refused:
        await engine.delete_context(parent)
    assert live.context_id in str(refused.value)
    with pytest.raises(SubContextError) as refused:
        await engine.finish(live.context_id)  # its own child is not finished
    assert grandchild.context_id in str(refused.value)
    await engine.finish(grandchild.context_id, summarizer=FinalAnswer(), keep=True)
    await engine.finish(live.context_id, summarizer=FinalAnswer(), keep=True)
    assert await engine.delete_context(parent) == [grandchild.context_id, live.context_id, parent]
    assert await engine.store.list_contexts() == []


async def test_children_the_tree_and_delete_load_no_child(
    made: kit.Made, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``children``, the tree and ``delete_context`` read the children's
    summaries (the store's ``list_children`` / ``list_contexts``): the only
    context loaded is the one asked about."""
    engine = made.engine
    engine.llm = ScriptedLLM(lambda r: {"text": "done"})
    parent = await engine.create_context(title="Plan")
    kids = [(await engine.spawn(parent, f"task {i}", title=f"T{i}")).context_id for i in range(3)]
    deeper = (await engine.spawn(kids[0], "deeper")).context_id
    await engine.finish(deeper, summarizer=FinalAnswer(), keep=True)
    store = engine.store
    loaded: list[str] = []
    real_load = store.load

    async def counting_load(cid: str) -> ChatContext:
        loaded.append(cid)
        return await real_load(cid)

    monkeypatch.setattr(store, "load", counting_load)
    infos = await engine.children(parent)
    assert [(i.context_id, i.title, i.state, i.finished) for i in infos] == [
        (k, f"T{n}", "Idle", False) for n, k in enumerate(kids)
    ]
    [info] = await engine.children(kids[0])
    assert (info.context_id, info.finished) == (deeper, True)
    tree = await context_tree(store, parent)
    assert [c.info.context_id for c in tree.children] == kids
    assert tree.children[0].children[0].info.finished is True
    assert tree.info.title == "Plan"
    with pytest.raises(SubContextError):
        await engine.delete_context(parent)  # its children are not finished
    assert not set(loaded) & {*kids, deeper}, loaded


# --------------------------------------------------------------------------- the tool allow-list


async def test_a_child_is_offered_only_its_tools_and_runs_no_other(made: kit.Made) -> None:
    engine = made.engine
    llm = scripted(
        {
            "tool_calls": [
                {"id": "c1", "name": "lookup", "arguments": {"key": "k"}},
                {"id": "c2", "name": "erase", "arguments": {"key": "k"}},
            ]
        },
        {"text": "looked up"},
    )
    engine.llm = llm
    parent = await engine.create_context()
    child = await engine.spawn(parent, "look k up", tools=["lookup"])
    assert child.turn.text == "looked up"
    offered = [d["function"]["name"] for d in llm.requests[0].tools]
    assert offered == ["lookup"]
    assert RAN == ["lookup:k"]  # erase never ran
    ctx = await engine.get_context(child.context_id)
    assert ctx.config.tools == ["lookup"]
    results = {
        n.message.tool_result.request_id: n.message.tool_result
        for n in ctx.history()
        if n.message.tool_result is not None
    }
    assert results["c1"].success and not results["c2"].success
    assert "erase" in results["c2"].result["error"]
    # a child's child cannot widen the list
    with pytest.raises(InvalidInput) as bad:
        await engine.spawn(child.context_id, "erase k", tools=["erase"])
    assert bad.value.where == "tools[0]"


async def test_an_allow_list_on_a_top_level_context(made: kit.Made) -> None:
    engine = made.engine
    llm = scripted({"text": "ok"})
    engine.llm = llm
    cid = await engine.create_context(tools=[])
    await engine.send(cid, "hi")
    assert llm.requests[0].tools == []
    with pytest.raises(InvalidInput) as bad:
        await engine.create_context(tools=["nope"])
    assert bad.value.where == "tools[0]"
    plain = await engine.create_context()
    assert (await engine.get_context(plain)).config.tools is None


# --------------------------------------------------------------------------- a fresh engine


async def test_a_fresh_engine_on_the_same_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ctx.db'}"
    first = Engine(
        llm=scripted({"text": "child says 7"}),
        tools=TOOLS,
        store=url,
        clock=FakeClock(),
        ids=SequentialIds(),
    )
    async with first:
        parent = await first.create_context(title="Root")
        child = await first.spawn(parent, "count", tools=["lookup"], title="Counter")
    second = Engine(
        llm=scripted({"text": "7, counted"}),
        tools=TOOLS,
        store=SQLiteStore(tmp_path / "ctx.db"),
        clock=FakeClock(),
        ids=SequentialIds(prefix="b-"),
    )
    async with second:
        [info] = await second.children(parent)
        assert (info.context_id, info.title, info.finished) == (child.context_id, "Counter", False)
        assert (await second.get_context(child.context_id)).config.tools == ["lookup"]
        done = await second.finish(child.context_id, keep=True)
        assert done.summary == "7, counted"
    third = Engine(store=url, clock=FakeClock(), ids=SequentialIds(prefix="c-"))
    async with third:
        [info] = await third.children(parent)
        assert info.finished
        ctx = await third.get_context(parent)
        assert (
            ctx.message_pool[done.message_id].message.metadata.extra[SUMMARY_KEY]["child_id"]
            == child.context_id
        )
        await verify(third, parent)
        with pytest.raises(SubContextError):
            await third.send(child.context_id, "more")
        assert await third.delete_context(parent) == [child.context_id, parent]


async def test_not_at_rest_parent_is_refused(made: kit.Made, store_url: str | None) -> None:
    engine = made.engine
    parent = await engine.create_context()
    ctx = await engine.get_context(parent)
    ctx.current_state = "ExecutingTools"  # as a crash would leave it
    await engine.unload(parent)
    store = engine.store
    await store.delete(parent)
    await store.create(ctx)
    with pytest.raises(NotAtRest):
        await engine.spawn(parent, "t")
    assert [s.id for s in await store.list_contexts()] == [parent]


# --------------------------------------------------------------------------- the sub-task tool


def research_engine(store_url: str | None, *answers: dict[str, Any], **spec: Any) -> kit.Made:
    research = subtask(
        "research",
        "Research a question in a helper conversation.",
        system_prompt="You research.",
        tools=["lookup"],
        **spec,
    )
    return kit.make_engine(list(answers), tools=[*TOOLS, research], store=store_url)


CALL_RESEARCH = {"tool_calls": [{"id": "r1", "name": "research", "arguments": {"task": "Find k"}}]}


async def test_the_subtask_tool_runs_a_child_and_returns_its_summary(
    store_url: str | None,
) -> None:
    RAN.clear()
    m = research_engine(
        store_url,
        CALL_RESEARCH,  # the parent's model calls the tool
        {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"key": "k"}}]},  # child
        {"text": "k is 'value of k'."},  # the child's answer
        {"text": "Summary: k has a value."},  # the summary
        {"text": "k has a value."},  # the parent's answer
    )
    async with m.engine as engine:
        parent = await engine.create_context(system_prompt="You plan.")
        turn = await engine.send(parent, "What is k?")
        assert turn.state is State.IDLE and turn.text == "k has a value."
        assert RAN == ["lookup:k"]
        requests = m.llm.requests
        child_id = requests[1].context_id
        assert child_id != parent and requests[2].context_id == child_id
        assert [d["function"]["name"] for d in requests[1].tools] == ["lookup"]
        assert requests[1].messages[0] == {"role": "system", "content": "You research."}
        assert requests[3].messages[-1]["content"] == DEFAULT_SUMMARY_PROMPT
        assert requests[4].context_id == parent
        assert requests[4].messages[-1]["role"] == "tool"
        assert requests[4].messages[-1]["content"] == "Summary: k has a value."
        ctx = await engine.get_context(parent)
        [result] = [n.message.tool_result for n in ctx.history() if n.message.tool_result]
        assert result.success and result.result == "Summary: k has a value."
        with pytest.raises(ContextNotFound):
            await engine.get_context(child_id)
        assert await engine.children(parent) == []
        await verify(engine, parent)


async def test_the_subtask_tool_can_keep_its_child(store_url: str | None) -> None:
    m = research_engine(
        store_url,
        CALL_RESEARCH,
        {"text": "found it"},
        {"text": "done"},
        summarizer=FinalAnswer(),
        keep=True,
    )
    async with m.engine as engine:
        parent = await engine.create_context()
        turn = await engine.send(parent, "go")
        assert turn.text == "done"
        [info] = await engine.children(parent)
        assert info.finished and info.title == "research" and info.state == "Idle"
        child = await engine.get_context(info.context_id)
        assert child.config.tools == ["lookup"]
        assert (await engine.steps(info.context_id))[-1].trigger == Change.ARCHIVED
        await verify(engine, info.context_id)


async def test_a_subtask_child_that_does_not_finish_is_an_error_result(
    store_url: str | None,
) -> None:
    m = research_engine(
        store_url,
        CALL_RESEARCH,
        {"error": {"status": 400, "message": "bad request"}},  # the child fails
        {"text": "the research failed"},
    )
    async with m.engine as engine:
        parent = await engine.create_context()
        turn = await engine.send(parent, "go")
        assert turn.state is State.IDLE and turn.text == "the research failed"
        ctx = await engine.get_context(parent)
        [result] = [n.message.tool_result for n in ctx.history() if n.message.tool_result]
        assert not result.success
        assert "PermanentFailure" in result.result["error"]
        [info] = await engine.children(parent)
        assert info.state == "PermanentFailure" and not info.finished
        await verify(engine, parent)


async def test_the_subtask_tool_outside_an_engine_fails_cleanly() -> None:
    tool_ = subtask("research", "r")
    outcome = await tool_.run({"task": "x"})
    assert not outcome.success and "inside an engine" in outcome.result["error"]
    with pytest.raises(Exception) as bad:
        subtask("research", "r", tools="lookup")  # type: ignore[arg-type]
    assert "tool names" in str(bad.value)


# --------------------------------------------------------------------------- a child that waits


def approval_tools() -> list[Any]:
    research = subtask(
        "research", "Research in a helper.", tools=["publish"], summarizer=FinalAnswer()
    )
    return [*TOOLS, research]


PARENT_CALLS = {
    "tool_calls": [
        {"id": "r1", "name": "research", "arguments": {"task": "Publish the note"}},
        {"id": "l1", "name": "lookup", "arguments": {"key": "k"}},
    ]
}
CHILD_CALL = {"tool_calls": [{"id": "p1", "name": "publish", "arguments": {"text": "note"}}]}


async def test_a_waiting_child_surfaces_its_calls_on_the_parent(store_url: str | None) -> None:
    RAN.clear()
    llm = scripted(PARENT_CALLS, CHILD_CALL, {"text": "Published the note."}, {"text": "All done."})
    async with Engine(
        llm=llm, tools=approval_tools(), store=store_url, clock=FakeClock(), ids=SequentialIds()
    ) as engine:
        parent = await engine.create_context()
        turn = await engine.send(parent, "Publish and look up")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert [c.id for c in turn.pending_tool_calls] == ["p1"]  # the child's call
        assert RAN == ["lookup:k"]  # the other call of the batch ran once
        ctx = await engine.get_context(parent)
        [r1] = [c for c in ctx.pending_tool_calls()]
        assert r1.id == "r1" and r1.reason is not None and "sub-context" in r1.reason
        [info] = await engine.children(parent)
        assert info.state == "AwaitingToolApproval" and info.title == "research"
        assert (await engine.trace(parent))[-2:] == [
            State.EXECUTING_TOOLS,
            State.AWAITING_TOOL_APPROVAL,
        ]
        assert (await engine.steps(parent))[-1].trigger == "subtask_waits"
        # the parent's resume keeps showing the child's calls
        assert [c.id for c in (await engine.resume(parent)).pending_tool_calls] == ["p1"]
        # a decision on the parent goes through the routing, one on the child does not
        assert not no_child_waits(engine._d, parent)
        assert no_child_waits(engine._d, info.context_id)

        turn = await engine.approve(parent, "p1")
        assert turn.state is State.IDLE and turn.text == "All done."
        assert RAN == ["lookup:k"]  # nothing ran twice
        ctx = await engine.get_context(parent)
        results = {
            n.message.tool_result.request_id: n.message.tool_result
            for n in ctx.history()
            if n.message.tool_result is not None
        }
        assert results["r1"].success and results["r1"].result == "Published the note."
        assert results["l1"].result == "value of k"
        assert await engine.children(parent) == []
        records = await verify(engine, parent)
        waits = next(r for r in records if r.trigger == "subtask_waits")
        assert waits.tool_results == ("l1",) and waits.actor == "system"


async def test_a_denied_child_call_lets_the_child_and_parent_go_on() -> None:
    llm = scripted(PARENT_CALLS, CHILD_CALL, {"text": "Not published."}, {"text": "It was denied."})
    async with Engine(
        llm=llm, tools=approval_tools(), clock=FakeClock(), ids=SequentialIds()
    ) as engine:
        parent = await engine.create_context()
        await engine.send(parent, "Publish and look up")
        turn = await engine.deny(parent, "p1", "not today")
        assert turn.state is State.IDLE and turn.text == "It was denied."
        ctx = await engine.get_context(parent)
        [r1] = [
            n.message.tool_result
            for n in ctx.history()
            if n.message.tool_result and n.message.tool_result.request_id == "r1"
        ]
        assert r1 is not None and r1.result == "Not published."
        await verify(engine, parent)


async def test_a_batch_cancelled_after_its_child_waits_leaves_no_wait_behind() -> None:
    """A sub-task call whose child waits, in a batch cancelled before it ends:
    the next batch of the parent is not taken for one that waits for it."""
    child_waits, stalled = anyio.Event(), anyio.Event()

    class Noted(dict[str, Any]):
        """The host's waits, telling when the first is noted."""

        def setdefault(self, key: str, default: Any = None) -> Any:
            child_waits.set()
            return super().setdefault(key, default)

    @tool
    async def stall() -> str:
        """Run until cancelled, once the batch's child waits."""
        await child_waits.wait()
        stalled.set()
        await anyio.sleep_forever()
        return "never"

    llm = scripted(
        {
            "tool_calls": [
                {"id": "r1", "name": "research", "arguments": {"task": "Publish the note"}},
                {"id": "s1", "name": "stall", "arguments": {}},
            ]
        },
        CHILD_CALL,
        {"tool_calls": [{"id": "l2", "name": "lookup", "arguments": {"key": "k"}}]},
        {"text": "k has a value."},
    )
    async with Engine(
        llm=llm, tools=[*approval_tools(), stall], clock=FakeClock(), ids=SequentialIds()
    ) as engine:
        host: Any = engine._d.subtask_host
        host.waiting = Noted()
        parent = await engine.create_context()
        cancelled, sent = await kit.cancel_while_running(engine, parent, "Publish", stalled)
        assert cancelled.state is State.IDLE and sent[0].state is State.IDLE
        assert parent not in host.waiting
        turn = await engine.send(parent, "Look k up")
        assert turn.state is State.IDLE and turn.text == "k has a value."
        assert [s.trigger for s in await engine.steps(parent)].count("subtask_waits") == 0
        await verify(engine, parent)


async def test_a_waiting_child_survives_a_new_engine(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ctx.db'}"
    first = Engine(
        llm=scripted(PARENT_CALLS, CHILD_CALL),
        tools=approval_tools(),
        store=url,
        clock=FakeClock(),
        ids=SequentialIds(),
    )
    async with first:
        parent = await first.create_context()
        await first.send(parent, "Publish and look up")
    second = Engine(
        llm=scripted({"text": "Published."}, {"text": "Done."}),
        tools=approval_tools(),
        store=url,
        clock=FakeClock(),
        ids=SequentialIds(prefix="b-"),
    )
    async with second:
        assert [c.id for c in (await second.resume(parent)).pending_tool_calls] == ["p1"]
        with pytest.raises(Exception) as unknown:
            await second.approve(parent, "nope")
        assert "nope" in str(unknown.value)
        turn = await second.approve(parent, "p1")
        assert turn.state is State.IDLE and turn.text == "Done."
        await verify(second, parent)


async def test_a_question_of_a_waiting_child_is_answered_on_the_parent() -> None:
    research = subtask(
        "research", "Research in a helper.", tools=["ask_user"], summarizer=FinalAnswer()
    )
    question = {"question": "Which city?", "choices": ["Oslo", "Rome"]}
    llm = scripted(
        {"tool_calls": [{"id": "r1", "name": "research", "arguments": {"task": "Pick a city"}}]},
        {"tool_calls": [{"id": "q1", "name": "ask_user", "arguments": question}]},
        {"text": "The user picked Rome."},
        {"text": "Rome it is."},
    )
    async with Engine(
        llm=llm, tools=[research, ask_user], clock=FakeClock(), ids=SequentialIds()
    ) as engine:
        parent = await engine.create_context()
        turn = await engine.send(parent, "Where do we go?")
        assert turn.state is State.AWAITING_TOOL_APPROVAL
        assert [q.call_id for q in turn.questions] == ["q1"]
        assert turn.questions[0].choices == ("Oslo", "Rome")
        turn = await engine.answer(parent, "q1", "Rome")
        assert turn.state is State.IDLE and turn.text == "Rome it is."
        assert await engine.children(parent) == []
        await verify(engine, parent)
