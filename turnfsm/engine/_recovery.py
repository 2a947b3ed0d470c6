"""What :meth:`Engine.recover` did with each context it looked at."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TurnFSMError
from ._turn import Turn

__all__ = ["Recovery"]


@dataclass(frozen=True, slots=True)
class Recovery:
    """The outcome of :meth:`Engine.recover`, per context (in the store's order).

    A context that rests (``Idle``, awaiting approval, ``PermanentFailure``) is
    in none of the three.
    """

    resumed: dict[str, Turn]
    """Context id -> the turn that resumed it."""
    skipped: dict[str, str]
    """Context id -> why it was not taken (another engine holds its lease, or a
    call of this engine is running on it)."""
    failed: dict[str, TurnFSMError]
    """Context id -> the typed error that stopped it (a stored state the table
    does not know, a store error, an illegal transition, ...)."""
