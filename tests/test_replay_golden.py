"""The replay scripts of ``tests/scripts/`` (format ``turnfsm-script/1``).

``tests/scripts_expected.json`` maps every script file (path relative to that
folder) to the exit status ``turnfsm replay`` must give it: 0 for the golden
scripts (top level), 1 for the ones in ``failing/`` (a check or the tape
fails) and 2 for the ones in ``invalid/`` (the script is refused), with a
fragment of the expected message for the last two.

Most checks go through the Python API (``run_script``, ``load_script``); the
command line (its entry, ``turnfsm.cli.main``, in this process) once per
category, and for ``--trace-out``.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from turnfsm.cli import main as cli_main
from turnfsm.replay import ScriptError, load_script, run_script

SCRIPTS = Path(__file__).parent / "scripts"
EXPECTED: dict[str, dict[str, Any]] = json.loads(
    (SCRIPTS.parent / "scripts_expected.json").read_text()
)
SUFFIXES = (".json", ".yaml", ".yml")

GOLDEN = sorted(name for name, e in EXPECTED.items() if e["exit"] == 0)
FAILING = sorted(name for name, e in EXPECTED.items() if e["exit"] == 1)
INVALID = sorted(name for name, e in EXPECTED.items() if e["exit"] == 2)


def _script_files() -> list[str]:
    return sorted(
        p.relative_to(SCRIPTS).as_posix()
        for p in SCRIPTS.rglob("*")
        if p.is_file() and p.suffix in SUFFIXES
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``turnfsm replay ARGS`` in this process (``turnfsm.cli.main``, as the
    script runs it): its exit code, standard output and error, with no
    terminal to ask. What is checked is the command's, not the process's."""
    out, err = io.StringIO(), io.StringIO()
    stdin = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(["replay", *args])
    finally:
        sys.stdin = stdin
    return subprocess.CompletedProcess(
        ["turnfsm", "replay", *args], code, out.getvalue(), err.getvalue()
    )


# ---------------------------------------------------------------- the sidecar


def test_expected_json_lists_every_script_file() -> None:
    assert sorted(EXPECTED) == _script_files()


def test_categories_live_in_their_folders() -> None:
    assert all("/" not in name for name in GOLDEN)
    assert all(name.startswith("failing/") for name in FAILING)
    assert all(name.startswith("invalid/") for name in INVALID)
    assert len(GOLDEN) >= 24 and len(FAILING) >= 5 and len(INVALID) >= 8
    assert any(name.endswith((".yaml", ".yml")) for name in GOLDEN)
    for name in FAILING + INVALID:
        assert EXPECTED[name].get("contains"), name


# ---------------------------------------------------------------- golden, API


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_script_passes(name: str) -> None:
    script = load_script(SCRIPTS / name)
    raw = script.raw
    # every golden script is complete: a name, a final expect with all three keys,
    # and at least one check along the way
    assert raw.get("name"), "a golden script has a name"
    assert {"trace", "final_state", "message_count"} <= set(raw["expect"])
    assert any(s.kind == "expect" for s in script.steps)
    result = run_script(script)
    assert result.ok, result.report()
    assert result.name == raw["name"]
    assert result.trace == raw["expect"]["trace"]
    assert result.trace[0] == "Idle"
    assert result.trace[-1] == raw["expect"]["final_state"]
    assert len(result.messages) == raw["expect"]["message_count"]


# ---------------------------------------------------------------- failing, API


@pytest.mark.parametrize("name", FAILING)
def test_failing_script_fails_with_its_message(name: str) -> None:
    result = run_script(SCRIPTS / name)
    assert not result.ok
    report = result.report()
    assert report.startswith("FAIL ")
    assert EXPECTED[name]["contains"] in report, report


# ---------------------------------------------------------------- invalid, API


