"""turnfsm: drive LLM conversations with an explicit, declared finite-state machine.

The public surface is what this module re-exports, for applications: the
engine and what it returns, states, tools and approvals, the stores an
application opens, the errors, the events it subscribes to and the model types
it reads. Everything in a ``_module`` is private. See ``README.md`` for a tour.

Authors of the other parts import from the package that defines them:

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
"""

from .engine import Engine, Question, Recovery, RetryPolicy, StopReason, Subscription, Turn
from .errors import (
    AnswerNotAChoice,
    BranchError,
    ContextBusy,
    ContextLeased,
    ContextNotFound,
    EnhancerError,
    IllegalTransition,
    InvalidInput,
    LeaseLost,
    LLMError,
    NotAQuestion,
    PermanentLLMError,
    QuestionNeedsAnswer,
    RenderError,
    SchemaVersionError,
    StoreError,
    TableError,
    ToolCallError,
    ToolCallNotPending,
    ToolDefinitionError,
    TransientLLMError,
    TurnFSMError,
    UnknownToolCall,
    VersionConflict,
)
from .events import (
    ContentDelta,
    Event,
    EventsMissed,
    Failed,
    MessageCompleted,
    QuestionAsked,
    Retrying,
    StateChanged,
    ToolApprovalRequested,
    ToolCallsRequested,
    ToolResult,
    TurnCompleted,
)
from .model import (
    ApprovalStatus,
    Branch,
    ChatConfig,
    ChatContext,
    ContentPart,
    FilePart,
    ImagePart,
    InternalMessage,
    MessageMetadata,
    MessageNode,
    MessageType,
    Role,
    SystemPrompt,
    TextPart,
    TokenUsage,
    ToolCallRequest,
    ToolCallResult,
)
from .states import State
from .storage import FilesStore, MemoryStore, SQLiteStore, open_store
from .tools import Approval, Tool, ToolOutcome, ToolRegistry, ask_user, question_tool, tool

__version__ = "0.1.0"

__all__ = [
    "AnswerNotAChoice",
    "Approval",
    "ApprovalStatus",
    "Branch",
    "BranchError",
    "ChatConfig",
    "ChatContext",
    "ContentDelta",
    "ContentPart",
    "ContextBusy",
    "ContextLeased",
    "ContextNotFound",
    "Engine",
    "EnhancerError",
    "Event",
    "EventsMissed",
    "Failed",
    "FilePart",
    "FilesStore",
    "IllegalTransition",
    "ImagePart",
    "InternalMessage",
    "InvalidInput",
    "LLMError",
    "LeaseLost",
    "MemoryStore",
    "MessageCompleted",
    "MessageMetadata",
    "MessageNode",
    "MessageType",
    "NotAQuestion",
    "PermanentLLMError",
    "Question",
    "QuestionAsked",
    "QuestionNeedsAnswer",
    "Recovery",
    "RenderError",
    "RetryPolicy",
    "Retrying",
    "Role",
    "SQLiteStore",
    "SchemaVersionError",
    "State",
    "StateChanged",
    "StopReason",
    "StoreError",
    "Subscription",
    "SystemPrompt",
    "TableError",
    "TextPart",
    "TokenUsage",
    "Tool",
    "ToolApprovalRequested",
    "ToolCallError",
    "ToolCallNotPending",
    "ToolCallRequest",
    "ToolCallResult",
    "ToolCallsRequested",
    "ToolDefinitionError",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResult",
    "TransientLLMError",
    "Turn",
    "TurnCompleted",
    "TurnFSMError",
    "UnknownToolCall",
    "VersionConflict",
    "__version__",
    "ask_user",
    "open_store",
    "question_tool",
    "tool",
]
