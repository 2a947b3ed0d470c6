"""``examples/ui-chat`` in a real Chromium (``pytest -m browser``): its one
command bundles the page with the AI SDK and starts ``turnfsm serve``; the page
asks, shows the approval the turn waits for, sends the decision, and shows the
tool's output and the answer (docs/server.md, "The AI SDK's useChat")."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit import listening_url, wait_ready

from .conftest import Tabs

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "examples" / "ui-chat" / "run.py"


PAGE = re.compile(r"the page: (http://\S+/)")


@pytest.fixture
def example(tmp_path: Path) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    if not (ROOT / ".cache" / "ui-stream" / "node_modules" / ".bin" / "esbuild").exists():
        pytest.skip("the AI SDK is not installed (.ci/run installs it into .cache/ui-stream)")
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path)}
    log = tmp_path / "run.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(RUN), "0", "0"],  # the ports it takes, it says
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        api = listening_url(proc, log)
        page = listening_url(proc, log, said=PAGE)
        wait_ready(api, process=proc, log=log)
        wait_ready(page, process=proc, log=log, path="/")
        yield api, page, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)


def test_the_page_asks_approves_and_answers(
    example: tuple[str, str, subprocess.Popen[str]], tabs: Tabs
) -> None:
    api, url, proc = example
    page = tabs.new()
    page.goto(url)
    page.click("form button")
    page.wait_for_selector("pre:has-text('approval-requested')")
    assert "get_weather" in page.inner_text("#log")
    page.click("text=Approve")
    page.wait_for_selector("pre:has-text('output-available')")
    page.wait_for_selector("text=The weather in Oslo is 15 C and cloudy.")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    with pytest.raises(OSError):  # the server went with it
        socket.create_connection(("127.0.0.1", int(api.rsplit(":", 1)[1])), timeout=5).close()
