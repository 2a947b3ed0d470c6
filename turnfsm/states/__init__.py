"""L1: the declared FSM. The table is data (:mod:`._table`); :mod:`._machine` is
the only module that imports ``transitions``."""

from ._changes import CHANGES, Change
from ._machine import ContextHolder, StepRecord, TurnMachine
from ._table import (
    INITIAL,
    NON_RESTING,
    RESTING,
    STATE_DESCRIPTIONS,
    STATE_EFFECTS,
    TRANSITIONS,
    TRIGGERS,
    Effect,
    State,
    Transition,
    Trigger,
    allowed_triggers,
    next_state,
    validate,
)

__all__ = [
    "CHANGES",
    "INITIAL",
    "NON_RESTING",
    "RESTING",
    "STATE_DESCRIPTIONS",
    "STATE_EFFECTS",
    "TRANSITIONS",
    "TRIGGERS",
    "Change",
    "ContextHolder",
    "Effect",
    "State",
    "StepRecord",
    "Transition",
    "Trigger",
    "TurnMachine",
    "allowed_triggers",
    "next_state",
    "validate",
]
