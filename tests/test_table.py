"""The declared transition table (turnfsm.states._table) against docs/architecture.md.

The expected states, resting states and edges are written out here literally,
from docs/architecture.md, independently of the code: a change to the table must change
this file too.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from turnfsm.errors import TableError
from turnfsm.states import (
    INITIAL,
    NON_RESTING,
    RESTING,
    STATE_DESCRIPTIONS,
    STATE_EFFECTS,
    TRANSITIONS,
    TRIGGERS,
    State,
    Transition,
    Trigger,
    allowed_triggers,
    next_state,
    validate,
)

# --- docs/architecture.md, "The table", copied by hand -------------------------------------

DESIGN_STATES = [
    "Idle",
    "ProcessingUserMessage",
    "AwaitingLLMResponse",
    "StreamingLLMResponse",
    "ProcessingLLMResponse",
    "AwaitingToolApproval",
    "ExecutingTools",
    "TransientFailure",
    "PermanentFailure",
]
DESIGN_RESTING = {"Idle", "AwaitingToolApproval", "PermanentFailure"}
DESIGN_NON_RESTING = set(DESIGN_STATES) - DESIGN_RESTING

# One entry per row of the table: (sources, trigger, destination).
DESIGN_ROWS: list[tuple[frozenset[str], str, str]] = [
    (frozenset({"Idle", "PermanentFailure"}), "user_message", "ProcessingUserMessage"),
    (frozenset({"AwaitingToolApproval"}), "user_message", "ProcessingUserMessage"),
    (frozenset({"ProcessingUserMessage"}), "prompt_ready", "AwaitingLLMResponse"),
    (frozenset({"ProcessingUserMessage"}), "prepare_failed", "PermanentFailure"),
    (frozenset({"AwaitingLLMResponse"}), "stream_started", "StreamingLLMResponse"),
    (frozenset({"AwaitingLLMResponse"}), "response_received", "ProcessingLLMResponse"),
    (frozenset({"StreamingLLMResponse"}), "stream_ended", "ProcessingLLMResponse"),
    (frozenset({"ProcessingLLMResponse"}), "needs_approval", "AwaitingToolApproval"),
    (frozenset({"ProcessingLLMResponse"}), "tools_decided", "ExecutingTools"),
    (frozenset({"ProcessingLLMResponse"}), "turn_complete", "Idle"),
    (frozenset({"ProcessingLLMResponse"}), "output_invalid", "AwaitingLLMResponse"),
    (frozenset({"ProcessingLLMResponse"}), "output_failed", "PermanentFailure"),
    (frozenset({"AwaitingToolApproval"}), "approvals_resolved", "ExecutingTools"),
    (frozenset({"ExecutingTools"}), "tools_done", "AwaitingLLMResponse"),
    (frozenset({"ExecutingTools"}), "outcome_unknown", "AwaitingToolApproval"),
    (frozenset({"ExecutingTools"}), "subtask_waits", "AwaitingToolApproval"),
    (
        frozenset({"AwaitingLLMResponse", "StreamingLLMResponse"}),
        "llm_failed_transient",
        "TransientFailure",
    ),
    (
        frozenset({"AwaitingLLMResponse", "StreamingLLMResponse"}),
        "llm_failed_permanent",
        "PermanentFailure",
    ),
    (frozenset({"TransientFailure"}), "retry", "AwaitingLLMResponse"),
    (frozenset({"TransientFailure"}), "give_up", "PermanentFailure"),
    (frozenset({"PermanentFailure"}), "retry", "AwaitingLLMResponse"),
    (frozenset({"PermanentFailure"}), "reset", "Idle"),
    # "any non-resting state, AwaitingToolApproval | cancel | Idle"
    (
        frozenset(
            {
                "ProcessingUserMessage",
                "AwaitingLLMResponse",
                "StreamingLLMResponse",
                "ProcessingLLMResponse",
                "ExecutingTools",
                "TransientFailure",
                "AwaitingToolApproval",
            }
        ),
        "cancel",
        "Idle",
    ),
    (
        frozenset({"ProcessingLLMResponse", "ExecutingTools"}),
        "client_calls",
        "AwaitingToolApproval",
    ),
]

DESIGN_TRIGGERS = {
    "user_message",
    "prompt_ready",
    "prepare_failed",
    "stream_started",
    "response_received",
    "stream_ended",
    "needs_approval",
    "tools_decided",
    "turn_complete",
    "output_invalid",
    "output_failed",
    "approvals_resolved",
    "tools_done",
    "outcome_unknown",
    "subtask_waits",
    "llm_failed_transient",
    "llm_failed_permanent",
    "retry",
    "give_up",
    "reset",
    "cancel",
    "client_calls",
}

# The same rows, one edge per (source, trigger).
DESIGN_EDGES: dict[tuple[str, str], str] = {
    (src, trigger): dest for sources, trigger, dest in DESIGN_ROWS for src in sources
}


# --- states -------------------------------------------------------------------------------


def test_state_enum_has_exactly_the_nine_design_names() -> None:
    assert [s.value for s in State] == DESIGN_STATES
    assert len(State) == 9


def test_state_is_a_str_enum_so_names_appear_verbatim() -> None:
    for s in State:
        assert isinstance(s, str)
        assert str(s) == s.value
        assert f"{s}" == s.value


def test_initial_and_resting_states() -> None:
    assert INITIAL.value == "Idle"
    assert {s.value for s in RESTING} == DESIGN_RESTING
    assert {s.value for s in NON_RESTING} == DESIGN_NON_RESTING
    assert frozenset(State) == RESTING | NON_RESTING
    assert not RESTING & NON_RESTING


def test_every_state_has_a_description() -> None:
    assert set(STATE_DESCRIPTIONS) == set(State)
    assert all(d.strip() for d in STATE_DESCRIPTIONS.values())


# --- the table ----------------------------------------------------------------------------


def test_transitions_equal_design_table_row_by_row() -> None:
    actual = [
        (frozenset(s.value for s in t.sources), t.trigger.value, t.dest.value) for t in TRANSITIONS
    ]
    assert actual == DESIGN_ROWS


def test_transitions_equal_design_table_as_a_set() -> None:
    # The same check, order-insensitive, so a reordering shows as "same set".
    actual = {
        (frozenset(s.value for s in t.sources), t.trigger.value, t.dest.value) for t in TRANSITIONS
    }
    assert actual == set(DESIGN_ROWS)


def test_no_row_lists_a_source_twice_and_every_row_has_a_meaning() -> None:
    for t in TRANSITIONS:
        assert len(set(t.sources)) == len(t.sources), t
        assert t.meaning.strip(), t


def test_trigger_enum_and_triggers_tuple_match_design() -> None:
    assert {t.value for t in Trigger} == DESIGN_TRIGGERS
    assert set(TRIGGERS) == set(Trigger)
    assert len(TRIGGERS) == len(set(TRIGGERS))


def test_transition_rows_are_frozen() -> None:
    row = TRANSITIONS[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.dest = State.IDLE  # type: ignore[misc]


@pytest.mark.parametrize(
    ("state", "trigger"),
    list(itertools.product(State, Trigger)),
    ids=lambda v: str(v),
)
def test_next_state_and_allowed_triggers_agree_with_design(state: State, trigger: Trigger) -> None:
    expected = DESIGN_EDGES.get((state.value, trigger.value))
    got = next_state(state, trigger)
    assert (got.value if got is not None else None) == expected
    assert (trigger in allowed_triggers(state)) == (expected is not None)


def test_allowed_triggers_per_state_is_exactly_the_design_set() -> None:
    for state in State:
        expected = {trig for (src, trig) in DESIGN_EDGES if src == state.value}
        assert {t.value for t in allowed_triggers(state)} == expected, state
        assert isinstance(allowed_triggers(state), frozenset)


def test_state_effects_cover_non_resting_states_except_streaming() -> None:
    expected = DESIGN_NON_RESTING - {"StreamingLLMResponse"}
    assert {s.value for s in STATE_EFFECTS} == expected
    # one distinct effect per state
    assert len(set(STATE_EFFECTS.values())) == len(STATE_EFFECTS)


def test_shipped_table_validates() -> None:
    validate()
    validate(TRANSITIONS)


# --- validate() on broken tables ----------------------------------------------------------

S = State
T = Trigger


def _without(*rows: tuple[State, Trigger]) -> list[Transition]:
    """The shipped table minus the given (source, trigger) edges (rows are split
    or dropped as needed)."""
    drop = set(rows)
    out: list[Transition] = []
    for t in TRANSITIONS:
        kept = tuple(s for s in t.sources if (s, t.trigger) not in drop)
        if kept:
            out.append(dataclasses.replace(t, sources=kept))
    return out


def _edges_from(state: State) -> list[tuple[State, Trigger]]:
    return [(state, t.trigger) for t in TRANSITIONS if state in t.sources]


def test_validate_refuses_unreachable_state() -> None:
    # Without stream_started nothing leads into StreamingLLMResponse.
    broken = _without((S.AWAITING_LLM_RESPONSE, T.STREAM_STARTED))
    with pytest.raises(TableError, match=r"not reachable.*StreamingLLMResponse"):
        validate(broken)


def test_validate_refuses_state_with_no_outgoing_edge() -> None:
    broken = _without(*_edges_from(S.TRANSIENT_FAILURE))
    with pytest.raises(TableError, match=r"TransientFailure is a trap"):
        validate(broken)


def test_validate_refuses_trap_cycle_that_never_returns_to_idle() -> None:
    # PermanentFailure only loops on itself: it has an edge, but is still a trap.
    broken = _without(*_edges_from(S.PERMANENT_FAILURE))
    broken.append(Transition((S.PERMANENT_FAILURE,), T.RESET, S.PERMANENT_FAILURE, "loop"))
    with pytest.raises(TableError, match=r"PermanentFailure is a trap"):
        validate(broken)


@pytest.mark.parametrize("state", sorted(NON_RESTING), ids=str)
def test_validate_refuses_non_resting_state_without_cancel(state: State) -> None:
    broken = _without((state, T.CANCEL))
    with pytest.raises(TableError, match=rf"{state}.*cancel|cancel.*{state}"):
        validate(broken)


def test_resting_state_needs_no_cancel_edge() -> None:
    # AwaitingToolApproval has cancel by design, but the rule does not demand it.
    validate(_without((S.AWAITING_TOOL_APPROVAL, T.CANCEL)))


def test_validate_refuses_non_resting_state_with_no_path_to_permanent_failure() -> None:
    # ExecutingTools only loops on itself: it cannot reach PermanentFailure. (Given
    # the other rules -- every state reachable from Idle and able to get back to
    # it -- such a state is always a trap too, which is what validate() reports.)
    broken = _without(*_edges_from(S.EXECUTING_TOOLS))
    broken.append(Transition((S.EXECUTING_TOOLS,), T.TOOLS_DONE, S.EXECUTING_TOOLS, "loop"))
    with pytest.raises(TableError, match="ExecutingTools"):
        validate(broken)


def test_validate_refuses_two_destinations_for_one_state_and_trigger() -> None:
    broken = [*TRANSITIONS, Transition((S.IDLE,), T.USER_MESSAGE, S.IDLE, "again")]
    with pytest.raises(TableError, match=r"Idle has two destinations for user_message"):
        validate(broken)


def test_validate_accepts_a_duplicate_row_with_the_same_destination() -> None:
    validate([*TRANSITIONS, TRANSITIONS[0]])


def test_validate_refuses_row_without_sources() -> None:
    broken = [*TRANSITIONS, Transition((), T.RESET, S.IDLE, "from nowhere")]
    with pytest.raises(TableError, match="no source"):
        validate(broken)


def test_table_error_is_a_turnfsm_error() -> None:
    from turnfsm.errors import TurnFSMError

    assert issubclass(TableError, TurnFSMError)
