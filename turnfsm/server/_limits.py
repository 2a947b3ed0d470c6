"""The per-tenant limit on concurrent turns (``--max-turns-per-tenant``; see
the section "Tenants and tokens" of ``docs/server.md``)."""

from collections.abc import Iterator
from contextlib import contextmanager

from ._errors import ApiError

__all__ = ["DEFAULT_MAX_TURNS_PER_TENANT", "RETRY_AFTER", "TurnLimit"]

DEFAULT_MAX_TURNS_PER_TENANT = 8
RETRY_AFTER = 1
"""Seconds a refused client is told to wait (``Retry-After``)."""


class TurnLimit:
    """Counts the turns each tenant has running in this server. A slot is
    taken before the turn's task starts (no await in between, so two requests
    at once cannot both take the last one) and given back when it ends."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max turns per tenant must be at least 1, not {limit}")
        self.limit = limit
        self._running: dict[str, int] = {}

    def running(self, tenant: str) -> int:
        return self._running.get(tenant, 0)

    def acquire(self, tenant: str) -> None:
        """Take a slot, or ``429 too_many_turns`` with ``Retry-After``."""
        now = self._running.get(tenant, 0)
        if now >= self.limit:
            raise ApiError(
                429,
                "too_many_turns",
                f"{now} turns of this tenant are running (the limit is {self.limit}); "
                "try again when one has ended",
                headers={"Retry-After": str(RETRY_AFTER)},
            )
        self._running[tenant] = now + 1

    def release(self, tenant: str) -> None:
        left = self._running.get(tenant, 0) - 1
        if left > 0:
            self._running[tenant] = left
        else:
            self._running.pop(tenant, None)

    @contextmanager
    def reserved(self, tenant: str) -> Iterator[None]:
        """Hold a slot while a request makes what its turn needs (a new context,
        its imported history): ``429`` comes before anything is stored. The slot
        is given back on leaving; the caller then launches the turn with no await
        in between, so the launch takes it again before any other request can."""
        self.acquire(tenant)
        try:
            yield
        finally:
            self.release(tenant)
