"""Property tests: random legal and illegal call sequences against the engine.

A hypothesis ``RuleBasedStateMachine`` drives one conversation: send (with LLM
answers drawn by hypothesis: text, chunks, cancels mid-stream, tool calls to
auto / required / deny / failing / unknown tools, transient and permanent
errors, broken streams, questions, sub-tasks run in child contexts), approve,
deny, answer, cancel, retry, reset, fork (with or without prompts of its own),
switch, config updates, mode switches and branch prompts, with ids that may be
pending, decided or unknown. The engine runs in an
``anyio`` blocking portal (one event loop thread per example); the scripted LLM
is a handler that plays the answers the last rule queued.

Invariants after every step:

* every committed step is an edge of ``TRANSITIONS`` and the steps chain; the
  change records between them move nothing and come with a ContextChanged;
* the context rests (Idle, AwaitingToolApproval, PermanentFailure);
* every tool call has exactly one result, except, at AwaitingToolApproval, the
  open calls of the newest batch; the same in every child a sub-task left;
* each request the LLM got is the active branch's prompts plus the
  from-scratch chat build of the stored history, and is a valid provider
  sequence;
* a refused call changes nothing that is stored;
* the events a subscriber saw have seqs 1, 2, 3, ... with no gap;
* the context survives a JSON round trip unchanged, and the store holds exactly
  what the engine holds.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
import tenacity
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kit import examples  # tests/ is on sys.path (no tests/__init__.py)

import turnfsm.model
from turnfsm import (
    ChatContext,
    Engine,
    Event,
    FinalAnswer,
    IllegalTransition,
    InvalidInput,
    Mode,
    RetryPolicy,
    Role,
    State,
    Turn,
    ask_user,
    records,
    subtask,
    tool,
)
from turnfsm.adapters.llm import LLMRequest
from turnfsm.engine import UNSET
from turnfsm.enhancers._builtin import mode_block
from turnfsm.errors import BranchError, NotAQuestion, ToolCallNotPending, UnknownToolCall
from turnfsm.records import Branch, MessageType
from turnfsm.states import CHANGES, RESTING, TRANSITIONS
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

EDGES = {(src.value, t.trigger.value, t.dest.value) for t in TRANSITIONS for src in t.sources}
RESTING_NAMES = {s.value for s in RESTING}
SYSTEM = "You are a property test."
MAX_ITERATIONS = 3

TOOL_NAMES = ["auto_t", "req_t", "deny_t", "fail_t", "ghost", "ask_user", "sub_t"]
ALL_TOOLS = ["auto_t", "req_t", "deny_t", "fail_t", "ask_user", "sub_t"]
MODES = [
    Mode(name="chat"),
    Mode(
        name="plan",
        instructions="Plan only.",
        tools=["auto_t", "deny_t", "ask_user"],
        approval={"auto_t": "required"},
        answer_type=MessageType.PLAN,
    ),
]
SUB_TOOLS = ["auto_t", "fail_t"]

# --------------------------------------------------------------------------- answers

words = st.sampled_from(["a", "b", "hello", " ", "ünï", "done."])
error_specs = st.sampled_from(
    [
        {"status": 503},
        {"status": 429, "retry_after": 0.1},
        {"kind": "timeout"},
        {"kind": "connection"},
        {"status": 400},
        {"status": 422},
    ]
)


@st.composite
def chunk_answer(draw: st.DrawFn) -> tuple[Any, ...]:
    chunks = draw(st.lists(words, min_size=1, max_size=3))
    cancel = draw(st.none() | st.integers(0, len(chunks)))
    return ("chunks", chunks, cancel)


@st.composite
def broken_answer(draw: st.DrawFn) -> tuple[Any, ...]:
    chunks = draw(st.lists(words, min_size=1, max_size=3))
    return ("broken", chunks, draw(st.integers(0, len(chunks))), draw(error_specs))


tool_answer = st.tuples(
    st.just("tools"),
    st.lists(st.sampled_from(TOOL_NAMES), min_size=1, max_size=3),
    st.booleans(),
)
needs_human = st.tuples(
    st.just("tools"),
    st.lists(st.sampled_from(TOOL_NAMES), max_size=2).map(lambda names: ["req_t", *names]),
    st.booleans(),
)
answers = st.one_of(
    st.tuples(st.just("text"), words),
    chunk_answer(),
    tool_answer,
    needs_human,
    needs_human,
    st.tuples(st.just("error"), error_specs),
    broken_answer(),
)
answer_lists = st.lists(answers, max_size=4)


# --------------------------------------------------------------------------- helpers

prompt_args = st.fixed_dictionaries(
    {},
    optional={
        "system_prompt": st.sampled_from([None, "", "sys B", SYSTEM]),
        "user_prompt": st.sampled_from([None, "", "be brief"]),
    },
)


def prompts_of(branch: Branch) -> tuple[str | None, str | None]:
    return (branch.system_prompt.content if branch.system_prompt else None, branch.user_prompt)


def expected_prompts(source: Branch, given: dict[str, Any]) -> tuple[str | None, str | None]:
    """A branch's prompts after ``given`` (left out: kept; None or "": none)."""
    system, user = prompts_of(source)
    if "system_prompt" in given:
        system = given["system_prompt"] or None
    if "user_prompt" in given:
        user = given["user_prompt"] or None
    return system, user


