"""The body ``POST /api/ui/chat`` reads: what the AI SDK's ``useChat`` sends
(its ``DefaultChatTransport``), checked where it enters.

A body names the chat (``id``: the context), carries the conversation as the
client holds it (``messages``: UI messages, each a list of ``parts``) and says
why it was sent (``trigger``). What the server takes from it:

- a new user message: the last message, a ``user`` one; its ``text`` parts
  joined are sent. The earlier ``user`` (and ``system``) messages are the
  resent history, matched by their ids against the context (the client's
  copies of the answers are not compared, as on ``/v1``);
- the user's decisions on calls waiting for approval: the last message, an
  ``assistant`` one, whose tool parts in state ``approval-responded`` carry
  ``approval.approved`` (and ``approval.reason`` for a denial);
- ``regenerate-message``: the last answer again (see :mod:`._ui_stream`).

Anything else is an :class:`~turnfsm.errors.InvalidInput` naming where in the
body it is (``messages[2].parts[0].type``).
"""

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..adapters.inbound import InboundMessage
from ..errors import InvalidInput
from ..model import Role

__all__ = ["Decisions", "UIChatIn", "decisions", "resent", "user_text"]

MAX_ID = 200
"""Characters an id (the chat's, a message's) may have: the engine's id rule."""


class UIMessageIn(BaseModel):
    """A UI message: its id, role and parts (other fields are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(default="", max_length=MAX_ID)
    role: Literal["system", "user", "assistant"]
    parts: list[dict[str, Any]]


class UIChatIn(BaseModel):
    """The request body of the AI SDK's chat transport; fields it adds from the
    client's own ``body`` option are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1, max_length=MAX_ID)
    """The chat's id: the context, made on first use in the caller's tenant."""
    messages: list[UIMessageIn] = Field(min_length=1)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = Field(default=None, max_length=MAX_ID)
    """The message the trigger is about (the assistant message to regenerate,
    the one an approval continues)."""


def _text(message: UIMessageIn, where: str) -> str:
    """The text parts of a message joined; a file or other part that carries
    content the server cannot send is refused (step and tool parts are not content)."""
    texts: list[str] = []
    for i, part in enumerate(message.parts):
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidInput(f"{where}.parts[{i}].text", "must be a string")
            texts.append(text)
        elif kind == "file":
            raise InvalidInput(f"{where}.parts[{i}].type", "only text parts can be sent")
        elif not isinstance(kind, str):
            raise InvalidInput(f"{where}.parts[{i}].type", "must be a string")
    return "".join(texts)


def user_text(body: UIChatIn) -> str:
    """The text of the last message, a ``user`` one with some text."""
    where = f"messages[{len(body.messages) - 1}]"
    last = body.messages[-1]
    if last.role != "user":
        raise InvalidInput(f"{where}.role", "the last message must be a 'user' message")
    text = _text(last, where)
    if not text.strip():
        raise InvalidInput(f"{where}.parts", "must hold some text")
    return text


def resent(body: UIChatIn, upto: int) -> list[InboundMessage]:
    """The messages before ``upto`` the engine matches as resent history: the
    ``user`` and ``system`` ones, with their ids (the assistant messages are the
    client's copies of the answers, not compared)."""
    out: list[InboundMessage] = []
    for i, m in enumerate(body.messages[:upto]):
        if m.role == "assistant":
            continue
        out.append(
            InboundMessage(
                role=Role(m.role),
                content=_text(m, f"messages[{i}]"),
                message_id=m.id or None,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Decisions:
    """The user's answers to approval requests: the ids approved, and the
    ``(id, reason)`` of those denied."""

    approve: list[str]
    deny: list[tuple[str, str | None]]

    @property
    def denied(self) -> set[str]:
        return {call_id for call_id, _ in self.deny}


def _is_tool(part: dict[str, Any]) -> bool:
    kind = part.get("type")
    return isinstance(kind, str) and (kind == "dynamic-tool" or kind.startswith("tool-"))


def decisions(body: UIChatIn) -> Decisions | None:
    """The approval decisions the last message carries: None when it is not an
    assistant message with a tool part in state ``approval-responded``."""
    index = len(body.messages) - 1
    last = body.messages[index]
    if last.role != "assistant":
        return None
    approve: list[str] = []
    deny: list[tuple[str, str | None]] = []
    for i, part in enumerate(last.parts):
        if not _is_tool(part) or part.get("state") != "approval-responded":
            continue
        where = f"messages[{index}].parts[{i}]"
        call_id = part.get("toolCallId")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInput(f"{where}.toolCallId", "must be a non-empty string")
        approval = part.get("approval")
        if not isinstance(approval, dict) or not isinstance(approval.get("approved"), bool):
            raise InvalidInput(f"{where}.approval.approved", "must be true or false")
        if approval["approved"]:
            approve.append(call_id)
        else:
            reason = approval.get("reason")
            if reason is not None and not isinstance(reason, str):
                raise InvalidInput(f"{where}.approval.reason", "must be a string")
            deny.append((call_id, reason or None))
    if not approve and not deny:
        return None
    return Decisions(approve, deny)
