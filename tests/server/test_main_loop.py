"""The server's main loop (``turnfsm.server._run._Server``): it ticks once a
second, renewing the ``Date`` header each tick, and an exit signal wakes it at
once rather than at its next tick."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time

import pytest
import uvicorn


async def _app(scope: dict[str, object], receive: object, send: object) -> None:
    raise AssertionError("no request is made")


def _server() -> tuple[uvicorn.Server, socket.socket]:
    from turnfsm.server._run import _Server

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = _Server(uvicorn.Config(_app, lifespan="off", log_level="warning"))
    # uvicorn would raise a signal it caught again once it stopped: this test's own
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    return server, sock


def test_an_exit_signal_wakes_the_loop_before_its_next_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from turnfsm.server import _run

    monkeypatch.setattr(_run, "TICK", 600.0)
    # uvicorn's handle_exit, as sse-starlette patches it, tells every stream of
    # the process to close (AppStatus.should_exit): put back once this test is
    # done, so that the streams of the tests after it in this process stay open
    from sse_starlette.sse import AppStatus

    monkeypatch.setattr(AppStatus, "should_exit", AppStatus.should_exit)
    server, sock = _server()

    async def main() -> float:
        listening = asyncio.Event()
        server.on_listening = lambda urls: listening.set()  # type: ignore[attr-defined]
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        await asyncio.wait_for(listening.wait(), 60)
        await asyncio.sleep(0.05)  # the loop waits for its tick
        asked = time.monotonic()
        server.handle_exit(signal.SIGTERM, None)
        await asyncio.wait_for(serving, 60)
        return time.monotonic() - asked

    try:
        took = asyncio.run(main())
    finally:
        sock.close()
    assert server.should_exit
    assert took < 30  # not the tick's 600 seconds


def test_each_tick_renews_the_date_header(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnfsm.server import _run

    monkeypatch.setattr(_run, "TICK", 0.01)
    server, sock = _server()
    counters: list[int] = []
    on_tick = server.on_tick

    async def counted(counter: int) -> bool:
        counters.append(counter)
        if len(counters) == 4:
            server.should_exit = True
        return await on_tick(counter)

    monkeypatch.setattr(server, "on_tick", counted)
    try:
        asyncio.run(asyncio.wait_for(server.serve(sockets=[sock]), 60))
    finally:
        sock.close()
    # uvicorn renews the Date header on every tenth of its ticks: each of ours is ten
    assert counters == [0, 10, 20, 30]
