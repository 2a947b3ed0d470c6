"""``--llm`` and ``--tools module:attribute``: a module in the working
directory is found (the installed ``turnfsm`` script, whose own folder is
first on ``sys.path``), ``chat`` and ``record`` take them as ``serve`` does,
and such a model is called by what it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from turnfsm.storage import open_store

from .test_cli_providers import PACKAGE_ROOT, run

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("TURNFSM_", "OPENAI_"))}
ENV["PYTHONPATH"] = PACKAGE_ROOT  # the code under test, and nothing else of our path
TURNFSM = str(Path(sys.executable).parent / "turnfsm")

APP = '''\
from turnfsm import tool
from turnfsm.adapters.llm.demo import DemoLLM


@tool
def get_weather(city: str) -> dict[str, object]:
    """The weather in a city."""
    return {"city": city, "temp_c": 21, "conditions": "sunny"}


class Model:
    def __init__(self) -> None:
        self.inner = DemoLLM(delay=0.0)

    def stream(self, request):
        return self.inner.stream(request)


class Named(Model):
    model = "weather-7b"
'''


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """A folder holding the application's module ``app``, and nothing else."""
    (tmp_path / "app.py").write_text(APP)
    return tmp_path


def turnfsm(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TURNFSM, *argv],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def model_id(cwd: Path, db: str) -> str:
    """The model of the one context in ``cwd / db``, as the store keeps it (read
    here: what ``contexts show`` prints of it is the store's)."""

    async def stored() -> str:
        store = open_store(f"sqlite:///{cwd / db}")
        try:
            (cid,) = await store.list_ids()
            return (await store.load(cid)).config.model_id
        finally:
            await store.aclose()

    return anyio.run(stored)


def test_chat_takes_the_llm_and_tools_of_a_module_in_the_working_directory(app: Path) -> None:
    url = "sqlite:///chat.db"
    ran = turnfsm(
        app,
        *("chat", "--llm", "app:Model", "--tools", "app:get_weather", "--approve", "all"),
        *("-m", "What's the weather in Rome?", "--store", url),
    )
    assert ran.returncode == 0, ran.stderr
    assert "tool call> get_weather" in ran.stdout
    assert "The weather in Rome is 21 C and sunny." in ran.stdout
    # labelled by what it is, not "demo": the opening line and the context's model
    assert "model app:Model (--llm)" in ran.stdout
    assert model_id(app, "chat.db") == "app:Model"


def test_a_model_that_names_itself_is_labelled_by_its_name(
    app: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in this process (finding the module is the test above's): the command puts
    # its working directory on sys.path; the test's own path and modules are
    # restored after, so no other test's ``app`` is this one
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "app", raising=False)
    url = "sqlite:///named.db"
    try:
        ran = run(app, "chat", "--llm", "app:Named", "-m", "hello", "--store", url)
    finally:
        sys.modules.pop("app", None)
    assert ran.code == 0, ran.err
    assert "model weather-7b (--llm)" in ran.out
    assert model_id(app, "named.db") == "weather-7b"


@pytest.mark.parametrize("flag", ["--llm", "--tools"])
def test_a_module_found_nowhere_names_the_folder_and_pythonpath(
    app: Path, flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in this process: the command puts its working directory on sys.path, as
    # the script does; the test's own is restored after
    monkeypatch.setattr(sys, "path", list(sys.path))
    demo = ["--demo"] if flag == "--tools" else []  # the model, when it is not the one named
    ran = run(app, "chat", *demo, "-m", "hi", flag, "nothere:x")
    assert ran.code == 2
    assert "Traceback" not in ran.err and ran.err.count("\n") == 1, ran.err
    assert f"{flag} 'nothere:x': no module named 'nothere'" in ran.err
    assert str(app) in ran.err and "PYTHONPATH" in ran.err


def test_record_records_the_model_it_is_given(app: Path) -> None:
    ran = turnfsm(
        app,
        *("record", "--out", "rome.json", "--llm", "app:Model", "--tools", "app:get_weather"),
        *("--approve", "all", "--message", "What's the weather in Rome?"),
    )
    assert ran.returncode == 0, ran.stderr
    script = json.loads((app / "rome.json").read_text())
    assert script["config"]["model"] == "app:Model"
    results = [step["tool"]["result"] for step in script["steps"] if "tool" in step]
    assert results == [{"city": "Rome", "temp_c": 21, "conditions": "sunny"}]  # the app's tool
    replayed = run(app, "replay", "rome.json")  # in this process: it needs no module of the app's
    assert replayed.code == 0, replayed.out + replayed.err
