"""The OTLP endpoint of the environment, checked as a command starts: a
malformed URL is a usage error; one that cannot be reached is a warning, and
the command runs."""

from __future__ import annotations

import socket
import subprocess

import pytest

from .conftest import Cli
from .test_cli_app_options import ENV, TURNFSM


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "notaurl", "not an http:// or https:// URL"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "localhost:4318", "not an http:// or https://"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:99999", "not a URL"),
    ],
)
@pytest.mark.parametrize("command", ["chat", "serve", "worker"])
def test_a_malformed_endpoint_is_one_line_and_exit_2(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, name: str, value: str, said: str, command: str
) -> None:
    monkeypatch.setenv(name, value)
    argv = {
        "chat": ["chat", "--demo", "-m", "hi", "--store", "memory://"],
        "serve": ["serve", "--port", "0", "--store", "memory://"],
        "worker": ["worker", "--store", "sqlite:///w.db"],
    }[command]
    ran = cli(*argv)
    assert ran.code == 2
    assert (
        ran.one_line()
        == f"turnfsm {command}: {name}={value!r}: {said}" + (ran.one_line().split(said, 1)[1])
    )
    assert ran.out == ""


def test_an_endpoint_that_cannot_be_reached_is_a_warning() -> None:
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        env = {**ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
        ran = subprocess.run(
            [TURNFSM, "chat", "--demo", "-m", "hi", "--store", "memory://"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "I am the demo model" in ran.stdout
    first = ran.stderr.splitlines()[0]
    assert first.startswith(
        f"turnfsm chat: warning: the OTLP endpoint {endpoint} cannot be reached"
    )
