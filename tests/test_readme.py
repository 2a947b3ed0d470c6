"""The README's embedding example, set-up commands and examples (and those
of the pages in docs/) stay true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
DOCS = README.parent / "docs"


def _embed_example() -> str:
    text = README.read_text()
    marker = text.index("<!-- embed-example")
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


def _examples() -> dict[str, str]:
    """Every python block that follows an ``<!-- example: NAME ... -->`` marker
    in the README (named NAME) and in docs/*.md (named ``docs/PAGE: NAME``)."""
    found = {}
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        text = page.read_text()
        prefix = "" if page == README else f"docs/{page.name}: "
        for marker in re.finditer(r"<!-- example: ([^(>]+?)\s*(?:\(|-->)", text):
            match = re.search(r"```python\n(.*?)```", text[marker.end() :], re.S)
            assert match, f"no python block after the example marker {marker.group(1)!r}"
            name = prefix + marker.group(1).strip()
            assert name not in found, f"two examples are named {name!r}"
            found[name] = match.group(1)
    return found


def test_the_readme_has_its_examples() -> None:
    assert {
        "config and branch prompts",
        "questions",
        "typed answers",
        "modes",
        "sub-contexts",
        "tool history",
        "token budget",
        "compaction",
        "sticky files",
        "request bodies",
        "docs/observability.md: traces and metrics",
        "docs/mcp.md: mcp tools",
    } <= set(_examples())


@pytest.mark.parametrize("name", sorted(_examples()))
def test_readme_example_runs(tmp_path: Path, name: str) -> None:
    """Each example asserts what it shows; it must exit 0."""
    script = tmp_path / "example.py"
    script.write_text(_examples()[name])
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "assert " in _examples()[name], "an example checks what it shows"


@pytest.mark.parametrize("words", ["turnfsm demo", "pytest"])
def test_readme_names_both_setup_commands(words: str) -> None:
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    assert any(words in b and "pip install" in b for b in blocks)
