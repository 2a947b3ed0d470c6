"""A real server on 127.0.0.1 for ``POST /api/ui/chat``: its engine's model is
the OpenAI adapter reading the OpenAI loopback server's scripted streams (text,
tool calls whose arguments come in several pieces), with a tool that needs
approval and one that does not, each counting its runs."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from turnfsm import Approval, Engine, tool

from .conftest import TOKENS, loopback_tls, serve_in_thread

_OPENAI = Path(__file__).resolve().parents[1] / "openai"
if str(_OPENAI) not in sys.path:  # its loopback server and bodies, by name
    sys.path.append(str(_OPENAI))

from openai_loopback import LoopbackServer, Reply  # noqa: E402
from openai_samples import text_stream, tool_call_stream  # noqa: E402

__all__ = [
    "RUNS",
    "LoopbackServer",
    "Reply",
    "UiServer",
    "chunks",
    "serve",
    "text_stream",
    "tool_call_stream",
]

RUNS: list[tuple[str, dict[str, Any]]] = []
"""Each tool run: its name and arguments."""


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    RUNS.append(("add", {"a": a, "b": b}))
    return a + b


@tool(approval=Approval.REQUIRED)
def book(city: str, nights: int) -> str:
    """Book a stay."""
    RUNS.append(("book", {"city": city, "nights": nights}))
    return f"booked {nights} nights in {city}"


ADD = {"a": 2, "b": 40}
BOOK = {"city": "Oslo, Norway", "nights": 3}


def tool_turn() -> list[Reply]:
    """Text and ``add`` (arguments in 3-character pieces), then ``book`` (waits
    for approval); after the approval, the closing text."""
    return [
        Reply(
            events=tool_call_stream([("call_add", "add", ADD)], text=["Let me ", "add."], piece=3)
        ),
        Reply(events=tool_call_stream([("call_book", "book", BOOK)], text=["Booking."], piece=3)),
        Reply(events=text_stream(["Done: ", "42, and ", "booked."])),
    ]


@dataclass
class UiServer:
    url: str
    model: LoopbackServer
    db: Path
    headers: dict[str, str] = field(default_factory=lambda: {"Authorization": "Bearer token-alice"})

    def client(self, token: str | None = "token-alice") -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(verify=loopback_tls(), base_url=self.url, headers=headers, timeout=30)


def serve(tmp: Path, **config: Any) -> Iterator[UiServer]:
    """The model's loopback server and the turnfsm server over it (a SQLite file)."""
    from turnfsm.server import ServerConfig, create_app

    RUNS.clear()
    db = tmp / "ui.db"
    with LoopbackServer() as model:

        def engine() -> Engine:
            import openai

            from turnfsm.adapters.llm.openai import OpenAIChatAdapter

            # no connection kept between calls: none is left open when the
            # server's event loop ends
            http = httpx.AsyncClient(
                verify=loopback_tls(), limits=httpx.Limits(max_keepalive_connections=0)
            )
            client = openai.AsyncOpenAI(
                base_url=model.url, api_key="sk-loop", timeout=10, http_client=http
            )
            llm = OpenAIChatAdapter(client)
            return Engine(llm=llm, tools=[add, book], store=f"sqlite:///{db}")

        settings: dict[str, Any] = {"tokens": dict(TOKENS), "max_body": 64_000, **config}
        app = create_app(engine, ServerConfig(**settings))
        for url in serve_in_thread(app):
            yield UiServer(url, model, db)


def chunks(r: httpx.Response) -> list[Any]:
    """The data of each event of a UI message stream, JSON decoded (``[DONE]`` as is)."""
    out: list[Any] = []
    for line in r.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out
