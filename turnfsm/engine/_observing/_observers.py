"""Watching engine calls: the hooks that traces and metrics hang on
(docs/observability.md).

A call into the engine (``send``, ``approve``, a worker's claim, ...) is
watched when something asks to watch it: an observer added with
:meth:`Engine.observe <turnfsm.Engine.observe>` (the Prometheus metrics of
``turnfsm serve`` and ``turnfsm worker`` are one), and OpenTelemetry
tracing (:mod:`turnfsm.engine._observing._otel_spans`) once the process has a tracer
provider. :func:`begin` asks each; when none answers, the call is not
watched (``Runtime.watch`` is None) and costs what it did before: a few
attribute reads.

The drive loop reports to the call's :class:`Watches` at these points only:
the call starts and ends (``Driver.run``), the context is loaded
(``Driver._call``), a transition of the table fires (``Driver.fire``), the
``call_llm`` effect starts and ends (:func:`run_effect`) and sends its
request (``_call_llm.call_llm``: each attempt's own), and each tool call
runs (:func:`run_calls`, from the ``run_tools`` effect). A watch must not
block or await; what one raises is logged (``observer_failed``) and the call
goes on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import anyio

from ...model import ApprovalStatus, LLMRequest, MessageNode, ToolCallRequest
from ...states import Effect
from ...tools import ToolOutcome, ToolRegistry
from ...tools import run_calls as _run_calls
from .._host import Host
from .._runtime import Runtime
from .._turn import Turn
from . import _otel_spans
from ._hooks import Watch

# read at every effect of a watched call: on Python 3.11 reading a member off
# its enum class goes through ``EnumType.__getattr__``'s slow lookup
_CALL_LLM = Effect.CALL_LLM

__all__ = ["Observer", "Watch", "Watches", "begin", "call_name", "run_calls", "run_effect"]


class Observer(Protocol):
    """What :meth:`Engine.observe <turnfsm.Engine.observe>` takes: asked at
    the start of every engine call whether it watches it."""

    def begin(self, context_id: str, call: str) -> Watch | None:
        """A :class:`Watch` for this call of the engine (``call``: the name of
        the engine's method, see :func:`call_name`), or None."""
        ...


_HOOKS = (
    "entered",
    "handing_off",
    "transition",
    "llm_started",
    "llm_request",
    "llm_ended",
    "tool_started",
    "tool_ended",
    "ended",
)
_DOES: dict[type, frozenset[str]] = {}
"""The hooks each class of watch overrides, found on its first call."""


def _does(watch: Watch) -> frozenset[str]:
    """The hooks ``watch`` does something on: :class:`Watch`'s own hooks do
    nothing, so a watch is not told of one it keeps (a hook it lacks is still
    called, so that the failure is logged). Read once per class, as a watch is
    made for every call; hooks set on the instance itself are read each time."""
    cls = type(watch)
    does = _DOES.get(cls)
    if does is None:
        does = _DOES[cls] = frozenset(
            [h for h in _HOOKS if getattr(cls, h, None) is not getattr(Watch, h)]
        )
    own = getattr(watch, "__dict__", None)
    if own:
        does = does | frozenset([h for h in _HOOKS if h in own])
    return does


_Takers = tuple[Watch, ...]
_Plan = tuple[_Takers, _Takers, _Takers, _Takers, _Takers, _Takers, _Takers, _Takers]
"""Per hook (``entered``, ``handing_off``, ``transition``, ``llm_started``,
``llm_request``, ``llm_ended``, the tool call's two, ``ended``), the watches
that override it, in order."""


def _plan(watches: tuple[Watch, ...]) -> _Plan:
    """Which of ``watches`` takes each hook (see :data:`_Plan`)."""
    does = [(w, _does(w)) for w in watches]

    def taking(*hooks: str) -> _Takers:
        return tuple([w for w, h in does if not h.isdisjoint(hooks)])

    return (
        taking("entered"),
        taking("handing_off"),
        taking("transition"),
        taking("llm_started"),
        taking("llm_request"),
        taking("llm_ended"),
        # a tool call's two hooks go to the same watches (the first one's
        # tokens are given back to the second)
        taking("tool_started", "tool_ended"),
        taking("ended"),
    )


class Watches:
    """The watches of one call: each hook goes to every one of them that
    overrides it, and an exception one raises is logged, never raised into
    the call."""

    __slots__ = (
        "_ended",
        "_entered",
        "_handing_off",
        "_llm_ended",
        "_llm_request",
        "_llm_started",
        "_tools",
        "_transition",
        "llm",
        "log",
        "tools",
        "watches",
    )

    def __init__(self, watches: Sequence[Watch], log: Any) -> None:
        self.watches = ws = tuple(watches)
        self.log = log
        # per hook, the watches that override it: a hook is reported several
        # times a turn, and most watches take a few of them
        (
            self._entered,
            self._handing_off,
            self._transition,
            self._llm_started,
            self._llm_request,
            self._llm_ended,
            self._tools,
            self._ended,
        ) = _plan(ws)
        self.llm = bool(self._llm_started or self._llm_ended)
        """Whether some watch is told when an LLM attempt starts or ends."""
        self.tools = bool(self._tools)
        """Whether some watch is told when a tool call starts or ends."""

    def any(self) -> bool:
        """Whether some watch overrides some hook (else the call needs none)."""
        return bool(
            self._entered
            or self._handing_off
            or self._transition
            or self.llm
            or self._llm_request
            or self.tools
            or self._ended
        )

    def _failed(self, watch: Watch, hook: str, exc: Exception) -> None:
        self.log.warning(
            "observer_failed", observer=type(watch).__name__, hook=hook, error=repr(exc)
        )

    def entered(self, rt: Runtime) -> None:
        for w in self._entered:
            try:
                w.entered(rt)
            except Exception as exc:
                self._failed(w, "entered", exc)

    def handing_off(self, rt: Runtime) -> None:
        for w in self._handing_off:
            try:
                w.handing_off(rt)
            except Exception as exc:
                self._failed(w, "handing_off", exc)

    def transition(self, rt: Runtime, source: str, trigger: str, dest: str) -> None:
        for w in self._transition:
            try:
                w.transition(rt, source, trigger, dest)
            except Exception as exc:
                self._failed(w, "transition", exc)

    def llm_started(self, rt: Runtime) -> None:
        for w in self._llm_started:
            try:
                w.llm_started(rt)
            except Exception as exc:
                self._failed(w, "llm_started", exc)

    def llm_request(self, rt: Runtime, request: LLMRequest) -> None:
        for w in self._llm_request:
            try:
                w.llm_request(rt, request)
            except Exception as exc:
                self._failed(w, "llm_request", exc)

    def llm_ended(
        self, rt: Runtime, answer: MessageNode | None, error: BaseException | None
    ) -> None:
        for w in reversed(self._llm_ended):
            try:
                w.llm_ended(rt, answer, error)
            except Exception as exc:
                self._failed(w, "llm_ended", exc)

    def tool_started(self, rt: Runtime, call: ToolCallRequest) -> list[Any]:
        started: list[Any] = []
        for w in self._tools:
            try:
                started.append(w.tool_started(rt, call))
            except Exception as exc:
                started.append(None)
                self._failed(w, "tool_started", exc)
        return started

    def tool_ended(
        self,
        rt: Runtime,
        call: ToolCallRequest,
        started: list[Any],
        outcome: ToolOutcome | None,
        error: BaseException | None,
    ) -> None:
        for w, token in reversed(list(zip(self._tools, started, strict=True))):
            try:
                w.tool_ended(rt, call, token, outcome, error)
            except Exception as exc:
                self._failed(w, "tool_ended", exc)

    def ended(self, context_id: str, turn: Turn | None, error: BaseException | None) -> None:
        for w in reversed(self._ended):
            try:
                w.ended(context_id, turn, error)
            except Exception as exc:
                self._failed(w, "ended", exc)


_NAMES = {
    "start_send": "send",
    "start_decide": "decide",
    "start_request": "send_request",
    "start_child_spawned": "spawn",
    "start_archive": "finish",
}


def call_name(start: Callable[..., Any], *, hand_off: bool = False, claimed: bool = False) -> str:
    """The engine method a call's ``start`` stands for: ``send``, ``submit``
    (``send`` handed off to a worker), ``approve``, ``deny``, ``decide``
    (approvals and denials at once), ``answer``, ``retry``, ``reset``,
    ``cancel``, ``resume``, ``claim`` (a worker's resume of a claimed
    context), ``send_request``, ``fork``, ``switch``, ``update_config``, ..."""
    func = getattr(start, "func", start)
    name: str = getattr(func, "__name__", "call")
    if claimed:
        return "claim"
    if name == "start_send" and hand_off:
        return "submit"
    if name == "start_decide":
        decisions = getattr(start, "args", ((),))[-1]
        statuses = {status for status, _ in getattr(decisions, "values", dict)()}
        if statuses == {ApprovalStatus.APPROVED}:
            return "approve"
        if statuses == {ApprovalStatus.DENIED}:
            return "deny"
    return _NAMES.get(name) or name.removeprefix("start_")


def begin(
    tracing: _otel_spans.Tracing,
    observers: Sequence[Observer],
    d: Host,
    context_id: str,
    start: Callable[..., Any],
    hand_off: bool,
    claimed: bool,
) -> Watches | None:
    """The watches of a call of the engine ``d`` starting now (its tracing
    setting and observers), or None when nothing watches it."""
    tracer = _otel_spans.tracer_of(tracing)
    if tracer is None and not observers:
        return None
    call = call_name(start, hand_off=hand_off, claimed=claimed)
    log = d.settings.log
    watches: list[Watch] = []
    if tracer is not None:
        provider = _otel_spans.provider_name(d.settings.llm)
        watches.append(_otel_spans.CallSpan(tracer, context_id, call, tracing, provider, d))
    for observer in observers:
        try:
            found = observer.begin(context_id, call)
        except Exception as exc:
            log.warning(
                "observer_failed", observer=type(observer).__name__, hook="begin", error=repr(exc)
            )
            continue
        if found is not None:
            watches.append(found)
    if not watches:
        return None
    found_watches = Watches(watches, log)
    # watches that keep every hook of Watch do nothing: the call runs unwatched
    return found_watches if found_watches.any() else None


async def run_effect(
    d: Host, rt: Runtime, effect: Effect, run: Callable[[Host, Runtime], Awaitable[None]]
) -> None:
    """Run one effect of a watched call; ``call_llm`` between its hooks."""
    watches = rt.watch
    if effect is not _CALL_LLM or watches is None or not watches.llm:
        await run(d, rt)
        return
    before = rt.answer
    watches.llm_started(rt)
    try:
        await run(d, rt)
    except BaseException as exc:
        watches.llm_ended(rt, None, exc)
        raise
    answer = rt.answer
    watches.llm_ended(rt, answer if answer is not before else None, None)


async def run_calls(
    rt: Runtime, registry: ToolRegistry, calls: Sequence[ToolCallRequest]
) -> list[ToolOutcome]:
    """:func:`turnfsm.tools.run_calls` for a watched call: each tool call
    between its hooks (concurrently when there are several, as there)."""
    watches = rt.watch
    if watches is None or not watches.tools:
        return await _run_calls(registry, calls)
    outcomes: list[ToolOutcome | None] = [None] * len(calls)

    async def one(index: int, call: ToolCallRequest) -> None:
        started = watches.tool_started(rt, call)
        try:
            outcome = (await _run_calls(registry, [call]))[0]
        except BaseException as exc:
            watches.tool_ended(rt, call, started, None, exc)
            raise
        watches.tool_ended(rt, call, started, outcome, None)
        outcomes[index] = outcome

    if len(calls) == 1:
        await one(0, calls[0])
    else:
        async with anyio.create_task_group() as group:
            for index, call in enumerate(calls):
                group.start_soon(one, index, call)
    return [outcome for outcome in outcomes if outcome is not None]
