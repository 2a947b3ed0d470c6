"""A chat request body (the ``contextManagement`` body or the ``messages`` body),
through :func:`~turnfsm.adapters.inbound.parse_request`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ....model import ChatContext
from .._request import parse_request
from ._checks import Ids, check_source, resolve_now, uuid_hex
from ._history import build_context

__all__ = [
    "import_request_body",
]


def import_request_body(
    data: Any, *, now: datetime | None = None, ids: Ids | None = None
) -> ChatContext:
    """A chat request body (either format), as parsed by
    :func:`~turnfsm.adapters.inbound.parse_request`: the conversation context,
    then the current message (flagged ``metadata.extra["current"]``, with the
    request's language and time zone); each with the body's format
    (``metadata.extra["request_format"]``), as ``send_request`` stores it.
    The current message is left unanswered: the context rests in ``Idle``
    with a user (or frontend operator) message last.
    ``engine.send_request(data, context_id)`` then answers it once (it is not
    stored again); ``engine.send`` would store a second copy.

    The context's ``frontend_operator_as`` is ``"assistant"``, as for a
    context ``send_request`` makes. Unlike a request's, an imported body's
    unknown keys are refused, each with its JSON path: an import drops
    nothing silently.
    """
    check_source(data)
    at = resolve_now(now)
    request = parse_request(data, unknown="refuse")
    messages = request.to_messages(now=at)
    for message in messages:
        message.metadata.extra["request_format"] = request.format
    ctx = build_context(messages, now=at, ids=ids or uuid_hex)
    ctx.config.frontend_operator_as = "assistant"  # as send_request makes a context
    return ctx
