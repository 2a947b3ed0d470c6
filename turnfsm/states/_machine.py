"""The runtime machine: one shared ``transitions.Machine`` built from the table.

This is the only module of turnfsm that imports ``transitions``. The flags are
the safe ones (docs/architecture.md, "Using transitions safely"): no auto
transitions, no queue (which is shared by every model), model override (a
holder is only given the methods it declares), events passed to callbacks, no
``on_exception`` (which would swallow errors, cancellation included).

Each loaded context gets a small :class:`ContextHolder` (never the context
record), attached with ``add_model(initial=stored_state)`` and detached with
``remove_model`` when it unloads. The trigger is synchronous and atomic: the
callbacks declared in the table only *note* what happened (the transition for
the store, the effect the engine runs next); the engine runs the async work.
"""

from __future__ import annotations

import logging
from typing import Any

from transitions import Event, EventData, Machine, Transition
from transitions import State as _State

from ..errors import IllegalTransition
from ._table import (
    EFFECT_CALLBACKS,
    INITIAL,
    STATE_EFFECTS,
    TRANSITIONS,
    Effect,
    State,
    Trigger,
    next_state,
)

__all__ = [
    "ContextHolder",
    "LeanEvent",
    "LeanMachine",
    "LeanState",
    "LeanTransition",
    "StepRecord",
    "TurnMachine",
]

# transitions logs one warning per method it does not bind under the model
# override policy (by design here: a holder declares only what it wants), about
# forty on every add_model. Quiet them unless the application set a level itself.
_transitions_log = logging.getLogger("transitions.core")
if _transitions_log.level == logging.NOTSET:
    _transitions_log.setLevel(logging.ERROR)

StepRecord = tuple[State, Trigger, State]
"""One committed step: (from, trigger, to)."""

_STATES: dict[str, State] = {s.value: s for s in State}
_TRIGGERS: dict[str, Trigger] = {t.value: t for t in Trigger}

# The effects as module constants: on Python 3.11 reading a member off its enum
# class goes through ``EnumType.__getattr__``'s slow lookup, and an enter
# callback runs on nearly every step.
_PREPARE = Effect.PREPARE
_CALL_LLM = Effect.CALL_LLM
_DECIDE = Effect.DECIDE
_RUN_TOOLS = Effect.RUN_TOOLS
_BACKOFF = Effect.BACKOFF


class ContextHolder:
    """The machine's model for one loaded context.

    ``state`` is set by the machine; ``effect`` is the work declared on the state
    just entered (None in a resting state); ``steps`` collects the transitions
    taken since the engine last drained it.

    The holder owns a loaded context's current state: the engine reads it
    here, and the context's ``current_state`` is the state as last committed
    (the engine writes it when a commit succeeds, from this one).
    """

    # slotted: the engine keeps one per loaded context, and an instance's
    # attribute values take more room than its slots
    __slots__ = ("attached", "context_id", "effect", "machine", "state", "steps")

    state: str
    """Set by the machine (the state's name; transitions keeps it a plain string).
    The one current state of the loaded context."""

    def __init__(self, context_id: str) -> None:
        self.context_id = context_id
        self.effect: Effect | None = None
        self.steps: list[StepRecord] = []
        self.attached = False
        self.machine: Machine | None = None
        """The ``transitions.Machine`` it was last attached to (kept after a
        detach, as transitions keeps the methods it bound)."""

    def current(self) -> State:
        """``state`` as a :class:`State` (a dict lookup: quicker than ``State(state)``)."""
        return _STATES[self.state]

    def trigger(self, name: str, *args: Any, **kwargs: Any) -> bool:
        """transitions' ``trigger`` convenience method, which ``add_model`` binds
        to each model as a ``functools.partial``: written here instead, as the
        machine's own, so that a loaded context does not keep one."""
        machine = self.machine
        if machine is None:
            raise RuntimeError(f"context {self.context_id} is not attached to the machine")
        return bool(machine._get_trigger(self, name, *args, **kwargs))

    # Callbacks named in the table (EFFECT_CALLBACKS) and by the machine.
    def on_enter_prepare(self, event: EventData) -> None:
        self.effect = _PREPARE

    def on_enter_call_llm(self, event: EventData) -> None:
        self.effect = _CALL_LLM

    def on_enter_decide(self, event: EventData) -> None:
        self.effect = _DECIDE

    def on_enter_run_tools(self, event: EventData) -> None:
        self.effect = _RUN_TOOLS

    def on_enter_backoff(self, event: EventData) -> None:
        self.effect = _BACKOFF

    def after_step(self, event: EventData) -> None:
        t = event.transition
        if type(t) is LeanTransition and t.step is not None:  # the record made with the table
            self.steps.append(t.step)
            return
        assert t is not None and event.event is not None and t.dest is not None
        self.steps.append((_STATES[t.source], _TRIGGERS[event.event.name], _STATES[t.dest]))


