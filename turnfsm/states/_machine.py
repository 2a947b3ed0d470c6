"""The runtime machine: one shared ``transitions.Machine`` built from the table.

This is the only module of turnfsm that imports ``transitions``. The flags are
the safe ones (docs/architecture.md, "Using transitions safely"): no auto
transitions, no queue (which is shared by every model), model override (a
holder is only given the methods it declares), events passed to callbacks, no
``on_exception`` (which would swallow errors, cancellation included).

Each loaded context gets a small :class:`ContextHolder` (never the pydantic
model), attached with ``add_model(initial=stored_state)`` and detached with
``remove_model`` when it unloads. The trigger is synchronous and atomic: the
callbacks declared in the table only *note* what happened (the transition for
the store, the effect the engine runs next); the engine runs the async work.
"""

from __future__ import annotations

import logging
from typing import Any

from transitions import EventData, Machine

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

__all__ = ["ContextHolder", "StepRecord", "TurnMachine"]

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


class ContextHolder:
    """The machine's model for one loaded context.

    ``state`` is set by the machine; ``effect`` is the work declared on the state
    just entered (None in a resting state); ``steps`` collects the transitions
    taken since the engine last drained it.
    """

    state: str
    """Set by the machine (the state's name; transitions keeps it a plain string)."""

    def __init__(self, context_id: str) -> None:
        self.context_id = context_id
        self.effect: Effect | None = None
        self.steps: list[StepRecord] = []
        self.attached = False

    def trigger(self, name: str) -> bool:  # replaced by the machine in add_model
        raise RuntimeError(f"context {self.context_id} is not attached to the machine")

    # Callbacks named in the table (EFFECT_CALLBACKS) and by the machine.
    def on_enter_prepare(self, event: EventData) -> None:
        self.effect = Effect.PREPARE

    def on_enter_call_llm(self, event: EventData) -> None:
        self.effect = Effect.CALL_LLM

    def on_enter_decide(self, event: EventData) -> None:
        self.effect = Effect.DECIDE

    def on_enter_run_tools(self, event: EventData) -> None:
        self.effect = Effect.RUN_TOOLS

    def on_enter_backoff(self, event: EventData) -> None:
        self.effect = Effect.BACKOFF

    def after_step(self, event: EventData) -> None:
        t = event.transition
        assert t is not None and event.event is not None and t.dest is not None
        self.steps.append((_STATES[t.source], _TRIGGERS[event.event.name], _STATES[t.dest]))


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
        self._machine = Machine(
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

        self._events = {t: self._machine.events[t.value] for t in Trigger}

    def attach(self, holder: ContextHolder, state: State) -> None:
        """``add_model`` at the stored state (no enter callbacks run)."""
        self._machine.add_model(holder, initial=state.value)
        holder.effect = None
        holder.attached = True

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
        dest = next_state(_STATES[holder.state], trigger)
        if dest is None:
            raise IllegalTransition(holder.state, trigger, context_id=holder.context_id)
        holder.effect = None
        self._events[trigger].trigger(holder)
        return dest
