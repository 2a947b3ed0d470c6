"""L1: audit logs. A context's committed transitions as JSON Lines, and their check.

- :func:`audit_records` (from a store's steps and messages) and
  :func:`audit_jsonl` write a log (``turnfsm audit export``);
- :func:`records_from_audit_lines` reads one back;
- :func:`verify_audit_log` checks one against the declared table
  (``turnfsm audit verify``);
- :data:`ACTORS` / :func:`actor_of` say who causes each transition.

This package imports only the model and the states (``docs/architecture.md``),
so the renderers can draw audit logs: callers load steps and messages from a
store and pass them in.
"""

from ._log import (
    ACTORS,
    TOOL_CYCLE,
    Actor,
    AuditRecord,
    CommittedStep,
    actor_of,
    audit_jsonl,
    audit_records,
    creation_order,
    records_from_audit_lines,
)
from ._verify import VerifyResult, verify_audit_log

__all__ = [
    "ACTORS",
    "TOOL_CYCLE",
    "Actor",
    "AuditRecord",
    "CommittedStep",
    "VerifyResult",
    "actor_of",
    "audit_jsonl",
    "audit_records",
    "creation_order",
    "records_from_audit_lines",
    "verify_audit_log",
]
