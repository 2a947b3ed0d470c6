"""``turnfsm diagram`` and ``turnfsm audit``, driven through argparse with their own
``add_parser`` functions (the tests build the parser; turnfsm.cli.main is not used)."""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from turnfsm.cli import _audit, _diagram
from turnfsm.render import (
    GENERATED,
    dot_source,
    mermaid_state_diagram,
)

from ._parse import parse_dot, parse_mermaid_state, parse_sequence, parse_svg
from ._runs import ROOT, SCRIPTS, Run, replay_into, require_dot
from .test_declared import ALL_STATES, table_edges


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="turnfsm")
    sub = parser.add_subparsers(dest="command")
    _diagram.add_parser(sub)
    _audit.add_parser(sub)
    args = parser.parse_args(argv)
    code: int = args.run(args)
    return code


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """weather_with_approval.json replayed into a SQLite store."""
    folder = tmp_path_factory.mktemp("cli")
    return replay_into(SCRIPTS / "weather_with_approval.json", f"sqlite:///{folder}/w.db")


@pytest.fixture(scope="module")
def retried(tmp_path_factory: pytest.TempPathFactory) -> Run:
    folder = tmp_path_factory.mktemp("cli-retry")
    return replay_into(SCRIPTS / "retries_exhausted.json", f"sqlite:///{folder}/r.db")


