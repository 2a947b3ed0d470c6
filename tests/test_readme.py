"""The README's embedding example, set-up commands and examples (and those
of the pages in docs/) stay true."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
DOCS = README.parent / "docs"


RUNNER = """
import json, os, signal, sys

import turnfsm  # what every example imports first: once, before each is forked

for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:  # the example's process: a script run by python, as from a shell
        os.chdir(job["cwd"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, name in ((1, job["out"]), (2, job["err"])):
            os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv = [job["script"]]
        sys.path[0] = os.path.dirname(job["script"])
        signal.alarm(60)  # the timeout: SIGALRM ends it
        import runpy

        runpy.run_path(job["script"], run_name="__main__")
        break  # the script's end: the interpreter exits as at a script's end
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""
"""Runs each example given on its standard input (a JSON line: the script, its
working directory, where its output and errors go) in a process of its own,
forked from one that imported ``turnfsm`` once, and answers its exit status: a
fresh interpreter per example started and imported the same every time."""


@pytest.fixture(scope="module")
def runner() -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-c", RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        yield proc
        assert proc.stdin is not None
        proc.stdin.close()  # the runner's end
        assert proc.wait(30) == 0


def run_script(
    runner: subprocess.Popen[str], script: Path, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``python SCRIPT`` in ``cwd``: its exit status, output and errors."""
    out, err = script.with_suffix(".out"), script.with_suffix(".err")
    assert runner.stdin is not None and runner.stdout is not None
    job = {"script": str(script), "cwd": str(cwd), "out": str(out), "err": str(err)}
    runner.stdin.write(json.dumps(job) + "\n")
    runner.stdin.flush()
    answer = runner.stdout.readline()
    assert answer, f"the example runner stopped (exit status {runner.poll()})"
    code = int(answer)
    return subprocess.CompletedProcess([script], code, out.read_text(), err.read_text())


def _embed_example() -> str:
    text = README.read_text()
    marker = text.index("<!-- embed-example")
    match = re.search(r"```python\n(.*?)```", text[marker:], re.S)
    assert match, "the README has no python block after the embed-example marker"
    return match.group(1)


def test_embedding_example_is_short() -> None:
    assert len(_embed_example().strip().splitlines()) <= 26


def test_embedding_example_runs(runner: subprocess.Popen[str], tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_embed_example())
    out = run_script(runner, script, Path.cwd())
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
def test_readme_example_runs(runner: subprocess.Popen[str], tmp_path: Path, name: str) -> None:
    """Each example asserts what it shows; it must exit 0."""
    script = tmp_path / "example.py"
    script.write_text(_examples()[name])
    out = run_script(runner, script, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "assert " in _examples()[name], "an example checks what it shows"


@pytest.mark.parametrize("words", ["turnfsm demo", "pytest"])
def test_readme_names_both_setup_commands(words: str) -> None:
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    assert any(words in b and "pip install" in b for b in blocks)
