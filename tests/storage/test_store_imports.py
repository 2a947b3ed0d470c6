"""A store's module, and the driver it needs, are imported only by a program
that uses that store: the server's event log and the Temporal payload table
are found for a memory or SQLite store without importing the PostgreSQL
store (which imports psycopg when it is installed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CODE = """
import sys
from turnfsm.storage import MemoryStore, SQLiteStore
from turnfsm.storage._eventlog import open_event_log
logs = [type(open_event_log(MemoryStore())).__name__,
        type(open_event_log(SQLiteStore(sys.argv[1]))).__name__]
try:
    from turnfsm.temporal._payloads import payload_table
except ImportError:  # the temporal extra is not installed
    tables = []
else:
    tables = [type(payload_table(MemoryStore())).__name__,
              type(payload_table(SQLiteStore(sys.argv[1]))).__name__]
print(logs, tables)
print(sorted(m for m in sys.modules if m == "psycopg" or m.endswith("._postgres")))
"""


def test_a_memory_or_sqlite_program_does_not_import_the_postgresql_store(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE, str(tmp_path / "s.db")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    logs, imported = out.stdout.splitlines()
    assert logs.startswith("['MemoryEventLog', 'SQLiteEventLog'] "), logs
    assert imported == "[]", out.stdout
