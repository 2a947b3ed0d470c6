"""The planted bug: ``turnfsm temporal-worker`` that retries a tool that is not
idempotent, silently.

``python -m tests.temporal.planted_worker ARGS`` is ``turnfsm temporal-worker
ARGS`` whose workflows give every tool call the retry policy of an idempotent
tool (``turnfsm.temporal._workflow.tool_retry``, replaced here): a call of
``charge`` lost with its worker (a SIGKILL mid-call) is attempted again by
Temporal on another worker, instead of being answered as ``outcome_unknown``
for a human to decide. The kill test's checker must catch it
(``test_kill.py``). It exists only here, never as a switch of the product.
"""

from __future__ import annotations

import sys
from typing import Any

from temporalio.common import RetryPolicy

from turnfsm.cli import main
from turnfsm.temporal import _workflow


def _as_if_idempotent(tool: Any, config: Any) -> RetryPolicy:
    return RetryPolicy(maximum_attempts=config.idempotent_attempts)


_workflow.tool_retry = _as_if_idempotent

if __name__ == "__main__":
    sys.exit(main(["temporal-worker", *sys.argv[1:]]))
