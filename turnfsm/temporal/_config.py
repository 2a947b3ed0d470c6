"""What a worker's workflows are made with, found by their task queue.

A workflow instance is made by the Temporal SDK, not by turnfsm, so it
cannot be handed its tools and engine options. The worker registers them
here under its task queue before it starts polling; the workflow looks them
up by ``workflow.info().task_queue``. (turnfsm is passed through the
workflow sandbox, so this module is the one the worker filled in.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..tools import Tool

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "WORKFLOW_ID_PREFIX",
    "WorkerConfig",
    "config_for",
    "register",
    "workflow_id",
]

DEFAULT_TASK_QUEUE = "turnfsm"
WORKFLOW_ID_PREFIX = "turnfsm-context-"
WORKFLOW_NAME = "turnfsm.Context"


def workflow_id(context_id: str) -> str:
    """The id of the workflow that runs the turns of ``context_id``."""
    return WORKFLOW_ID_PREFIX + context_id


@dataclass(frozen=True)
class WorkerConfig:
    """The workflow side of a worker: the tools as the table sees them, the
    engine's options, the activities' timeouts and retries."""

    tools: tuple[Tool, ...] = ()
    engine_options: dict[str, Any] = field(default_factory=dict)
    heartbeat_timeout: timedelta = timedelta(seconds=10)
    """A worker that stops heartbeating for this long has lost its activity
    (an LLM call or a tool): Temporal hands it to another worker."""
    llm_timeout: timedelta = timedelta(minutes=10)
    """The longest one LLM attempt may take, streaming included."""
    tool_timeout: timedelta = timedelta(minutes=10)
    """For a tool without a timeout of its own: the longest one call may take."""
    store_timeout: timedelta = timedelta(seconds=60)
    """The longest one load or commit may take before Temporal retries it."""
    idempotent_attempts: int = 5
    """Attempts of an idempotent tool's call lost to a crash (its own errors
    are results, never retried). A tool that is not idempotent is attempted
    once: a lost attempt is ``outcome_unknown``, for a human to decide."""
    history_limit: int = 10_000
    """Continue-as-new once the workflow's history has this many events (or
    when the server suggests it, whichever comes first)."""


_CONFIGS: dict[str, WorkerConfig] = {}
REPLAY = "*replay*"
"""Where :func:`~turnfsm.temporal.replayer` registers its config: a
``Replayer`` runs workflows on a task queue of its own naming."""


def register(task_queue: str, config: WorkerConfig) -> None:
    _CONFIGS[task_queue] = config


def config_for(task_queue: str) -> WorkerConfig:
    found = _CONFIGS.get(task_queue) or _CONFIGS.get(REPLAY)
    if found is None:
        raise RuntimeError(
            f"no turnfsm worker registered task queue {task_queue!r} in this process"
        )
    return found
