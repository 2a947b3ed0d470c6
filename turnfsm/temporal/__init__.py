"""turnfsm on Temporal: one workflow per context, the declared table inside it,
the effects as activities, the engine's calls as Updates (docs/temporal.md).

Needs the ``temporal`` extra (the ``temporalio`` SDK); ``import turnfsm``
never imports it.

- :class:`TemporalEngine`: the engine a client uses; its turn calls go to
  Temporal, the rest reads the store.
- :class:`TemporalWorker`: runs the workflows and the activities of one task
  queue (``turnfsm temporal-worker``).
- :func:`workflow_id`: the id of a context's workflow.
- :class:`StoredPayloadCodec`, :func:`prune_payloads`: payloads over
  Temporal's limit kept in the store (both classes above apply the codec).
"""

from __future__ import annotations

from ._client import TemporalEngine
from ._config import DEFAULT_TASK_QUEUE, WORKFLOW_ID_PREFIX, WORKFLOW_NAME, workflow_id
from ._payloads import THRESHOLD as PAYLOAD_THRESHOLD
from ._payloads import PayloadNotFound, Pruned, StoredPayloadCodec, prune_payloads
from ._worker import PASSED_THROUGH, TemporalWorker, replayer, sandbox
from ._workflow import ContextWorkflow

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "PASSED_THROUGH",
    "PAYLOAD_THRESHOLD",
    "WORKFLOW_ID_PREFIX",
    "WORKFLOW_NAME",
    "ContextWorkflow",
    "PayloadNotFound",
    "Pruned",
    "StoredPayloadCodec",
    "TemporalEngine",
    "TemporalWorker",
    "prune_payloads",
    "replayer",
    "sandbox",
    "workflow_id",
]