@pytest.mark.parametrize("name", INVALID)
def test_invalid_script_is_refused_with_its_json_path(name: str) -> None:
    with pytest.raises(ScriptError) as info:
        load_script(SCRIPTS / name)
    err = info.value
    message = str(err)
    assert EXPECTED[name]["contains"] in message, message
    assert str(SCRIPTS / name) in message  # names the file
    paths = [path for path, _ in err.problems]
    assert EXPECTED[name]["path"] in paths
    assert all(path.startswith("$") and reason for path, reason in err.problems)


# ---------------------------------------------------------------- CLI, one run each


def test_cli_golden_scripts_exit_0_one_json_object_each() -> None:
    paths = [str(SCRIPTS / name) for name in GOLDEN]
    proc = _cli("--json", *paths)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(GOLDEN)  # one object per script, no summary with --json
    objects = [json.loads(line) for line in lines]
    assert [o["file"] for o in objects] == paths
    for name, obj in zip(GOLDEN, objects, strict=True):
        assert obj["ok"] is True, obj
        assert obj["failures"] == []
        raw = load_script(SCRIPTS / name).raw
        assert obj["name"] == raw["name"]
        assert obj["trace"] == raw["expect"]["trace"]


def test_cli_failing_folder_exits_1_with_each_message_and_a_summary() -> None:
    proc = _cli(str(SCRIPTS / "failing"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.splitlines()[-1] == f"0 passed, {len(FAILING)} failed, 0 invalid"
    blocks: dict[str, str] = {}
    for block in out.split("FAIL ")[1:]:
        title, _, body = block.partition("\n")
        blocks[title] = body
    assert len(blocks) == len(FAILING)
    for name in FAILING:
        title = load_script(SCRIPTS / name).name
        assert EXPECTED[name]["contains"] in blocks[title], (name, blocks[title])


def test_cli_invalid_folder_exits_2_with_each_json_path() -> None:
    proc = _cli("--json", str(SCRIPTS / "invalid"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    objects = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(objects) == len(INVALID)
    by_file = {Path(o["name"]).relative_to(SCRIPTS).as_posix(): o for o in objects}
    assert sorted(by_file) == INVALID
    for name, obj in by_file.items():
        assert obj["ok"] is False and obj["invalid"] is True
        lines = [f"{p['path']}: {p['reason']}" for p in obj["problems"]]
        assert any(EXPECTED[name]["contains"] in line for line in lines), (name, lines)
        assert EXPECTED[name]["path"] in [p["path"] for p in obj["problems"]]


# ---------------------------------------------------------------- --trace-out (in-process CLI)


@pytest.mark.parametrize("name", GOLDEN)
def test_trace_out_is_byte_identical_across_runs(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert cli_main(["replay", str(SCRIPTS / name), "--trace-out", str(first)]) == 0
    assert cli_main(["replay", str(SCRIPTS / name), "--trace-out", str(second)]) == 0
    assert first.read_bytes() == second.read_bytes()
    written = json.loads(first.read_text())
    assert set(written) == {"trace", "events", "messages"}
    api = json.loads(json.dumps(run_script(SCRIPTS / name).trace_out()))
    assert written == api
    out = capsys.readouterr().out
    assert out.count("1 passed, 0 failed, 0 invalid") == 2


def test_trace_out_needs_exactly_one_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.json"
    code = cli_main(
        [
            "replay",
            str(SCRIPTS / GOLDEN[0]),
            str(SCRIPTS / GOLDEN[1]),
            "--trace-out",
            str(out),
        ]
    )
    assert code == 2
    assert "exactly one script" in capsys.readouterr().err
    assert not out.exists()


def test_trace_out_is_written_for_a_failing_script_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.json"
    code = cli_main(
        ["replay", str(SCRIPTS / "failing/wrong_final_trace.json"), "--trace-out", str(out)]
    )
    assert code == 1
    observed = json.loads(out.read_text())
    assert observed["trace"] == [
        "Idle",
        "ProcessingUserMessage",
        "AwaitingLLMResponse",
        "ProcessingLLMResponse",
        "Idle",
    ]
    assert "0 passed, 1 failed, 0 invalid" in capsys.readouterr().out
