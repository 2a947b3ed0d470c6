"""``scale`` tests (the kill test and its planted bug, a minute each) run only
when selected: ``pytest -m scale tests/scale``. The quick hand-off tests here
run in the default suite."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: storage.pg

from storage.pg import pg_cluster, pg_url  # the PostgreSQL server

__all__ = ["pg_cluster", "pg_url"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "scale" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="the kill test: run with -m scale")
    for item in items:
        if item.get_closest_marker("scale") is not None:
            item.add_marker(skip)
