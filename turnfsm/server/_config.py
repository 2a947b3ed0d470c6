"""How a server runs: :class:`ServerConfig` (``docs/server.md``)."""

from dataclasses import dataclass, field
from typing import Literal

from ..model import FrontendOperatorAs
from ._limits import DEFAULT_MAX_TURNS_PER_TENANT

__all__ = ["DEFAULT_MAX_BODY", "ServerConfig"]

DEFAULT_MAX_BODY = 1_000_000
"""Bytes a request body may have (``413`` beyond)."""


@dataclass
class ServerConfig:
    """How the app runs: ``tokens`` (token -> tenant; empty: one tenant, no
    authentication), the body limit, the CORS origins (none: CORS off), the
    heartbeat of event streams, and whether ``recover()`` runs on start."""

    tokens: dict[str, str] = field(default_factory=dict)
    max_body: int = DEFAULT_MAX_BODY
    cors_origins: list[str] = field(default_factory=list)
    heartbeat: float = 15.0
    recover_on_start: bool = True
    shutdown_grace: float = 5.0
    max_turns_per_tenant: int = DEFAULT_MAX_TURNS_PER_TENANT
    model: str = "demo"
    """The model of a context made without one (``POST /api/contexts`` without
    ``model``, ``/v1``, ``/api/chat``, ``/chat``, the web view): the name the
    model adapter sends upstream for it. ``turnfsm serve`` sets it to the model
    it calls (``docs/server.md``)."""
    temporal_answer_within: float = 35.0
    """With ``turns="temporal"``: the longest a call without ``?wait=true``
    waits for Temporal to take it (the engine's own bounds answer within about
    32 s: ``docs/temporal.md``, "When Temporal does not answer"); past it the
    request is ``503 temporal_unavailable``, the call's fate not known, and
    the call goes on in the background."""
    turns: Literal["here", "workers", "temporal"] = "here"
    """Where a posted message's turn runs: in this process, or on the workers
    of the same store (``docs/workers.md``; the server then runs no
    ``recover()`` on start: the workers claim what a crash left), or on
    Temporal (``docs/temporal.md``: the factory's engine is a
    ``TemporalEngine``, whose turn calls are Temporal Updates; no
    ``recover()`` on start, and running calls are not cancelled on shutdown:
    their turns go on without this server)."""
    frontend_operator_as: FrontendOperatorAs = "assistant"
    """The role the model sees a frontend operator's message in, for a context
    made by ``POST /api/chat`` (``ChatConfig.frontend_operator_as``):
    ``"assistant"``, as the request formats send it, or ``"user"``. Contexts
    made any other way keep ``"user"``. ``turnfsm serve --frontend-operator-as``
    sets it."""
