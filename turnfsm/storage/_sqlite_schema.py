"""The SQLite store's file: its check before connecting, and its table layout.

The layout is versioned as PostgreSQL's is (:mod:`turnfsm.storage._migrate`):
:data:`MIGRATIONS`, numbered, ``turnfsm_meta.store_format`` counting those
applied. :func:`prepare` applies the missing ones when a store opens the
file, and ``turnfsm db upgrade --store sqlite:///...`` does the same
(:func:`upgrade`). A file of format 1 made before the ``leases`` table and
the ``detail``, ``lease_token`` and ``lease_owner`` columns of ``steps``
existed gets them when it is opened (they are part of format 1).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ..errors import StoreError
from ._migrate import FORMAT_ROW, SET_FORMAT, format_of_row, missing

__all__ = ["MIGRATIONS", "STORE_FORMAT", "check_database_file", "prepare", "upgrade"]

_HEADER = b"SQLite format 3\x00"

_TABLES = """
CREATE TABLE IF NOT EXISTS turnfsm_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS contexts (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    schema_version INTEGER NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    parent_id TEXT,
    active_branch TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    config TEXT NOT NULL,
    progress TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS branches (
    ctx INTEGER NOT NULL,
    name TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (ctx, name)
);
CREATE TABLE IF NOT EXISTS branch_messages (
    ctx INTEGER NOT NULL,
    branch TEXT NOT NULL,
    pos INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    PRIMARY KEY (ctx, branch, pos)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    ctx INTEGER NOT NULL,
    id TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (ctx, id)
);
CREATE TABLE IF NOT EXISTS steps (
    ctx INTEGER NOT NULL,
    schema_version INTEGER NOT NULL,
    version INTEGER NOT NULL,
    from_state TEXT NOT NULL,
    trigger TEXT NOT NULL,
    to_state TEXT NOT NULL,
    at TEXT NOT NULL,
    detail TEXT,
    lease_token INTEGER,
    lease_owner TEXT
);
CREATE INDEX IF NOT EXISTS steps_by_context ON steps (ctx);
"""

_LEASES_TABLE = """
CREATE TABLE IF NOT EXISTS leases (
    context_id TEXT PRIMARY KEY,
    owner TEXT,
    token INTEGER NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID
"""

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: the tables
    (*(s for s in _TABLES.split(";") if s.strip()), _LEASES_TABLE),
)
"""The table layout's migrations, in order, each as its statements."""

STORE_FORMAT = len(MIGRATIONS)
"""The version of the table layout (``turnfsm_meta.store_format``)."""


_LOOKS = 5
"""How many times a file shorter than its header says is looked at again
before it is called truncated (see :func:`check_database_file`)."""

_WAL_HEADER = 32
"""A WAL file's own header: a longer one holds frames."""


def check_database_file(path: Path) -> None:
    """Refuse, without writing anything, a file that is not a whole SQLite database.

    A missing or empty file is fine (SQLite makes a new database). Otherwise the
    100-byte header must be SQLite's, and the file must be at least as long as
    the page count its header states (when that count is valid), so that a
    truncated database is caught before SQLite touches it.

    A file may be shorter than its header says while it is whole: a checkpoint
    copies pages from the WAL in page order, the header's page first, and a
    commit in rollback mode writes the same way. Another process may be in the
    middle of either, and a process killed in the middle of one leaves the file
    so, with the WAL or the journal beside it from which SQLite finishes or
    undoes the copy on opening. So a short file is only called truncated when
    it stays short with neither a WAL holding frames nor a journal beside it,
    looked at after the file itself.
    """
    short = _short_by_header(path)
    looks = 1
    while short is not None and not _journal_beside(path):
        if looks == _LOOKS:
            size, pages, page_size = short
            raise StoreError(
                f"{path}: truncated SQLite database: {size} bytes, its header says "
                f"{pages} pages of {page_size} bytes ({pages * page_size} bytes); it was "
                "left untouched"
            )
        short = _short_by_header(path)
        looks += 1


def _short_by_header(path: Path) -> tuple[int, int, int] | None:
    """``(size, pages, page size)`` if the file is shorter than its header's
    valid page count says, else None; a file that is not a SQLite database is
    refused. The size is read after the header, from the same open file, so a
    file that grows between the two reads is not taken for a short one."""
    try:
        if not path.exists():
            return None
        if path.is_dir():
            raise StoreError(f"{path}: is a directory, not a SQLite database file")
        with path.open("rb") as f:
            header = f.read(100)
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the database file: {exc}") from exc
    if not header:
        return None
    if not header.startswith(_HEADER):
        raise StoreError(
            f"{path}: not a SQLite database (the file does not start with the SQLite "
            "header); it was left untouched"
        )
    if len(header) < 100:
        raise StoreError(
            f"{path}: truncated SQLite database ({size} bytes, shorter than its header); "
            "it was left untouched"
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter = header[24:28]
    pages = int.from_bytes(header[28:32], "big")
    valid_for = header[92:96]
    if page_size < 512 or page_size & (page_size - 1):
        raise StoreError(
            f"{path}: damaged SQLite header (page size {page_size}); it was left untouched"
        )
    if pages and change_counter == valid_for and size < pages * page_size:
        return size, pages, page_size
    return None


def _journal_beside(path: Path) -> bool:
    """Whether a WAL holding frames or a rollback journal lies beside ``path``:
    SQLite then has what it needs to finish or undo a copy into the file."""
    for suffix, longer_than in (("-wal", _WAL_HEADER), ("-journal", 0)):
        try:
            if os.stat(f"{path}{suffix}").st_size > longer_than:
                return True
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreError(f"{path}{suffix}: cannot read: {exc}") from exc
    return False


def prepare(conn: sqlite3.Connection, path: Path, synchronous: str) -> tuple[int, int]:
    """Make ``conn``'s database a turnfsm store of the current layout: refuse a
    database of something else or of a newer layout (before anything is
    written), switch it to WAL mode with ``synchronous``, and apply the
    migrations it lacks in one transaction. ``(format before, format after)``
    (before: 0 for a new database)."""
    try:
        # read before anything is written: a damaged file fails here, untouched
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "turnfsm_meta" not in tables:
            raise StoreError(
                f"{path}: a SQLite database of something else (tables: "
                f"{', '.join(sorted(tables))}), not a turnfsm store; it was left untouched"
            )
        found = format_of_row(conn.execute(FORMAT_ROW).fetchone()) if tables else None
        todo = missing(found, STORE_FORMAT, str(path))
        before = 0 if found is None else found
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            raise StoreError(f"{path}: cannot switch the database to WAL mode ({mode!r})")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        if todo:
            conn.execute("BEGIN IMMEDIATE")
            try:  # under the write lock: another process may have applied them
                known = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'turnfsm_meta'"
                ).fetchone()
                now = format_of_row(conn.execute(FORMAT_ROW).fetchone()) if known else None
                for number in missing(now, STORE_FORMAT, str(path)):
                    for statement in MIGRATIONS[number - 1]:
                        conn.execute(statement)
                conn.execute(SET_FORMAT, (str(STORE_FORMAT),))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        _complete_format_1(conn, path)
        return before, STORE_FORMAT
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot use the database: {exc}") from exc


def _complete_format_1(conn: sqlite3.Connection, path: Path) -> None:
    """Add the ``leases`` table, and the ``detail``, ``lease_token`` and
    ``lease_owner`` columns of ``steps``, to a file made before they existed
    (old rows keep NULL in the new columns)."""
    try:
        known = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'leases'"
        ).fetchone()
        if known is None:
            conn.execute(_LEASES_TABLE)
        columns = {r[1] for r in conn.execute("PRAGMA table_info(steps)")}
        for column, kind in (
            ("detail", "TEXT"),
            ("lease_token", "INTEGER"),
            ("lease_owner", "TEXT"),
        ):
            if column in columns:
                continue
            try:
                conn.execute(f"ALTER TABLE steps ADD COLUMN {column} {kind}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):  # another process added it
                    raise
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot add the leases table: {exc}") from exc


def upgrade(path: Path, *, busy_timeout: float = 5.0) -> tuple[int, int]:
    """Apply the migrations the SQLite file at ``path`` lacks (a new file gets
    them all), as opening a store on it does: ``(format before, format
    after)``."""
    check_database_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"{path}: cannot open the database: {exc}") from exc
    try:
        return prepare(conn, path, "FULL")
    finally:
        conn.close()