def call_results(ctx: ChatContext, branch: str) -> tuple[list[Any], dict[str, int]]:
    """The calls asked on ``branch`` (in order) and how many results each has."""
    calls: list[Any] = []
    counts: dict[str, int] = {}
    for node in ctx.history(branch):
        msg = node.message
        for c in msg.tool_calls or ():
            assert c.id not in counts, f"call id {c.id} asked twice"
            calls.append(c)
            counts[c.id] = 0
        if msg.tool_result is not None:
            rid = msg.tool_result.request_id
            assert rid in counts, f"result for {rid} before (or without) its call"
            counts[rid] += 1
    return calls, counts


def check_provider_sequence(messages: list[dict[str, Any]]) -> None:
    """Every assistant message with tool_calls is followed by one tool message per call."""
    i = 0
    while i < len(messages):
        m = messages[i]
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            following = [x.get("tool_call_id") for x in messages[i + 1 : i + 1 + len(ids)]]
            assert following == ids, (ids, following)
            i += 1 + len(ids)
            continue
        assert m["role"] != "tool", f"tool message without its call at {i}"
        i += 1


def prefix_has_open_calls(ctx: ChatContext, at: int) -> bool:
    nodes = ctx.history()[: at + 1]
    asked = {c.id for n in nodes for c in n.message.tool_calls or ()}
    answered = {n.message.tool_result.request_id for n in nodes if n.message.tool_result}
    return bool(asked - answered)


