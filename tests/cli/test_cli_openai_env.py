"""The OpenAI settings an application reads from its environment
(``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``OPENAI_MODEL``), as each command
that picks a model honours them: the command line's entry in this process
(``serve`` in a thread of it, ``worker`` as a ``turnfsm`` process) against a
loopback Chat Completions server, the model asserted in the body it received.
Precedence: ``--model`` > ``OPENAI_MODEL`` > the provider's default."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest

from turnfsm.cli._providers import PROVIDERS

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS / "openai") not in sys.path:
    sys.path.append(str(TESTS / "openai"))

from kit import SWEEP, first_by_default, serve_in_process  # noqa: E402
from openai_loopback import LoopbackServer, Reply  # noqa: E402
from openai_samples import text_stream  # noqa: E402

from .test_cli_providers import _serving, _start, _stop, run  # noqa: E402

DEFAULT = PROVIDERS["openai"].default_model
KEY = "sk-env-test-0123456789"


def _answer() -> Reply:
    return Reply(events=text_stream(["Hi ", "there."]))


def test_chat_sends_the_model_the_variable_names(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.script(_answer(), _answer(), _answer())
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": KEY}
        named = run(
            tmp_path, "chat", "-m", "Hi", "--store", "memory://",
            env={**env, "OPENAI_MODEL": "gpt-env-model"},
        )  # fmt: skip
        flagged = run(
            tmp_path, "chat", "-m", "Hi", "--store", "memory://", "--model", "gpt-flag-model",
            env={**env, "OPENAI_MODEL": "gpt-env-model"},
        )  # fmt: skip
        unset = run(tmp_path, "chat", "-m", "Hi", "--store", "memory://", env=env)
        bodies = [r.body for r in server.requests]
    for ran in (named, flagged, unset):
        assert ran.code == 0, ran.err
    # the flag wins over the variable, which wins over the default
    assert [b["model"] for b in bodies] == ["gpt-env-model", "gpt-flag-model", DEFAULT]
    assert f"; openai gpt-env-model at {server.url}" in named.out  # the opening line
    # the key came from OPENAI_API_KEY, the endpoint from OPENAI_BASE_URL
    assert all(KEY in r.headers.get("authorization", "") for r in server.requests)


def test_a_blank_model_variable_is_the_default(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.script(_answer())
        ran = run(
            tmp_path, "chat", "-m", "Hi", "--store", "memory://", "--base-url", server.url,
            env={"OPENAI_MODEL": "  "},
        )  # fmt: skip
        (request,) = server.requests
    assert ran.code == 0, ran.err
    assert request.body["model"] == DEFAULT


def test_the_responses_provider_reads_the_variable_too(tmp_path: Path) -> None:
    from openai_samples import ResponsesStream

    with LoopbackServer() as server:
        server.script(Reply(events=ResponsesStream().text(["Via ", "responses."]).completed()))
        ran = run(
            tmp_path, "chat", "--responses", "-m", "Hi", "--store", "memory://",
            "--base-url", server.url, env={"OPENAI_MODEL": "gpt-env-responses"},
        )  # fmt: skip
        (request,) = server.requests
    assert ran.code == 0, ran.err
    assert request.path == "/v1/responses" and request.body["model"] == "gpt-env-responses"


@SWEEP  # chat reads it: test_chat_sends_the_model_the_variable_names
def test_record_records_and_sends_the_model_the_variable_names(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.script(_answer())
        ran = run(
            tmp_path, "record", "--out", "env.json", "-m", "Hello", "--base-url", server.url,
            env={"OPENAI_MODEL": "gpt-env-record"},
        )  # fmt: skip
        (request,) = server.requests
    assert ran.code == 0, ran.err
    assert request.body["model"] == "gpt-env-record"
    script = json.loads((tmp_path / "env.json").read_text())
    assert script["config"]["model"] == "gpt-env-record"


@SWEEP
def test_serve_gives_new_contexts_the_model_the_variable_names(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.script(_answer())
        with _serving(
            "--store", f"sqlite:///{tmp_path / 'serve.db'}",
            env={"OPENAI_BASE_URL": server.url, "OPENAI_MODEL": "gpt-env-serve"},
        ) as served:  # fmt: skip
            created = httpx.post(f"{served.url}/api/contexts", json={})
            cid = created.json()["id"]
            turn = httpx.post(
                f"{served.url}/api/contexts/{cid}/messages?wait=true",
                json={"content": "Hi"},
                timeout=60,
            )
        (request,) = server.requests
    assert created.status_code == 201, created.text
    assert created.json()["model"] == "gpt-env-serve"
    assert turn.status_code == 200, turn.text
    assert request.body["model"] == "gpt-env-serve"
    assert f"model gpt-env-serve (openai at {server.url}" in served.said()


@pytest.mark.parametrize(
    ("flags", "model"),
    first_by_default(
        [([], "gpt-env-worker"), (["--model", "gpt-flag-worker"], "gpt-flag-worker")],
        ["variable", "flag"],
    ),
)
def test_a_worker_names_the_model_the_variable_names(
    tmp_path: Path, flags: list[str], model: str
) -> None:
    with LoopbackServer() as server:
        proc = _start(
            tmp_path, "worker", "--store", "sqlite:///work.db", *flags,
            env={"OPENAI_BASE_URL": server.url, "OPENAI_MODEL": "gpt-env-worker"},
        )  # fmt: skip
        try:
            assert proc.stderr is not None
            started = proc.stderr.readline()
        finally:
            err = _stop(proc)
    assert f", model {model} (openai at {server.url}" in started, started + err


def test_the_variable_alone_does_not_leave_the_demo_model(tmp_path: Path) -> None:
    """``OPENAI_MODEL`` names a model, not an endpoint: without a key or a base
    URL, ``serve`` still answers with the demo model."""
    with serve_in_process(
        "--port", "0", "--store", "memory://", env={"OPENAI_MODEL": "gpt-env-serve"}
    ) as served:
        created = httpx.post(f"{served.url}/api/contexts", json={})
    assert created.json()["model"] == "demo", created.text
    assert ", model demo, " in served.said()


HELPED = ["chat", "serve", "worker", "record"]


@pytest.mark.parametrize("command", first_by_default(HELPED, HELPED))
def test_help_states_the_precedence(tmp_path: Path, command: str) -> None:
    ran = run(tmp_path, command, "--help", env={"COLUMNS": "2000"})
    assert ran.code == 0, ran.err
    assert f"$OPENAI_MODEL, else {DEFAULT} for openai and openai-responses" in ran.out
    assert "the flag wins over the variable" in ran.out
