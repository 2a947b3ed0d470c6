"""The picture of docs/architecture.md's "The life of a send()": its SVG is
the rendering of its DOT source as it is now, and the page shows it."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "regen_diagrams", ROOT / "scripts" / "regen_diagrams.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_svg_is_rendered_from_the_source_as_it_is() -> None:
    said: list[str] = []
    assert _script().hand_drawn(ROOT, check=True, say=said.append) == 0, said


def test_an_edited_source_makes_its_svg_stale(tmp_path: Path) -> None:
    script = _script()
    for source, target in script.HAND_DRAWN.items():
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / source, tmp_path / source)
        shutil.copy(ROOT / target, tmp_path / target)
    source = next(iter(script.HAND_DRAWN))
    with (tmp_path / source).open("a", encoding="utf-8") as f:
        f.write("// edited\n")
    said: list[str] = []
    assert script.hand_drawn(tmp_path, check=True, say=said.append) == 1
    assert any(script.HAND_DRAWN[source] in line for line in said)
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed: the SVG cannot be rendered again")
    assert script.hand_drawn(tmp_path, check=False, say=said.append) == 0
    assert script.hand_drawn(tmp_path, check=True, say=said.append) == 0


def test_the_architecture_page_opens_with_the_walkthrough_and_its_picture() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    headings = [line for line in page.splitlines() if line.startswith("## ")]
    assert headings[0] == "## The life of a `send()`"
    walkthrough = page.split("\n## ")[1]
    assert "](../diagrams/send.svg)" in walkthrough