# --------------------------------------------------------------------------- the machine


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._portal_cm = start_blocking_portal("asyncio")
        self.portal = self._portal_cm.__enter__()
        self.queue: deque[tuple[Any, ...]] = deque()
        self.ids = itertools.count(1)
        self.runs: list[str] = []
        self.mismatches: list[str] = []
        self.requests_checked = 0
        self.events: list[Event] = []
        self.llm = ScriptedLLM(self._answer)
        self.engine = Engine(
            llm=self.llm,
            tools=self._tools(),
            modes=MODES,
            clock=FakeClock(),
            ids=SequentialIds(),
            max_iterations=MAX_ITERATIONS,
            retry=RetryPolicy(max_attempts=2, wait=tenacity.wait_fixed(0.25)),
        )
        self.cid: str = self.portal.call(self._create)
        self.reader = self.portal.start_task_soon(self._read)
        self.last_version = 0
        self.state = "Idle"
        self.last_turn: Turn | None = None
        self.mode = "chat"

    # -- plumbing

    def _tools(self) -> list[Any]:
        runs = self.runs

        def make(name: str, approval: str, fail: bool = False) -> Any:
            def fn() -> str:
                runs.append(name)
                if fail:
                    raise RuntimeError(f"{name} failed")
                return f"{name} ok"

            fn.__doc__ = f"{name} tool"
            return tool(fn, name=name, approval=approval)

        return [
            make("auto_t", "auto"),
            make("req_t", "required"),
            make("deny_t", "deny"),
            make("fail_t", "auto", fail=True),
            ask_user,
            subtask(
                "sub_t", "runs a sub-task", tools=SUB_TOOLS, summarizer=FinalAnswer(), keep=True
            ),
        ]

    async def _create(self) -> str:
        cid = await self.engine.create_context(system_prompt=SYSTEM)
        self.sub = self.engine.subscribe(cid)
        return cid

    async def _read(self) -> None:
        async for ev in self.sub:
            self.events.append(ev)

    async def _answer(self, request: LLMRequest) -> dict[str, Any]:
        # Checks are recorded, not asserted: an exception here would become a failed
        # LLM call inside the engine.
        ctx = await self.engine.get_context(request.context_id)
        branch = ctx.active_branch
        prompt = "\n\n".join(
            p
            for p in (
                branch.system_prompt.content if branch.system_prompt else None,
                branch.user_prompt,
                mode_block("plan", "Plan only.") if ctx.config.mode == "plan" else None,
            )
            if p
        )
        expected = [
            *([{"role": "system", "content": prompt}] if prompt else []),
            *turnfsm.model.to_chat_messages(n.message for n in ctx.history()),
        ]
        if request.messages != expected:
            self.mismatches.append(f"request {len(self.llm.requests)} != stored history")
        if ctx.parent_id is not None:
            offered = SUB_TOOLS
        elif ctx.config.mode == "plan":
            offered = ["auto_t", "deny_t", "ask_user"]
        else:
            offered = ALL_TOOLS
        if [t["function"]["name"] for t in request.tools] != offered:
            self.mismatches.append("tools offered")
        if not self.queue:
            return {"text": "fallback"}
        spec = self.queue.popleft()
        kind = spec[0]
        if kind == "text":
            return {"text": spec[1]}
        if kind == "chunks":
            out: dict[str, Any] = {"chunks": spec[1]}
            if spec[2] is not None:
                out["cancel_after"] = spec[2]
            return out
        if kind == "tools":
            args = {"ask_user": {"question": "which?"}, "sub_t": {"task": "do it"}}
            calls = [
                {"id": f"call_{next(self.ids)}", "name": n, "arguments": args.get(n, {})}
                for n in spec[1]
            ]
            out = {"tool_calls": calls}
            if spec[2]:
                out["text"] = "using tools"
            return out
        if kind == "error":
            return {"error": spec[1]}
        assert kind == "broken"
        return {"chunks": spec[1], "fail_after": spec[2], "error": spec[3]}

    def ctx(self) -> ChatContext:
        return self.portal.call(self.engine.get_context, self.cid)

    def run(self, fn: Callable[..., Any], *args: Any) -> Turn:
        turn = self.portal.call(fn, *args)
        assert isinstance(turn, Turn)
        self.last_turn = turn
        event(f"{fn.__name__} -> {turn.state} ({turn.stop_reason})")
        assert turn.state.value in RESTING_NAMES
        ctx = self.ctx()
        assert ctx.current_state == turn.state
        assert ctx.version >= self.last_version
        self.last_version = ctx.version
        self.state = ctx.current_state
        return turn

    def refused(self, error: type[BaseException], fn: Callable[..., Any], *args: Any) -> None:
        before = self.ctx()
        steps = self.portal.call(self.engine.steps, self.cid)
        runs = list(self.runs)
        n_requests = len(self.llm.requests)
        try:
            self.portal.call(fn, *args)
        except error:
            pass
        else:
            raise AssertionError(f"{fn.__name__}{args} should raise {error.__name__}")
        event(f"refused: {error.__name__}")
        after = self.ctx()
        assert after == before
        assert (after.version, after.current_state) == (before.version, before.current_state)
        assert self.portal.call(self.engine.steps, self.cid) == steps
        assert self.runs == runs
        assert len(self.llm.requests) == n_requests

    def questions(self) -> list[str]:
        """Pending calls that are questions (on this context, or from a waiting child)."""
        ctx = self.ctx()
        asked = [c.id for c in ctx.pending_tool_calls() if c.tool_name == "ask_user"]
        turn = self.last_turn
        if turn is not None and turn.state == State.AWAITING_TOOL_APPROVAL:
            asked += [q.call_id for q in turn.questions if q.call_id not in asked]
        return asked

    def known_call_ids(self, ctx: ChatContext) -> list[str]:
        return [c.id for n in ctx.message_pool.values() for c in n.message.tool_calls or ()]

    def teardown(self) -> None:
        try:
            self.portal.call(self.engine.aclose)
            self.reader.result(timeout=5)
            self.portal.call(self.sub.aclose)
        finally:
            self._portal_cm.__exit__(None, None, None)

    # -- rules

    @rule(
        queued=answer_lists,
        text=st.sampled_from(["hi", "go on", "what?"]),
        role=st.sampled_from(["user", "frontend_operator"]),
    )
    def send(self, queued: list[tuple[Any, ...]], text: str, role: str) -> None:
        before = self.ctx()
        self.queue = deque(queued)
        turn = self.run(self.engine.send, self.cid, text, role)
        assert turn.states[0] == State.PROCESSING_USER_MESSAGE
        ctx = self.ctx()
        if before.current_state == "AwaitingToolApproval":
            # the pending calls were closed first: nothing of that batch is open now
            closed = {c.id for c in before.open_tool_calls()}
            _, counts = call_results(ctx, ctx.active_branch_name)
            assert all(counts[c] == 1 for c in closed)
        user_msgs = [
            n for n in ctx.history() if n.message.role in (Role.USER, Role.FRONTEND_OPERATOR)
        ]
        assert user_msgs[-1].message.text == text

    @precondition(lambda self: self.mode == "chat")
    @rule(first=needs_human, queued=answer_lists)
    def send_needing_approval(self, first: tuple[Any, ...], queued: list[tuple[Any, ...]]) -> None:
        self.queue = deque([first, *queued])
        turn = self.run(self.engine.send, self.cid, "use a tool", "user")
        assert turn.states[:3] == (
            State.PROCESSING_USER_MESSAGE,
            State.AWAITING_LLM_RESPONSE,
            State.PROCESSING_LLM_RESPONSE,
        )
        assert turn.state == State.AWAITING_TOOL_APPROVAL
        assert turn.stop_reason == "awaiting_approval"
        assert turn.pending_tool_calls[0].tool_name == "req_t"

    @precondition(lambda self: self.state == "AwaitingToolApproval")
    @rule(data=st.data(), queued=answer_lists)
    def approve_pending(self, data: st.DataObject, queued: list[tuple[Any, ...]]) -> None:
        pending = [c.id for c in self.ctx().pending_tool_calls()]
        approvable = [c for c in pending if c not in self.questions()]
        if not approvable:
            return
        ids = data.draw(st.lists(st.sampled_from(approvable), min_size=1, unique=True))
        self.queue = deque(queued)
        turn = self.run(self.engine.approve, self.cid, ids)
        if set(ids) == set(pending):
            assert turn.states[0] == State.EXECUTING_TOOLS
        else:
            assert turn.states == ()
            assert turn.state == State.AWAITING_TOOL_APPROVAL
            assert {c.id for c in turn.pending_tool_calls} == set(pending) - set(ids)

    @precondition(lambda self: self.state == "AwaitingToolApproval")
    @rule(queued=answer_lists)
    def approve_all(self, queued: list[tuple[Any, ...]]) -> None:
        for question in self.questions():  # a question is answered, never approved
            self.run(self.engine.answer, self.cid, question, "yes")
            if self.state != "AwaitingToolApproval":
                return
        ctx = self.ctx()
        pending = [c.id for c in ctx.pending_tool_calls()]
        to_run = [c.tool_name for c in ctx.open_tool_calls() if c.approval_status != "Denied"]
        runs = len(self.runs)
        self.queue = deque(queued)
        turn = self.run(self.engine.approve, self.cid, pending)
        assert turn.states[:2] == (State.EXECUTING_TOOLS, State.AWAITING_LLM_RESPONSE)
        # the approved and auto-approved calls of the batch ran (unknown tools run nothing);
        # later tool rounds of this call may add more runs
        ran = self.runs[runs:]
        # (unknown tools, questions and sub-tasks append no run)
        expected = [n for n in to_run if n not in ("ghost", "ask_user", "sub_t")]
        assert sorted(ran[: len(expected)]) == sorted(expected)

    @precondition(lambda self: self.state == "AwaitingToolApproval")
    @rule(data=st.data(), queued=answer_lists, text=st.sampled_from(["yes", "Paris"]))
    def answer_question(
        self, data: st.DataObject, queued: list[tuple[Any, ...]], text: str
    ) -> None:
        questions = self.questions()
        if not questions:
            pending = [c.id for c in self.ctx().pending_tool_calls()]
            if pending:  # not a question: refused, nothing changes
                self.refused(NotAQuestion, self.engine.answer, self.cid, pending[0], text)
            return
        call_id = data.draw(st.sampled_from(questions))
        self.queue = deque(queued)
        self.run(self.engine.answer, self.cid, call_id, text)
        after = self.ctx()
        results = [
            n.message.tool_result
            for n in after.message_pool.values()
            if n.message.tool_result and n.message.tool_result.request_id == call_id
        ]
        assert len(results) == 1 and results[0].success and results[0].result == text

    @precondition(lambda self: self.state != "AwaitingToolApproval")
    @rule(mode=st.sampled_from(["chat", "plan", "nope"]))
    def switch_mode(self, mode: str) -> None:
        if mode == "nope":
            refuse = functools.partial(self.engine.update_config, mode=mode)
            refuse.__name__ = "update_config"  # type: ignore[attr-defined]
            self.refused(InvalidInput, refuse, self.cid)
            return
        before = self.ctx()
        config = self.portal.call(functools.partial(self.engine.update_config, self.cid, mode=mode))
        assert config.mode == mode
        self.mode = mode
        after = self.ctx()
        assert after.version == before.version + (before.config.mode != mode)
        self.last_version = after.version

    @precondition(lambda self: self.state == "AwaitingToolApproval")
    @rule(data=st.data(), queued=answer_lists, reason=st.sampled_from(["", "no", "not now"]))
    def deny_pending(self, data: st.DataObject, queued: list[tuple[Any, ...]], reason: str) -> None:
        pending = [c.id for c in self.ctx().pending_tool_calls()]
        call_id = data.draw(st.sampled_from(pending))
        self.queue = deque(queued)
        turn = self.run(self.engine.deny, self.cid, call_id, reason)
        after = self.ctx()
        (denied,) = [
            c
            for n in after.message_pool.values()
            for c in n.message.tool_calls or ()
            if c.id == call_id
        ]
        assert (denied.approval_status, denied.decided_by) == ("Denied", "human")
        results = [
            n.message.tool_result
            for n in after.message_pool.values()
            if n.message.tool_result and n.message.tool_result.request_id == call_id
        ]
        if len(pending) > 1:
            assert turn.states == ()
            assert results == []
        else:  # the batch was resolved: the denied call got its result without running
            assert turn.states[0] == State.EXECUTING_TOOLS
            (res,) = results
            assert res.success is False
            assert res.result["status"] == "denied"
            if reason:
                assert reason in res.result["error"]

    @rule(data=st.data(), approve=st.booleans())
    def decide_not_pending(self, data: st.DataObject, approve: bool) -> None:
        ctx = self.ctx()
        pending = {c.id for c in ctx.pending_tool_calls()}
        decided = [i for i in self.known_call_ids(ctx) if i not in pending]
        call_id = data.draw(st.sampled_from(["no_such_call", *decided]))
        error = UnknownToolCall if call_id == "no_such_call" else ToolCallNotPending

        async def decide() -> Any:
            if approve:
                return await self.engine.approve(self.cid, [call_id])
            return await self.engine.deny(self.cid, call_id, "x")

        decide.__name__ = f"{'approve' if approve else 'deny'}({call_id})"
        self.refused(error, decide)

    @rule()
    def cancel(self) -> None:
        ctx = self.ctx()
        if ctx.current_state == "AwaitingToolApproval":
            open_calls = [c.id for c in ctx.open_tool_calls()]
            turn = self.run(self.engine.cancel, self.cid)
            assert turn.state == State.IDLE
            assert turn.stop_reason == "cancelled"
            after = self.ctx()
            for n in after.message_pool.values():
                r = n.message.tool_result
                if r is not None and r.request_id in open_calls:
                    assert r.success is False and r.result["status"] == "cancelled"
        else:
            self.refused(IllegalTransition, self.engine.cancel, self.cid)

    @rule(queued=answer_lists, retry=st.booleans())
    def recover(self, queued: list[tuple[Any, ...]], retry: bool) -> None:
        """``retry`` or ``reset``: legal only at PermanentFailure."""
        action = self.engine.retry if retry else self.engine.reset
        if self.ctx().current_state == "PermanentFailure":
            self.queue = deque(queued)
            turn = self.run(action, self.cid)
            if retry:
                assert turn.states[0] == State.AWAITING_LLM_RESPONSE
            else:
                assert list(turn.states) == [State.IDLE]
        else:
            self.refused(IllegalTransition, action, self.cid)

    @rule(name=st.sampled_from(["main", "alt", "other", ""]), data=st.data())
    def fork(self, name: str, data: st.DataObject) -> None:
        ctx = self.ctx()
        n = len(ctx.active_branch.message_ids)
        at = data.draw(st.integers(-2, n))
        prompts = data.draw(prompt_args)
        fork = functools.partial(self.engine.fork, **prompts)
        fork.__name__ = "fork"  # type: ignore[attr-defined]
        legal = (
            ctx.current_state in ("Idle", "PermanentFailure")
            and name
            and name not in ctx.branches
            and -1 <= at < n
            and not prefix_has_open_calls(ctx, at)
        )
        if legal:
            self.run(fork, self.cid, name, at)
            after = self.ctx()
            assert after.active_branch_name == name
            assert after.active_branch.message_ids == ctx.active_branch.message_ids[: at + 1]
            assert after.history(ctx.active_branch_name) == ctx.history()
            assert prompts_of(after.active_branch) == expected_prompts(ctx.active_branch, prompts)
        elif not name:  # not a branch name at all: refused as an argument
            self.refused(InvalidInput, fork, self.cid, name, at)
        else:
            self.refused(BranchError, fork, self.cid, name, at)

    @rule(name=st.sampled_from(["main", "alt", "other"]), prompts=st.data())
    def set_prompts(self, name: str, prompts: st.DataObject) -> None:
        ctx = self.ctx()
        given = prompts.draw(prompt_args)
        set_prompts = functools.partial(self.engine.set_branch_prompts, **given)
        if name not in ctx.branches:
            self.refused(BranchError, set_prompts, self.cid, name)
            return
        after = self.portal.call(set_prompts, self.cid, name)
        assert after == self.ctx()
        want = expected_prompts(ctx.branches[name], given)
        assert prompts_of(after.branches[name]) == want
        assert after.version == ctx.version + (want != prompts_of(ctx.branches[name]))
        assert after.current_state == ctx.current_state
        self.last_version = after.version

    @rule(
        model=st.none() | st.sampled_from(["m1", "m2"]),
        title=st.sampled_from([UNSET, None, "a title", "ünï"]),
        parameters=st.none() | st.sampled_from([{}, {"temperature": 0.5}]),
    )
    def update_config(self, model: str | None, title: Any, parameters: Any) -> None:
        ctx = self.ctx()
        given: dict[str, Any] = {"title": title}
        if model is not None:
            given["model"] = model
        if parameters is not None:
            given["parameters"] = parameters
        config = self.portal.call(functools.partial(self.engine.update_config, self.cid, **given))
        after = self.ctx()
        assert config == after.config
        update: dict[str, Any] = {}
        if model is not None:
            update["model_id"] = model
        if parameters is not None:
            update["parameters"] = parameters
        if title is not UNSET:
            update["title"] = title
        want = dataclasses.replace(ctx.config, **update)
        assert after.config == want
        assert after.version == ctx.version + (want != ctx.config)
        assert after.current_state == ctx.current_state
        self.last_version = after.version

    @rule(name=st.sampled_from(["main", "alt", "other"]))
    def switch(self, name: str) -> None:
        ctx = self.ctx()
        if ctx.current_state in ("Idle", "PermanentFailure") and name in ctx.branches:
            self.run(self.engine.switch_branch, self.cid, name)
            assert self.ctx().active_branch_name == name
        else:
            self.refused(BranchError, self.engine.switch_branch, self.cid, name)

    # -- invariants

    @invariant()
    def steps_are_declared_edges_that_chain(self) -> None:
        all_steps = self.portal.call(self.engine.steps, self.cid)
        prev = "Idle"
        steps = []
        for s in all_steps:
            if s.trigger in CHANGES:  # a change record: at rest, moving nothing
                assert s.from_state == s.to_state == prev, (prev, s)
                assert prev in RESTING_NAMES and s.detail, s
                continue
            steps.append(s)
            assert (s.from_state, s.trigger, s.to_state) in EDGES, s
            assert s.from_state == prev, (prev, s)
            prev = s.to_state
        ctx = self.ctx()
        assert ctx.current_state == prev
        assert ctx.current_state in RESTING_NAMES
        assert ctx.current_state == self.state
        trace = self.portal.call(self.engine.trace, self.cid)
        assert trace == ["Idle", *(s.to_state for s in steps)]

    @invariant()
    def every_child_call_has_one_result(self) -> None:
        for child in self.portal.call(self.engine.children, self.cid):
            ctx = self.portal.call(self.engine.get_context, child.context_id)
            assert ctx.parent_id == self.cid
            for branch in ctx.branches:
                calls, counts = call_results(ctx, branch)
                assert all(v <= 1 for v in counts.values()), counts
                missing = [c.id for c in calls if counts[c.id] == 0]
                if ctx.current_state == "AwaitingToolApproval":
                    assert missing == [c.id for c in ctx.open_tool_calls()]
                else:
                    assert missing == [], (ctx.current_state, missing)

    @invariant()
    def every_call_has_one_result(self) -> None:
        ctx = self.ctx()
        for branch in ctx.branches:
            calls, counts = call_results(ctx, branch)
            assert all(v <= 1 for v in counts.values()), counts
            missing = [c for c in calls if counts[c.id] == 0]
            if branch == ctx.active_branch_name and ctx.current_state == "AwaitingToolApproval":
                open_ids = [c.id for c in ctx.open_tool_calls()]
                assert [c.id for c in missing] == open_ids
                assert missing, "AwaitingToolApproval with nothing open"
                assert any(c.approval_status == "Pending" for c in missing)
                # the others were decided (by a human, or by policy) but not run yet
                assert all(
                    c.decided_by in ("human", "policy")
                    for c in missing
                    if c.approval_status != "Pending"
                )
            else:
                assert missing == [], (branch, missing)

    @invariant()
    def requests_match_stored_history(self) -> None:
        assert self.mismatches == []
        for request in self.llm.requests[self.requests_checked :]:
            check_provider_sequence(request.messages)
        self.requests_checked = len(self.llm.requests)

    @invariant()
    def event_seq_is_gap_free(self) -> None:
        self.portal.call(anyio.wait_all_tasks_blocked)
        seqs = [ev.seq for ev in self.events]
        assert seqs == list(range(1, len(seqs) + 1))
        assert all(ev.kind != "EventsMissed" for ev in self.events)
        moves = [ev for ev in self.events if ev.kind == "StateChanged"]
        steps = self.portal.call(self.engine.steps, self.cid)
        assert [(c.from_state, c.trigger, c.to_state) for c in moves] == [  # type: ignore[union-attr]
            (s.from_state, s.trigger, s.to_state) for s in steps if s.trigger not in CHANGES
        ]
        changed = [ev for ev in self.events if ev.kind == "ContextChanged"]
        assert [(c.change, c.detail) for c in changed] == [  # type: ignore[union-attr]
            (s.trigger, s.detail) for s in steps if s.trigger in CHANGES
        ]

    @invariant()
    def json_round_trip(self) -> None:
        ctx = self.ctx()
        assert records.from_json(ChatContext, records.to_json(ctx).decode()) == ctx

    @invariant()
    def store_holds_what_the_engine_holds(self) -> None:
        # at rest, the engine's working copy is exactly what was committed
        stored = self.portal.call(self.engine.store.load, self.cid)
        loaded = self.ctx()
        assert stored == loaded


EngineMachine.TestCase.settings = settings(
    max_examples=examples(60),
    stateful_step_count=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEngineMachine = EngineMachine.TestCase
