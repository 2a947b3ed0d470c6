from __future__ import annotations

from pathlib import Path

import pytest

from ._runs import GOLDEN, Run, replay_into


@pytest.fixture(scope="session")
def golden_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every golden replay script, replayed through the engine into its own SQLite store."""
    folder: Path = tmp_path_factory.mktemp("golden")
    return {
        script.name: replay_into(script, f"sqlite:///{folder / (script.stem + '.db')}")
        for script in GOLDEN
    }
