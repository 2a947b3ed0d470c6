"""Prometheus metrics of the engine calls a process runs (docs/observability.md).

:class:`EngineMetrics` is an observer (``Engine.observe``): it watches every
call of the engines it is attached to and keeps its metrics in a registry of
its own (``registry``), which ``turnfsm serve`` answers at ``/metrics`` and
``turnfsm worker`` on ``--metrics-port``. Every label has a bounded set of
values: call names, states and stop reasons come from the table and the
engine; model and tool names are kept as they come up to
``max_label_values`` distinct ones each, then counted as ``_other``. No
context id is ever a label. The engines' loaded-context caches (their size
and bounds, ``turnfsm_loaded_*``) are read at each scrape, at no cost per call.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Gauge,
    generate_latest,
    start_http_server,
)

from ..engine import Engine, Turn, Watch
from ..model import MessageNode, Role, ToolCallRequest
from ..states import RESTING, State, Trigger
from ..tools import ToolOutcome
from ._families import Counted, Histogrammed, Pending, apply

__all__ = ["CONTENT_TYPE", "EngineMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The media type of :meth:`EngineMetrics.render`'s text."""

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_RESTING = frozenset(s.value for s in RESTING)
OTHER = "_other"
_REQUEST_FORMATS = frozenset({"context_management", "legacy"})
_SPEAKERS = (Role.USER, Role.FRONTEND_OPERATOR)


class _Bounded:
    """The values one label may take: the first ``limit`` distinct ones seen,
    then :data:`OTHER`."""

    __slots__ = ("limit", "seen")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        value = value or "_unknown"
        if value in self.seen:
            return value
        if len(self.seen) >= self.limit:
            return OTHER
        self.seen.add(value)
        return value


def _children(metric: Any) -> Callable[..., Any]:
    """``metric.labels`` kept per tuple of label values: ``labels()`` checks
    the values and takes the metrics' lock at every call, and the observer asks
    for a child at every transition. Every label here has a bounded set of
    values (see the module docstring), so the cache is bounded too; no child is
    ever removed from these metrics."""
    return functools.cache(metric.labels)


