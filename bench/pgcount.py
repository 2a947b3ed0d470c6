"""Count the SQL round trips a process sends to PostgreSQL, by caller.

``install()`` patches psycopg's async cursor (``execute``, ``executemany``) and
the connection's commands (``BEGIN``, ``COMMIT``, ``ROLLBACK``), and counts
each as one round trip (an ``executemany`` is one: psycopg pipelines it),
under the store or event-log method that sent it: the outermost frame of
``turnfsm/storage/_postgres.py`` or ``_pg_events.py`` on the stack (``commit``,
``load``, ``acquire_lease``, ``claim_expired``, ``add``, ...), ``check`` for
the pool's check of a connection it hands out, else ``other``. ``report()``
is the counts as a dict; with ``$TURNFSM_PGCOUNT`` set, the counts are written
there (JSON, appended as one line) when the process exits.

W9 uses it with ``--count`` (``python bench/w9.py --count``): the driver
installs it, and the workers run as ``python bench/pgcount.py worker ...``.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from collections import Counter
from typing import Any

COUNTS: Counter[str] = Counter()
STATEMENTS: Counter[str] = Counter()
_OURS = ("turnfsm/storage/_postgres.py", "turnfsm/storage/_pg_events.py")
_POOL = "psycopg_pool/"


def _caller() -> str:
    frame = sys._getframe(2)
    found = None
    while frame is not None:
        name = frame.f_code.co_filename
        if name.endswith(_OURS):
            code = frame.f_code.co_name
            if not code.startswith("_") and code != "<lambda>":
                found = code
        elif _POOL in name and frame.f_code.co_name in ("_check_connection", "check_connection"):
            return "check"
        frame = frame.f_back  # type: ignore[assignment]
    return found or "other"


_INSTALLED: list[bool] = []


def install() -> None:
    """Patch psycopg to count (once per process)."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    import psycopg
    from psycopg._connection_base import BaseConnection

    execute = psycopg.AsyncCursor.execute
    executemany = psycopg.AsyncCursor.executemany
    exec_command = BaseConnection._exec_command

    async def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        where = _caller()
        COUNTS[where] += 1
        STATEMENTS[where] += 1
        return await execute(self, query, *args, **kwargs)

    async def counted_executemany(self: Any, query: Any, params: Any, **kwargs: Any) -> Any:
        params = list(params)
        where = _caller()
        COUNTS[where] += 1
        STATEMENTS[where] += len(params)
        return await executemany(self, query, params, **kwargs)

    def counted_command(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        where = _caller()
        COUNTS[where] += 1
        STATEMENTS[where] += 1
        return exec_command(self, command, *args, **kwargs)

    psycopg.AsyncCursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.AsyncCursor.executemany = counted_executemany  # type: ignore[method-assign]
    BaseConnection._exec_command = counted_command  # type: ignore[method-assign]
    target = os.environ.get("TURNFSM_PGCOUNT")
    if target:
        atexit.register(_dump, target)


def report() -> dict[str, dict[str, int]]:
    """Round trips and statements so far, by caller."""
    return {"trips": dict(COUNTS), "statements": dict(STATEMENTS)}


def _dump(target: str) -> None:
    with open(target, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), **report()}) + "\n")


if __name__ == "__main__":
    install()
    from turnfsm.cli import main

    code = main(sys.argv[1:])
    sys.exit(code)
