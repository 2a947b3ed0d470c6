"""``serve --turns workers``: a posted message's turn handed to the workers
(``docs/workers.md``), and the turn read back from the store for ``?wait=true``."""

from __future__ import annotations

import contextlib

import anyio

from ..engine import Engine, Turn
from ..engine._output import OutputInvalid, schema_output, unfenced
from ..model import Role
from ..states import RESTING, State
from ..storage._base import ContextHeads

__all__ = ["POLL_FIRST", "POLL_MAX", "wait_for_rest"]

POLL_FIRST = 0.02
"""Seconds before the first look at the store after a hand-off."""
POLL_MAX = 0.25
"""The longest wait between two looks (the wait doubles up to it)."""


async def wait_for_rest(engine: Engine, context_id: str, message_id: str) -> Turn:
    """Wait until the context rests, then the turn that started with
    ``message_id`` as a :class:`Turn`: its states (the transitions committed
    since that message's ``user_message``), the messages from it on, the
    pending calls, the error, and a typed turn's output (validated again by
    the stored schema: its JSON). ``stop_reason`` is not stored, so it is None.

    While the worker runs the turn, each look reads only the context's state
    (:class:`~turnfsm.storage._base.ContextHeads`: one row), never the whole
    context: a long conversation costs no more to wait for than a short one.
    The context is loaded once it rests (again only if another turn started
    in between). A store that cannot read a head is loaded at each look."""
    store = engine.store
    heads = store if isinstance(store, ContextHeads) else None
    delay = POLL_FIRST
    while True:
        if heads is None or State((await heads.head(context_id))[0]) in RESTING:
            ctx = await store.load(context_id)
            if State(ctx.current_state) in RESTING and message_id in ctx.message_pool:
                break
        await anyio.sleep(delay)
        delay = min(delay * 2, POLL_MAX)
    steps = [s for s in await store.steps(context_id) if s.detail is None]
    start = max((i for i, s in enumerate(steps) if s.trigger == "user_message"), default=len(steps))
    ids = ctx.active_branch.message_ids
    at = ids.index(message_id) if message_id in ids else len(ids)
    nodes = [ctx.message_pool[i] for i in ids[at:]]
    state = State(ctx.current_state)
    pending = tuple(ctx.pending_tool_calls()) if state is State.AWAITING_TOOL_APPROVAL else ()
    output = None
    typed = ctx.progress.output
    if typed is not None and state is State.IDLE and nodes:  # a typed turn that completed
        last = nodes[-1].message
        if last.role is Role.ASSISTANT and "output" in last.metadata.extra:
            with contextlib.suppress(OutputInvalid):  # a refusal, a cut answer: none
                output = schema_output(typed.schema).validate(unfenced(last.text))
    return Turn(
        context_id=context_id,
        state=state,
        stop_reason=None,
        states=tuple(State(s.to_state) for s in steps[start:]),
        messages=tuple(n.message for n in nodes),
        message_ids=tuple(n.id for n in nodes),
        pending_tool_calls=pending,
        error=ctx.progress.last_error if state is State.PERMANENT_FAILURE else None,
        output=output,
    )
