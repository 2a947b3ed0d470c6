"""Pins for the behaviour of the ``transitions`` library that turnfsm relies on.

See docs/architecture.md, "Using transitions safely". If an upgrade of
``transitions`` changes one of these, this file fails before the engine does.
Only this test file and turnfsm/states/_machine.py may import ``transitions``
(tests/test_layering.py checks it).
"""

from __future__ import annotations

import re
from importlib.metadata import version
from typing import Any

import pytest
import transitions
from transitions import EventData, Machine, MachineError

from turnfsm.states._machine import LeanMachine, LeanTransition

STATES = ["Idle", "Busy", "Done"]
EDGES = [
    {"trigger": "go", "source": "Idle", "dest": "Busy"},
    {"trigger": "finish", "source": "Busy", "dest": "Done"},
    {"trigger": "reset", "source": ["Busy", "Done"], "dest": "Idle"},
]


class Holder:
    """A model that declares only ``trigger`` (like turnfsm's ContextHolder)."""

    state: str

    def __init__(self) -> None:
        self.log: list[Any] = []

    def trigger(self, name: str) -> bool:  # replaced by the machine
        raise RuntimeError("not attached")


MACHINES: dict[str, type[Machine]] = {"stock": Machine, "lean": LeanMachine}
_machine_cls: type[Machine] = Machine


@pytest.fixture(autouse=True, params=sorted(MACHINES))
def machine_kind(request: pytest.FixtureRequest) -> str:
    """Every pin holds for the stock classes and for the engine's lean ones."""
    global _machine_cls
    _machine_cls = MACHINES[request.param]
    return str(request.param)


def safe_machine(**overrides: Any) -> Machine:
    """A machine with the flags turnfsm uses (docs/architecture.md, "How callbacks run")."""
    kwargs: dict[str, Any] = {
        "model": [],
        "states": STATES,
        "transitions": EDGES,
        "initial": "Idle",
        "auto_transitions": False,
        "ignore_invalid_triggers": False,
        "queued": False,
        "model_override": True,
        "send_event": True,
    }
    kwargs.update(overrides)
    return _machine_cls(**kwargs)


def test_installed_version_is_in_the_pinned_range() -> None:
    v = version("transitions")
    major, minor, patch = (int(re.match(r"\d+", p).group()) for p in v.split(".")[:3])  # type: ignore[union-attr]
    assert (0, 9, 3) <= (major, minor, patch) < (0, 10, 0), v
    assert transitions.__version__ == v


# --- auto_transitions -------------------------------------------------------------------


def test_auto_transitions_false_adds_no_to_state_methods() -> None:
    m = safe_machine(model_override=False)
    h = Holder()
    m.add_model(h)
    for s in STATES:
        assert not hasattr(h, f"to_{s}")
    assert "to_Idle" not in m.events
    assert set(m.events) == {"go", "finish", "reset"}


def test_auto_transitions_true_would_bypass_the_table() -> None:
    # The contrast: the default adds to_<state> from every state.
    m = safe_machine(model_override=False, auto_transitions=True)
    h = Holder()
    m.add_model(h)
    h.to_Done()  # type: ignore[attr-defined]
    assert h.state == "Done"


# --- invalid triggers -------------------------------------------------------------------


def test_invalid_trigger_raises_machine_error_and_keeps_state() -> None:
    m = safe_machine()
    h = Holder()
    m.add_model(h)
    with pytest.raises(MachineError, match="finish"):
        h.trigger("finish")
    assert h.state == "Idle"
    with pytest.raises(MachineError):
        m.events["finish"].trigger(h)
    assert h.state == "Idle"


def test_ignore_invalid_triggers_true_would_hide_the_error() -> None:
    m = safe_machine(ignore_invalid_triggers=True)
    h = Holder()
    m.add_model(h)
    assert h.trigger("finish") is False
    assert h.state == "Idle"


def test_machine_error_is_an_exception_with_a_value() -> None:
    assert issubclass(MachineError, Exception)
    err = MachineError("boom")
    assert err.value == "boom"


# --- model_override -------------------------------------------------------------------


def test_model_override_binds_only_declared_methods() -> None:
    m = safe_machine()
    h = Holder()
    m.add_model(h)
    # declared: replaced by the machine
    assert h.trigger("go") is True
    assert h.state == "Busy"
    # not declared: not added
    for name in ["go", "finish", "reset", "is_Idle", "is_Busy", "may_go", "may_trigger"]:
        assert not hasattr(h, name), name


def test_model_override_replaces_a_declared_trigger_method() -> None:
    class WithGo(Holder):
        def go(self) -> bool:
            raise RuntimeError("placeholder")

    m = safe_machine()
    h = WithGo()
    m.add_model(h)
    assert h.go() is True
    assert h.state == "Busy"
    assert not hasattr(h, "finish")


def test_without_model_override_the_model_is_decorated() -> None:
    m = safe_machine(model_override=False)
    h = Holder()
    m.add_model(h)
    assert hasattr(h, "is_Idle")
    assert hasattr(h, "go")
    assert hasattr(h, "may_go")