# ---------------------------------------------------------------- lean classes
#
# transitions' documented extension points (``state_cls``, ``transition_cls``,
# ``event_cls`` and a ``Machine`` subclass) with the per-trigger work the engine
# does not use taken out: the debug/info log calls on every step, the
# ``functools.partial`` and queue check around an unqueued trigger, and the
# name lookups of the source and destination State objects. Every trigger
# still runs through these Event, Transition and State objects and the
# callbacks declared with the table, in transitions' order: prepare,
# conditions, before_state_change/before, exit, set the state, enter,
# after/after_state_change, finalize_event. tests/test_transitions_pins.py
# pins that order and the raising behaviour for both the stock and the lean
# classes.


class LeanState(_State):
    """A State whose enter/exit run their callbacks without the log calls."""

    machine_fields: dict[str, Any] | None = None
    """Its machine's ``vars`` when the machine that made it gave them (see
    ``LeanEvent.machine_fields``; :class:`TurnMachine` does); else the
    machine's attribute is read."""

    def enter(self, event_data: EventData) -> None:
        on_enter = self.on_enter
        if on_enter:
            machine = event_data.machine
            fields = self.machine_fields
            send_event = machine.send_event if fields is None else fields["send_event"]
            # the commonest case, the one callback the table names (a method of
            # the holder), called here as ``callbacks`` would call it, without its frame
            if len(on_enter) == 1 and type(on_enter[0]) is str and send_event:
                method = getattr(event_data.model, on_enter[0], None)
                if method is not None and callable(method):
                    method(event_data)
                    return
            machine.callbacks(on_enter, event_data)

    def exit(self, event_data: EventData) -> None:
        if self.on_exit:
            event_data.machine.callbacks(self.on_exit, event_data)


class LeanTransition(Transition):
    """A Transition that looks its State objects up once and skips the log calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.source_state: _State | None = None
        self.dest_state: _State | None = None
        self.step: StepRecord | None = None
        """What ``ContextHolder.after_step`` records for this transition: set when
        its event adds it, if its states and trigger are the table's."""
        self.machine_fields: dict[str, Any] | None = None
        """Its machine's ``vars``, set when a :class:`LeanEvent` adds it (see
        ``LeanEvent.machine_fields``)."""

    def execute(self, event_data: EventData) -> bool:
        # transitions' own order: prepare, conditions, before, exit, set the
        # state, enter, final, after; the state change is written out here
        # rather than called through ``_change_state``, since every step of
        # every turn runs it (the machine's callback lists are read from the
        # attributes behind transitions' properties ``before_state_change``
        # and ``after_state_change``, which return the same lists)
        machine = event_data.machine
        fields = self.machine_fields
        if fields is None:  # not added by a LeanEvent: read through the machine
            fields = vars(machine)
        if self.prepare:
            machine.callbacks(self.prepare, event_data)
        if self.conditions and not self._eval_conditions(event_data):
            return False
        before = fields["_before_state_change"]
        if before or self.before:
            machine.callbacks([*before, *self.before], event_data)
        if self.dest:  # None: an internal transition, no change of state
            source, dest = self.source_state, self.dest_state
            if source is None or dest is None:
                source = self.source_state = machine.get_state(self.source)
                dest = self.dest_state = machine.get_state(self.dest)
            if source.on_exit:
                source.exit(event_data)
            setattr(event_data.model, fields["model_attribute"], dest._name)
            event_data.state = dest
            dest.enter(event_data)
            if dest.final:
                machine.callbacks(machine.on_final, event_data)
        if self.after:
            machine.callbacks(self.after, event_data)
        after = fields["_after_state_change"]
        if after:
            # as in ``LeanState.enter``: the holder's one declared method at once
            if len(after) == 1 and type(after[0]) is str and fields["send_event"]:
                method = getattr(event_data.model, after[0], None)
                if method is not None and callable(method):
                    method(event_data)
                    return True
            machine.callbacks(after, event_data)
        return True

    def _change_state(self, event_data: EventData) -> None:
        # what ``execute`` does inline; kept for transitions' own callers
        machine = event_data.machine
        source, dest = self.source_state, self.dest_state
        if source is None or dest is None:
            assert self.dest is not None
            source = self.source_state = machine.get_state(self.source)
            dest = self.dest_state = machine.get_state(self.dest)
        source.exit(event_data)
        setattr(event_data.model, machine.model_attribute, dest.value)
        event_data.state = dest
        dest.enter(event_data)
        if dest.final:
            machine.callbacks(machine.on_final, event_data)


