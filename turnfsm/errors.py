"""Every exception turnfsm raises.

The tree::

    TurnFSMError
    ├── TableError                  the declared FSM table is inconsistent (raised at import)
    ├── IllegalTransition           an event the table does not allow in the current state
    ├── ContextNotFound             no context with that id in the store
    ├── ContextBusy                 a call is already running on that context
    │   └── ContextLeased           ... in another engine, which holds the context's lease
    ├── NotAtRest                   a change made only at rest, on a context a crash left mid-turn
    ├── SubContextError             a sub-context call on a context in the wrong place for it
    ├── ToolCallError
    │   ├── UnknownToolCall         no tool call with that id in the context
    │   ├── ToolCallNotPending      the call was already decided (approved or denied)
    │   ├── NotAQuestion            answer was given a call that is not a question
    │   ├── QuestionNeedsAnswer     approve was given a question: answer it (or deny it)
    │   ├── AnswerNotAChoice        the answer is not one of the question's choices
    │   └── NotAClientCall          submit_results was given a call the engine runs
    ├── InvalidInput                an argument of a public call is malformed
    │   ├── OutputTypeError         an output type that cannot be made a JSON Schema
    │   └── ToolNameClash           a client tool has the name of one of the engine's tools
    ├── OutputValidationError       a typed answer did not validate, its retries spent
    ├── HistoryConflict             a resent history disagrees with what the context holds
    ├── BranchError                 unknown branch, existing name, fork index out of range
    ├── ToolDefinitionError         a tool cannot be turned into a JSON schema
    ├── ToolsetError                a toolset (an MCP server) cannot start or list its tools
    ├── EnhancerError               an enhancer raised while preparing the request
    ├── LLMError                    the model call failed; retryability is data on the error
    │   ├── TransientLLMError       429, 408, 409, 5xx, timeouts, connection errors
    │   └── PermanentLLMError       400, 401, 403, 404, 422
    ├── StoreError                  the store cannot read or write
    │   ├── VersionConflict         another writer committed first
    │   ├── LeaseLost               the writer's lease on the context was taken over
    │   └── SchemaVersionError      a stored record has an unknown schema version
    ├── TemporalUnavailable         the Temporal server that runs the turns cannot be reached
    └── RenderError                 a diagram, trace or audit log cannot be made or read

Errors of the outside world (the ``openai`` SDK, the network, a tool) are mapped
into this tree at the boundary that meets them, with ``raise ... from exc``.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = [
    "AnswerNotAChoice",
    "BranchError",
    "ContextBusy",
    "ContextLeased",
    "ContextNotFound",
    "EnhancerError",
    "HistoryConflict",
    "IllegalTransition",
    "InvalidInput",
    "LLMError",
    "LeaseLost",
    "NotAClientCall",
    "NotAQuestion",
    "NotAtRest",
    "OutputTypeError",
    "OutputValidationError",
    "PermanentLLMError",
    "QuestionNeedsAnswer",
    "RenderError",
    "SchemaVersionError",
    "StoreError",
    "SubContextError",
    "TableError",
    "TemporalUnavailable",
    "ToolCallError",
    "ToolCallNotPending",
    "ToolDefinitionError",
    "ToolNameClash",
    "ToolsetError",
    "TransientLLMError",
    "TurnFSMError",
    "UnknownToolCall",
    "VersionConflict",
]


class TurnFSMError(Exception):
    """Base class of every error turnfsm raises on purpose."""


class TableError(TurnFSMError):
    """The declared transition table breaks one of its own rules."""


class IllegalTransition(TurnFSMError):
    """The table has no edge for ``trigger`` from ``state``; nothing was changed."""

    def __init__(self, state: str, trigger: str, *, context_id: str | None = None) -> None:
        state = str(state)  # the exact names, also when given the enums
        trigger = str(trigger)
        self.state = state
        self.trigger = trigger
        self.context_id = context_id
        where = f" (context {context_id})" if context_id else ""
        super().__init__(
            f"event {trigger!r} is not allowed in state {state!r}{where}; nothing was changed"
        )


class ContextNotFound(TurnFSMError, KeyError):
    """No context with this id exists."""

    def __init__(self, context_id: str) -> None:
        self.context_id = context_id
        super().__init__(f"no context with id {context_id!r}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class ContextBusy(TurnFSMError):
    """Another call is running on this context; calls run one at a time."""

    def __init__(self, context_id: str, state: str) -> None:
        self.context_id = context_id
        self.state = state
        super().__init__(
            f"context {context_id!r} is busy (in state {state!r}); wait for the running call "
            "to return, or cancel it"
        )


class NotAtRest(TurnFSMError):
    """A change made only at rest (config, branch prompts) was asked of a context
    that is not at rest: a crash stopped its turn in ``state``. Nothing was
    changed; ``resume`` the context first."""

    def __init__(self, context_id: str, state: str, what: str) -> None:
        self.context_id = context_id
        self.state = str(state)
        self.what = what
        super().__init__(
            f"{what} of context {context_id!r} change only at rest, and it is in "
            f"{self.state} (a crash stopped its turn there): resume it first; nothing was changed"
        )


class SubContextError(TurnFSMError):
    """A sub-context call (``finish``, ``delete_context``, input to a finished
    sub-context) that the contexts involved do not allow now: ``context_id``
    names the one refused and ``reason`` says why. Nothing was changed."""

    def __init__(self, context_id: str, reason: str) -> None:
        self.context_id = context_id
        self.reason = reason
        super().__init__(f"context {context_id!r}: {reason}; nothing was changed")


class ContextLeased(ContextBusy):
    """Another engine (another process, or another :class:`Engine` object) holds the
    context's lease: it is running a call on it until the lease is released or
    expires. ``owner`` names that engine, ``expires_at`` is the lease's expiry
    (seconds since the epoch, on the engine's clock)."""

    def __init__(self, context_id: str, owner: str, expires_at: float) -> None:
        self.context_id = context_id
        self.state = "leased"
        self.owner = owner
        self.expires_at = expires_at
        until = datetime.fromtimestamp(expires_at, UTC).isoformat()
        TurnFSMError.__init__(
            self,
            f"context {context_id!r} is leased by {owner} until {until}: another engine is "
            "running a call on it; try again when it returns (or when the lease expires)",
        )


class ToolCallError(TurnFSMError):
    """A tool call id given to approve/deny/answer is not usable."""


class UnknownToolCall(ToolCallError, KeyError):
    def __init__(self, context_id: str, call_id: str) -> None:
        self.context_id = context_id
        self.call_id = call_id
        super().__init__(f"context {context_id!r} has no tool call with id {call_id!r}")

    def __str__(self) -> str:
        return str(self.args[0])


class ToolCallNotPending(ToolCallError):
    def __init__(self, context_id: str, call_id: str, status: str) -> None:
        self.context_id = context_id
        self.call_id = call_id
        self.status = status
        super().__init__(
            f"tool call {call_id!r} of context {context_id!r} is not pending (it is {status})"
        )


class NotAQuestion(ToolCallError):
    """``answer`` was given a call to a tool that is not a question tool."""

    def __init__(self, context_id: str, call_id: str, tool_name: str) -> None:
        self.context_id = context_id
        self.call_id = call_id
        self.tool_name = tool_name
        super().__init__(
            f"tool call {call_id!r} of context {context_id!r} calls {tool_name!r}, which is "
            "not a question tool: approve or deny it instead of answering it"
        )


class QuestionNeedsAnswer(ToolCallError):
    """``approve`` was given a question: a question is answered (``answer``) or
    declined (``deny``), never approved."""

    def __init__(self, context_id: str, call_id: str) -> None:
        self.context_id = context_id
        self.call_id = call_id
        super().__init__(
            f"tool call {call_id!r} of context {context_id!r} is a question to the user: "
            f"answer it with engine.answer({context_id!r}, {call_id!r}, text), or deny it; "
            "nothing was changed"
        )


class AnswerNotAChoice(ToolCallError, ValueError):
    """The answer to a question with choices is not one of them (they are binding)."""

    def __init__(self, context_id: str, call_id: str, text: str, choices: tuple[str, ...]) -> None:
        self.context_id = context_id
        self.call_id = call_id
        self.text = text
        self.choices = choices
        listed = ", ".join(repr(c) for c in choices)
        shown = text if len(text) <= 80 else text[:77] + "..."
        super().__init__(
            f"the answer {shown!r} to question {call_id!r} of context {context_id!r} is not "
            f"one of its choices: {listed}; nothing was changed"
        )


class NotAClientCall(ToolCallError):
    """``submit_results`` was given a call the engine runs (one of its own
    tools): approve, deny or answer it instead."""

    def __init__(self, context_id: str, call_id: str, tool_name: str) -> None:
        self.context_id = context_id
        self.call_id = call_id
        self.tool_name = tool_name
        super().__init__(
            f"tool call {call_id!r} of context {context_id!r} calls {tool_name!r}, which is "
            "not a client tool: the engine runs it (approve, deny or answer it instead); "
            "nothing was changed"
        )


class InvalidInput(TurnFSMError, ValueError):
    """An argument of a public call is malformed; ``where`` names the argument."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}")


class OutputTypeError(InvalidInput, TypeError):
    """An ``output_type`` that cannot be turned into a JSON Schema and a
    validator (an unsupported Python type, or a JSON Schema that is not
    valid); ``where`` names the argument, or the path in the schema."""


class OutputValidationError(TurnFSMError):
    """A turn's answer did not match its output type, and the output retries
    were spent: the turn rests in PermanentFailure (``retry`` asks again).

    ``problems`` are ``(path, message)`` pairs, ``path`` a JSON path into the
    answer (``$`` for the whole, ``$.items[0].price``); ``schema_name`` is the
    output type's name."""

    def __init__(self, schema_name: str, problems: tuple[tuple[str, str], ...]) -> None:
        self.schema_name = schema_name
        self.problems = problems
        listed = "; ".join(f"{path}: {message}" for path, message in problems)
        super().__init__(f"the answer does not match output type {schema_name}: {listed}")


class ToolNameClash(InvalidInput):
    """A tool the client declared (``client_tools``) has the name of one of the
    engine's tools: a call of that name could not say who runs it. Nothing was
    changed."""

    def __init__(self, where: str, tool_name: str) -> None:
        self.tool_name = tool_name
        super().__init__(
            where,
            f"{tool_name!r} is the name of one of the engine's tools: "
            "a client tool needs a name of its own",
        )


class HistoryConflict(TurnFSMError):
    """A request body's conversation context disagrees with what the context
    holds: a message whose id the context knows has other content, or the
    body's earlier messages are not in the stored order. Nothing was stored.

    ``message_id`` is the id the body gave the disagreeing message (None when it
    had none); ``where`` is its JSON path in the body."""

    def __init__(self, context_id: str, where: str, message_id: str | None, reason: str) -> None:
        self.context_id = context_id
        self.where = where
        self.message_id = message_id
        self.reason = reason
        named = f"message {message_id!r}" if message_id is not None else "the message"
        super().__init__(
            f"{where}: {named} disagrees with context {context_id!r}: {reason}; nothing was stored"
        )


class BranchError(TurnFSMError):
    """A branch operation refers to something that does not exist or already does."""


class ToolDefinitionError(TurnFSMError, TypeError):
    """A function cannot be described as a tool (untyped parameter, bad name, ...)."""


class ToolsetError(TurnFSMError):
    """A toolset (an MCP server) cannot be started or cannot list its tools
    when the engine starts. Later failures of its calls are tool results."""


class EnhancerError(TurnFSMError):
    """An enhancer raised while preparing the request; the turn fails permanently."""

    def __init__(self, enhancer: str, cause: BaseException) -> None:
        self.enhancer = enhancer
        super().__init__(f"enhancer {enhancer} failed: {type(cause).__name__}: {_text(cause)}")


def _text(cause: BaseException) -> str:
    """``str(cause)`` as text a store can hold (it is kept as the turn's error):
    a broken ``__str__`` gives a placeholder, lone surrogates become U+FFFD."""
    try:
        text = str(cause)
    except Exception:
        return "<the message could not be printed>"
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class LLMError(TurnFSMError):
    """A model call failed.

    ``retryable`` and ``retry_after`` (seconds, from ``Retry-After`` /
    ``retry-after-ms``) are data on the error: the engine's one retry layer reads them.
    ``partial_text`` holds what a broken stream delivered before it broke.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        kind: str | None = None,
        retry_after: float | None = None,
        partial_text: str = "",
    ) -> None:
        self.message = message
        self.status = status
        self.kind = kind
        self.retry_after = retry_after
        self.partial_text = partial_text
        super().__init__(message)

    def describe(self) -> str:
        """A one-line description: status or kind, then the message."""
        if self.status is not None:
            head = f"HTTP {self.status}"
            return head if self.message == head else f"{head}: {self.message}"
        if self.kind:
            return f"{self.kind}: {self.message}"
        return self.message

    @staticmethod
    def from_status(
        status: int, message: str = "", *, retry_after: float | None = None
    ) -> LLMError:
        """The error for an HTTP status: transient for 408, 409, 429 and 5xx, else permanent
        (docs/architecture.md, "The table")."""
        cls: type[LLMError] = (
            TransientLLMError if status in (408, 409, 429) or status >= 500 else PermanentLLMError
        )
        return cls(message or f"HTTP {status}", status=status, retry_after=retry_after)


class TransientLLMError(LLMError):
    retryable = True


class PermanentLLMError(LLMError):
    retryable = False


class StoreError(TurnFSMError):
    """The store cannot read or write; the context stays at its last committed state."""


class VersionConflict(StoreError):
    def __init__(self, context_id: str, expected: int, found: int) -> None:
        self.context_id = context_id
        self.expected = expected
        self.found = found
        super().__init__(
            f"context {context_id!r} was changed by another writer: expected version "
            f"{expected}, store has {found}; nothing of this write was stored"
        )


class LeaseLost(StoreError):
    """A write, or a lease renewal, by an owner whose lease on the context was taken
    over by another (a larger fencing token): nothing of it was stored."""

    def __init__(self, context_id: str, token: int, current: int | None) -> None:
        self.context_id = context_id
        self.token = token
        self.current = current
        now = "no lease" if current is None else f"lease token {current}"
        super().__init__(
            f"context {context_id!r}: the lease with token {token} was lost (the store has "
            f"{now}: another owner took the context over); nothing of this write was stored"
        )


class SchemaVersionError(StoreError):
    def __init__(self, where: str, found: int, supported: int) -> None:
        self.where = where
        self.found = found
        self.supported = supported
        super().__init__(
            f"{where}: schema version {found} is newer than this turnfsm supports "
            f"({supported}); upgrade turnfsm to read it"
        )


class TemporalUnavailable(TurnFSMError):
    """The Temporal server that runs the turns (``turnfsm.temporal``) cannot be
    reached, or did not answer in time. ``accepted`` says what became of the
    call: False, Temporal never took it (nothing ran: call again); True, it was
    accepted and goes on there, only its result is not known here; None, not
    known (read the context before calling again). ``retry_after``: the
    seconds to wait before calling again."""

    def __init__(self, message: str, *, accepted: bool | None = False, retry_after: int = 5):
        self.accepted = accepted
        self.retry_after = retry_after
        super().__init__(message)


class RenderError(TurnFSMError):
    """A diagram, trace or audit log cannot be rendered or read (Graphviz's ``dot``
    is missing or failed, or a file is not a trace or a log); the message says why."""
