"""How long a call waits on the Temporal server, and what it is when the
server cannot be reached (docs/temporal.md, "When Temporal does not answer").

Every request the client side makes (the Update that starts a call, the polls
of its result, a signal, a health check) goes through :func:`bounded`: it has
a deadline of its own, and what it raises is mapped here, once. The SDK says
"the connection is lost" in several ways, depending on where the request was
when it was lost:

- an :class:`~temporalio.service.RPCError` with status ``UNAVAILABLE`` (the
  connection refused, the server shutting down), ``UNKNOWN`` ("transport
  error": the connection broke mid-request), ``DEADLINE_EXCEEDED`` (the
  request's deadline passed at the server) or ``CANCELLED`` ("Timeout
  expired": it passed here, or the connection was reset), each after the
  SDK's own retries;
- an :class:`~temporalio.client.RPCTimeoutOrCancelledError` (or its
  ``WorkflowUpdateRPCTimeoutOrCancelledError``): what the SDK makes of the
  last two for Updates and their polls;
- a ``RuntimeError("Failed client connect: ...")`` from the SDK's core when
  a client that connects lazily cannot connect;
- no answer at all (a server that holds the connection and says nothing):
  :func:`bounded`'s own deadline.

Each is :class:`~turnfsm.errors.TemporalUnavailable`, and so is one answer
of the server: ``FAILED_PRECONDITION`` with a ``WorkflowNotReadyFailure``
(the context's workflow takes no Update while its last workflow task failed:
Temporal retries that task, and the call was not taken). Everything else is
the server answering, and stays what it is: an Update refused or failed
(``WorkflowUpdateFailedError``, which carries the engine's own error), a
workflow that failed, or any other status (``NOT_FOUND``,
``FAILED_PRECONDITION``, ``INVALID_ARGUMENT``, ``PERMISSION_DENIED``, ...).
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, TypeVar

import anyio
from temporalio.api.errordetails.v1 import (
    MultiOperationExecutionFailure,
    WorkflowNotReadyFailure,
)
from temporalio.client import Client, RPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from ..errors import TemporalUnavailable

__all__ = [
    "ACCEPT_WITHIN",
    "CONNECT_WITHIN",
    "FIRST_STEP_WITHIN",
    "GRACE",
    "LOST",
    "PATIENCE",
    "RPC_TIMEOUT",
    "WorkflowNotReady",
    "answers",
    "bounded",
    "lost",
    "not_ready",
    "result_of",
    "unavailable",
]

T = TypeVar("T")

RPC_TIMEOUT = 10.0
"""Seconds one request to the Temporal server may take: a signal, a health
check, each long poll of an Update's result (a poll that runs out while the
server answers its health check is a turn still running: polled again)."""
ACCEPT_WITHIN = 20.0
"""Seconds a call waits for the context's workflow to accept or refuse its
Update (the tries of a settling context included), before it is
``TemporalUnavailable`` whose ``accepted`` is not known."""
FIRST_STEP_WITHIN = 10.0
"""Seconds an accepted call waits for its first step to be in the store
before it is announced as accepted all the same (``turnfsm serve``'s 202)."""
PATIENCE = 60.0
"""Seconds an accepted call goes on waiting for its result while the
Temporal server cannot be reached (it holds the call: it runs once the
server is back) before it is ``TemporalUnavailable``."""
CONNECT_WITHIN = 10.0
"""Seconds :meth:`TemporalEngine.connect` waits for the server."""
GRACE = 2.0
"""Seconds past a request's own deadline before :func:`bounded` gives up on
it (the SDK's answer to the deadline comes first, when it comes)."""

LOST = frozenset(
    {
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.UNKNOWN,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.CANCELLED,
    }
)
"""The statuses of a request the Temporal server did not answer: the
connection refused, broken or reset, or the deadline passed."""

_CONNECT = "Failed client connect"
"""How the SDK's core begins the ``RuntimeError`` of a failed connection."""


def lost(exc: BaseException) -> str | None:
    """What ``exc`` says when it says the Temporal server was not reached
    or did not answer in time; None when it is the server's answer."""
    if isinstance(exc, RPCTimeoutOrCancelledError):
        return "did not answer in time"
    if isinstance(exc, RPCError) and exc.status in LOST:
        return f"cannot be reached ({exc.status.name}: {exc.message})"
    if isinstance(exc, RuntimeError) and str(exc).startswith(_CONNECT):
        return f"cannot be reached ({exc})"
    return None


class WorkflowNotReady(TemporalUnavailable):
    """The server refused the Update: the context's workflow takes none while
    its last workflow task failed (Temporal tries that task again). Nothing of
    the call was taken; the caller may try again (``WorkflowUpdates.call`` does,
    within ``ACCEPT_WITHIN``)."""


def not_ready(exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing an Update because the workflow
    cannot take one now (``WorkflowNotReadyFailure``, alone or as the
    failed operation of an update-with-start)."""
    if not isinstance(exc, RPCError) or exc.status is not RPCStatusCode.FAILED_PRECONDITION:
        return False
    for detail in exc.grpc_status.details:
        if detail.Is(WorkflowNotReadyFailure.DESCRIPTOR):
            return True
        multi = MultiOperationExecutionFailure()
        if detail.Unpack(multi) and any(
            inner.Is(WorkflowNotReadyFailure.DESCRIPTOR)
            for status in multi.statuses
            for inner in status.details
        ):
            return True
    return False


def unavailable(said: str, accepted: bool | None, at: str | None = None) -> TemporalUnavailable:
    """The error for a call the server did not answer (``said``: how), by
    what is known of the call: ``accepted`` True (it goes on there), False
    (never sent: nothing ran), None (sent, but not known to be accepted).
    With ``at`` (an address), the error of a connection, not of a call."""
    if at is not None:
        return TemporalUnavailable(f"the Temporal server at {at} {said}", accepted=False)
    if accepted:
        return TemporalUnavailable(
            f"the Temporal server {said} after it accepted the call, which goes on there; "
            "its result is not known here: read the context",
            accepted=True,
        )
    if accepted is False:
        return TemporalUnavailable(
            f"the Temporal server {said}; the call was not sent: call again later",
            accepted=False,
        )
    return TemporalUnavailable(
        f"the Temporal server {said}; whether it accepted the call is not known: "
        "read the context before calling again",
        accepted=None,
    )


async def bounded(
    call: Awaitable[T], within: float, *, accepted: bool | None, at: str | None = None
) -> T:
    """``call`` (one request to the Temporal server, or the SDK's loop of
    them) given ``within`` seconds; a lost connection, or no answer in time,
    is :class:`TemporalUnavailable` (``accepted``: as :func:`unavailable`;
    a call not known to be accepted whose connection could not be made was
    never sent; ``at``: the address of a connection being made)."""
    with anyio.move_on_after(within) as scope:
        try:
            return await call
        except Exception as exc:
            if not scope.cancel_called:  # the SDK's answer, not our deadline
                if not_ready(exc):
                    raise WorkflowNotReady(
                        f"the context's workflow takes no call now ({exc}): its last "
                        "workflow task failed, and Temporal tries it again; the call was "
                        "not taken: call again later",
                        accepted=False,
                    ) from exc
                said = lost(exc)
                if said is None:
                    raise
                if isinstance(exc, RuntimeError) and accepted is None:
                    accepted = False  # no connection: nothing of this call was sent
                raise unavailable(said, accepted, at) from exc
            # our deadline: the SDK may have made its cancel an error of its own
    raise unavailable(f"did not answer within {within:g} s", accepted, at)


async def answers(client: Client) -> bool:
    """Whether the Temporal server answers a health check, now."""
    try:
        return await bounded(
            client.service_client.check_health(timeout=timedelta(seconds=RPC_TIMEOUT)),
            RPC_TIMEOUT + GRACE,
            accepted=None,
        )
    except TemporalUnavailable:
        return False
    except RPCError:  # it answered, with an error of its own
        return True


async def result_of(client: Client, handle: Any) -> Any:
    """An accepted Update's result (``handle``: its
    :class:`~temporalio.client.WorkflowUpdateHandle`), by long polls of
    :data:`RPC_TIMEOUT` seconds. A poll that runs out while the server
    answers its health check is a turn that takes longer: polled again. While
    the server does not answer, the wait goes on (Temporal holds the call: it
    runs once the server is back) for :data:`PATIENCE` seconds, then it is
    ``TemporalUnavailable`` with ``accepted`` True."""
    silent_since: float | None = None
    while True:
        try:
            return await bounded(
                handle.result(rpc_timeout=timedelta(seconds=RPC_TIMEOUT)),
                RPC_TIMEOUT + GRACE,
                accepted=True,
            )
        except TemporalUnavailable:
            if await answers(client):
                silent_since = None
                continue
            now = anyio.current_time()
            silent_since = now if silent_since is None else silent_since
            if now - silent_since >= PATIENCE:
                raise
            await anyio.sleep(1.0)
