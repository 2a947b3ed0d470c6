"""The one way in for code that runs an engine's calls on a host of its own.

A :class:`~turnfsm.engine.Worker` resumes the turns it claims under their
leases; a Temporal workflow holds an engine whose store, LLM, tools, clock,
ids and logger are the workflow's stand-ins, and reads the loaded copy of a
context while a call runs; the Temporal client drops the loaded copy of a
context whose turn another host changes. They do so through the engine's
:class:`HostSeam` (``engine._host_seam``) and :func:`hosted`, never through
the drive loop the engine is made of: how the driver is built may change
without them.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..adapters.llm import LLM
from ..errors import InvalidInput
from ..storage import Lease, Store
from ..tools import Tool
from . import _calls
from ._clock import Clock
from ._drive import Driver
from ._runtime import Runtime
from ._settings import Settings
from ._turn import Turn

__all__ = ["HostSeam", "StandIns", "hosted"]

E = TypeVar("E")


class HostSeam:
    """What another host may do with an engine's calls and loaded contexts."""

    __slots__ = ("_d", "_surface")

    def __init__(self, d: Driver, surface: Callable[[Turn], Awaitable[Turn]]) -> None:
        self._d = d
        self._surface = surface
        """What the engine's own calls do with a turn before they return it
        (a sub-task child's pending calls listed on its parent)."""

    @property
    def settings(self) -> Settings:
        """The engine's settings as they are now (replaced as a whole when one changes)."""
        return self._d.settings

    def runtime(self, context_id: str) -> Runtime | None:
        """The loaded copy of a context (None: not loaded)."""
        return self._d.loaded.get(context_id)

    def unload(self, context_id: str) -> None:
        """Drop the loaded copy of a context that another host changes: the
        next call reads it from the store."""
        self._d.loaded.unload(context_id)

    def request_hand_back(self, context_id: str) -> bool:
        """Ask the running call on the context to hand itself back before its
        next wait; False when no call runs on it."""
        return self._d.request_hand_back(context_id)

    async def resume_claimed(self, lease: Lease) -> Turn:
        """Resume the context of a lease this engine claimed (a worker's),
        under that lease, from its committed state."""
        d = self._d
        start = functools.partial(_calls.start_resume, d)
        return await self._surface(await d.run(lease.context_id, start, lease=lease))


@dataclass(frozen=True, slots=True)
class StandIns:
    """What a host gives an engine in place of the application's: the
    store, the LLM, the tools, the clock, the ids and the logger (a durable
    workflow's activities, replayed clock and ids, and a silent logger)."""

    store: Store
    llm: LLM
    tools: Iterable[Tool]
    clock: Clock
    ids: Callable[[], str]
    logger: Any


_STAND_IN_NAMES = frozenset(StandIns.__slots__) | {"leases", "threads"}


def hosted(cls: Callable[..., E], parts: StandIns, **options: Any) -> E:
    """An engine of class ``cls`` (``Engine`` or a subclass) on a host that
    owns each of its contexts by construction and runs it on one thread:
    ``parts`` in place of the application's, no lease renewed
    (``leases=False``) and no thread started (``threads=False``); ``options``
    are the rest of ``Engine``'s arguments and may not name what the host gives."""
    clash = sorted(_STAND_IN_NAMES & options.keys())
    if clash:
        raise InvalidInput(clash[0], "is the host's to give, not an engine option here")
    return cls(
        llm=parts.llm,
        tools=parts.tools,
        store=parts.store,
        clock=parts.clock,
        ids=parts.ids,
        logger=parts.logger,
        leases=False,
        threads=False,
        **options,
    )
