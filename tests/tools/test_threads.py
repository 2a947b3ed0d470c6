"""Sync tools run in a worker thread of their own limiter, with the caller's
context variables; ``inline=True`` keeps a cheap one in the loop's thread; a
sync summarizer runs in a thread too; an approval policy is asked in the
loop's thread, as the decision it is (README, "Tools")."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from contextvars import ContextVar
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from kit import make_engine  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm import Engine
from turnfsm.model import ChatContext, ToolCallRequest
from turnfsm.testing import ScriptedLLM
from turnfsm.tools import ToolOutcome, ToolRegistry, current_call, run_calls, tool, tool_threads

pytestmark = pytest.mark.anyio

REQUEST_ID: ContextVar[str] = ContextVar("request_id", default="-")


def call(name: str, arguments: dict[str, Any], cid: str = "c1") -> ToolCallRequest:
    return ToolCallRequest(id=cid, tool_name=name, arguments=arguments)


async def test_a_sleeping_sync_tool_leaves_the_loop_free() -> None:
    entered = threading.Event()
    release = threading.Event()
    ticks: list[int] = []

    @tool(timeout=None)
    def sleepy() -> list[int]:
        entered.set()
        release.wait(60)  # let go by the loop's other task (or, frozen, after 60 s)
        return list(ticks)

    async with anyio.create_task_group() as group:

        async def tick() -> None:
            # the loop runs other tasks while the tool sleeps; then lets it go
            await anyio.to_thread.run_sync(entered.wait, 60)
            for i in range(3):
                ticks.append(i)
                await anyio.lowlevel.checkpoint()
            release.set()

        group.start_soon(tick)
        outcome = await sleepy.run({})
    assert outcome == ToolOutcome(True, [0, 1, 2])  # what the tool saw when it woke


async def test_the_tool_sees_the_callers_context_variables() -> None:
    seen: dict[str, Any] = {}

    @tool
    def where() -> str:
        running = current_call()
        seen["call"] = None if running is None else running.id
        seen["request_id"] = REQUEST_ID.get()
        seen["thread"] = threading.get_ident()
        return "ok"

    token = REQUEST_ID.set("req-7")
    try:
        outcomes = await run_calls(ToolRegistry([where]), [call("where", {}, "call-9")])
    finally:
        REQUEST_ID.reset(token)
    assert outcomes == [ToolOutcome(True, "ok")]
    assert seen == {"call": "call-9", "request_id": "req-7", "thread": seen["thread"]}
    assert seen["thread"] != threading.get_ident()


async def test_the_tool_runs_inside_its_tracing_span() -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inside: list[int] = []

    @tool
    def get_weather(city: str) -> dict[str, Any]:
        inside.append(trace.get_current_span().get_span_context().span_id)
        return {"city": city}

    answers = [
        {"tool_calls": [{"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}]},
        {"text": "Sunny."},
    ]
    async with make_engine(answers, tools=[get_weather], tracer_provider=provider).engine as e:
        cid = await e.create_context()
        await e.send(cid, "Weather in Oslo?")
    provider.shutdown()
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool get_weather"]
    assert span.context is not None
    assert inside == [span.context.span_id]


async def test_tool_threads_are_apart_from_anyios_default_limiter() -> None:
    """Every token of anyio's default limiter taken (as a store's or the
    server's work in threads takes them): a sync tool still runs; and the
    tools' own bound holds the second call until the first is done."""
    default = anyio.to_thread.current_default_thread_limiter()
    saved = default.total_tokens
    default.total_tokens = 1
    order: list[str] = []
    first_in = threading.Event()
    release = threading.Event()

    @tool(timeout=None)
    def job(name: str) -> str:
        order.append(f"{name} in")
        if name == "a":
            first_in.set()
            release.wait(60)
        order.append(f"{name} out")
        return name

    holder = threading.Event()
    try:
        tool_threads().total_tokens = 1
        async with anyio.create_task_group() as group:
            # the default limiter's only token, held until the end
            group.start_soon(anyio.to_thread.run_sync, holder.wait, 60)
            await anyio.wait_all_tasks_blocked()
            assert default.borrowed_tokens == 1
            results: dict[str, ToolOutcome] = {}
            b_done = anyio.Event()

            async def run(name: str) -> None:
                results[name] = await job.run({"name": name})
                if name == "b":
                    b_done.set()

            group.start_soon(run, "a")
            await anyio.to_thread.run_sync(first_in.wait, 60, limiter=anyio.CapacityLimiter(1))
            group.start_soon(run, "b")
            await anyio.wait_all_tasks_blocked()
            assert tool_threads().borrowed_tokens == 1  # b waits for a's thread
            assert order == ["a in"]
            release.set()
            await b_done.wait()
            holder.set()
    finally:
        release.set()
        holder.set()
        default.total_tokens = saved
    assert order == ["a in", "a out", "b in", "b out"]
    assert results == {"a": ToolOutcome(True, "a"), "b": ToolOutcome(True, "b")}