class LeanEvent(Event):
    """An Event whose trigger runs at once (the machine has no queue)."""

    def __init__(self, name: str, machine: Machine) -> None:
        super().__init__(name, machine)
        self.machine_fields: dict[str, Any] = vars(machine)
        """The machine's instance attributes, the live dict behind them: a step
        reads its settings and callback lists here, as every attribute read
        on a ``Machine`` goes through the ``__getattr__`` hook its class
        defines (a lookup of the type's ``__getattr__`` first), which the
        interpreter cannot specialise."""

    def add_transition(self, transition: Transition) -> None:
        super().add_transition(transition)
        if type(transition) is LeanTransition:
            transition.machine_fields = self.machine_fields
        if type(transition) is LeanTransition and transition.dest is not None:
            source = _STATES.get(transition.source)
            trigger = _TRIGGERS.get(self.name)
            dest = _STATES.get(transition.dest)
            if source is not None and trigger is not None and dest is not None:
                transition.step = (source, trigger, dest)

    def trigger(self, model: Any, *args: Any, **kwargs: Any) -> bool:
        machine = self.machine
        if machine.has_queue:  # pragma: no cover - the engine's machine is unqueued
            return bool(super().trigger(model, *args, **kwargs))
        result: bool = self._trigger(EventData(None, self, machine, model, args, kwargs))
        return result

    def _trigger(self, event_data: EventData) -> bool:
        # the model's state is a state's name (the lean machine's states are
        # named by strings: ``State.name`` is its value), and the machine's
        # callback lists are read behind transitions' properties
        machine = self.machine
        fields = self.machine_fields
        name = getattr(event_data.model, fields["model_attribute"])
        state = fields["states"][name]
        event_data.state = state
        try:
            # ``_is_valid_source`` (which raises or logs) only for a refused event,
            # and ``_process`` written out, as every step runs through here
            if name in self.transitions or self._is_valid_source(state):
                prepare = fields["_prepare_event"]
                if prepare:
                    machine.callbacks(prepare, event_data)
                for trans in self.transitions[name]:
                    event_data.transition = trans
                    if trans.execute(event_data):
                        event_data.result = True
                        break
        except BaseException as err:
            event_data.error = err  # type: ignore[assignment]  # as transitions does
            if not machine.on_exception:
                raise
            machine.callbacks(machine.on_exception, event_data)
        finally:
            finalize = fields["_finalize_event"]
            if finalize:
                try:
                    machine.callbacks(finalize, event_data)
                except BaseException as err:  # as transitions does: logged, not raised
                    _transitions_log.error(
                        "While executing finalize callbacks a %s occurred: %s.",
                        type(err).__name__,
                        err,
                    )
        return bool(event_data.result)

    def _process(self, event_data: EventData) -> bool:
        # what ``_trigger`` does inline; kept for transitions' own callers
        machine = self.machine
        if machine.prepare_event:
            machine.callbacks(machine.prepare_event, event_data)
        for trans in self.transitions[event_data.state.name]:
            event_data.transition = trans
            if trans.execute(event_data):
                event_data.result = True
                break
        return bool(event_data.result)


class LeanMachine(Machine):
    """``transitions.Machine`` with the lean classes, and callbacks run
    without a log call each."""

    state_cls = LeanState
    transition_cls = LeanTransition
    event_cls = LeanEvent

    _holder_binds: tuple[int, int, bool] | None = None
    """Whether ``add_model`` binds anything to a :class:`ContextHolder`, for
    the machine's count of states and of events when it was found out."""

    def add_model(self, model: Any, initial: Any = None) -> None:
        # transitions' add_model makes a partial for each name it could bind
        # (a trigger, its ``may_``, each state's ``is_``) and, under the model
        # override policy, binds only those the model already has, then looks
        # for each state's ``on_enter_``/``on_exit_`` methods. A holder is
        # slotted and declares none of them, so for a holder all of it binds
        # nothing: what remains is the state set and the model added.
        if type(model) is ContextHolder and initial is not None and not self._binds_to_holder():
            if not (model.attached and model.machine is self):  # transitions: not in models
                # set_state for one model
                state = initial if isinstance(initial, _State) else self.get_state(initial)
                setattr(model, self.model_attribute, state.value)
                self.models.append(model)
            return
        super().add_model(model, initial=initial)

    def _binds_to_holder(self) -> bool:
        known = self._holder_binds
        if known is not None and known[:2] == (len(self.states), len(self.events)):
            return known[2]
        names = ["may_trigger"]  # ``trigger``: the holder's own (_checked_assignment)
        for trigger in self.events:
            names += (trigger, f"may_{trigger}")
        for state in self.states.values():
            names.append(f"is_{state.name}")
            names += (f"{cb}_{state.name}" for cb in self.state_cls.dynamic_methods)
        # an instance without a __dict__ has only what its class has
        binds = ContextHolder.__dictoffset__ != 0 or any(
            getattr(ContextHolder, name, None) is not None for name in names
        )
        self._holder_binds = (len(self.states), len(self.events), binds)
        return binds

    def _checked_assignment(self, model: Any, name: str, func: Any) -> None:
        if name == "trigger" and type(model) is ContextHolder:
            return  # the holder's own method does what the partial would
        super()._checked_assignment(model, name, func)

    def callbacks(self, funcs: Any, event_data: EventData) -> None:
        # a callback named in the table is a method of the holder: called here
        # as transitions would call it, without a ``callback`` frame and
        # resolve_callable's string dispatch each
        send_event = self.send_event
        model = event_data.model
        for func in funcs:
            if type(func) is str and send_event:
                method = getattr(model, func, None)
                if method is not None and callable(method):
                    method(event_data)
                    continue
            self.callback(func, event_data)

    def callback(self, func: Any, event_data: EventData) -> None:
        # a callback named in the table is a method of the holder: call it as
        # transitions would, without resolve_callable's string dispatch
        if type(func) is str and self.send_event:
            method = getattr(event_data.model, func, None)
            if method is not None and callable(method):
                method(event_data)
                return
        super().callback(func, event_data)


