"""The replay runner: drives the real engine from a script's tape, offline.

The engine is the ordinary :class:`~turnfsm.engine.Engine`; only its edges are
scripted: the LLM and the tools take their outcomes from the tape, the clock
is virtual (backoff never sleeps) and ids are sequential, so the same script
always gives byte-identical output (into a store that already holds contexts,
the ids get a run prefix so that they do not collide, claimed by the
context's create so that replays at the same moment do not collide either).

The tape is strict: when the engine calls the
LLM the next step must be ``llm`` or ``llm_error``; when it runs a tool, the
next steps must hold a ``tool`` step for that call (any order within one
batch); when the engine rests, the next step must be an input, a check, or
the end. A mismatch stops the replay with the step index, what the tape said
and what the engine did.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import records
from ..adapters.llm.scripted import play
from ..engine import (
    Engine,
    FakeClock,
    FinalAnswer,
    RetryPolicy,
    SequentialIds,
)
from ..engine._defaults import default_logger as _default_logger
from ..enhancers import Compaction
from ..errors import StoreError, TurnFSMError
from ..events import EVENT_ADAPTER, Event
from ..model import ChatContext, LLMChunk, LLMRequest
from ..storage import Store
from ..tools import Tool, ToolError, ask_user, current_call, question_tool, subtask
from ._script import load_script, parse_script
from ._script_model import FinalExpect, Script, ScriptConfig, ScriptSubtask, Step, StepExpect

__all__ = ["Failure", "ReplayResult", "replay", "run_script"]

# A script's failures are expected outcomes, reported in the result: the
# engine's warnings about them would only repeat them on stderr.
_QUIET = _default_logger(logging.CRITICAL)


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a replay failed: a ``check`` that did not hold, or the ``tape``."""

    kind: str
    step: int | None
    message: str
    expected: Any = None
    observed: Any = None

    def render(self) -> str:
        where = f"step {self.step}" if self.step is not None else "final expect"
        lines = [f"{where}: {self.message}"]
        if self.expected is not None or self.observed is not None:
            lines.append(f"  expected: {_show(self.expected)}")
            lines.append(f"  observed: {_show(self.observed)}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "step": self.step,
            "message": self.message,
            "expected": self.expected,
            "observed": self.observed,
        }


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


@dataclass(slots=True)
class ReplayResult:
    name: str
    failures: list[Failure] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    context_id: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    def trace_out(self) -> dict[str, Any]:
        """What ``--trace-out`` writes: the observed trace, events and messages."""
        return {"trace": self.trace, "events": self.events, "messages": self.messages}

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "failures": [f.to_json() for f in self.failures],
            "trace": self.trace,
        }

    def report(self) -> str:
        if self.ok:
            return f"PASS {self.name}"
        body = "\n".join(f.render() for f in self.failures)
        return f"FAIL {self.name}\n{body}"


class _TapeStop(Exception):
    """Raised inside a scripted edge when the tape does not match; the runner
    reports the recorded failure once the engine rests."""


class _Tape:
    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = steps
        self.pos = 0
        self.consumed: set[int] = set()
        self.stop: Failure | None = None
        self.checks: list[Failure] = []

    def peek(self) -> Step | None:
        return self.steps[self.pos] if self.pos < len(self.steps) else None

    def take(self) -> Step:
        step = self.steps[self.pos]
        self.consumed.add(self.pos)
        self._advance()
        return step

    def _advance(self) -> None:
        while self.pos < len(self.steps) and self.pos in self.consumed:
            self.pos += 1

    def fail(self, message: str, expected: Any = None, observed: Any = None) -> _TapeStop:
        step = self.peek()
        if self.stop is None:
            # at the end of the tape the index is one past the last step
            index = step.index if step else len(self.steps)
            self.stop = Failure("tape", index, message, expected, observed)
        return _TapeStop(message)

    def next_described(self) -> str:
        step = self.peek()
        return step.describe() if step else f"the end of the tape (after {len(self.steps)} steps)"

    def take_tool(self, call_id: str) -> Step | None:
        """The ``tool`` step for ``call_id`` among the tool steps at the head."""
        i = self.pos
        while i < len(self.steps) and (self.steps[i].kind == "tool" or i in self.consumed):
            step = self.steps[i]
            if i not in self.consumed and step.value.id == call_id:
                self.consumed.add(i)
                self._advance()
                return step
            i += 1
        return None


