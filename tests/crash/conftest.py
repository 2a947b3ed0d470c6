"""``crash_full`` tests (the whole crash matrix, minutes long) run only when
selected: ``pytest -m crash_full tests/crash``. The default run keeps the
reduced matrix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: storage.pg

from storage.pg import pg_cluster  # the PostgreSQL cases' server

__all__ = ["pg_cluster"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "crash_full" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="the full crash matrix: run with -m crash_full")
    for item in items:
        if item.get_closest_marker("crash_full") is not None:
            item.add_marker(skip)