# --- callbacks: no rollback, EventData ----------------------------------------------------


def test_after_callback_raising_leaves_the_new_state() -> None:
    class Boom(Holder):
        def explode(self, event: EventData) -> None:
            raise ValueError("after")

    m = safe_machine(after_state_change="explode")
    h = Boom()
    m.add_model(h)
    with pytest.raises(ValueError, match="after"):
        h.trigger("go")
    assert h.state == "Busy"  # no rollback


def test_on_enter_callback_raising_leaves_the_new_state() -> None:
    class Boom(Holder):
        def on_enter_busy(self, event: EventData) -> None:
            raise ValueError("enter")

    states: list[Any] = [
        "Idle",
        {"name": "Busy", "on_enter": ["on_enter_busy"]},
        "Done",
    ]
    m = safe_machine(states=states)
    h = Boom()
    m.add_model(h)
    with pytest.raises(ValueError, match="enter"):
        h.trigger("go")
    assert h.state == "Busy"  # no rollback
    # ... and the machine keeps working from there
    assert h.trigger("finish") is True
    assert h.state == "Done"


def test_send_event_passes_one_event_data() -> None:
    seen: list[tuple[Any, ...]] = []

    class Rec(Holder):
        def note(self, *args: Any, **kwargs: Any) -> None:
            seen.append((args, kwargs))

    m = safe_machine(after_state_change="note")
    h = Rec()
    m.add_model(h)
    h.trigger("go")
    assert len(seen) == 1
    args, kwargs = seen[0]
    assert kwargs == {}
    assert len(args) == 1
    event = args[0]
    assert isinstance(event, EventData)
    assert event.model is h
    assert event.machine is m
    assert event.event is not None and event.event.name == "go"
    assert event.transition is not None
    assert event.transition.source == "Idle"
    assert event.transition.dest == "Busy"
    # In after_state_change, event.state is already the *new* state: read the
    # source from event.transition (as ContextHolder.after_step does).
    assert event.state is not None and event.state.name == "Busy"


def test_after_state_change_is_not_called_for_a_refused_trigger() -> None:
    calls: list[str] = []

    class Rec(Holder):
        def note(self, event: EventData) -> None:
            calls.append(event.event.name)  # type: ignore[union-attr]

    m = safe_machine(after_state_change="note")
    h = Rec()
    m.add_model(h)
    with pytest.raises(MachineError):
        h.trigger("reset")
    assert calls == []


# --- add_model(initial=...) ------------------------------------------------------------


def test_add_model_with_initial_runs_no_on_enter_callback() -> None:
    entered: list[str] = []

    class Rec(Holder):
        def on_enter_busy(self, event: EventData) -> None:
            entered.append(event.state.name)  # type: ignore[union-attr]

    states: list[Any] = ["Idle", {"name": "Busy", "on_enter": ["on_enter_busy"]}, "Done"]
    m = safe_machine(states=states)
    h = Rec()
    m.add_model(h, initial="Busy")
    assert h.state == "Busy"
    assert entered == []
    # entering it through a transition does run it
    h2 = Rec()
    m.add_model(h2)
    h2.trigger("go")
    assert entered == ["Busy"]


def test_remove_model_keeps_bound_methods_and_state() -> None:
    m = safe_machine()
    h = Holder()
    m.add_model(h)
    h.trigger("go")
    m.remove_model(h)
    assert h not in m.models
    assert h.state == "Busy"
    # "The model will still contain all previously added triggers" -- the reason
    # TurnMachine must not rely on remove_model to stop a stale holder.
    assert h.trigger("finish") is True


def test_models_share_one_machine_independently() -> None:
    m = safe_machine()
    a, b = Holder(), Holder()
    m.add_model(a)
    m.add_model(b, initial="Done")
    a.trigger("go")
    assert (a.state, b.state) == ("Busy", "Done")
    b.trigger("reset")
    assert (a.state, b.state) == ("Busy", "Idle")


# --- queued=False ------------------------------------------------------------------------


def _nested_order(queued: bool) -> tuple[list[str], Any]:
    order: list[str] = []

    class Rec(Holder):
        def after(self, event: EventData) -> None:
            name = event.event.name  # type: ignore[union-attr]
            order.append(f"after {name} begins")
            if name == "go":
                self.trigger("finish")
            order.append(f"after {name} ends")

    m = safe_machine(queued=queued, after_state_change="after")
    h = Rec()
    m.add_model(h)
    result = h.trigger("go")
    order.append(f"returned in {h.state}")
    return order, result


def test_queued_false_runs_a_trigger_synchronously_and_nested() -> None:
    order, result = _nested_order(queued=False)
    assert result is True
    assert order == [
        "after go begins",
        "after finish begins",
        "after finish ends",
        "after go ends",
        "returned in Done",
    ]