def _trace_file(run: Run, folder: Path, name: str = "trace.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(run.result.trace_out(), indent=2))
    return path


# ---------------------------------------------------------------------- the declared machine


def test_diagram_defaults_to_mermaid_on_stdout(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run_cli(["diagram"]) == 0
    assert capsysbinary.readouterr().out.decode() == mermaid_state_diagram()


def test_diagram_dot_to_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.dot"
    assert run_cli(["diagram", "--format", "dot", "--out", str(out)]) == 0
    assert out.read_text() == dot_source()
    assert f"wrote {out}" in capsys.readouterr().err


def test_diagram_svg_and_png(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    require_dot()
    assert run_cli(["diagram", "--format", "svg"]) == 0
    d = parse_svg(capsysbinary.readouterr().out)
    assert d.states == ALL_STATES and d.edges == table_edges()
    out = tmp_path / "m.png"
    assert run_cli(["diagram", "--format", "png", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_diagram_without_dot_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TURNFSM_DOT", "no-such-dot-binary")
    assert run_cli(["diagram", "--format", "svg"]) == 2
    err = capsys.readouterr().err
    assert "turnfsm diagram:" in err and "apt-get install graphviz" in err


# ---------------------------------------------------------------------- run paths


def test_diagram_of_a_stored_context(
    stored: Run, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    argv = ["diagram", "--context", stored.context_id, "--store", stored.store_url]
    assert run_cli(argv) == 0
    d = parse_mermaid_state(capsysbinary.readouterr().out.decode())
    assert d.edges == table_edges()
    assert d.edge_labels[("ProcessingLLMResponse", "needs_approval")] == "✔ needs_approval x1"
    assert d.classes["current"] == {"Idle"}
    require_dot()
    assert run_cli([*argv, "--format", "svg", "--times"]) == 0
    s = parse_svg(capsysbinary.readouterr().out)
    assert s.states == ALL_STATES and s.edges == table_edges()
    assert s.edge_labels[("AwaitingToolApproval", "approvals_resolved")] == (
        "approvals_resolved x1"
    )


def test_sequence_of_a_stored_context(
    stored: Run, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    argv = ["diagram", "--context", stored.context_id, "--store", stored.store_url, "--sequence"]
    assert run_cli(argv) == 0
    lines = parse_sequence(capsysbinary.readouterr().out.decode())
    assert "approver->>engine: approve call_1" in lines
    assert run_cli([*argv, "--turn", "3"]) == 2
    assert "there is no turn 3" in capsysbinary.readouterr().err.decode()


def test_a_missing_context_or_bad_options(stored: Run, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["diagram", "--context", "nope", "--store", stored.store_url]) == 2
    assert "no context with id 'nope'" in capsys.readouterr().err
    assert run_cli(["diagram", "--sequence"]) == 2
    assert "--sequence needs --context" in capsys.readouterr().err
    argv = ["diagram", "--context", stored.context_id, "--store", stored.store_url]
    assert run_cli([*argv, "--sequence", "--format", "svg"]) == 2
    assert "Mermaid only" in capsys.readouterr().err
    assert run_cli(["diagram", "--times"]) == 2
    assert run_cli(["diagram", "--check"]) == 2


def test_diagram_of_a_trace_out_file_and_of_an_audit_log(
    retried: Run, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    trace = _trace_file(retried, tmp_path)
    assert run_cli(["diagram", "--trace", str(trace), "--format", "dot"]) == 0
    from_trace = parse_dot(capsysbinary.readouterr().out.decode())
    assert from_trace.edge_labels[("TransientFailure", "retry")] == "retry x2"
    assert 'fillcolor="#fff59d"' in from_trace.attrs["PermanentFailure"]
    log = tmp_path / "audit.jsonl"
    log.write_text(retried.log)
    assert run_cli(["diagram", "--trace", str(log), "--format", "dot"]) == 0
    from_log = parse_dot(capsysbinary.readouterr().out.decode())
    assert from_log.edge_labels == from_trace.edge_labels
    assert run_cli(["diagram", "--trace", str(trace), "--sequence"]) == 0
    lines = parse_sequence(capsysbinary.readouterr().out.decode())
    assert "engine-->>user: failed: attempts exhausted" in lines


def test_an_unreadable_trace_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["diagram", "--trace", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\nworld\n")
    assert run_cli(["diagram", "--trace", str(junk)]) == 2
    assert "neither a replay --trace-out file nor an audit log" in capsys.readouterr().err
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    assert run_cli(["diagram", "--trace", str(binary)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


# ---------------------------------------------------------------------- --diff


def test_diff_of_the_same_script_twice(
    stored: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    again = replay_into(SCRIPTS / "weather_with_approval.json", "memory://")
    a = _trace_file(stored, tmp_path, "a.json")
    b = _trace_file(again, tmp_path, "b.json")
    assert run_cli(["diagram", "--diff", str(a), str(b)]) == 0
    assert "same: both traces have the same 10 states" in capsys.readouterr().out
    log = tmp_path / "b.jsonl"
    log.write_text(again.log)
    assert run_cli(["diagram", "--diff", str(a), str(log)]) == 0  # a trace against a log


def test_diff_of_diverging_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _trace_file(replay_into(SCRIPTS / "text_answer.json", "memory://"), tmp_path, "t.json")
    streamed = replay_into(SCRIPTS / "streamed_answer.json", "memory://")
    log = tmp_path / "s.jsonl"
    log.write_text(streamed.log)
    assert run_cli(["diagram", "--diff", str(text), str(log)]) == 1
    out = capsys.readouterr().out
    assert "traces differ at index 3:" in out
    assert f"{text}: ProcessingLLMResponse (via response_received)" in out
    assert f"{log}: StreamingLLMResponse (via stream_started)" in out
    assert "common prefix: 3 states" in out
    assert run_cli(["diagram", "--diff", str(text), str(tmp_path / "nope")]) == 2


# ---------------------------------------------------------------------- --regenerate


def test_the_repository_files_are_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["diagram", "--regenerate", "--check", "--root", str(ROOT)]) == 0
    assert "up to date" in capsys.readouterr().out


def test_regenerate_writes_only_what_is_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_dot()
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    root = ["--root", str(tmp_path)]
    assert run_cli(["diagram", "--regenerate", "--check", *root]) == 1
    assert capsys.readouterr().out.count("stale: ") == len(GENERATED)
    assert run_cli(["diagram", "--regenerate", *root]) == 0
    assert capsys.readouterr().out.count("wrote ") == len(GENERATED)
    for name in GENERATED:
        assert (tmp_path / name).read_bytes() == (ROOT / name).read_bytes() or name.endswith(
            (".svg", ".png")
        )
    assert run_cli(["diagram", "--regenerate", "--check", *root]) == 0
    (tmp_path / "diagrams" / "fsm.mmd").write_text("stateDiagram-v2\n")
    svg = tmp_path / "diagrams" / "fsm.svg"
    svg.write_text(svg.read_text().replace("dot sha256:", "dot sha256:0"))
    assert run_cli(["diagram", "--regenerate", "--check", *root]) == 1
    out = capsys.readouterr().out
    assert "stale: diagrams/fsm.mmd" in out and "stale: diagrams/fsm.svg" in out
    assert "stale: diagrams/fsm.dot" not in out
    assert run_cli(["diagram", "--regenerate", *root]) == 0
    out = capsys.readouterr().out
    assert "wrote diagrams/fsm.mmd" in out and "unchanged diagrams/fsm.dot" in out
    assert (tmp_path / "diagrams" / "fsm.mmd").read_text() == mermaid_state_diagram()


def test_regenerate_refuses_a_folder_that_is_not_the_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["diagram", "--regenerate", "--root", str(tmp_path)]) == 2
    assert "not the turnfsm repository root" in capsys.readouterr().err
    assert not (tmp_path / "diagrams").exists()


def test_the_regenerate_script() -> None:
    script = ROOT / "scripts" / "regen_diagrams.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "up to date" in done.stdout
    bad = subprocess.run(
        [sys.executable, str(script), "--bogus"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2


# ---------------------------------------------------------------------- audit


def test_audit_export_to_stdout_and_file(
    stored: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["audit", "export", stored.context_id, "--store", stored.store_url]) == 0
    assert capsys.readouterr().out == stored.log
    out = tmp_path / "log.jsonl"
    argv = ["audit", "export", stored.context_id, "--store", stored.store_url, "--out", str(out)]
    assert run_cli(argv) == 0
    assert out.read_text() == stored.log
    assert "(9 steps)" in capsys.readouterr().err


def test_audit_export_of_a_missing_context(stored: Run, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["audit", "export", "nope", "--store", stored.store_url]) == 2
    assert "no context with id 'nope'" in capsys.readouterr().err


def test_audit_verify_exit_codes(
    stored: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(stored.log)
    assert run_cli(["audit", "verify", str(good)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ok: {good}: 9 steps") and "1 tool calls, all resolved" in out

    lines = stored.log.split("\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:4], *lines[5:]]))  # line 5 removed
    assert run_cli(["audit", "verify", str(bad)]) == 1
    assert capsys.readouterr().out.strip() == f"{bad}:5: seq 6 where 5 was expected " + (
        "(a line is missing, added, moved or renumbered)"
    )

    waiting = tmp_path / "waiting.jsonl"
    waiting.write_text("\n".join(lines[:4]) + "\n")
    assert run_cli(["audit", "verify", str(waiting)]) == 0
    assert "1 still waiting in AwaitingToolApproval" in capsys.readouterr().out

    assert run_cli(["audit", "verify", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff")
    assert run_cli(["audit", "verify", str(binary)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_audit_verify_reads_stdin(
    stored: Run, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stored.log.encode())))
    assert run_cli(["audit", "verify", "-"]) == 0
    assert capsys.readouterr().out.startswith("ok: -: 9 steps")
