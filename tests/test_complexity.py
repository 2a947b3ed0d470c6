"""The storage, tools, replay, render and adapter modules hold no function of
cyclomatic complexity 20 or more (ruff's mccabe rule, C901): a function that
grows past it is split into named steps or a table. The SQLite and memory
stores and the store's base and schema are left to their own rule."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ruff = pytest.importorskip("ruff")

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "turnfsm"
MAX_COMPLEXITY = 19
"""The most a function may have (ruff's ``lint.mccabe.max-complexity``)."""

HELD = ("storage", "tools", "replay", "render", "adapters")
LEFT_OUT = ("_sqlite", "_memory", "_base.py", "_schema.py")
"""Storage modules under another rule (the prefixes of their file names)."""


def _held_files() -> list[Path]:
    out: list[Path] = []
    for part in HELD:
        for path in sorted((PKG / part).rglob("*.py")):
            if part == "storage" and path.name.startswith(LEFT_OUT):
                continue
            out.append(path)
    return out


def too_complex(paths: list[Path]) -> list[str]:
    """ruff's C901 findings in ``paths`` (one line each)."""
    found = subprocess.run(
        [
            ruff.find_ruff_bin(),
            "check",
            "--no-cache",
            "--isolated",
            "--select",
            "C901",
            "--config",
            f"lint.mccabe.max-complexity={MAX_COMPLEXITY}",
            "--output-format",
            "concise",
            *map(str, paths),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in found.stdout.splitlines() if "C901" in line]


def test_no_function_in_the_held_modules_is_too_complex() -> None:
    files = _held_files()
    assert len(files) > 40, files  # the modules are found
    assert too_complex(files) == []


def test_the_check_finds_a_function_of_complexity_twenty(tmp_path: Path) -> None:
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(19))
    source = tmp_path / "branchy.py"
    source.write_text(f"def branchy(x):\n{branches}    return -1\n")
    assert len(too_complex([source])) == 1
    source.write_text(f"def branchy(x):\n{branches[: branches.rindex('    if')]}    return -1\n")
    assert too_complex([source]) == []


def test_the_left_out_modules_are_only_the_other_rules() -> None:
    held = {p.name for p in _held_files() if p.parent == PKG / "storage"}
    assert "_files.py" in held and "_postgres.py" in held
    assert not any(name.startswith(LEFT_OUT) for name in held)
