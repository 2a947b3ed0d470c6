"""The planted bug: ``turnfsm worker`` whose commits skip the fencing check.

``python -m tests.scale.planted_worker ARGS`` is ``turnfsm worker ARGS`` whose
commits skip the fence: the store's one-statement commit (``turnfsm_commit``,
which checks the lease's token in SQL) is bypassed for the statements it falls
back to, with the fencing check of those statements (``_check_fence`` in
``turnfsm.storage._pg_commit``) replaced by a function that checks nothing.
A commit under a lease that another worker has since claimed is applied as
long as its version matches. The plant refuses to start when what it replaces
is gone, so that a move of the store's code cannot leave it planting nothing.
The kill test's checker must catch it (``tests/scale/test_kill.py``). It
exists only here, never as a switch of the product.
"""

from __future__ import annotations

import sys
from typing import Any

from turnfsm.cli import main
from turnfsm.storage import _pg_commit
from turnfsm.storage._postgres import PostgresStore


async def _no_fence(conn: Any, context_id: str, token: int) -> None:
    return None


async def _commit_without_fence(self: PostgresStore, commit: Any) -> None:
    await self._run(lambda conn: self._commit_tx(conn, commit), transaction=True)


for owner, name in ((_pg_commit, "_check_fence"), (PostgresStore, "_commit_tx")):
    if not callable(getattr(owner, name, None)):
        raise SystemExit(f"planted_worker: {owner.__name__}.{name} is gone; plant the bug anew")
_pg_commit._check_fence = _no_fence
PostgresStore.commit = _commit_without_fence  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(["worker", *sys.argv[1:]]))