class _TapeLLM:
    gen_ai_provider_name = "turnfsm.replay"
    """What the engine's OpenTelemetry spans name the provider (docs/observability.md)."""

    def __init__(self, tape: _Tape) -> None:
        self.tape = tape

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        tape = self.tape
        if tape.stop is not None:
            raise _TapeStop("the tape already failed")
        step = tape.peek()
        if step is None or step.kind not in ("llm", "llm_error"):
            raise tape.fail(
                f"the engine called the LLM (call {request.iteration}, attempt "
                f"{request.attempt}) but the next step is {tape.next_described()}",
                expected="an llm or llm_error step",
                observed="an LLM call",
            )
        tape.take()
        answer = step.value
        if answer.expect_request:
            tape.checks.extend(_check_request(step.index, answer.expect_request, request))
        async for chunk in play(answer, request):
            yield chunk


def _tape_tool(tape: _Tape, name: str) -> Any:
    def run(**arguments: Any) -> Any:
        call = current_call()
        assert call is not None
        if tape.stop is not None:
            raise _TapeStop("the tape already failed")
        step = tape.take_tool(call.id)
        if step is None:
            raise tape.fail(
                f"the engine ran tool call {call.id!r} ({name}) but the next step is "
                f"{tape.next_described()}",
                expected=f"a tool step for {call.id!r}",
                observed=f"tool call {call.id!r}",
            )
        if step.value.error is not None:
            raise ToolError(step.value.error)
        return step.value.result

    return run


def _check_request(index: int, expect: Mapping[str, Any], request: LLMRequest) -> list[Failure]:
    msgs = request.messages
    observed: dict[str, Any] = {
        "message_count": lambda: len(msgs),
        "roles": lambda: [m.get("role") for m in msgs],
        "system_contains": lambda: next(
            (m.get("content") for m in msgs if m.get("role") == "system"), ""
        ),
        "tools": lambda: [t["function"]["name"] for t in request.tools],
        "last_user_contains": lambda: next(
            (m.get("content") for m in reversed(msgs) if m.get("role") == "user"), ""
        ),
    }
    failures = []
    for key, want in expect.items():
        if want is None:
            continue
        if key not in observed:
            failures.append(Failure("check", index, f"expect_request has an unknown key {key!r}"))
            continue
        got = observed[key]()
        if key.endswith("_contains"):
            ok = isinstance(got, str) and isinstance(want, str) and want in got
        elif key == "tools":
            ok = isinstance(want, list) and sorted(got) == sorted(want)
        else:
            ok = got == want
        if not ok:
            failures.append(
                Failure("check", index, f"the request sent to the LLM: {key}", want, got)
            )
    return failures


def _check_state(
    index: int, expect: StepExpect, ctx: ChatContext, pending: Sequence[str] | None = None
) -> list[Failure]:
    """``pending``: the ids a human is asked to decide, when they are not the
    context's own (a sub-task's child waits)."""
    history = ctx.history()
    observed: dict[str, Any] = {}
    expected: dict[str, Any] = {}
    if expect.state is not None:
        expected["state"], observed["state"] = str(expect.state), ctx.current_state
    if expect.pending is not None:
        expected["pending"] = expect.pending
        observed["pending"] = (
            [c.id for c in ctx.pending_tool_calls()] if pending is None else list(pending)
        )
    if expect.message_count is not None:
        expected["message_count"], observed["message_count"] = expect.message_count, len(history)
    if expect.branch is not None:
        expected["branch"], observed["branch"] = expect.branch, ctx.active_branch_name
    if expect.mode is not None:
        expected["mode"], observed["mode"] = expect.mode, ctx.config.mode
    if expect.last_message is not None:
        last = history[-1].message if history else None
        want = expect.last_message.model_dump(exclude_none=True)
        got: dict[str, Any] = {}
        if last is not None:
            if "role" in want:
                got["role"] = str(last.role)
            if "text" in want:
                got["text"] = last.text
            if "type" in want:
                got["type"] = str(last.message_type)
        expected["last_message"], observed["last_message"] = want, got or None
    return [
        Failure("check", index, f"expect {key}", expected[key], observed[key])
        for key in expected
        if expected[key] != observed[key]
    ]


