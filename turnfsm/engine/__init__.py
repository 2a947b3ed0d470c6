"""L3: the driver. The only place that orchestrates async I/O."""

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from ._client_tools import check_client_tools, check_tool_choice
from ._client_view import client_calls
from ._clock import Clock, FakeClock, SequentialIds, SystemClock
from ._engine import Engine
from ._inputs import UNSET, Unset
from ._modes import Mode
from ._observing._hooks import Watch
from ._observing._observers import Observer
from ._recovery import Recovery
from ._retry import WAITS as _WAITS
from ._retry import RetryPolicy
from ._subcontexts._summarizers import (
    DEFAULT_SUMMARY_PROMPT,
    FinalAnswer,
    LLMSummarizer,
    Summarizer,
    SummaryFunction,
)
from ._subcontexts._tree import ContextTree, context_tree, delete_tree
from ._subscribers import EngineSubscription, EventTap, Subscription
from ._turn import Child, ChildInfo, Finished, Question, StopReason, Turn
from ._worker import Worker

if TYPE_CHECKING:
    from ._retry import wait_exponential, wait_fixed, wait_random_exponential

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "UNSET",
    "Child",
    "ChildInfo",
    "Clock",
    "ContextTree",
    "Engine",
    "EngineSubscription",
    "EventTap",
    "FakeClock",
    "FinalAnswer",
    "Finished",
    "LLMSummarizer",
    "Mode",
    "Observer",
    "Question",
    "Recovery",
    "RetryPolicy",
    "SequentialIds",
    "StopReason",
    "Subscription",
    "Summarizer",
    "SummaryFunction",
    "SystemClock",
    "Turn",
    "Unset",
    "Watch",
    "Worker",
    "check_client_tools",
    "check_tool_choice",
    "client_calls",
    "context_tree",
    "delete_tree",
    "wait_exponential",
    "wait_fixed",
    "wait_random_exponential",
]


# tenacity's wait strategies are imported when first asked for (see _retry)
__getattr__ = lazy_names(__name__, dict.fromkeys(_WAITS, "._retry"))


def __dir__() -> list[str]:
    return sorted({*globals(), *_WAITS})
