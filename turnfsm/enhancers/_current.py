"""The current message of a request body: marked in the view, with the user's
language and time zone."""

from __future__ import annotations

from typing import Any

from ..model import ChatContext, InternalMessage, LLMRequest, Role
from ..model._message import extra_of

__all__ = ["CurrentMessageMarker", "UserLocale", "current_message"]

_SPEAKERS = {Role.USER: "USER", Role.FRONTEND_OPERATOR: "FRONTEND_OPERATOR"}


def current_message(context: ChatContext) -> InternalMessage | None:
    """The newest user (or frontend operator) message of the active branch when
    it is flagged current (``metadata.extra["current"]``: it came as the current
    message of a request body); None otherwise. Looks back only over the
    current turn (to that message)."""
    pool = context.message_pool
    for mid in reversed(context.branches[context.active_branch_name].message_ids):
        msg = pool[mid].message
        if msg.role in _SPEAKERS:
            return msg if extra_of(msg.metadata).get("current") is True else None
    return None


def _last_user(messages: list[dict[str, Any]]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return None


class CurrentMessageMarker:
    """Marks the current message of a request body in the view.

    When the turn's user message is flagged current (it came through
    ``engine.send_request``, or a request body import), its content in the view
    starts with ``[CURRENT MESSAGE FROM USER]: `` (or ``FROM FRONTEND_OPERATOR``),
    so the model can tell it from the conversation context that came with it.
    Stored history keeps what was said. The request's
    ``metadata["current_message"]`` names the speaker when it marked one.
    """

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        msg = current_message(context)
        return request if msg is None else _marked(request, msg)


def _marked(request: LLMRequest, msg: InternalMessage) -> LLMRequest:
    """:class:`CurrentMessageMarker`'s change, ``msg`` the current message."""
    i = _last_user(request.messages)
    if i is None:
        return request
    speaker = _SPEAKERS[msg.role]
    prefix = f"[CURRENT MESSAGE FROM {speaker}]: "
    old = request.messages[i]
    content = old.get("content")
    if isinstance(content, list):
        new_content: Any = [{"type": "text", "text": prefix.rstrip()}, *content]
    else:
        new_content = prefix + (content or "")
    messages = list(request.messages)
    messages[i] = {**old, "content": new_content}
    request.messages = messages
    request.metadata["current_message"] = {"from": speaker.lower()}
    return request


class UserLocale:
    """Tells the model the user's language and time zone, when the turn's
    current message carried them (a request body's ``userLanguage`` and
    ``userTimezone``): a ``system`` message after the system messages at the
    head of the view::

        The user's language is de (answer in it unless asked otherwise). The
        user's time zone is Europe/Berlin.

    The request's ``metadata["user_locale"]`` holds the values shown.
    """

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        msg = current_message(context)
        return request if msg is None else _localized(request, msg)


def _localized(request: LLMRequest, msg: InternalMessage) -> LLMRequest:
    """:class:`UserLocale`'s change, ``msg`` the current message."""
    extra = msg.metadata.extra
    language = extra.get("user_language")
    timezone = extra.get("user_timezone")
    parts = []
    shown: dict[str, str] = {}
    if isinstance(language, str) and language:
        parts.append(f"The user's language is {language} (answer in it unless asked otherwise).")
        shown["language"] = language
    if isinstance(timezone, str) and timezone:
        parts.append(f"The user's time zone is {timezone}.")
        shown["timezone"] = timezone
    if not parts:
        return request
    messages = request.messages
    head = 0
    while head < len(messages) and messages[head].get("role") == "system":
        head += 1
    request.messages = [
        *messages[:head],
        {"role": "system", "content": " ".join(parts)},
        *messages[head:],
    ]
    request.metadata["user_locale"] = shown
    return request


class CurrentMessage:
    """:class:`UserLocale` then :class:`CurrentMessageMarker`, as the engine
    runs them (steps 6 and 7 of the request's view), with one look back for
    the current message between them: each request of every turn looks, and
    neither step changes which message is current."""

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        msg = current_message(context)
        if msg is None:
            return request
        return _marked(_localized(request, msg), msg)
