"""The planted bug: ``turnfsm worker`` whose commits skip the fencing check.

``python -m tests.scale.planted_worker ARGS`` is ``turnfsm worker ARGS`` whose
commits skip the fence: the store's one-statement commit (``turnfsm_commit``,
which checks the lease's token in SQL) is bypassed for the statements it falls
back to, with ``PostgresStore._check_fence`` replaced by a function that checks
nothing. A commit under a lease that another worker has since claimed is
applied as long as its version matches. The kill test's checker must catch it
(``tests/scale/test_scale.py``). It exists only here, never as a switch of the
product.
"""

from __future__ import annotations

import sys
from typing import Any

from turnfsm.cli import main
from turnfsm.storage._postgres import PostgresStore


async def _no_fence(conn: Any, context_id: str, token: int) -> None:
    return None


async def _commit_without_fence(self: PostgresStore, commit: Any) -> None:
    await self._run(lambda conn: self._commit_tx(conn, commit), transaction=True)


PostgresStore._check_fence = staticmethod(_no_fence)  # type: ignore[method-assign,assignment]
PostgresStore.commit = _commit_without_fence  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(["worker", *sys.argv[1:]]))
