"""The README's embedding example and set-up commands stay true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def _embed_example(marker_name: str = "embed-example") -> str:
    text = README.read_text()
    marker = text.index(f"<!-- {marker_name}")
    match = re.search(r"```python\n(.*?)```", text[marker:], re.S)
    assert match, "the README has no python block after the embed-example marker"
    return match.group(1)


def test_embedding_example_is_short() -> None:
    assert len(_embed_example().strip().splitlines()) <= 26


def test_embedding_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_embed_example())
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "The weather in London is 15 C." in out.stdout
    assert "StreamingLLMResponse" in out.stdout


def test_subcontext_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "subcontexts.py"
    script.write_text(_embed_example("subcontext-example"))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("A flight to Lisbon costs 120 EUR. []")


@pytest.mark.parametrize("words", ["turnfsm demo", "pytest"])
def test_readme_names_both_setup_commands(words: str) -> None:
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    assert any(words in b and "pip install" in b for b in blocks)
