"""L2: the prompt preparation pipeline.

An enhancer shapes the request view the LLM will see; it never changes stored
history. Each gets the request built so far and the context, and returns the
request to send. The request and its ``messages`` list are fresh for every
call: an enhancer may change the list (insert, drop, replace entries). The
message dicts in it are the engine's own, kept incrementally across calls:
never edit one in place; put a new dict in its slot instead. What an enhancer
drops or injects it says in ``request.metadata`` (JSON data, under its own key).

An enhancer author needs only this package: :class:`Enhancer`, the request
view (:class:`LLMRequest`) and the context it reads (:class:`ChatContext`).
"""

from ..model import ChatContext, LLMRequest
from ._budget import BudgetExceeded, EstimatingCounter, TokenBudget, TokenCounter, calibration
from ._builtin import SystemPromptEnhancer, ToolDefinitionsEnhancer
from ._compaction import SUMMARY_PROMPT, Compaction, summary_block, summary_of
from ._current import CurrentMessageMarker, UserLocale, current_message
from ._history import ToolCallHistory
from ._protocol import Enhancer
from ._sticky import StickyFiles

__all__ = [
    "SUMMARY_PROMPT",
    "BudgetExceeded",
    "ChatContext",
    "Compaction",
    "CurrentMessageMarker",
    "Enhancer",
    "EstimatingCounter",
    "LLMRequest",
    "StickyFiles",
    "SystemPromptEnhancer",
    "TokenBudget",
    "TokenCounter",
    "ToolCallHistory",
    "ToolDefinitionsEnhancer",
    "UserLocale",
    "calibration",
    "current_message",
    "summary_block",
    "summary_of",
]
