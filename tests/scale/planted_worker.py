"""The planted bug: ``turnfsm worker`` whose commits skip the fencing check.

``python -m tests.scale.planted_worker ARGS`` is ``turnfsm worker ARGS`` with
``PostgresStore._check_fence`` replaced by a function that checks nothing: a
commit under a lease that another worker has since claimed is applied as long
as its version matches. The kill test's checker must catch it
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


PostgresStore._check_fence = staticmethod(_no_fence)  # type: ignore[method-assign,assignment]

if __name__ == "__main__":
    sys.exit(main(["worker", *sys.argv[1:]]))