class EngineMetrics:
    """Prometheus metrics of the engine calls of this process (see the module
    docstring and docs/observability.md for each metric)."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, max_label_values: int = 64
    ) -> None:
        self.registry = r = registry if registry is not None else CollectorRegistry()
        self.lock = lock = threading.Lock()
        """Taken by every update of the counters and histograms, and by a
        scrape as it reads them (the engines attached may run in several
        threads, and a scrape in another)."""
        self.models = _Bounded(max_label_values)
        self.tools = _Bounded(max_label_values)
        self.waiting: set[str] = set()
        """Contexts whose last call in this process ended at AwaitingToolApproval
        with calls for a human to decide."""
        self.turns_started = Counted(
            "turnfsm_turns_started",
            "Engine calls started, by call (send, submit, approve, claim, ...)",
            ["call"],
            registry=r,
            lock=lock,
        )
        self.turns_finished = Counted(
            "turnfsm_turns_finished",
            "Engine calls ended, by call and stop reason (none: the call stopped no "
            "turn; error: it raised)",
            ["call", "stop_reason"],
            registry=r,
            lock=lock,
        )
        self.running = Gauge("turnfsm_turns_running", "Engine calls running now", registry=r)
        self.running.set_function(self._running)
        self.awaiting_approval = Gauge(
            "turnfsm_turns_awaiting_approval",
            "Contexts whose last call in this process ended waiting for a human decision",
            registry=r,
        )
        self.awaiting_approval.set_function(lambda: len(self.waiting))
        self.state_seconds = Histogrammed(
            "turnfsm_state_seconds",
            "Seconds spent in each non-resting state of the table, per visit",
            ["state"],
            buckets=_SECONDS,
            registry=r,
            lock=lock,
        )
        self.llm_seconds = Histogrammed(
            "turnfsm_llm_seconds",
            "Seconds per LLM attempt, by model and outcome (answered, transient, "
            "permanent, interrupted)",
            ["model", "outcome"],
            buckets=_SECONDS,
            registry=r,
            lock=lock,
        )
        self.llm_tokens = Counted(
            "turnfsm_llm_tokens",
            "Tokens the provider reported, by model and kind (input, output)",
            ["model", "kind"],
            registry=r,
            lock=lock,
        )
        self.tool_seconds = Histogrammed(
            "turnfsm_tool_seconds",
            "Seconds per tool call run, by tool",
            ["tool"],
            buckets=_SECONDS,
            registry=r,
            lock=lock,
        )
        self.tool_errors = Counted(
            "turnfsm_tool_errors",
            "Tool calls run whose result is an error, by tool",
            ["tool"],
            registry=r,
            lock=lock,
        )
        self.worker_claims = Counted(
            "turnfsm_worker_claims",
            "Contexts a worker of this process claimed and ran",
            registry=r,
            lock=lock,
        )
        self.worker_takeovers = Counted(
            "turnfsm_worker_takeovers",
            "Claimed contexts that another owner had left mid-turn (its lease expired, "
            "or it handed the turn back as it stopped), rather than freshly submitted",
            registry=r,
            lock=lock,
        )
        self.request_formats = Counted(
            "turnfsm_request_format",
            "Request bodies answered (send_request, POST /api/chat), by format "
            "(context_management, legacy)",
            ["format"],
            registry=r,
            lock=lock,
        )
        self.stream_clients = Gauge(
            "turnfsm_stream_clients",
            "Event streams (SSE) open on this server",
            registry=r,
        )
        self.started_of = _children(self.turns_started)
        self.finished_of = _children(self.turns_finished)
        self.state_seconds_of = _children(self.state_seconds)
        self.llm_seconds_of = _children(self.llm_seconds)
        self.llm_tokens_of = _children(self.llm_tokens)
        self.tool_seconds_of = _children(self.tool_seconds)
        self.tool_errors_of = _children(self.tool_errors)
        self.request_formats_of = _children(self.request_formats)
        """Each labelled metric's children, kept per tuple of label values."""
        self.engines: list[Engine] = []
        """The engines attached: the loaded-context gauges sum theirs at each scrape."""
        for name, doc, read in (
            ("turnfsm_loaded_contexts", "Contexts the engine holds loaded", _loaded_contexts),
            (
                "turnfsm_loaded_messages",
                "Messages of the loaded contexts (each as of its last call)",
                _loaded_messages,
            ),
            (
                "turnfsm_loaded_contexts_max",
                "The bound on loaded contexts (max_loaded)",
                _max_loaded,
            ),
            (
                "turnfsm_loaded_messages_max",
                "The bound on the loaded contexts' messages (max_loaded_messages)",
                _max_loaded_messages,
            ),
        ):
            Gauge(name, doc, registry=r).set_function(self._summed(read))

    # ------------------------------------------------------------------ wiring

    def attach(self, engine: Engine) -> Engine:
        """Watch ``engine``'s calls from now on, and read its loaded-context
        cache at each scrape; returns it."""
        engine.observe(self)
        self.engines.append(engine)
        return engine

    def _summed(self, read: Callable[[Engine], int]) -> Callable[[], float]:
        """A gauge's function: ``read`` of every attached engine, summed (read
        at scrape time only: nothing is counted per call)."""
        return lambda: float(sum(read(engine) for engine in self.engines))

    def _running(self) -> float:
        """Calls begun and not yet ended: each call's start is counted in
        ``turnfsm_turns_started`` and its end, whatever it was, in
        ``turnfsm_turns_finished``, so their difference is the gauge, read at
        a scrape instead of moved twice per call."""
        with self.lock:
            started = sum(c.value for c in self.turns_started.children.values())
            finished = sum(c.value for c in self.turns_finished.children.values())
        return started - finished

    def count_streams(self, count: Callable[[], int]) -> None:
        """Read ``turnfsm_stream_clients`` from ``count()`` at each scrape."""
        self.stream_clients.set_function(lambda: float(count()))

    def serve(
        self,
        port: int,
        host: str = "127.0.0.1",
        *,
        on_listening: Callable[[str], None] | None = None,
    ) -> Callable[[], None]:
        """Answer ``GET /metrics`` on ``host:port`` in a thread of its own (no
        token asked: bind it where only the scraper reaches); returns the
        function that stops it. ``OSError`` when it cannot listen.
        ``on_listening`` is given the URL it answers at (``port`` 0 takes a
        free port, which the URL names)."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        if on_listening is not None:
            host_bound, port_bound = server.server_address[:2]  # (str, int) for IP
            shown = str(host_bound)
            shown = f"[{shown}]" if ":" in shown else shown
            on_listening(f"http://{shown}:{port_bound}/metrics")

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(5)

        return stop

    def render(self) -> bytes:
        """The metrics in Prometheus' text format (:data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)

    # ------------------------------------------------------------------ the observer

    def begin(self, context_id: str, call: str) -> Watch:
        watch = _CallMetrics(self, call)
        watch.pending.append((self.started_of(call), 1))
        if call == "claim":
            watch.pending.append((self.worker_claims.labels(), 1))
        watch.flush()
        return watch


def _loaded_contexts(engine: Engine) -> int:
    return len(engine.loaded_contexts)


def _loaded_messages(engine: Engine) -> int:
    return engine.loaded_messages


def _max_loaded(engine: Engine) -> int:
    return engine.max_loaded


def _max_loaded_messages(engine: Engine) -> int:
    return engine.max_loaded_messages


