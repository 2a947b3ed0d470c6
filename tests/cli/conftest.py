"""Shared pieces of the command-line tests."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnfsm.cli import main
from turnfsm.storage import open_store

SCRIPTS = Path(__file__).parent.parent / "scripts"
WEATHER = SCRIPTS / "weather_with_approval.json"


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def one_line(self) -> str:
        """The single stderr line (asserting there is exactly one, and no traceback)."""
        assert "Traceback" not in self.err, self.err
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        assert self.err.endswith("\n")
        return lines[0]


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No store or keys from the environment; the default store in tmp_path; no terminal."""
    for name in (
        "TURNFSM_STORE",
        "TURNFSM_DEBUG",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_MODEL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.chdir(tmp_path)


Cli = Callable[..., Ran]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """``turnfsm ARGV...`` in this process: exit code, stdout, stderr."""

    def run(*argv: str) -> Ran:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


def contexts(cli: Cli, url: str) -> list[dict[str, Any]]:
    ran = cli("contexts", "list", "--json", "--store", url)
    assert ran.code == 0, ran.err
    return [json.loads(line) for line in ran.out.splitlines()]


def stored_views(url: str, cid: str) -> list[dict[str, object]]:
    """What each stored message of ``cid`` records of the view it was sent in
    (its ``metadata.extra["view"]``, empty where none)."""

    async def load() -> list[dict[str, object]]:
        store = open_store(url)
        try:
            ctx = await store.load(cid)
        finally:
            await store.aclose()
        return [n.message.metadata.extra.get("view", {}) for n in ctx.history()]

    return anyio.run(load)
