"""Hostile HTTP, at the class: every number a client gives, and the
``Last-Event-ID`` a server has not reached."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from turnfsm import Engine
from turnfsm._numbers import whole_number
from turnfsm.adapters.llm.demo import DemoLLM
from turnfsm.cli._demo import get_weather
from turnfsm.errors import InvalidInput
from turnfsm.server import ServerConfig, create_app
from turnfsm.server._web._routes import router as web_router

from .conftest import TOKENS, Running, demo_engine, serve_in_thread
from .test_events import read_events, until
from .test_rest import create

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "turnfsm" / "server"
BAD_NUMBERS = [
    "\u00b2",  # superscript two: str.isdigit() takes it, int() does not
    "\u0665",  # Arabic-Indic five: int() reads it as 5
    "\u0663\u0662",
    "\uff15",  # fullwidth five
    "+5",
    " 5",
    "5_0",
    "5.0",
    "-1",
    "0x5",
    "1e3",
    "5" * 5000,  # over Python's limit on the digits of an int
]


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """No tokens: one tenant, the loopback only."""
    db = tmp_path_factory.mktemp("open") / "server.db"
    app = create_app(lambda: demo_engine(db), ServerConfig(max_body=64_000, heartbeat=0.5))
    for url in serve_in_thread(app):
        yield Running(url, db)


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    db = tmp_path_factory.mktemp("slow") / "server.db"

    def factory() -> Engine:
        return Engine(llm=DemoLLM(delay=0.05), tools=[get_weather], store=f"sqlite:///{db}")

    app = create_app(factory, ServerConfig(tokens=dict(TOKENS), max_turns_per_tenant=4))
    for url in serve_in_thread(app):
        yield Running(url, db)


def every_route() -> list[tuple[str, str]]:
    """(method, path) of every route the app serves: the OpenAPI document's,
    the web view's, the documentation's."""
    app = create_app(lambda: demo_engine(Path("unused.db")))
    out = [(method.upper(), path) for path, ops in app.openapi()["paths"].items() for method in ops]
    out += [(m, r.path) for r in web_router.routes for m in sorted(r.methods)]  # type: ignore[attr-defined]
    out += [("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/redoc"), ("GET", "/nowhere")]
    return sorted(set(out))


def filled(path: str, cid: str) -> str:
    return (
        path.replace("{context_id}", cid)
        .replace("{session_id}", cid)
        .replace("{message_id}", "m-none")
        .replace("{name}", "web.css")
    )


def answer(c: httpx.Client, method: str, url: str, **kw: Any) -> httpx.Response:
    """The response's head (a stream is closed once its head is read)."""
    with c.stream(method, url, **kw) as r:
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            r.read()
        return r


# ---------------------------------------------------------------------- numbers


def test_whole_numbers_are_ascii_digits_in_a_range() -> None:
    assert whole_number("0", "x", 0, 10) == 0
    assert whole_number("0010", "x", 0, 9999) == 10
    assert whole_number(b"65535", "x", 0, 65535) == 65535
    for bad in [*BAD_NUMBERS, "", "11", "65536"]:
        with pytest.raises(InvalidInput) as info:
            whole_number(bad, "query.limit", 0, 10)
        assert info.value.where == "query.limit"
        assert len(str(info.value)) < 200  # a 5,000-digit value is not echoed whole


def test_no_other_reading_of_client_numbers() -> None:
    """``str.isdigit`` (which takes ``²``) and ``int()`` on what a client sent
    appear nowhere in the server or the CLI: they read numbers through
    ``whole_number``."""
    found = []
    for path in [*SERVER.rglob("*.py"), *(ROOT / "turnfsm" / "cli").rglob("*.py")]:
        text = path.read_text("utf-8")
        for lineno, line in enumerate(text.splitlines(), 1):
            if ".isdigit()" in line or re.search(
                r"\bint\([^)]*(request|header|param|query|value|text|cursor|line)", line
            ):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("bad", BAD_NUMBERS)
def test_every_number_a_client_gives_is_422_naming_it(server: Running, bad: str) -> None:
    with server.client() as c:
        cid = create(c)
        for path in ("/api/contexts", f"/api/contexts/{cid}/messages", "/sessions"):
            for name in ("cursor", "limit"):
                r = c.get(path, params={name: bad})
                assert r.status_code == 422, (path, name, r.text)
                error = r.json()["error"]
                assert error["code"] == "invalid_input"
                assert error["where"] == f"query.{name}", error
        if bad == " 5":
            return  # a header's leading space is not part of its value (RFC 9110)
        with c.stream(
            "GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": bad.encode()}
        ) as r:
            r.read()
            assert r.status_code == 422, r.text
            assert r.json()["error"]["where"] == "header.last-event-id"


def test_cli_numbers_are_read_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    from turnfsm.cli import main

    for flag, bad in [("--port", "\u00b2"), ("--port", "+80"), ("--max-body", "9" * 5000)]:
        assert main(["serve", flag, bad]) == 2
        assert "whole number" in capsys.readouterr().err


# ---------------------------------------------------------------------- Last-Event-ID


def test_an_id_ahead_of_the_context_gets_a_resync_and_the_stream_goes_on(
    server: Running,
) -> None:
    with server.client() as c:
        cid = create(c)
        done = c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "hello"})
        assert done.status_code == 200, done.text
        with c.stream("GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": "0"}) as r:
            last = max(int(e.id or 0) for e in until(read_events(r), "TurnCompleted"))
        ahead = str(last + 1000)
        with c.stream("GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": ahead}) as r:
            events = read_events(r)
            first = next(e for e in events if e.event != "Heartbeat")
            assert first.event == "Resync"
            assert first.id == str(last)  # the id the client keeps from now on
            assert first.data["last_seq"] == last and first.data["state"] == "Idle"
            c.post(f"/api/contexts/{cid}/messages", json={"content": "again"})
            later = [e for e in until(events, "TurnCompleted") if e.event != "Heartbeat"]
        assert int(later[0].id or 0) == last + 1  # the stream goes on from there
