"""turnfsm: drive LLM conversations with an explicit, declared finite-state machine.

The public surface is what this module re-exports, for applications: the
engine and what it returns, states, tools and approvals, the stores an
application opens, the errors it catches most, the events it reacts to most
and the records it reads most. Everything in a ``_module`` is private. See
``README.md`` for a tour.

The rest of each family lives in its public module, next to the names above:

- every record type, and (de)serialising them: :mod:`turnfsm.records`;
- every event kind: :mod:`turnfsm.events`;
- every error: :mod:`turnfsm.errors`;
- an LLM adapter: :mod:`turnfsm.adapters.llm` (:class:`LLM`, :class:`LLMRequest`,
  :class:`LLMResponse`, the deltas);
- an enhancer: :mod:`turnfsm.enhancers` (:class:`Enhancer`, the request view,
  the built-in enhancers);
- a store: :mod:`turnfsm.storage` (:class:`Store`, :class:`Commit`,
  :class:`StepLog`);
- the declared machine: :mod:`turnfsm.states` (``TRANSITIONS``, ``RESTING``,
  :class:`Trigger`, :class:`Transition`);
- a clock: :mod:`turnfsm.engine` (:class:`Clock`, :class:`SystemClock`);
- tests: :mod:`turnfsm.testing` (the scripted LLM, a fake clock, ids, replay).

Names that earlier releases exported here and that now live only in their
module (``turnfsm.TextPart``, ``turnfsm.Retrying``, ``turnfsm.LeaseLost``, ...)
still resolve, with a ``DeprecationWarning`` that names their module
(:data:`MOVED`).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from . import records
from .engine import (
    Child,
    ChildInfo,
    Engine,
    FinalAnswer,
    Finished,
    LLMSummarizer,
    Mode,
    Question,
    Recovery,
    RetryPolicy,
    StopReason,
    Subscription,
    Summarizer,
    SummaryFunction,
    Turn,
    Worker,
)
from .errors import (
    ContextBusy,
    ContextNotFound,
    IllegalTransition,
    InvalidInput,
    LLMError,
    NotAtRest,
    OutputValidationError,
    StoreError,
    ToolCallError,
    TurnFSMError,
    VersionConflict,
)
from .events import (
    ContentDelta,
    Event,
    Failed,
    QuestionAsked,
    StateChanged,
    ToolApprovalRequested,
    TurnCompleted,
)
from .model import (
    ApprovalStatus,
    ChatContext,
    InternalMessage,
    MessageNode,
    Role,
    ToolCallRequest,
    ToolCallResult,
)
from .states import State
from .storage import MemoryStore, open_store
from .tools import Approval, Tool, ToolOutcome, ToolRegistry, question_tool, subtask, tool

if TYPE_CHECKING:
    from .storage import FilesStore, SQLiteStore
    from .tools import ask_user

__version__ = "0.1.0"

__all__ = [
    "Approval",
    "ApprovalStatus",
    "ChatContext",
    "Child",
    "ChildInfo",
    "ContentDelta",
    "ContextBusy",
    "ContextNotFound",
    "Engine",
    "Event",
    "Failed",
    "FilesStore",
    "FinalAnswer",
    "Finished",
    "IllegalTransition",
    "InternalMessage",
    "InvalidInput",
    "LLMError",
    "LLMSummarizer",
    "MemoryStore",
    "MessageNode",
    "Mode",
    "NotAtRest",
    "OutputValidationError",
    "Question",
    "QuestionAsked",
    "Recovery",
    "RetryPolicy",
    "Role",
    "SQLiteStore",
    "State",
    "StateChanged",
    "StopReason",
    "StoreError",
    "Subscription",
    "Summarizer",
    "SummaryFunction",
    "Tool",
    "ToolApprovalRequested",
    "ToolCallError",
    "ToolCallRequest",
    "ToolCallResult",
    "ToolOutcome",
    "ToolRegistry",
    "Turn",
    "TurnCompleted",
    "TurnFSMError",
    "VersionConflict",
    "Worker",
    "__version__",
    "ask_user",
    "open_store",
    "question_tool",
    "records",
    "subtask",
    "tool",
]

MOVED: dict[str, str] = {
    **dict.fromkeys(
        (
            "Branch",
            "ChatConfig",
            "ContentPart",
            "FilePart",
            "ImagePart",
            "MessageMetadata",
            "MessageType",
            "SystemPrompt",
            "TextPart",
            "TokenUsage",
        ),
        "turnfsm.records",
    ),
    **dict.fromkeys(
        (
            "ContextChanged",
            "EventsMissed",
            "MessageCompleted",
            "Retrying",
            "ToolCallsRequested",
            "ToolResult",
        ),
        "turnfsm.events",
    ),
    **dict.fromkeys(
        (
            "AnswerNotAChoice",
            "BranchError",
            "ContextLeased",
            "EnhancerError",
            "LeaseLost",
            "NotAQuestion",
            "PermanentLLMError",
            "QuestionNeedsAnswer",
            "RenderError",
            "SchemaVersionError",
            "SubContextError",
            "TableError",
            "ToolCallNotPending",
            "ToolDefinitionError",
            "TransientLLMError",
            "UnknownToolCall",
        ),
        "turnfsm.errors",
    ),
}
"""Names exported here by earlier releases, and the module each lives in now."""


LAZY: dict[str, str] = {
    "FilesStore": "turnfsm.storage",
    "SQLiteStore": "turnfsm.storage",
    "ask_user": "turnfsm.tools",
}
"""Names exported here that are imported (or made) when first asked for, not
with the package (an in-memory engine does not need them; ``ask_user``'s
arguments model is built when it is first asked for), and the module of each."""


def __getattr__(name: str) -> Any:
    lazy = LAZY.get(name)
    if lazy is not None:
        value = getattr(importlib.import_module(lazy), name)
        globals()[name] = value
        return value
    home = MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'turnfsm' has no attribute {name!r}")
    warnings.warn(
        f"turnfsm.{name} moved to {home}: import it from there (from {home} import {name})",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)
