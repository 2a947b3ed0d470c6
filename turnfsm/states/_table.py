"""The declared state machine: every transition of turnfsm lives in this table.

Rules (docs/architecture.md, "The table"):

1. Everything that moves a context from one state to another is a row of
   :data:`TRANSITIONS`. Nothing else changes ``current_state``; the runtime
   machine, the diagrams, the validation and the docs are all built from it.
2. An event that has no row for the current state is refused with
   :class:`~turnfsm.errors.IllegalTransition` and changes nothing.
3. What happens in a state is declared as data too: :data:`STATE_EFFECTS`
   names the work the engine runs on entering it (``on_enter``), and the
   engine dispatches on that name through a table, never an if/elif chain.
4. The table is checked when this module is imported (:func:`validate`): one
   initial state, every state reachable, no trap states, every non-resting
   state has a ``cancel`` edge and a path to ``PermanentFailure``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from ..errors import TableError

__all__ = [
    "EFFECT_CALLBACKS",
    "INITIAL",
    "NON_RESTING",
    "RESTING",
    "STATE_DESCRIPTIONS",
    "STATE_EFFECTS",
    "TRANSITIONS",
    "TRIGGERS",
    "Effect",
    "State",
    "Transition",
    "Trigger",
    "allowed_triggers",
    "next_state",
    "validate",
]


class State(StrEnum):
    IDLE = "Idle"
    PROCESSING_USER_MESSAGE = "ProcessingUserMessage"
    AWAITING_LLM_RESPONSE = "AwaitingLLMResponse"
    STREAMING_LLM_RESPONSE = "StreamingLLMResponse"
    PROCESSING_LLM_RESPONSE = "ProcessingLLMResponse"
    AWAITING_TOOL_APPROVAL = "AwaitingToolApproval"
    EXECUTING_TOOLS = "ExecutingTools"
    TRANSIENT_FAILURE = "TransientFailure"
    PERMANENT_FAILURE = "PermanentFailure"


class Trigger(StrEnum):
    USER_MESSAGE = "user_message"
    PROMPT_READY = "prompt_ready"
    PREPARE_FAILED = "prepare_failed"
    STREAM_STARTED = "stream_started"
    RESPONSE_RECEIVED = "response_received"
    STREAM_ENDED = "stream_ended"
    NEEDS_APPROVAL = "needs_approval"
    TOOLS_DECIDED = "tools_decided"
    TURN_COMPLETE = "turn_complete"
    OUTPUT_INVALID = "output_invalid"
    OUTPUT_FAILED = "output_failed"
    APPROVALS_RESOLVED = "approvals_resolved"
    TOOLS_DONE = "tools_done"
    OUTCOME_UNKNOWN = "outcome_unknown"
    SUBTASK_WAITS = "subtask_waits"
    LLM_FAILED_TRANSIENT = "llm_failed_transient"
    LLM_FAILED_PERMANENT = "llm_failed_permanent"
    RETRY = "retry"
    GIVE_UP = "give_up"
    RESET = "reset"
    CANCEL = "cancel"
    CLIENT_CALLS = "client_calls"


class Effect(StrEnum):
    """The work the engine runs when a state is entered."""

    PREPARE = "prepare"
    """Run the enhancers and build the request."""
    CALL_LLM = "call_llm"
    """Send the request; stream or receive the answer."""
    DECIDE = "decide"
    """Apply the approval policy to the answer's tool calls."""
    RUN_TOOLS = "run_tools"
    """Run the approved calls; record one result per call."""
    BACKOFF = "backoff"
    """Wait out the retry delay, then retry or give up."""


S = State
T = Trigger

INITIAL = S.IDLE
RESTING: frozenset[State] = frozenset({S.IDLE, S.AWAITING_TOOL_APPROVAL, S.PERMANENT_FAILURE})
"""States where a call into the engine returns and the engine waits for the outside."""
NON_RESTING: frozenset[State] = frozenset(State) - RESTING


@dataclass(frozen=True, slots=True)
class Transition:
    sources: tuple[State, ...]
    trigger: Trigger
    dest: State
    meaning: str


