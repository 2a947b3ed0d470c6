"""The README's curl session, run against a real ``turnfsm serve``."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .test_serve import serve_here

README = Path(__file__).resolve().parents[2] / "README.md"


def session() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- serve-example: [^>]*-->\n```sh\n(.*?)```", text, re.S)
    assert found, "the README has no serve example"
    return found.group(1)


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_readme_curl_session(tmp_path: Path) -> None:
    script = session()
    lines = script.splitlines()
    assert lines[1].startswith("turnfsm serve --tokens tokens.txt")
    with serve_here(tmp_path) as (client, _):  # in this process: the session is the subject
        port = str(client.base_url.port)
        body = "\n".join(ln for ln in lines[2:]).replace(":8000", f":{port}")
        body = body.replace("secret-alice", "token-alice")  # the token serve() gives
        run = subprocess.run(
            ["bash", "-e", "-c", body + "\nsleep 0.5; kill %1"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    said = next(ln for ln in lines if ln.startswith("# The weather"))[2:]
    assert said in run.stdout
    assert '"ok":true' in run.stdout
    events = (tmp_path / "events.txt").read_text()
    assert "event: StateChanged" in events and "id: 1" in events
    assert "event: TurnCompleted" in events