async def test_a_sync_summarizer_runs_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()
    where: list[int] = []

    def summary(child: ChatContext) -> str:
        where.append(threading.get_ident())
        return f"{len(child.history())} messages"

    async def asummary(child: ChatContext) -> str:
        where.append(threading.get_ident())
        return "async summary"

    engine = Engine(llm=ScriptedLLM([{"text": "done"}, {"text": "done again"}]))
    async with engine:
        parent = await engine.create_context()
        child = (await engine.spawn(parent, "task one")).context_id
        assert (await engine.finish(child, summarizer=summary)).summary == "2 messages"
        child = (await engine.spawn(parent, "task two")).context_id
        assert (await engine.finish(child, summarizer=asummary)).summary == "async summary"
    assert where[0] != loop_thread
    assert where[1] == loop_thread


async def test_an_approval_policy_is_asked_in_the_loops_thread() -> None:
    """A policy is a decision, made with the answer (no I/O): it runs where
    the answer is processed, and a policy that cannot decide at once says
    "required" and leaves it to a human."""
    loop_thread = threading.get_ident()
    asked: list[int] = []

    def policy(request: ToolCallRequest) -> str:
        asked.append(threading.get_ident())
        return "auto"

    @tool(approval=policy)
    def lookup(city: str) -> str:
        return city

    answers = [
        {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"city": "Oslo"}}]},
        {"text": "Found."},
    ]
    async with make_engine(answers, tools=[lookup]).engine as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Oslo?")
    assert turn.state == "Idle"
    assert asked == [loop_thread]


EXITS_WHILE_A_TOOL_SLEEPS = textwrap.dedent(
    """
    import sys, threading
    import anyio
    from turnfsm import Engine, tool
    from turnfsm.testing import ScriptedLLM

    entered = threading.Event()

    @tool(timeout=None)
    def forever() -> str:
        entered.set()
        threading.Event().wait()  # never returns
        return "never"

    llm = ScriptedLLM([{"tool_calls": [{"id": "c1", "name": "forever", "arguments": {}}]}])

    async def main() -> None:
        async with Engine(llm=llm, tools=[forever]) as engine:
            cid = await engine.create_context()
            async with anyio.create_task_group() as group:
                group.start_soon(engine.send, cid, "go")
                await anyio.to_thread.run_sync(entered.wait)
                group.cancel_scope.cancel()  # as a stopping server cancels its turns
        print("stopped", flush=True)

    anyio.run(main)
    """
)


def test_a_process_exits_without_waiting_for_a_sleeping_tool() -> None:
    """The tool's thread is a daemon: a process that stops (``turnfsm serve`` on
    SIGTERM) exits, as after a kill, instead of waiting for the tool to return
    (the interpreter joins anyio's worker threads at exit)."""
    done = subprocess.run(
        [sys.executable, "-c", EXITS_WHILE_A_TOOL_SLEEPS],
        capture_output=True,
        text=True,
        timeout=120,  # without daemon threads: never exits, and this fails
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "stopped\n"
