"""A loaded context: the working copy and what the engine keeps beside it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, Protocol

import anyio
import anyio.lowlevel

from ..errors import IllegalTransition, OutputValidationError
from ..events import Event
from ..model import Branch, ChatContext, LLMRequest, MessageNode
from ..states import ContextHolder, State, Trigger, TurnMachine, next_state
from ..storage import Lease
from ._clock import Clock
from ._subscribers import Sink
from ._turn import StopReason, Turn

__all__ = [
    "CLAIM",
    "HELD",
    "RELEASED",
    "CallEnd",
    "LeaseStatus",
    "Runtime",
    "StepSettings",
    "dirty",
    "require",
]


class LeaseStatus(Enum):
    """Where a loaded context's lease (``Runtime.lease``) stands; the one
    owner of that fact. The drive loop moves it, the heartbeat reads it::

        RELEASED --(a call takes the lease from the store)--------> HELD
        RELEASED --(a call leaves it to its first commit)---------> CLAIM
        CLAIM    --(that commit takes it / its outcome unknown)---> HELD
        CLAIM    --(that commit releases it too / it was refused)-> RELEASED
        HELD     --(the call's last commit, or release)-----------> RELEASED
    """

    RELEASED = "released"
    """Not held: released by the call's last commit or on its own, or never
    taken (between calls, ``lease`` is the last one held)."""
    HELD = "held"
    """Held by the running call; the heartbeat renews it."""
    CLAIM = "claim"
    """To be taken by the call's first commit (``Commit.take_lease``): the
    context is still loaded from this engine's last call on it, and ``lease``
    is the one that commit asks for (the next token)."""


RELEASED: Final = LeaseStatus.RELEASED
HELD: Final = LeaseStatus.HELD
CLAIM: Final = LeaseStatus.CLAIM


class CallEnd:
    """The end of one call on a loaded context: set once the call has left,
    with the ``Turn`` it returned.

    Only a ``cancel`` waiting for a running call waits on it, so its
    ``anyio.Event`` is made by the first :meth:`wait`, not for every call."""

    __slots__ = ("_event", "left", "turn")

    def __init__(self) -> None:
        self._event: anyio.Event | None = None
        self.left = False
        self.turn: Turn | None = None

    def set(self) -> None:
        """The call has left (``turn`` is set)."""
        self.left = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Until the call has left."""
        if self.left:
            await anyio.lowlevel.checkpoint()  # as waiting on a set event does
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


class StepSettings(Protocol):
    """What the steps (``_steps``) read of the engine's settings."""

    @property
    def clock(self) -> Clock: ...

    @property
    def ids(self) -> Callable[[], str]: ...


@dataclass(eq=False, slots=True)
class Runtime:
    """A loaded context: the working copy and what the engine keeps beside it.

    Slotted: one is held per loaded context, and a slot is smaller and
    quicker to read than an instance dict of some thirty keys."""

    ctx: ChatContext
    holder: ContextHolder
    chat: list[dict[str, Any]]
    """The active branch in chat format, kept in step with ``ctx``."""
    subscribers: list[Sink]
    log: Any
    machine: TurnMachine
    """The engine's machine, which every trigger is fired through."""
    settings: StepSettings
    """The engine's settings as of the running call (the steps read its clock and ids)."""
    request_cancel: Callable[[], None] = lambda: None
    seq: int = 0
    """The last seq reserved."""
    held: int = 0
    """Its messages as ``Loaded.messages`` counts them (``_loaded.py``)."""
    sent_seq: int = 0
    """The last seq that went out (stored, or a ContentDelta sent between commits)."""
    scope: anyio.CancelScope | None = None
    cancel_requested: bool = False
    running: bool = False
    """A call runs on it (from the lease protocol's ``_begin`` to the drive
    loop's ``_leave``): a ``cancel`` may wait for the call's end."""
    done: CallEnd | None = None
    """The running call's end, made by the first caller that waits for it
    (``cancel``): most calls end with nobody waiting. None between calls, so
    that a loaded context keeps no ``Turn``."""
    # Changes not yet committed, and below the running call's lists: each is
    # the empty tuple (or None) until its first item, which makes the list. A
    # resting context keeps none of them: an engine holds thousands of loaded
    # contexts, and an empty list or dict for each of eight would be kept by
    # every one of them between its calls.
    appended: list[tuple[str, MessageNode]] | tuple[()] = ()
    replaced: dict[str, MessageNode] | None = None
    branches: list[Branch] | tuple[()] = ()
    active_changed: bool = False
    config_changed: bool = False
    changes: list[tuple[str, dict[str, Any]]] | tuple[()] = ()
    """Changes that are not transitions (name, detail): audit records of the next commit."""
    # the running call
    turn_states: list[State] | tuple[()] = ()
    turn_nodes: list[MessageNode] | tuple[()] = ()
    stop_reason: StopReason | None = None
    request: LLMRequest | None = None
    answer: MessageNode | None = None
    output: Any = None
    """The running call's typed answer, once validated (``Turn.output``)."""
    output_error: OutputValidationError | None = None
    """Why the running call's typed answer failed, once the retries are spent."""
    partial: list[str] | tuple[()] = ()
    partial_id: str | None = None
    outbox: list[tuple[Callable[..., Event], int, float, dict[str, Any]]] | tuple[()] = ()
    """Events waiting for the next commit: (kind, seq, timestamp, fields)."""
    call_ids: dict[str, None] | None = None
    """Every tool call id in the context, built on first need and kept up to
    date as answers are appended, so that making an answer's ids unique does
    not scan the history on every call."""
    lease: Lease | None = None
    """The lease of the running call (after it returns: the last one it held)."""
    lease_status: LeaseStatus = LeaseStatus.RELEASED
    """Where ``lease`` stands (see :class:`LeaseStatus`)."""
    watch: Any = None
    """What watches the running call (``_observing._observers.Watches``: traces, metrics),
    or None when nothing does."""
    hand_back: bool = False
    """Stop the running call before its next call of the model or backoff
    (after the tools it is running), once what it did is committed: the context stays
    away from rest with its lease released, for another engine to resume
    (a worker that shuts down)."""


def dirty(rt: Runtime) -> bool:
    """Changes not yet committed."""
    return bool(
        rt.holder.steps
        or rt.appended
        or rt.replaced
        or rt.branches
        or rt.active_changed
        or rt.config_changed
        or rt.changes
    )


def require(rt: Runtime, trigger: Trigger) -> State:
    """The current state, when the table has an edge for ``trigger`` from it;
    else :class:`~turnfsm.errors.IllegalTransition` (nothing changed)."""
    state = rt.holder.current()  # a dict lookup, not an enum call
    if next_state(state, trigger) is None:
        raise IllegalTransition(state, trigger, context_id=rt.ctx.id)
    return state