TRANSITIONS: tuple[Transition, ...] = (
    Transition(
        (S.IDLE, S.PERMANENT_FAILURE),
        T.USER_MESSAGE,
        S.PROCESSING_USER_MESSAGE,
        "a user (or frontend operator) message arrives",
    ),
    Transition(
        (S.AWAITING_TOOL_APPROVAL,),
        T.USER_MESSAGE,
        S.PROCESSING_USER_MESSAGE,
        'pending calls are first closed with "superseded" results',
    ),
    Transition(
        (S.PROCESSING_USER_MESSAGE,),
        T.PROMPT_READY,
        S.AWAITING_LLM_RESPONSE,
        "enhancers ran; request built",
    ),
    Transition(
        (S.PROCESSING_USER_MESSAGE,), T.PREPARE_FAILED, S.PERMANENT_FAILURE, "an enhancer raised"
    ),
    Transition(
        (S.AWAITING_LLM_RESPONSE,),
        T.STREAM_STARTED,
        S.STREAMING_LLM_RESPONSE,
        "first chunk of a streamed answer",
    ),
    Transition(
        (S.AWAITING_LLM_RESPONSE,),
        T.RESPONSE_RECEIVED,
        S.PROCESSING_LLM_RESPONSE,
        "whole (non-streamed) answer",
    ),
    Transition(
        (S.STREAMING_LLM_RESPONSE,), T.STREAM_ENDED, S.PROCESSING_LLM_RESPONSE, "last chunk"
    ),
    Transition(
        (S.PROCESSING_LLM_RESPONSE,),
        T.NEEDS_APPROVAL,
        S.AWAITING_TOOL_APPROVAL,
        "at least one call needs a human decision",
    ),
    Transition(
        (S.PROCESSING_LLM_RESPONSE,),
        T.TOOLS_DECIDED,
        S.EXECUTING_TOOLS,
        "every call decided by policy, no human needed",
    ),
    Transition(
        (S.PROCESSING_LLM_RESPONSE,),
        T.TURN_COMPLETE,
        S.IDLE,
        "text answer, or the iteration limit was hit",
    ),
    Transition(
        (S.PROCESSING_LLM_RESPONSE,),
        T.OUTPUT_INVALID,
        S.AWAITING_LLM_RESPONSE,
        "the answer does not match the output type; its errors are sent back",
    ),
    Transition(
        (S.PROCESSING_LLM_RESPONSE,),
        T.OUTPUT_FAILED,
        S.PERMANENT_FAILURE,
        "the answer does not match the output type; the output retries are spent",
    ),
    Transition(
        (S.AWAITING_TOOL_APPROVAL,),
        T.APPROVALS_RESOLVED,
        S.EXECUTING_TOOLS,
        "every pending call approved or denied",
    ),
    Transition(
        (S.EXECUTING_TOOLS,), T.TOOLS_DONE, S.AWAITING_LLM_RESPONSE, "one result per call appended"
    ),
    Transition(
        (S.EXECUTING_TOOLS,),
        T.OUTCOME_UNKNOWN,
        S.AWAITING_TOOL_APPROVAL,
        "after a crash, a started non-idempotent call has no outcome: a human decides",
    ),
    Transition(
        (S.EXECUTING_TOOLS,),
        T.SUBTASK_WAITS,
        S.AWAITING_TOOL_APPROVAL,
        "a sub-task's child waits for a human: its pending calls surface here",
    ),
    Transition(
        (S.AWAITING_LLM_RESPONSE, S.STREAMING_LLM_RESPONSE),
        T.LLM_FAILED_TRANSIENT,
        S.TRANSIENT_FAILURE,
        "retryable error (429, 408, 409, 5xx, timeout, connection)",
    ),
    Transition(
        (S.AWAITING_LLM_RESPONSE, S.STREAMING_LLM_RESPONSE),
        T.LLM_FAILED_PERMANENT,
        S.PERMANENT_FAILURE,
        "non-retryable error (400, 401, 403, 404, 422)",
    ),
    Transition((S.TRANSIENT_FAILURE,), T.RETRY, S.AWAITING_LLM_RESPONSE, "backoff elapsed"),
    Transition((S.TRANSIENT_FAILURE,), T.GIVE_UP, S.PERMANENT_FAILURE, "attempts exhausted"),
    Transition(
        (S.PERMANENT_FAILURE,), T.RETRY, S.AWAITING_LLM_RESPONSE, "a user asks to try again"
    ),
    Transition((S.PERMANENT_FAILURE,), T.RESET, S.IDLE, "a user abandons the failed turn"),
    Transition(
        tuple(s for s in State if s in NON_RESTING or s is S.AWAITING_TOOL_APPROVAL),
        T.CANCEL,
        S.IDLE,
        'partial text kept and marked cancelled; open calls get "cancelled" results',
    ),
    Transition(
        (S.PROCESSING_LLM_RESPONSE, S.EXECUTING_TOOLS),
        T.CLIENT_CALLS,
        S.AWAITING_TOOL_APPROVAL,
        "calls of the client's tools wait for its results (the engine's calls ran first)",
    ),
)

