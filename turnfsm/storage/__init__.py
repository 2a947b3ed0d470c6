"""L2: persistence. The :class:`Store` interface and its backends."""

from ._base import Commit, ContextSummary, StepLog, Store
from ._memory import MemoryStore

__all__ = ["Commit", "ContextSummary", "MemoryStore", "StepLog", "Store"]
