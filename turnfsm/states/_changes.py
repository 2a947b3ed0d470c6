"""Changes: committed records of the audit trail that are not transitions.

A context's config, its branches and their prompts, and its sub-contexts
(spawned, finished) change at a resting state without moving the context: no
row of the table is taken, ``current_state`` stays, and the change is
committed like a step (versioned, durable before it is acknowledged, with an
event and an audit record naming it). The names here
are the ``trigger`` such a record carries; none of them is a trigger of the
table (checked below), so a record is a transition or a change, never both.
"""

from __future__ import annotations

from enum import StrEnum

from ._table import TRIGGERS

__all__ = ["CHANGES", "Change"]


class Change(StrEnum):
    CONFIG_UPDATED = "config_updated"
    """``update_config``: the fields given, with their new values."""
    BRANCH_FORKED = "branch_forked"
    """``fork``: the new branch, where it forked, the prompts it was given."""
    BRANCH_SWITCHED = "branch_switched"
    """``switch_branch``: the branch made active."""
    BRANCH_PROMPTS_SET = "branch_prompts_set"
    """``set_branch_prompts``: the branch and the prompts given."""
    CHILD_SPAWNED = "child_spawned"
    """``spawn``, on the parent: the new sub-context's id, title and task."""
    CHILD_FINISHED = "child_finished"
    """``finish``, on the parent: the sub-context's id and the summary message
    appended to the parent's active branch (the one message this record adds)."""
    ARCHIVED = "archived"
    """``finish(keep=True)``, on the sub-context: it is kept, finished, and
    takes no more input."""


CHANGES: frozenset[str] = frozenset(Change)

if CHANGES & {str(t) for t in TRIGGERS}:  # pragma: no cover - a guard on the names
    raise AssertionError("a change is named like a trigger of the table")