def test_queued_true_would_defer_the_nested_trigger() -> None:
    order, result = _nested_order(queued=True)
    assert result is True
    assert order == [
        "after go begins",
        "after go ends",
        "after finish begins",
        "after finish ends",
        "returned in Done",
    ]


def test_queued_false_trigger_returns_after_state_changed() -> None:
    m = safe_machine()
    h = Holder()
    m.add_model(h)
    assert h.trigger("go") is True
    assert h.state == "Busy"


class Recorder(Holder):
    """Notes every callback transitions runs, by name."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("cb_", "cond_")):
            passes = not name.startswith("cond_no")

            def callback(event: EventData) -> bool:
                self.log.append(name)
                return passes

            return callback
        raise AttributeError(name)


def test_callbacks_run_in_transitions_order(machine_kind: str) -> None:
    states = [
        {"name": "Idle", "on_exit": ["cb_exit"]},
        {"name": "Busy", "on_enter": ["cb_enter"]},
        "Done",
    ]
    edges = [
        {
            "trigger": "go",
            "source": "Idle",
            "dest": "Busy",
            "prepare": "cb_prepare",
            "conditions": "cond_yes",
            "before": "cb_before",
            "after": "cb_after",
        },
        {"trigger": "stay", "source": "Busy", "dest": "Done", "conditions": "cond_no"},
    ]
    m = safe_machine(
        states=states,
        transitions=edges,
        prepare_event="cb_prepare_event",
        before_state_change="cb_before_state_change",
        after_state_change="cb_after_state_change",
        finalize_event="cb_finalize_event",
    )
    assert type(m) is MACHINES[machine_kind]
    r = Recorder()
    m.add_model(r)
    assert r.trigger("go") is True
    assert r.log == [
        "cb_prepare_event",
        "cb_prepare",
        "cond_yes",
        "cb_before_state_change",
        "cb_before",
        "cb_exit",
        "cb_enter",
        "cb_after",
        "cb_after_state_change",
        "cb_finalize_event",
    ]
    assert r.state == "Busy"
    r.log.clear()
    assert r.trigger("stay") is False  # a failed condition: no change, finalize still runs
    assert r.log == ["cb_prepare_event", "cond_no", "cb_finalize_event"]
    assert r.state == "Busy"


def test_on_exception_receives_the_error_instead_of_raising(machine_kind: str) -> None:
    seen: list[BaseException | None] = []

    class Model(Holder):
        def explode(self, event: EventData) -> None:
            raise ValueError("boom")

        def handle(self, event: EventData) -> None:
            seen.append(event.error)

    m = safe_machine(after_state_change="explode", on_exception="handle")
    model = Model()
    m.add_model(model)
    model.trigger("go")
    assert len(seen) == 1 and isinstance(seen[0], ValueError)
    assert model.state == "Busy"


def test_the_lean_classes_read_the_attributes_behind_the_properties() -> None:
    # LeanEvent and LeanTransition read these attributes and State._name directly
    m = LeanMachine(
        states=["a", "b"],
        transitions=[{"trigger": "go", "source": "a", "dest": "b"}],
        initial="a",
        prepare_event="p",
        before_state_change="b1",
        after_state_change="a1",
        finalize_event="f",
    )
    assert m._prepare_event is m.prepare_event and m.prepare_event == ["p"]
    assert m._before_state_change is m.before_state_change == ["b1"]
    assert m._after_state_change is m.after_state_change == ["a1"]
    assert m._finalize_event is m.finalize_event == ["f"]
    state = m.get_state("b")
    assert state._name == state.name == state.value == "b"


def test_callbacks_set_after_the_machine_is_built_run_on_the_next_trigger(
    machine_kind: str,
) -> None:
    # the lean classes read the machine's settings from its live attribute
    # dict: what the property setters put there later is what a step runs
    m = safe_machine()
    r = Recorder()
    m.add_model(r)
    m.prepare_event = "cb_prepare_event"
    m.before_state_change = "cb_before_state_change"
    m.after_state_change = ["cb_after_state_change"]
    m.finalize_event = "cb_finalize_event"
    assert r.trigger("go") is True
    assert r.log == [
        "cb_prepare_event",
        "cb_before_state_change",
        "cb_after_state_change",
        "cb_finalize_event",
    ]
    assert r.state == "Busy"
    r.log.clear()
    m.after_state_change = []
    m.finalize_event = []
    assert r.trigger("finish") is True
    assert r.log == ["cb_prepare_event", "cb_before_state_change"]
    assert r.state == "Done"


def test_a_lean_transition_made_outside_an_event_reads_its_machine(machine_kind: str) -> None:
    if machine_kind != "lean":
        pytest.skip("a lean class's own fallback")
    m = safe_machine(after_state_change="cb_after_state_change")
    r = Recorder()
    m.add_model(r)
    loose = LeanTransition("Idle", "Busy")
    assert loose.machine_fields is None
    event = m.events["go"]
    data = EventData(m.get_state("Idle"), event, m, r, (), {})
    assert loose.execute(data) is True
    assert r.state == "Busy"
    assert r.log == ["cb_after_state_change"]
