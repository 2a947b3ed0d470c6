"""The retry policy: a frozen value read by the engine's one retry layer.

This is the only module that imports ``tenacity``: its wait strategies compute
the backoff. A delay the provider asked for (``Retry-After``,
``retry-after-ms``, carried on the error) wins when present.

``tenacity`` (with ``asyncio``'s futures, ``logging`` and ``inspect`` behind
it) is imported by the first policy made, or the first wait strategy asked
for here, not by ``import turnfsm``: ``turnfsm --help`` and a command's usage
error make no engine.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._lazy import lazy_names
from ..errors import InvalidInput, LLMError

if TYPE_CHECKING:
    from tenacity import wait_exponential, wait_fixed, wait_random_exponential
    from tenacity.wait import wait_base

__all__ = [
    "RetryPolicy",
    "default_retry",
    "wait_exponential",
    "wait_fixed",
    "wait_random_exponential",
]

WAITS = ("wait_exponential", "wait_fixed", "wait_random_exponential")
"""tenacity's wait strategies named here (and in :mod:`turnfsm.engine`)."""


__getattr__ = lazy_names(__name__, dict.fromkeys(WAITS, "tenacity"))


def _default_wait() -> wait_base:
    import tenacity

    return tenacity.wait_random_exponential(multiplier=0.5, max=30.0)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How transient LLM failures are retried.

    ``max_attempts`` counts LLM attempts for one request (3: the first and two
    retries). ``wait`` is any tenacity wait strategy (exponential with full
    jitter by default). ``max_retry_after`` caps a provider's requested delay.
    """

    max_attempts: int = 3
    wait: wait_base = field(default_factory=_default_wait)
    respect_retry_after: bool = True
    max_retry_after: float = 600.0

    def __post_init__(self) -> None:
        n = self.max_attempts
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidInput("max_attempts", f"must be an integer >= 1, not {n!r}")
        if not callable(self.wait):
            raise InvalidInput("wait", f"must be a tenacity wait strategy, not {self.wait!r}")
        cap = self.max_retry_after
        if isinstance(cap, bool) or not isinstance(cap, int | float) or not cap >= 0:
            raise InvalidInput("max_retry_after", f"must be a number >= 0, not {cap!r}")

    def delay(self, attempt: int, error: LLMError) -> float:
        """Seconds to wait before attempt ``attempt + 1``, after ``error`` failed ``attempt``."""
        if self.respect_retry_after and error.retry_after is not None:
            return min(max(error.retry_after, 0.0), self.max_retry_after)
        import tenacity

        state = tenacity.RetryCallState(None, None, (), {})  # type: ignore[arg-type]
        state.attempt_number = attempt
        return float(self.wait(state))


@functools.cache
def default_retry() -> RetryPolicy:
    """``RetryPolicy()``, made on first use and shared (it is frozen): an
    engine made without a policy asks for it at its first retry, so that one
    whose LLM never fails never imports ``tenacity``."""
    return RetryPolicy()
