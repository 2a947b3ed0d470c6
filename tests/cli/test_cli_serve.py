"""``turnfsm serve`` and ``worker`` as real processes: a port in use is said
before anything is opened, the banner names the model given, and Ctrl-C
exits 130 as the exit-code table says."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from .test_cli_app_options import APP, ENV, TURNFSM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def _wait_ready(proc: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("the server never became ready")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate()  # reaped, its pipes closed


def test_a_port_in_use_is_said_before_the_store_is_opened(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = subprocess.run(
            [TURNFSM, "serve", "--port", str(port), "--store", "sqlite:///chats.db"],
            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert ran.returncode == 2
    assert ran.stderr == (
        f"turnfsm serve: the server did not start: 127.0.0.1:{port} is in use; "
        "stop what listens there, or give another --port\n"
    )  # one line: no banner, no recovery log
    assert not (tmp_path / "chats.db").exists()  # the store was not touched


def test_serve_names_the_llm_given_and_exits_130_on_ctrl_c(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    port = _free_port()
    proc = _start(tmp_path, "serve", "--port", str(port), "--llm", "app:Model")
    try:
        _wait_ready(proc, port)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert err.startswith(f"turnfsm serve: http://127.0.0.1:{port}, model app:Model, store "), err
    assert proc.returncode == 130, err
    assert err.endswith("turnfsm serve: interrupted\n")


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


def test_the_api_lists_the_tools_a_context_is_offered(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(tmp_path, "serve", "--port", str(port), "--tools", "app:get_weather")
    try:
        _wait_ready(proc, port)
        every = httpx.post(f"{url}/api/contexts", json={"system_prompt": "weather"}).json()
        none = httpx.post(f"{url}/api/contexts", json={"system_prompt": "x", "tools": []}).json()
        listed = httpx.get(f"{url}/api/contexts/{every['id']}/tools")
        empty = httpx.get(f"{url}/api/contexts/{none['id']}/tools").json()
        missing = httpx.get(f"{url}/api/contexts/no-such-id/tools")
        schema = httpx.get(f"{url}/openapi.json").json()
    finally:
        _stop(proc)
    assert listed.status_code == 200, listed.text
    (weather,) = listed.json()
    assert weather["name"] == "get_weather" and weather["approval"] == "auto"
    assert weather["description"] == "The weather in a city."
    assert weather["parameters"]["properties"]["city"]["type"] == "string"
    assert empty == []  # its own allow-list offers nothing
    assert missing.status_code == 404
    response = schema["paths"]["/api/contexts/{context_id}/tools"]["get"]["responses"]["200"]
    assert response["content"]["application/json"]["schema"]["items"]["$ref"].endswith("/ToolOut")
