"""The engine's own public calls that sub-context work makes on a child or
its parent (:class:`EngineCalls`), handed in by the engine when it is made.

They go through the engine's methods, not around them, so that an engine
whose children run elsewhere (a Temporal workflow's, whose overrides send a
child's calls to the child's workflow) has its way with every one of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...model import ChatContext, ContentPart
from .._turn import Turn

__all__ = ["EngineCalls"]


@dataclass(frozen=True, slots=True)
class EngineCalls:
    """Bound methods of one :class:`~turnfsm.Engine` (see the module's docstring)."""

    engine: Any
    """The engine itself: what a summarizer is given."""
    get_context: Callable[[str], Awaitable[ChatContext]]
    send: Callable[[str, Sequence[ContentPart]], Awaitable[Turn]]
    resume: Callable[[str], Awaitable[Turn]]
    approve: Callable[[str, Sequence[str]], Awaitable[Turn]]
    deny: Callable[[str, Sequence[str], str | None], Awaitable[Turn]]
    answer: Callable[[str, str, str], Awaitable[Turn]]
    delete_context: Callable[[str], Awaitable[list[str]]]
