"""What ``POST /ag-ui`` reads: AG-UI's ``RunAgentInput`` (see ``docs/ag-ui.md``).

The body is checked here, where it enters: its shape by pydantic (``422``
naming the field), then what a run means. A run sends a message (its
``messages`` end with a ``user`` message: the earlier ones are the client's
copy of the conversation, matched as ``/v1/chat/completions`` matches a resent
history), gives the results of frontend tools (its ``messages`` end with
``tool`` messages), or resumes (``resume`` answers the interrupts the previous
run ended with: an approval, a denial or a question's answer each). AG-UI messages are
read as the OpenAI ``messages`` they correspond to, by the OpenAI compatible
endpoint's own functions.
"""

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..adapters.inbound import InboundMessage
from ..errors import InvalidInput
from ._openai_compat import _last_user_text, _resent

__all__ = [
    "AgUiContext",
    "AgUiMessage",
    "AgUiTool",
    "Decisions",
    "Resume",
    "RunAgentIn",
    "decisions",
    "frontend_tools",
    "new_message",
    "openai_messages",
]

MAX_ID_LENGTH = 200
"""Characters a thread's id may have (a context id's limit)."""


class _Loose(BaseModel):
    # AG-UI's objects are open: a newer client's fields are kept and not read
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class AgUiMessage(_Loose):
    """One message of the conversation as the client holds it."""

    id: str = Field(min_length=1)
    role: Literal["developer", "system", "assistant", "user", "tool", "activity", "reasoning"]
    content: Any = None
    toolCalls: list[dict[str, Any]] | None = None
    toolCallId: str | None = None


class AgUiTool(_Loose):
    """A tool the frontend declares and runs: offered to the model beside the
    server's, its calls are handed to the client."""

    name: str = Field(min_length=1)
    description: str = ""
    parameters: Any = None


class AgUiContext(_Loose):
    """Ambient information for the run (accepted, not read: see the docs)."""

    description: str
    value: str


class Resume(_Loose):
    """The answer to one interrupt of the previous run."""

    interruptId: str = Field(min_length=1)
    status: Literal["resolved", "cancelled"]
    payload: Any = None


class RunAgentIn(_Loose):
    """AG-UI's ``RunAgentInput``: ``threadId`` names the context (made, in the
    caller's tenant, on first use), ``runId`` the run (echoed in ``RUN_STARTED``
    and ``RUN_FINISHED``). ``state`` and ``forwardedProps`` are accepted and not
    read; ``context`` entries likewise."""

    threadId: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    runId: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    parentRunId: str | None = None
    protocolVersion: str | None = None
    state: Any = None
    messages: list[AgUiMessage] = Field(default_factory=list)
    tools: list[AgUiTool] = Field(default_factory=list)
    context: list[AgUiContext] = Field(default_factory=list)
    forwardedProps: Any = None
    resume: list[Resume] | None = None


def _openai(message: AgUiMessage) -> dict[str, Any] | None:
    """The OpenAI ``messages`` entry an AG-UI message corresponds to (None for
    what a chat history has no place for: activity and reasoning messages)."""
    if message.role in ("activity", "reasoning"):
        return None
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "assistant":
        if message.content is None:
            out["content"] = ""
        if message.toolCalls:
            out["tool_calls"] = message.toolCalls
    if message.role == "tool":
        out["tool_call_id"] = message.toolCallId
    return out


def openai_messages(body: RunAgentIn) -> list[dict[str, Any]]:
    """The run's messages as OpenAI ``messages`` entries (those that have one)."""
    return [m for m in map(_openai, body.messages) if m is not None]


def frontend_tools(body: RunAgentIn) -> list[dict[str, Any]] | None:
    """The run's ``tools`` as OpenAI function tools (None when it declares none)."""
    if not body.tools:
        return None
    out: list[dict[str, Any]] = []
    for tool in body.tools:
        function: dict[str, Any] = {"name": tool.name, "description": tool.description}
        if tool.parameters is not None:
            function["parameters"] = tool.parameters
        out.append({"type": "function", "function": function})
    return out


def new_message(body: RunAgentIn) -> tuple[str, list[InboundMessage]]:
    """A run that sends a message: its text (the last message, a ``user``
    message of text) and the earlier messages as the engine matches a resent
    history. :class:`InvalidInput` names what is wrong (``messages[i]...``)."""
    if not body.messages:
        raise InvalidInput("messages", "must end with a 'user' message, or the run must resume")
    listed = [(i, _openai(m)) for i, m in enumerate(body.messages)]
    kept = [m for _, m in listed if m is not None]
    last_at, last = listed[-1]
    if last is None:
        raise InvalidInput(f"messages[{last_at}].role", "the last message must be a 'user' message")
    # named by its place in the body: the same function /v1 reads its last message with
    text = _last_user_text([*([{}] * last_at), last])
    return text, _resent(kept[:-1])


Decisions = tuple[list[str], list[tuple[str, str | None]], list[tuple[str, str]]]
"""Calls to approve, ``(call, reason)`` to deny, ``(call, text)`` to answer."""


@dataclass(frozen=True, slots=True)
class _Where:
    index: int

    def __call__(self, field: str) -> str:
        return f"resume[{self.index}].{field}"


def decisions(resume: list[Resume]) -> Decisions:
    """What the ``resume`` entries decide. An approval interrupt is answered
    ``{"approved": true}`` or ``{"approved": false, "reason": "..."}``, a
    question ``{"answer": "..."}``; ``cancelled`` denies (a question too).
    The interrupt's id is the tool call's."""
    if not resume:
        raise InvalidInput("resume", "must answer at least one interrupt")
    approve: list[str] = []
    deny: list[tuple[str, str | None]] = []
    answer: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, entry in enumerate(resume):
        where = _Where(i)
        call = entry.interruptId
        if call in seen:
            raise InvalidInput(where("interruptId"), f"interrupt {call!r} is answered twice")
        seen.add(call)
        if entry.status == "cancelled":
            deny.append((call, "cancelled by the client"))
            continue
        payload = entry.payload
        if not isinstance(payload, dict):
            raise InvalidInput(
                where("payload"), 'must be {"approved": true|false} or {"answer": "..."}'
            )
        if "answer" in payload:
            text = payload["answer"]
            if not isinstance(text, str) or not text.strip():
                raise InvalidInput(where("payload.answer"), "must be a non-empty string")
            answer.append((call, text))
            continue
        approved = payload.get("approved")
        if not isinstance(approved, bool):
            raise InvalidInput(where("payload.approved"), "must be true or false")
        reason = payload.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise InvalidInput(where("payload.reason"), "must be a string")
        if approved:
            approve.append(call)
        else:
            deny.append((call, reason))
    return approve, deny, answer