class TurnMachine:
    """The one ``transitions.Machine`` every context shares, built from the table."""

    def __init__(self) -> None:
        states: list[dict[str, Any]] = [
            {"name": s.value, "on_enter": [EFFECT_CALLBACKS[s]] if s in STATE_EFFECTS else []}
            for s in State
        ]
        transitions = [
            {
                "trigger": t.trigger.value,
                "source": [s.value for s in t.sources],
                "dest": t.dest.value,
            }
            for t in TRANSITIONS
        ]
        self._machine = LeanMachine(
            model=[],
            states=states,
            transitions=transitions,
            initial=INITIAL.value,
            auto_transitions=False,
            ignore_invalid_triggers=False,
            queued=False,
            model_override=True,
            send_event=True,
            after_state_change="after_step",
        )

        assert not self._machine.has_queue  # fire calls the events' _trigger directly
        fields = vars(self._machine)
        for state in self._machine.states.values():  # made by this machine, for it alone
            if type(state) is LeanState:
                state.machine_fields = fields
        events = {t: self._machine.events[t.value] for t in Trigger}
        # the table's edges by the holder's state name (what the machine sets),
        # each with its destination and the Event that takes it
        self._edges: dict[tuple[str, Trigger], tuple[State, Event]] = {}
        for s in State:
            for t in Trigger:
                dest = next_state(s, t)
                if dest is not None:
                    self._edges[(s.value, t)] = (dest, events[t])
        self._data = EventData(None, None, self._machine, None, (), {})
        """The EventData :meth:`fire` sets for each trigger (``event`` None between them)."""

    def attach(self, holder: ContextHolder, state: State) -> None:
        """``add_model`` at the stored state (no enter callbacks run)."""
        self._machine.add_model(holder, initial=state.value)
        holder.effect = None
        holder.attached = True
        holder.machine = self._machine

    def detach(self, holder: ContextHolder) -> None:
        if holder.attached:
            self._machine.remove_model(holder)
            holder.attached = False

    @property
    def attached(self) -> int:
        return len(self._machine.models)

    def fire(self, holder: ContextHolder, trigger: Trigger) -> State:
        """Take ``trigger``; raise :class:`IllegalTransition` (changing nothing) if the
        table has no edge for it from the holder's state."""
        if not holder.attached:
            raise RuntimeError(f"context {holder.context_id} is not attached to the machine")
        edge = self._edges.get((holder.state, trigger))
        if edge is None:
            raise IllegalTransition(holder.state, trigger, context_id=holder.context_id)
        dest, event = edge
        holder.effect = None
        # ``Event.trigger`` written out for the unqueued machine, where it does
        # no more than this: its EventData, then the lean ``_trigger``. The
        # machine's one EventData is set as a new one would be (the callbacks
        # the table declares keep nothing of it) rather than one made per step,
        # the costliest part of a step's own bookkeeping, or one kept per holder,
        # which every loaded context would keep; a trigger fired from inside
        # another's callbacks, which finds it in use, gets one of its own.
        data = self._data
        if data.event is not None:
            event._trigger(EventData(None, event, self._machine, holder, (), {}))
            return dest
        data.state = None
        data.event = event
        data.model = holder
        data.transition = None
        data.error = None
        data.result = False
        try:
            event._trigger(data)
        finally:
            data.event = None
            data.model = None
        return dest