def _request_format(rt: Any) -> str:
    """The format of the request body a ``send_request`` call answers: that of
    its current message (``metadata.extra["request_format"]``), the branch's
    newest user or frontend operator message; ``unknown`` for one stored
    without it."""
    pool = rt.ctx.message_pool
    for mid in reversed(rt.ctx.active_branch.message_ids):
        message = pool[mid].message
        if message.role in _SPEAKERS:
            found = message.metadata.extra.get("request_format")
            return found if found in _REQUEST_FORMATS else "unknown"
    return "unknown"


def _tokens(amount: int) -> int:
    """A token count to add to a counter: not negative, as counters only go up."""
    if amount < 0:
        raise ValueError("Counters can only be incremented by non-negative amounts.")
    return amount


class _CallMetrics(Watch):
    """The metrics of one call (a :class:`~turnfsm.engine.Watch`).

    Its updates wait in ``pending`` (only the call's task touches it) and are
    applied in one hold of the metrics' lock (:meth:`flush`) before each LLM
    attempt and tool call, the waits of a call, and at its end: a scrape sees
    each no later than the call's next wait, and the call takes the lock a few
    times instead of at every update."""

    __slots__ = ("call", "entered_at", "llm_at", "m", "pending", "state", "state_at")

    def __init__(self, metrics: EngineMetrics, call: str) -> None:
        self.m = metrics
        self.call = call
        self.pending: Pending = []
        self.state: str | None = None
        self.state_at = 0.0
        self.entered_at: float | None = None
        self.llm_at = 0.0

    def flush(self) -> None:
        """Apply the pending updates."""
        pending, self.pending = self.pending, []
        apply(self.m.lock, pending)

    def entered(self, rt: Any) -> None:
        if self.entered_at is not None:  # run again on a fresh copy
            return
        self.entered_at = self.state_at = time.perf_counter()
        self.state = str(rt.holder.state)
        if self.call == "claim" and self.state != State.PROCESSING_USER_MESSAGE:
            self.pending.append((self.m.worker_takeovers.labels(), 1))

    def transition(self, rt: Any, source: str, trigger: str, dest: str) -> None:
        now = time.perf_counter()
        if self.call == "send_request" and trigger == Trigger.USER_MESSAGE:
            self.pending.append((self.m.request_formats_of(_request_format(rt)), 1))
        source = str(source)
        if source not in _RESTING and self.state == source:
            self.pending.append((self.m.state_seconds_of(source), now - self.state_at))
        self.state = str(dest)
        self.state_at = now

    def llm_started(self, rt: Any) -> None:
        self.flush()
        self.llm_at = time.perf_counter()

    def llm_ended(self, rt: Any, answer: MessageNode | None, error: BaseException | None) -> None:
        took = time.perf_counter() - self.llm_at
        m, pending = self.m, self.pending
        if answer is not None:
            md = answer.message.metadata
            model = m.models(md.model or rt.ctx.config.model_id)
            outcome = "answered"
            usage = md.usage
            if usage is not None:
                if usage.prompt_tokens:
                    pending.append((m.llm_tokens_of(model, "input"), _tokens(usage.prompt_tokens)))
                if usage.completion_tokens:
                    output = _tokens(usage.completion_tokens)
                    pending.append((m.llm_tokens_of(model, "output"), output))
        else:
            model = m.models(rt.ctx.config.model_id)
            if error is not None:
                outcome = "interrupted"
            elif str(rt.holder.state) == State.TRANSIENT_FAILURE:
                outcome = "transient"
            else:
                outcome = "permanent"
        pending.append((m.llm_seconds_of(model, outcome), took))

    def tool_started(self, rt: Any, call: ToolCallRequest) -> float:
        self.flush()
        return time.perf_counter()

    def tool_ended(
        self,
        rt: Any,
        call: ToolCallRequest,
        started: Any,
        outcome: ToolOutcome | None,
        error: BaseException | None,
    ) -> None:
        m = self.m
        name = m.tools(call.tool_name)
        self.pending.append((m.tool_seconds_of(name), time.perf_counter() - float(started)))
        if outcome is None or not outcome.success:
            self.pending.append((m.tool_errors_of(name), 1))

    def ended(self, context_id: str, turn: Turn | None, error: BaseException | None) -> None:
        m = self.m
        if turn is None:
            self.pending.append((m.finished_of(self.call, "error"), 1))
            self.flush()
            return
        stop = turn.stop_reason.value if turn.stop_reason is not None else "none"
        self.pending.append((m.finished_of(self.call, stop), 1))
        self.flush()
        if turn.state is State.AWAITING_TOOL_APPROVAL and turn.pending_tool_calls:
            # (calls of the client's tools alone wait for the client, not a human)
            m.waiting.add(context_id)
        else:
            m.waiting.discard(context_id)
