"""A real uvicorn on 127.0.0.1 (a random port, in a thread) over a SQLite file."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from kit import (  # tests/ is on sys.path (no tests/__init__.py)
    loopback_tls,
    skip_without,
    wait_ready,
)

from turnfsm import Engine
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.cli._demo import get_weather

skip_without("fastapi")

# the server's stack (fastapi, uvicorn, turnfsm.server) is imported by the
# fixtures and tests that start a server, not at collection

TOKENS = {"token-alice": "alice", "token-bob": "bob"}


@dataclass
class Running:
    url: str
    db: Path

    def client(self, token: str | None = "token-alice") -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(verify=loopback_tls(), base_url=self.url, headers=headers, timeout=30)


def serve_in_thread(app: object) -> Iterator[str]:
    import uvicorn

    from turnfsm.server._run import HTTP_PROTOCOL

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app,  # type: ignore[arg-type]
            log_level="warning",
            lifespan="on",
            ws="none",
            http=HTTP_PROTOCOL,  # as turnfsm serve runs it
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, log=lambda: "" if thread.is_alive() else "the server's thread ended")
        yield url
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()


def demo_engine(db: Path) -> Engine:
    return Engine(llm=DemoLLM(delay=0.0), tools=[get_weather], store=f"sqlite:///{db}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path_factory.mktemp("server") / "server.db"
    app = create_app(
        lambda: demo_engine(db), ServerConfig(tokens=dict(TOKENS), max_body=64_000, heartbeat=0.5)
    )
    for url in serve_in_thread(app):
        yield Running(url, db)