def _check_final(expect: FinalExpect, trace: list[str], ctx: ChatContext) -> list[Failure]:
    failures = []
    if expect.trace is not None:
        want = [str(s) for s in expect.trace]
        if want != trace:
            at = next(
                (i for i, (a, b) in enumerate(zip(want, trace, strict=False)) if a != b),
                min(len(want), len(trace)),
            )
            failures.append(
                Failure(
                    "check",
                    None,
                    f"trace differs from entry {at}: expected "
                    f"{want[at] if at < len(want) else 'end'}, observed "
                    f"{trace[at] if at < len(trace) else 'end'}",
                    want,
                    trace,
                )
            )
    if expect.final_state is not None and str(expect.final_state) != ctx.current_state:
        failures.append(
            Failure("check", None, "final_state", str(expect.final_state), ctx.current_state)
        )
    if expect.message_count is not None and expect.message_count != len(ctx.history()):
        failures.append(
            Failure("check", None, "message_count", expect.message_count, len(ctx.history()))
        )
    return failures


def _subtask_tool(name: str, description: str, approval: str, spec: ScriptSubtask) -> Tool:
    """A sub-task tool: its child's ``llm`` and ``tool`` steps, and the summary's
    ``llm`` step (``"summarizer": "llm"``), follow on the same tape."""
    return subtask(
        name,
        description,
        system_prompt=spec.system_prompt,
        tools=spec.tools,
        model=spec.model,
        summarizer=FinalAnswer() if spec.summarizer == "final_answer" else None,
        keep=spec.keep,
        approval=approval,  # type: ignore[arg-type]
    )


def build_engine(
    script: Script, tape: _Tape, store: Store | None = None, ids: SequentialIds | None = None
) -> Engine:
    cfg = script.config
    tools = [
        question_tool(t.name, t.description or ask_user.description)
        if t.question
        else Tool.from_spec(
            t.name,
            t.description,
            t.parameters,
            _tape_tool(tape, t.name),
            approval=t.approval,
            idempotent=t.idempotent,
            timeout=None,
        )
        if t.subtask is None
        else _subtask_tool(t.name, t.description, t.approval, t.subtask)
        for t in script.tools
    ]
    from ..engine import wait_exponential  # tenacity, with the first policy made

    retry = RetryPolicy(
        max_attempts=cfg.retry.max_attempts,
        wait=wait_exponential(multiplier=cfg.retry.initial_delay, max=cfg.retry.max_delay),
    )
    return Engine(
        llm=_TapeLLM(tape),
        tools=tools,
        store=store,
        retry=retry,
        max_iterations=cfg.max_iterations,
        limit_notice=cfg.limit_notice,
        clock=FakeClock(),
        ids=ids if ids is not None else SequentialIds(),
        tool_history_rounds=cfg.tool_history_rounds,
        compaction=_compaction(cfg),
        subscriber_buffer=1 << 30,
        logger=_QUIET,
        modes=script.modes,
        output_type=cfg.output_type,
        output_retries=cfg.output_retries,
    )


def _compaction(cfg: ScriptConfig) -> Compaction | None:
    c = cfg.compaction
    if c is None:
        return None
    return Compaction(
        c.threshold_tokens, keep_tokens=c.keep_tokens, max_summary_input=c.max_summary_input
    )


async def _input(engine: Engine, cid: str, step: Step) -> object:
    v = step.value
    kind = step.kind
    if kind == "user":
        return await engine.send(cid, v.content, role=v.role)
    if kind == "approve":
        return await engine.approve(cid, list(v))
    if kind == "deny":
        return await engine.deny(cid, v.id, reason=v.reason)
    if kind == "answer":
        return await engine.answer(cid, v.id, v.text)
    if kind == "cancel":
        return await engine.cancel(cid)
    if kind == "retry":
        return await engine.retry(cid)
    if kind == "reset":
        return await engine.reset(cid)
    if kind == "branch":
        return await engine.fork(cid, v.name, at=v.at, **v.prompts())
    if kind == "config":
        return await engine.update_config(cid, **v.fields())
    if kind == "switch":
        return await engine.switch_branch(cid, v)
    raise AssertionError(kind)  # pragma: no cover - the parser allows no other input


