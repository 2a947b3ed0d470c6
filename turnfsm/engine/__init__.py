"""L3: the driver. The only place that orchestrates async I/O."""

from ._clock import Clock, FakeClock, SequentialIds, SystemClock
from ._engine import Engine
from ._inputs import UNSET, Unset
from ._modes import Mode
from ._recovery import Recovery
from ._retry import RetryPolicy, wait_exponential, wait_fixed, wait_random_exponential
from ._subscribers import Subscription
from ._turn import Question, StopReason, Turn

__all__ = [
    "UNSET",
    "Clock",
    "Engine",
    "FakeClock",
    "Mode",
    "Question",
    "Recovery",
    "RetryPolicy",
    "SequentialIds",
    "StopReason",
    "Subscription",
    "SystemClock",
    "Turn",
    "Unset",
    "wait_exponential",
    "wait_fixed",
    "wait_random_exponential",
]
