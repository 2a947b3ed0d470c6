"""The runtime machine (turnfsm.states._machine): TurnMachine and ContextHolder."""

from __future__ import annotations

import itertools

import pytest

from turnfsm.errors import IllegalTransition, TurnFSMError
from turnfsm.states import (
    STATE_EFFECTS,
    TRANSITIONS,
    ContextHolder,
    Effect,
    State,
    Trigger,
    TurnMachine,
    next_state,
)
from turnfsm.states._machine import LeanState

EDGES: list[tuple[State, Trigger, State]] = [
    (src, t.trigger, t.dest) for t in TRANSITIONS for src in t.sources
]
ILLEGAL: list[tuple[State, Trigger]] = [
    (s, t) for s, t in itertools.product(State, Trigger) if next_state(s, t) is None
]


@pytest.fixture(scope="module")
def machine() -> TurnMachine:
    return TurnMachine()


def _attached(machine: TurnMachine, state: State, context_id: str = "ctx") -> ContextHolder:
    h = ContextHolder(context_id)
    machine.attach(h, state)
    return h


def test_edges_cover_the_table() -> None:
    assert len(EDGES) == len({(s, t) for s, t, _ in EDGES})
    assert len(EDGES) + len(ILLEGAL) == len(State) * len(Trigger)


@pytest.mark.parametrize(("src", "trigger", "dest"), EDGES, ids=lambda v: str(v))
def test_every_edge_moves_the_holder_as_the_table_says(
    machine: TurnMachine, src: State, trigger: Trigger, dest: State
) -> None:
    h = _attached(machine, src)
    try:
        assert machine.fire(h, trigger) is dest
        assert h.state == dest.value
        assert h.steps == [(src, trigger, dest)]
        step = h.steps[0]
        assert all(type(x) in (State, Trigger) for x in step)
        assert h.effect is STATE_EFFECTS.get(dest)
    finally:
        machine.detach(h)


def test_effect_is_noted_per_entered_state(machine: TurnMachine) -> None:
    h = _attached(machine, State.IDLE)
    try:
        path = [
            (Trigger.USER_MESSAGE, Effect.PREPARE),
            (Trigger.PROMPT_READY, Effect.CALL_LLM),
            (Trigger.STREAM_STARTED, None),
            (Trigger.LLM_FAILED_TRANSIENT, Effect.BACKOFF),
            (Trigger.RETRY, Effect.CALL_LLM),
            (Trigger.RESPONSE_RECEIVED, Effect.DECIDE),
            (Trigger.TOOLS_DECIDED, Effect.RUN_TOOLS),
            (Trigger.OUTCOME_UNKNOWN, None),
            (Trigger.CANCEL, None),
        ]
        for trigger, effect in path:
            machine.fire(h, trigger)
            assert h.effect is effect, trigger
        assert h.state == State.IDLE
        assert [step[1] for step in h.steps] == [t for t, _ in path]
    finally:
        machine.detach(h)


def test_a_canonical_trace_is_recorded_in_steps(machine: TurnMachine) -> None:
    # docs/architecture.md, canonical traces: "auto-approved tool"
    h = _attached(machine, State.IDLE)
    try:
        for trigger in [
            Trigger.USER_MESSAGE,
            Trigger.PROMPT_READY,
            Trigger.RESPONSE_RECEIVED,
            Trigger.TOOLS_DECIDED,
            Trigger.TOOLS_DONE,
            Trigger.RESPONSE_RECEIVED,
            Trigger.TURN_COMPLETE,
        ]:
            machine.fire(h, trigger)
        trace = [h.steps[0][0].value] + [to.value for _, _, to in h.steps]
        assert trace == [
            "Idle",
            "ProcessingUserMessage",
            "AwaitingLLMResponse",
            "ProcessingLLMResponse",
            "ExecutingTools",
            "AwaitingLLMResponse",
            "ProcessingLLMResponse",
            "Idle",
        ]
        # consecutive steps chain
        for (_, _, a), (b, _, _) in itertools.pairwise(h.steps):
            assert a is b
    finally:
        machine.detach(h)