TRIGGERS: tuple[Trigger, ...] = tuple(dict.fromkeys(t.trigger for t in TRANSITIONS))

STATE_EFFECTS: Mapping[State, Effect] = {
    S.PROCESSING_USER_MESSAGE: Effect.PREPARE,
    S.AWAITING_LLM_RESPONSE: Effect.CALL_LLM,
    S.PROCESSING_LLM_RESPONSE: Effect.DECIDE,
    S.EXECUTING_TOOLS: Effect.RUN_TOOLS,
    S.TRANSIENT_FAILURE: Effect.BACKOFF,
}
"""The work declared on entering a state. StreamingLLMResponse has none of its
own: the stream that entered it is still being read by ``call_llm``."""

EFFECT_CALLBACKS: Mapping[State, str] = {s: f"on_enter_{e.value}" for s, e in STATE_EFFECTS.items()}
"""The ``on_enter`` callback names given to the runtime machine, per state."""

STATE_DESCRIPTIONS: Mapping[State, str] = {
    S.IDLE: "resting: waiting for a user message",
    S.PROCESSING_USER_MESSAGE: "enhancers prepare the request",
    S.AWAITING_LLM_RESPONSE: "the request is sent; waiting for the first chunk or the answer",
    S.STREAMING_LLM_RESPONSE: "chunks of the answer are arriving",
    S.PROCESSING_LLM_RESPONSE: (
        "the answer is stored; its tool calls are decided by policy, a typed answer is validated"
    ),
    S.AWAITING_TOOL_APPROVAL: (
        "resting: waiting for a human to approve or deny tool calls, or for a client's results"
    ),
    S.EXECUTING_TOOLS: "the decided tool calls run; one result per call is recorded",
    S.TRANSIENT_FAILURE: "a retryable LLM error; waiting out the backoff",
    S.PERMANENT_FAILURE: "resting: the turn failed; retry, reset or send a new message",
}

_EDGES: dict[tuple[State, Trigger], State] = {}
for _t in TRANSITIONS:
    for _s in _t.sources:
        _EDGES[(_s, _t.trigger)] = _t.dest

_ALLOWED: dict[State, frozenset[Trigger]] = {
    s: frozenset(t for (src, t) in _EDGES if src is s) for s in State
}


def next_state(state: State, trigger: Trigger) -> State | None:
    """The destination of ``trigger`` from ``state``, or None if the table has no edge."""
    return _EDGES.get((state, trigger))


def allowed_triggers(state: State) -> frozenset[Trigger]:
    """The triggers the table allows in ``state`` (computed from the table, not the machine)."""
    return _ALLOWED[state]


def validate(
    transitions: Iterable[Transition] = TRANSITIONS,
    *,
    initial: State = INITIAL,
    resting: frozenset[State] = RESTING,
) -> None:
    """Check the graph rules (rule 4 of this module's docstring).

    Raises :class:`TableError` naming the first rule the table breaks.
    """
    rows = list(transitions)
    edges: dict[tuple[State, Trigger], State] = {}
    for row in rows:
        if not row.sources:
            raise TableError(f"transition {row.trigger} has no source state")
        for src in row.sources:
            key = (src, row.trigger)
            if key in edges and edges[key] is not row.dest:
                raise TableError(
                    f"{src} has two destinations for {row.trigger}: {edges[key]} and {row.dest}"
                )
            edges[key] = row.dest
    succ: dict[State, set[State]] = {s: set() for s in State}
    for (src, _), dst in edges.items():
        succ[src].add(dst)

    seen = _closure(succ, initial)
    unreachable = [s for s in State if s not in seen]
    if unreachable:
        raise TableError(f"states not reachable from {initial}: {', '.join(unreachable)}")
    for s in State:
        if not succ[s]:
            raise TableError(f"{s} is a trap state: no transition leaves it")
        if initial not in _closure(succ, s):
            raise TableError(f"{s} is a trap: {initial} cannot be reached from it")
        if s in resting:
            continue
        if (s, Trigger.CANCEL) not in edges:
            raise TableError(f"non-resting state {s} has no cancel edge")
        if State.PERMANENT_FAILURE not in _closure(succ, s):
            raise TableError(f"non-resting state {s} has no path to PermanentFailure")


def _closure(succ: Mapping[State, set[State]], start: State) -> set[State]:
    seen = {start}
    todo = [start]
    while todo:
        for nxt in succ[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


validate()
