"""How ``turnfsm serve`` writes to a connection (``turnfsm.server._run``): a
response's head goes out with its body, in one write."""

from __future__ import annotations

import asyncio
from typing import Any


class Recorded(asyncio.Transport):
    """A transport that keeps what it is given, as the socket would get it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: Any) -> None:
        assert not self.closed, "a write after close"
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


HEAD = b"HTTP/1.1 202 Accepted\r\ncontent-length: 16\r\n\r\n"


def test_a_head_goes_out_with_the_write_after_it_and_other_writes_at_once() -> None:
    from turnfsm.server._run import HeadWithBody

    async def scenario() -> list[list[bytes]]:
        real = Recorded()
        wire = HeadWithBody(real, asyncio.get_running_loop())
        seen = []
        wire.write(HEAD)
        seen.append(list(real.writes))  # held
        assert wire.get_write_buffer_size() == 7 + len(HEAD)
        wire.write(memoryview(b'{"state":"Idle"}'))
        seen.append(list(real.writes))  # with its body, without waiting
        wire.write(b"5\r\nhello\r\n")
        wire.writelines([b"0\r\n", b"\r\n"])
        seen.append(list(real.writes))  # not a head: at once
        await asyncio.sleep(0)
        seen.append(list(real.writes))  # the held head's flush finds nothing
        return seen

    held, joined, body, later = asyncio.run(scenario())
    assert held == []
    assert joined == [HEAD + b'{"state":"Idle"}']
    assert body == [*joined, b"5\r\nhello\r\n", b"0\r\n\r\n"]
    assert later == body


def test_a_head_alone_goes_out_at_the_next_turn_of_the_loop() -> None:
    """A stream's head: its first event may be long in coming."""
    from turnfsm.server._run import HeadWithBody

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        real = Recorded()
        wire = HeadWithBody(real, asyncio.get_running_loop())
        wire.write(HEAD)
        before = list(real.writes)
        await asyncio.sleep(0)
        return before, list(real.writes)

    before, after = asyncio.run(scenario())
    assert before == []
    assert after == [HEAD]


def test_close_sends_a_held_head_first_and_abort_drops_it() -> None:
    from turnfsm.server._run import HeadWithBody

    async def scenario() -> tuple[Recorded, Recorded]:
        loop = asyncio.get_running_loop()
        closed, aborted = Recorded(), Recorded()
        one, two = HeadWithBody(closed, loop), HeadWithBody(aborted, loop)
        one.write(HEAD)
        one.close()
        two.write(HEAD)
        two.abort()
        await asyncio.sleep(0)  # the pending flushes find nothing to send
        return closed, aborted

    closed, aborted = asyncio.run(scenario())
    assert closed.writes == [HEAD] and closed.closed
    assert aborted.writes == [] and aborted.aborted


def test_a_held_head_is_dropped_when_the_transport_closed_meanwhile() -> None:
    from turnfsm.server._run import HeadWithBody

    async def scenario() -> Recorded:
        real = Recorded()
        wire = HeadWithBody(real, asyncio.get_running_loop())
        wire.write(HEAD)
        real.closed = True  # the peer went away before the flush
        await asyncio.sleep(0)
        return real

    assert asyncio.run(scenario()).writes == []


def test_uvicorns_response_goes_out_in_one_write() -> None:
    """uvicorn's own protocol (as ``turnfsm serve`` runs it) answers a request
    with its head and body in one write."""
    import uvicorn
    from uvicorn.server import ServerState

    from turnfsm.server._run import HTTP_PROTOCOL

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        await receive()
        body = b'{"accepted":true}'
        headers = [(b"content-type", b"application/json"), (b"content-length", b"17")]
        await send({"type": "http.response.start", "status": 202, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def scenario() -> Recorded:
        config = uvicorn.Config(app, lifespan="off", ws="none", http=HTTP_PROTOCOL)
        config.load()
        protocol: Any = HTTP_PROTOCOL(  # type: ignore[call-arg]
            config=config, server_state=ServerState(), app_state={}
        )
        real = Recorded()
        protocol.connection_made(real)
        protocol.data_received(b"POST /m HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        for _ in range(20):  # the app runs in a task; the flush a turn later
            await asyncio.sleep(0)
        protocol.connection_lost(None)
        return real

    real = asyncio.run(scenario())
    assert len(real.writes) == 1, real.writes
    head, _, body = real.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 202 Accepted\r\n")
    assert body == b'{"accepted":true}'