@pytest.mark.parametrize(("state", "trigger"), ILLEGAL, ids=lambda v: str(v))
def test_illegal_trigger_raises_and_changes_nothing(
    machine: TurnMachine, state: State, trigger: Trigger
) -> None:
    h = _attached(machine, state, context_id="c-42")
    h.effect = Effect.DECIDE  # a sentinel: must survive the refused trigger
    h.steps.append((State.IDLE, Trigger.USER_MESSAGE, State.PROCESSING_USER_MESSAGE))
    steps_before = list(h.steps)
    try:
        with pytest.raises(IllegalTransition) as info:
            machine.fire(h, trigger)
        err = info.value
        assert err.state == state
        assert err.trigger == trigger
        assert err.context_id == "c-42"
        assert state.value in str(err)
        assert trigger.value in str(err)
        assert h.state == state.value
        assert h.steps == steps_before
        assert h.effect is Effect.DECIDE
    finally:
        machine.detach(h)


def test_illegal_transition_is_a_turnfsm_error() -> None:
    assert issubclass(IllegalTransition, TurnFSMError)


def test_illegal_transition_message_uses_exact_names(machine: TurnMachine) -> None:
    h = _attached(machine, State.IDLE, context_id="c1")
    try:
        with pytest.raises(IllegalTransition) as info:
            machine.fire(h, Trigger.PROMPT_READY)
        assert str(info.value) == (
            "event 'prompt_ready' is not allowed in state 'Idle' (context c1); nothing was changed"
        )
    finally:
        machine.detach(h)


@pytest.mark.parametrize("state", list(State), ids=str)
def test_attach_at_stored_state_runs_no_enter_callback(machine: TurnMachine, state: State) -> None:
    h = ContextHolder("ctx")
    machine.attach(h, state)
    try:
        assert h.state == state.value
        assert h.effect is None
        assert h.steps == []
    finally:
        machine.detach(h)


def test_attach_resets_a_stale_effect(machine: TurnMachine) -> None:
    h = ContextHolder("ctx")
    h.effect = Effect.RUN_TOOLS
    machine.attach(h, State.EXECUTING_TOOLS)
    try:
        assert h.effect is None
    finally:
        machine.detach(h)


def test_unattached_holder_refuses_its_trigger() -> None:
    h = ContextHolder("lonely")
    with pytest.raises(RuntimeError, match="lonely"):
        h.trigger("user_message")


def test_holder_gets_no_extra_trigger_methods(machine: TurnMachine) -> None:
    # model_override=True: only what ContextHolder declares is bound.
    h = _attached(machine, State.IDLE)
    try:
        for name in ["to_Idle", "is_Idle", "user_message", "may_user_message", "cancel"]:
            assert not hasattr(h, name), name
    finally:
        machine.detach(h)


def test_detach_removes_the_model(machine: TurnMachine) -> None:
    before = machine.attached
    h = _attached(machine, State.IDLE)
    assert machine.attached == before + 1
    machine.detach(h)
    assert machine.attached == before
    machine.detach(h)  # idempotent
    assert machine.attached == before


def test_detach_keeps_the_holder_state(machine: TurnMachine) -> None:
    h = _attached(machine, State.IDLE)
    machine.fire(h, Trigger.USER_MESSAGE)
    machine.detach(h)
    assert h.state == State.PROCESSING_USER_MESSAGE.value
    assert len(h.steps) == 1


def test_fire_on_a_detached_holder_is_refused(machine: TurnMachine) -> None:
    h = _attached(machine, State.IDLE)
    machine.detach(h)
    with pytest.raises((TurnFSMError, RuntimeError)):
        machine.fire(h, Trigger.USER_MESSAGE)
    assert h.state == State.IDLE.value
    assert h.steps == []


def test_one_machine_serves_many_holders_independently(machine: TurnMachine) -> None:
    before = machine.attached
    holders = {s: _attached(machine, s, context_id=f"ctx-{s}") for s in State}
    try:
        assert machine.attached == before + len(State)
        a = holders[State.IDLE]
        b = holders[State.AWAITING_LLM_RESPONSE]
        machine.fire(a, Trigger.USER_MESSAGE)
        machine.fire(b, Trigger.LLM_FAILED_TRANSIENT)
        machine.fire(a, Trigger.PROMPT_READY)
        assert a.state == State.AWAITING_LLM_RESPONSE.value
        assert b.state == State.TRANSIENT_FAILURE.value
        assert a.effect is Effect.CALL_LLM
        assert b.effect is Effect.BACKOFF
        assert [s[1] for s in a.steps] == [Trigger.USER_MESSAGE, Trigger.PROMPT_READY]
        assert b.steps == [
            (State.AWAITING_LLM_RESPONSE, Trigger.LLM_FAILED_TRANSIENT, State.TRANSIENT_FAILURE)
        ]
        for s, h in holders.items():
            if h not in (a, b):
                assert h.state == s.value
                assert h.steps == []
                assert h.effect is None
        # an illegal trigger on one does not disturb another
        with pytest.raises(IllegalTransition):
            machine.fire(holders[State.IDLE], Trigger.RETRY)
        assert b.state == State.TRANSIENT_FAILURE.value
    finally:
        for h in holders.values():
            machine.detach(h)
    assert machine.attached == before


