"""``turnfsm serve`` and ``worker``: a port in use is said before anything is
opened; as real processes, the banner names the model given, the API lists a
context's tools, and Ctrl-C exits 130 as the exit-code table says."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest
from kit import listening_on_pipe, wait_ready

from .conftest import Cli
from .test_cli_app_options import APP, ENV, TURNFSM


def _start(cwd: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [TURNFSM, *argv],
        cwd=cwd,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_ready(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """The URL a ``serve --port 0`` process said it listens on, once it is
    ready, and what it said until then (which the pipe no longer holds)."""
    url, said = listening_on_pipe(proc)
    wait_ready(url, process=proc, log=lambda: said)
    return url, said


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate()  # reaped, its pipes closed


def test_a_port_in_use_is_said_before_the_store_is_opened(cli: Cli, tmp_path: Path) -> None:
    # in this process (the check is the command's, made before anything starts)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = cli("serve", "--port", str(port), "--store", "sqlite:///chats.db")
    assert ran.code == 2
    assert ran.err == (
        f"turnfsm serve: the server did not start: 127.0.0.1:{port} is in use; "
        "stop what listens there, or give another --port\n"
    )  # one line: no banner, no recovery log
    assert not (tmp_path / "chats.db").exists()  # the store was not touched


def test_serve_names_the_llm_given_lists_its_tools_and_exits_130_on_ctrl_c(
    tmp_path: Path,
) -> None:
    """One process: its banner, the tools the API says a context is offered,
    then Ctrl-C."""
    (tmp_path / "app.py").write_text(APP)
    proc = _start(
        tmp_path, "serve", "--port", "0", "--llm", "app:Model", "--tools", "app:get_weather"
    )
    try:
        url, said = _wait_ready(proc)
        every = httpx.post(f"{url}/api/contexts", json={"system_prompt": "weather"}).json()
        none = httpx.post(f"{url}/api/contexts", json={"system_prompt": "x", "tools": []}).json()
        listed = httpx.get(f"{url}/api/contexts/{every['id']}/tools")
        empty = httpx.get(f"{url}/api/contexts/{none['id']}/tools").json()
        missing = httpx.get(f"{url}/api/contexts/no-such-id/tools")
        # the document is built on its first request, a fraction of a second of
        # CPU: more than httpx's default 5 s on a loaded machine
        schema = httpx.get(f"{url}/openapi.json", timeout=60).json()
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    err = said + rest
    assert err.startswith("turnfsm serve: http://127.0.0.1:0, model app:Model, store "), err
    # --port 0 took a free port, which the line after the store's recovery names
    assert re.fullmatch(r"http://127\.0\.0\.1:[1-9][0-9]*", url), url
    assert said.endswith(f"\nturnfsm serve: listening on {url}\n"), said
    assert proc.returncode == 130, err
    assert err.endswith("turnfsm serve: interrupted\n")
    # the API lists the tools a context is offered
    assert listed.status_code == 200, listed.text
    (weather,) = listed.json()
    assert weather["name"] == "get_weather" and weather["approval"] == "auto"
    assert weather["description"] == "The weather in a city."
    assert weather["parameters"]["properties"]["city"]["type"] == "string"
    assert empty == []  # its own allow-list offers nothing
    assert missing.status_code == 404
    response = schema["paths"]["/api/contexts/{context_id}/tools"]["get"]["responses"]["200"]
    assert response["content"]["application/json"]["schema"]["items"]["$ref"].endswith("/ToolOut")


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_worker_exits_130_on_ctrl_c_and_0_on_sigterm(
    tmp_path: Path, sent: signal.Signals, code: int
) -> None:
    proc = _start(tmp_path, "worker", "--store", "sqlite:///work.db")
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline()
        assert started.startswith("turnfsm worker: "), started
        proc.send_signal(sent)
        _, err = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert proc.returncode == code, err
    assert "turnfsm worker: stopped (0 turns run, 0 failed)" in err
