"""``?wait=true`` in ``serve --turns workers``: the server answers the finished
Turn a worker process ran, looking at the context's head (its state, one row)
while it waits, and loading the whole context only once it rests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnfsm import Engine
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.cli._demo import get_weather
from turnfsm.model import ChatContext
from turnfsm.storage import SQLiteStore

from .conftest import TOKENS, Running, serve_in_thread


class Counting(SQLiteStore):
    """A SQLite store that counts what the server reads of each context."""

    loads: Counter[str] = Counter()
    heads: Counter[str] = Counter()

    async def load(self, context_id: str) -> ChatContext:
        Counting.loads[context_id] += 1
        return await super().load(context_id)

    async def head(self, context_id: str) -> tuple[str, int]:
        Counting.heads[context_id] += 1
        return await super().head(context_id)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Running]:
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path / "server.db"

    def factory() -> Engine:
        return Engine(llm=DemoLLM(delay=0.0), tools=[get_weather], store=Counting(db))

    app = create_app(factory, ServerConfig(tokens=dict(TOKENS), turns="workers"))
    log = (tmp_path / "worker.log").open("w")
    # the worker's turn streams for about a second: the server looks many times
    argv = ["worker", "--store", f"sqlite:///{db}", "--poll", "0.05", "--demo-delay", "0.1"]
    worker = subprocess.Popen(
        [sys.executable, "-m", "turnfsm", *argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""},
    )
    try:
        for url in serve_in_thread(app):
            yield Running(url, db)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, (tmp_path / "worker.log").read_text()
        log.close()


def test_wait_answers_the_finished_turn_reading_heads_not_the_context(
    workers: Running,
) -> None:
    with workers.client() as c:
        r = c.post("/api/contexts", json={"system_prompt": "You talk."})
        assert r.status_code == 201, r.text
        cid = r.json()["id"]
        loads_before = Counting.loads[cid]
        r = c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "Tell me a story"})
        assert r.status_code == 200, r.text
        turn = r.json()
        loads = Counting.loads[cid] - loads_before
        stored = c.get(f"/api/contexts/{cid}/messages").json()["messages"]
    assert turn["state"] == "Idle"
    assert turn["states"][0] == "ProcessingUserMessage" and turn["states"][-1] == "Idle"
    # the Turn holds the worker's answer, as stored
    said = [m["content"][0]["text"] for m in turn["messages"] if m["role"] == "assistant"]
    assert said and said[-1] == stored[-1]["message"]["content"][0]["text"]
    # it looked many times while the worker ran, each a head read; the context
    # was loaded by the submit and once at rest, not once per look
    assert Counting.heads[cid] >= 4, Counting.heads
    assert loads <= 2, (loads, Counting.heads[cid])
