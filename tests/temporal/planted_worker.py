"""The planted bug: ``turnfsm temporal-worker`` that retries a tool that is not
idempotent, silently.

``python -m tests.temporal.planted_worker ARGS`` is ``turnfsm temporal-worker
ARGS`` whose workflows take every tool for idempotent: a call of ``charge``
lost with its worker (a SIGKILL mid-call) is attempted again by Temporal's
retry policy on another worker, instead of being answered as
``outcome_unknown`` for a human to decide. The kill test's checker must catch
it (``test_kill.py``). It exists only here, never as a switch of the product.
"""

from __future__ import annotations

import sys
from typing import Any

from turnfsm.cli import main
from turnfsm.temporal import _workflow

_made = _workflow._ActivityTool.of.__func__  # type: ignore[attr-defined]


def _every_tool_idempotent(cls: Any, tool: Any, wf: Any) -> Any:
    made = _made(cls, tool, wf)
    object.__setattr__(made, "idempotent", True)
    return made


_workflow._ActivityTool.of = classmethod(_every_tool_idempotent)  # type: ignore[assignment,method-assign]

if __name__ == "__main__":
    sys.exit(main(["temporal-worker", *sys.argv[1:]]))