def test_two_machines_do_not_share_models() -> None:
    m1, m2 = TurnMachine(), TurnMachine()
    h = _attached(m1, State.IDLE)
    assert m1.attached == 1
    assert m2.attached == 0
    m1.detach(h)


def test_many_holders_attach_and_detach() -> None:
    m = TurnMachine()
    holders = [_attached(m, State.IDLE, context_id=str(i)) for i in range(200)]
    assert m.attached == 200
    for i, h in enumerate(holders):
        if i % 2:
            m.fire(h, Trigger.USER_MESSAGE)
    assert sum(h.state == State.PROCESSING_USER_MESSAGE for h in holders) == 100
    for h in holders:
        m.detach(h)
    assert m.attached == 0


def test_reattach_after_detach_resumes_from_the_stored_state(machine: TurnMachine) -> None:
    h = _attached(machine, State.IDLE)
    machine.fire(h, Trigger.USER_MESSAGE)
    machine.detach(h)
    machine.attach(h, State.PROCESSING_USER_MESSAGE)
    try:
        assert h.effect is None
        assert machine.fire(h, Trigger.PROMPT_READY) is State.AWAITING_LLM_RESPONSE
        assert h.state == State.AWAITING_LLM_RESPONSE.value
    finally:
        machine.detach(h)


def test_the_states_read_their_machines_settings_from_its_attribute_dict() -> None:
    tm = TurnMachine()
    machine = tm._machine
    for state in machine.states.values():
        assert isinstance(state, LeanState)
        assert state.machine_fields is vars(machine)
    # a LeanState its machine gave nothing reads the machine itself
    assert LeanState("x").machine_fields is None


def _bound_names(machine: TurnMachine) -> list[tuple[str, list[str], list[str]]]:
    return [(s.name, list(s.on_enter), list(s.on_exit)) for s in machine._machine.states.values()]


@pytest.mark.parametrize("state", list(State))
def test_attaching_a_holder_ends_as_transitions_add_model_would(state: State) -> None:
    # the machine's add_model skips the bindings it would not make for a holder;
    # transitions' own add_model, on another machine, is the reference
    ours, reference = TurnMachine(), TurnMachine()
    callbacks_before = _bound_names(ours)
    mine, theirs = ContextHolder("a"), ContextHolder("a")
    ours.attach(mine, state)
    Machine = type(reference._machine).__mro__[1]
    Machine.add_model(reference._machine, theirs, initial=state.value)
    assert mine.state == theirs.state == state.value
    assert ours._machine.models == [mine]
    assert reference._machine.models == [theirs]
    assert _bound_names(ours) == _bound_names(reference) == callbacks_before
    ours.attach(mine, state)  # attached already: added once, as transitions does
    assert ours._machine.models == [mine]
    if state is State.IDLE:  # and the holder takes its triggers through the machine
        assert ours.fire(mine, Trigger.USER_MESSAGE) is State.PROCESSING_USER_MESSAGE
        assert mine.steps == [(State.IDLE, Trigger.USER_MESSAGE, State.PROCESSING_USER_MESSAGE)]


def test_a_holder_class_that_declares_a_bound_name_takes_the_full_path() -> None:
    machine = TurnMachine()
    lean = machine._machine
    assert lean._binds_to_holder() is False
    ContextHolder.may_user_message = lambda self: True  # type: ignore[attr-defined]
    try:
        lean._holder_binds = None
        assert lean._binds_to_holder() is True
        h = ContextHolder("b")
        with pytest.raises(AttributeError):  # the full path binds it, and a slotted holder refuses
            machine.attach(h, State.IDLE)
    finally:
        del ContextHolder.may_user_message  # type: ignore[attr-defined]
        lean._holder_binds = None
    assert lean._binds_to_holder() is False