async def replay(
    script: Script | Mapping[str, Any] | str | Path, *, store: Store | None = None
) -> ReplayResult:
    """Run a script (parsed, a decoded mapping, or a file path) and check it.

    An invalid script raises :class:`~turnfsm.replay.ScriptError` before anything runs.
    """
    if isinstance(script, str | Path):
        script = load_script(script)
    elif not isinstance(script, Script):
        script = parse_script(script)
    tape = _Tape(script.steps)
    result = ReplayResult(script.name)
    events: list[Event] = []
    ids = SequentialIds(await _ids_prefix(store, set()) if store is not None else "id-")
    async with build_engine(script, tape, store, ids) as engine:
        cid = await _create_claimed(engine, script, store, ids)
        result.context_id = cid
        async with engine.subscribe(cid) as sub:
            while tape.stop is None and (step := tape.peek()) is not None:
                if step.kind == "expect":
                    tape.take()
                    ctx = await engine.get_context(cid)
                    asked = [c.id for c in await engine._subcontexts.pending(cid)]
                    result.failures.extend(_check_state(step.index, step.value, ctx, asked))
                    continue
                if step.is_outcome:
                    ctx = await engine.get_context(cid)
                    tape.fail(
                        f"{step.describe()} was not used: the engine is resting at "
                        f"{ctx.current_state} and asked for no {step.kind} outcome",
                        expected=f"an input, a check or the end at {ctx.current_state}",
                        observed=step.kind,
                    )
                    break
                tape.take()
                try:
                    await _input(engine, cid, step)
                except TurnFSMError as exc:
                    if tape.stop is None:
                        tape.stop = Failure(
                            "tape",
                            step.index,
                            f"{step.describe()}: the engine refused it: {exc}",
                        )
                events.extend(sub.drain())
            events.extend(sub.drain())
        ctx = await engine.get_context(cid)
        result.trace = [str(s) for s in await engine.trace(cid)]
    result.failures.extend(tape.checks)
    if tape.stop is not None:
        result.failures.append(tape.stop)
    elif script.expect is not None:
        result.failures.extend(_check_final(script.expect, result.trace, ctx))
    result.failures.sort(key=lambda f: (f.step is None, f.step or 0))
    result.events = [EVENT_ADAPTER.dump_python(e, mode="json") for e in events]
    result.messages = [records.to_python(n) for n in ctx.history()]
    return result


_CLAIMS = 1000
"""How many run prefixes one replay tries before it gives up (each try that
fails lost a race to another replay that took that prefix first)."""


async def _create_claimed(
    engine: Engine, script: Script, store: Store | None, ids: SequentialIds
) -> str:
    """Create the replay's context: the create claims its run prefix.

    Choosing a prefix only reads the store, so two replays into one store at
    the same moment can choose the same one. The context's create is the
    store's own create-if-absent (one transaction, one ``INSERT ... ON
    CONFLICT``, one rename), and every id of a replay comes from its prefix: the
    replay whose create stores the context owns the prefix; the other finds the
    context there, takes the next free prefix and creates again, with its ids
    counted from 1 again. Nothing else was stored by then."""
    cfg = script.config
    tried: set[str] = set()
    for _ in range(_CLAIMS):
        try:
            return await engine.create_context(
                system_prompt=cfg.system_prompt,
                model=cfg.model,
                mode=cfg.mode,
                parameters=cfg.parameters,
            )
        except StoreError:
            if store is None:
                raise
            # the id the create used: the ids' last one
            if not await _stored(store, f"{ids.prefix}{ids.count}"):
                raise  # the store failed for another reason: not a lost race
        tried.add(ids.prefix)
        ids.prefix, ids.count = await _ids_prefix(store, tried), 0
    raise StoreError(
        f"no free run prefix after {_CLAIMS} tries: other replays into this store kept "
        "taking each one first"
    )


async def _stored(store: Store, context_id: str) -> bool:
    return context_id in await store.list_ids()


async def _ids_prefix(store: Store, tried: set[str]) -> str:
    """Sequential ids as always (``id-1``, ...) in an empty store; in one that
    already holds contexts (an earlier replay, say), a run prefix no stored id
    has (``r2-id-1``, ...), so each replay is kept as its own context.
    ``tried``: prefixes this replay lost to another (see :func:`_create_claimed`)."""
    taken = await store.list_ids()
    if not taken and "id-" not in tried:
        return "id-"
    run = len(taken) + 1
    while f"r{run}-id-" in tried or any(cid.startswith(f"r{run}-") for cid in taken):
        run += 1
    return f"r{run}-id-"


def run_script(
    script: Script | Mapping[str, Any] | str | Path, *, store: Store | None = None
) -> ReplayResult:
    """:func:`replay` from synchronous code (runs its own event loop)."""
    import anyio

    async def go() -> ReplayResult:
        return await replay(script, store=store)

    return anyio.run(go)
