"""The PostgreSQL fixtures (``tests/storage/pg.py``) for the storage tests."""

from __future__ import annotations

from .pg import pg_cluster, pg_url

__all__ = ["pg_cluster", "pg_url"]
