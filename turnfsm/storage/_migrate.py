"""How a SQL store's table layout is versioned, the same for SQLite and
PostgreSQL: the layout is a tuple of numbered migrations (each store's
``MIGRATIONS``), ``turnfsm_meta.store_format`` counts those applied, and the
missing ones are applied in order, in one transaction, up to the layout this
turnfsm knows (``turnfsm db upgrade --store URL``; see docs/storage.md,
"Table layouts and migrations")."""

from __future__ import annotations

from ..errors import SchemaVersionError, StoreError

__all__ = ["FORMAT_ROW", "SET_FORMAT", "format_of_row", "missing"]

FORMAT_ROW = "SELECT value FROM turnfsm_meta WHERE key = 'store_format'"
"""The layout's format, as stored."""
SET_FORMAT = (
    "INSERT INTO turnfsm_meta (key, value) VALUES ('store_format', ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
"""The layout's format, once migrations are applied (``?``: the number, as text)."""


def format_of_row(row: tuple[object, ...] | None) -> int:
    """``turnfsm_meta.store_format`` as read by :data:`FORMAT_ROW` (``-1``: missing
    or not a number)."""
    try:
        return int(str(row[0])) if row is not None else -1
    except ValueError:
        return -1


def missing(found: int | None, known: int, where: str, *, to: int | None = None) -> range:
    """The numbers of the migrations a layout of format ``found`` lacks, up to
    ``to`` (by default every one this turnfsm knows: ``known``). ``None``: no
    layout yet (all are missing). A layout without a valid format is a
    StoreError, a newer one than this turnfsm knows a SchemaVersionError
    (both naming ``where``), before anything is written."""
    before = 0 if found is None else found
    if before < 0:
        raise StoreError(f"{where}: the turnfsm store has no valid store_format")
    if before > known:
        raise SchemaVersionError(f"{where} (store format)", before, known)
    return range(before + 1, (known if to is None else to) + 1)
