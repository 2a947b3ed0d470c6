"""``turnfsm chat`` (turnfsm/cli/_chat.py), non-interactive paths, in-process.

The command is parsed by its own ``add_parser`` on a bare argparse parser (the
same wiring ``turnfsm.cli`` does) and run against the loopback server.
"""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from kit import refusing_port
from openai_loopback import LoopbackServer, Reply, error_body
from openai_samples import ResponsesStream, chunk, completion, text_stream, tool_call_stream

from turnfsm.cli import _chat, _chat_model
from turnfsm.cli._chat import run_chat
from turnfsm.cli._demo_tools import builtin_tools, calculate
from turnfsm.tools import ToolError

KEY = "sk-cli"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No key, no base URL, no store from the environment; a scratch working dir."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ADMIN_KEY", "TURNFSM_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="turnfsm")
    sub = parser.add_subparsers(dest="command")
    _chat.add_parser(sub)
    return parser.parse_args(["chat", *argv])


async def chat(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await run_chat(parse(*argv), stdin=io.StringIO(stdin), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def loop_args(server: LoopbackServer, *more: str) -> list[str]:
    return ["--base-url", server.url, "--store", "memory://", "--max-attempts", "1", *more]


# ---------------------------------------------------------------------- setup problems: one line


def test_no_key_and_no_base_url_points_to_the_demo(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    args = parse("--message", "hi")
    assert args.run(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("turnfsm chat: no OPENAI_API_KEY")
    assert "turnfsm chat --demo" in err and "turnfsm demo" in err


@pytest.mark.anyio
async def test_an_unreachable_server_is_one_line() -> None:
    with refusing_port() as port:  # bound, never listened on: refused throughout
        url = f"http://127.0.0.1:{port}/v1"
        code, _out, err = await chat(
            "--base-url", url, "--store", "memory://", "--max-attempts", "1", "-m", "hi"
        )
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"turnfsm chat: cannot reach {url}")


@pytest.mark.anyio
async def test_a_refused_key_is_one_line(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    loopback.script(
        Reply(status=401, json=error_body("Incorrect API key provided", "invalid_request_error"))
    )
    code, _, err = await chat(*loop_args(loopback, "-m", "hi"))
    assert code == 2
    assert err.count("\n") == 1
    assert "refused the API key (HTTP 401: Incorrect API key provided)" in err
    assert loopback.requests[0].headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.anyio
async def test_a_failed_turn_exits_1(loopback: LoopbackServer) -> None:
    loopback.script(
        Reply(
            status=400,
            json=error_body("Unsupported parameter: 'max_tokens'", "invalid_request_error"),
        )
    )
    code, _, err = await chat(*loop_args(loopback, "-m", "hi"))
    assert code == 1
    assert (
        err
        == "turnfsm chat: the model call failed: HTTP 400: Unsupported parameter: 'max_tokens'\n"
    )


@pytest.mark.anyio
async def test_a_bad_store_and_an_unknown_context(loopback: LoopbackServer) -> None:
    code, _, err = await chat("--base-url", loopback.url, "--store", "nope", "-m", "hi")
    assert (code, err.count("\n")) == (2, 1)
    assert err.startswith("turnfsm chat: --store:")
    code, _, err = await chat(*loop_args(loopback, "--context", "missing", "-m", "hi"))
    assert (code, err.count("\n")) == (2, 1)
    assert "no context with id 'missing'" in err
    assert loopback.requests == []


# ---------------------------------------------------------------------- turns


@pytest.mark.anyio
async def test_one_streamed_message(loopback: LoopbackServer) -> None:
    loopback.script(Reply(events=text_stream(["Hello ", "from the ", "loopback."])))
    code, out, err = await chat(*loop_args(loopback, "--model", "local-model", "-m", "Hi"))
    assert (code, err) == (0, "")
    assert "assistant> Hello from the loopback." in out
    assert "a memory:// store is gone at exit" in out  # nothing to resume
    [got] = loopback.requests
    assert got.body["model"] == "local-model"
    assert got.body["messages"][0] == {"role": "system", "content": _chat_model.DEFAULT_SYSTEM}
    assert got.body["messages"][1] == {"role": "user", "content": "Hi"}
    assert [t["function"]["name"] for t in got.body["tools"]] == [
        "clock",
        "calculator",
        "read_file",
    ]
    assert got.headers["authorization"] == f"Bearer {_chat.PLACEHOLDER_KEY}"  # a local server


@pytest.mark.anyio
async def test_openai_base_url_from_the_environment(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    loopback.script(Reply(events=text_stream(["ok"])))
    code, out, _ = await chat("--store", "memory://", "-m", "Hi", "--json")
    assert code == 0
    assert json.loads(out)["text"] == "ok"
    assert loopback.requests[0].headers["authorization"] == f"Bearer {KEY}"


def _read_file_call(path: str) -> Reply:
    return Reply(events=tool_call_stream([("call_r", "read_file", {"path": path})], piece=5))


@pytest.mark.anyio
async def test_json_turn_with_an_approved_read_file(
    loopback: LoopbackServer, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("buy milk\n", "utf-8")
    loopback.script(_read_file_call("notes.txt"), Reply(events=text_stream(["You need ", "milk."])))
    code, out, err = await chat(
        *loop_args(loopback, "--approve", "all", "--json", "-m", "What do I need?")
    )
    assert (code, err) == (0, "")
    [line] = out.splitlines()  # nothing but the JSON
    doc = json.loads(line)
    assert doc["state"] == "Idle" and doc["stop_reason"] == "completed"
    assert doc["states"] == [
        "ProcessingUserMessage",
        "AwaitingLLMResponse",
        "StreamingLLMResponse",
        "ProcessingLLMResponse",
        "AwaitingToolApproval",
        "ExecutingTools",
        "AwaitingLLMResponse",
        "StreamingLLMResponse",
        "ProcessingLLMResponse",
        "Idle",
    ]
    assert doc["text"] == "You need milk."
    roles = [m["role"] for m in doc["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert doc["messages"][1]["tool_calls"][0]["approval"] == "Approved"
    assert doc["messages"][2]["result"]["content"] == "buy milk\n"
    tool_message = loopback.bodies[1]["messages"][-1]
    assert tool_message["role"] == "tool" and "buy milk" in tool_message["content"]


@pytest.mark.anyio
async def test_approve_none_denies(loopback: LoopbackServer, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("hidden", "utf-8")
    loopback.script(_read_file_call("secret.txt"), Reply(events=text_stream(["Understood."])))
    code, out, _ = await chat(*loop_args(loopback, "--approve", "none", "-m", "read it"))
    assert code == 0
    assert "denied read_file" in out
    assert "assistant> Understood." in out
    tool_message = loopback.bodies[1]["messages"][-1]
    assert "hidden" not in tool_message["content"]
    assert json.loads(tool_message["content"])["status"] == "denied"


@pytest.mark.anyio
@pytest.mark.parametrize(("answer", "approved"), [("y\n", True), ("n\n", False), ("", False)])
async def test_approve_ask_reads_the_answer(
    loopback: LoopbackServer, tmp_path: Path, answer: str, approved: bool
) -> None:
    (tmp_path / "a.txt").write_text("alpha", "utf-8")
    loopback.script(_read_file_call("a.txt"), Reply(events=text_stream(["Done."])))
    code, _, err = await chat(
        *loop_args(loopback, "--approve", "ask", "-m", "read a.txt"), stdin=answer
    )
    assert code == 0
    assert 'approve read_file({"path": "a.txt"})? [y/N]' in err
    content = loopback.bodies[1]["messages"][-1]["content"]
    assert ("alpha" in content) is approved


@pytest.mark.anyio
async def test_store_and_resume(loopback: LoopbackServer, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'chat.db'}"
    loopback.script(
        Reply(events=text_stream(["Nice to meet you, Ada."])), Reply(events=text_stream(["Ada."]))
    )
    base = ["--base-url", loopback.url, "--store", store, "--json"]
    code, out, _ = await chat(*base, "-m", "I am Ada.")
    assert code == 0
    cid = json.loads(out)["context_id"]
    code, out, _ = await chat(*base, "--context", cid, "-m", "Who am I?")
    assert code == 0
    assert json.loads(out)["context_id"] == cid
    resumed = loopback.bodies[1]["messages"]
    assert [m["role"] for m in resumed] == ["system", "user", "assistant", "user"]
    assert resumed[2]["content"] == "Nice to meet you, Ada."


@pytest.mark.anyio
async def test_responses_api(loopback: LoopbackServer) -> None:
    loopback.script(Reply(events=ResponsesStream().text(["Via ", "responses."]).completed()))
    code, out, _ = await chat(*loop_args(loopback, "--responses", "-m", "Hi", "--json"))
    assert code == 0
    assert json.loads(out)["text"] == "Via responses."
    assert loopback.requests[0].path == "/v1/responses"


@pytest.mark.anyio
async def test_no_stream(loopback: LoopbackServer) -> None:
    loopback.script(Reply(json=completion("Whole answer.")))
    code, out, _ = await chat(*loop_args(loopback, "--no-stream", "-m", "Hi"))
    assert code == 0
    assert "assistant> Whole answer." in out
    assert "stream" not in loopback.requests[0].body


@pytest.mark.anyio
async def test_calculator_round_trip(loopback: LoopbackServer) -> None:
    loopback.script(
        Reply(events=tool_call_stream([("c1", "calculator", {"expression": "2 * (3 + 4) ** 2"})])),
        Reply(events=text_stream(["98."])),
    )
    code, out, _ = await chat(*loop_args(loopback, "-m", "2*(3+4)^2?"))
    assert code == 0
    assert 'tool result> calculator: {"expression": "2 * (3 + 4) ** 2", "result": 98}' in out


@pytest.mark.anyio
async def test_lines_from_stdin_without_a_terminal(loopback: LoopbackServer) -> None:
    loopback.script(Reply(events=text_stream(["one"])), Reply(events=text_stream(["two"])))
    code, out, _ = await chat(*loop_args(loopback), stdin="first\n\nsecond\n/exit\nnever\n")
    assert code == 0
    assert "assistant> one" in out and "assistant> two" in out
    assert len(loopback.requests) == 2


@pytest.mark.anyio
async def test_the_demo_model_needs_no_key() -> None:
    code, out, _ = await chat(
        "--demo",
        "--store",
        "memory://",
        "--approve",
        "all",
        "--json",
        "-m",
        "What's the weather in Oslo?",
    )
    assert code == 0
    assert json.loads(out)["text"] == "The weather in Oslo is 15 C and cloudy."


# ---------------------------------------------------------------------- the demo tools


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("2 * (3 + 4)", 14),
        ("7 // 2 + 7 % 2", 4),
        ("-2 ** 3", -8),
        ("1 / 4", 0.25),
        ("2 ** 0.5 * 2 ** 0.5", 2.0000000000000004),
    ],
)
def test_calculator(expression: str, value: float) -> None:
    assert calculate(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "not Call"),
        ("x + 1", "not Name"),
        ("'a' * 3", "not Constant"),
        ("(1).real", "not Attribute"),
        ("1 / 0", "division by zero"),
        ("9 ** 9 ** 9", "exponents above 1000"),
        ("10 ** 1000 * 10 ** 1000 * 10 ** 1000", "too large"),
        ("1e308 * 10", "too large"),
        ("(-1) ** 0.5", "not a real number"),
        ("1 +", "not an arithmetic expression"),
        ("1" * 201, "longer than 200"),
        ("", "give an arithmetic expression"),
    ],
)
def test_calculator_refuses(expression: str, message: str) -> None:
    with pytest.raises(ToolError, match=message.replace("(", r"\(").replace("*", r"\*")):
        calculate(expression)


def _tools(root: Path) -> dict[str, Any]:
    return {t.name: t.fn for t in builtin_tools(root)}


def test_clock() -> None:
    now = _tools(Path.cwd())["clock"]("Europe/Paris")
    assert now["timezone"] == "Europe/Paris" and now["iso"][-6:] in ("+01:00", "+02:00")
    with pytest.raises(ToolError, match="unknown timezone"):
        _tools(Path.cwd())["clock"]("Mars/Olympus_Mons")


def test_read_file_stays_in_the_working_directory(tmp_path: Path) -> None:
    root = tmp_path / "work"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f.txt").write_text("x" * 50, "utf-8")
    (tmp_path / "outside.txt").write_text("secret", "utf-8")
    (root / "link.txt").symlink_to(tmp_path / "outside.txt")
    read = _tools(root)["read_file"]
    assert read("sub/f.txt") == {"path": "sub/f.txt", "content": "x" * 50, "truncated": False}
    assert read("sub/../sub/f.txt", max_bytes=10) == {
        "path": "sub/f.txt",
        "content": "x" * 10,
        "truncated": True,
    }
    for bad in (
        "../outside.txt",
        str(tmp_path / "outside.txt"),
        "link.txt",
        "sub/../../outside.txt",
    ):
        with pytest.raises(ToolError, match="outside the working directory"):
            read(bad)
    with pytest.raises(ToolError, match="not a file"):
        read("sub")
    [read_tool] = [t for t in builtin_tools(root) if t.name == "read_file"]
    assert str(read_tool.approval) == "required"
    assert os.path.isdir(root)


@pytest.mark.anyio
async def test_thinking_and_retries_are_shown(loopback: LoopbackServer) -> None:
    loopback.script(
        Reply(
            status=503,
            json=error_body("overloaded", "server_error"),
            headers={"retry-after-ms": "10"},
        ),
        Reply(
            events=[
                chunk({"role": "assistant", "reasoning_content": "Two plus "}),
                chunk({"reasoning_content": "two."}),
                chunk({"content": "4"}),
                chunk({}, "stop"),
                "[DONE]",
            ]
        ),
    )
    args = ["--base-url", loopback.url, "--store", "memory://", "--max-attempts", "2"]
    code, out, err = await chat(*args, "-m", "2+2?")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert "retrying in 0.0s (attempt 1 failed: HTTP 503: overloaded)" in lines
    assert "thinking> Two plus two." in lines
    assert "assistant> 4" in lines
