"""W7: the W1 turn through ``turnfsm serve`` (HTTP + SSE), against the same turn in-process.

Two measuring processes, run alternately by ``run.py`` (docs/benchmarks.md, "W7"):

- ``inprocess``: an engine made by :func:`make_engine` in this process; 200 W1
  turns (``engine.send``), then the streamed part: 50 answers of 100 deltas
  read by a subscriber, as W2.
- ``http``: the same engine in a server process of its own (``--serve 0``:
  what ``turnfsm serve`` runs, ``turnfsm.server._run.run_server``, on a free
  port of 127.0.0.1, which it says on standard error); this process is the
  client: it opens the context's event stream, then for each turn posts the
  message (``202``) and reads the stream until ``TurnCompleted``, parsing
  every event's JSON. The streamed part the same
  way, every ``ContentDelta`` read from the stream. The client speaks HTTP/1.1
  with h11 over one keep-alive TCP connection for the posts and one for the
  stream (:class:`Wire`), on uvloop as the server is: lean, as a browser's
  ``fetch`` and ``EventSource`` are, so that the figure is the server's.
- ``httpx``: the same as ``http`` with one ``httpx.AsyncClient`` as the
  client. Reported beside it, not as the figure: httpx's own CPU per request
  is more than the server's (docs/benchmarks.md, "W7: the server's
  overhead"), so with it as the client the figure would measure the client.
- ``--instructions [LONG SHORT]``: the server's instructions per W1 turn
  under valgrind's cachegrind, which the machine's load does not move.

The figures: microseconds per W1 turn, and deltas per second of the streamed
part. ``run.py`` subtracts the medians: the milliseconds a turn costs over
HTTP and SSE on top of the turn in-process. The server process's CPU time
(``/proc``) is reported beside it, split from the client's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from typing import IO, Any

import anyio
from _common import (
    W1_TURNS,
    W2_CHUNKS_PER_ANSWER,
    W2_TEXT,
    W2_TURNS,
    CheckFailed,
    Timed,
    check,
    current_rss_mib,
    expected_w1_history,
    expected_w2_history,
    peak_rss_mib,
)
from turnfsm_side import Handler, StreamingLLM, get_weather

from turnfsm import ContentDelta, Engine, State, StopReason, TurnCompleted, records
from turnfsm.events import EventsMissed
from turnfsm.model import MessageNode, to_chat_messages
from turnfsm.testing import ScriptedLLM

SELF = os.path.abspath(__file__)
STREAM_MODEL = "w7-stream"
"""A context created with this model is answered by W2's streaming adapter;
any other by W1's handler."""
DELTAS = W2_TURNS * W2_CHUNKS_PER_ANSWER
READY_TIMEOUT = 60.0


class W7LLM:
    """W1's scripted handler, or W2's 100-delta answers for a context whose
    model is :data:`STREAM_MODEL`: one engine serves both parts."""

    def __init__(self) -> None:
        self.handler = Handler()
        self.scripted = ScriptedLLM(self.handler, record=False)
        self.streaming = StreamingLLM()

    def stream(self, request: Any) -> AsyncIterator[Any]:
        llm = self.streaming if request.model == STREAM_MODEL else self.scripted
        return llm.stream(request)


def make_engine() -> Engine:
    """The engine of both sides: the defaults (in memory), as W1."""
    return Engine(llm=W7LLM(), tools=[get_weather])


# --------------------------------------------------------------------- in-process


async def inprocess() -> dict[str, Any]:
    async with make_engine() as engine:
        warm = await engine.create_context()
        await engine.send(warm, "turn 1")  # not timed: as the HTTP side's warm-up turn
        cid = await engine.create_context()
        rss0 = current_rss_mib()
        tm = Timed.start()
        for i in range(1, W1_TURNS + 1):
            turn = await engine.send(cid, f"turn {i}")
            if turn.state is not State.IDLE or turn.stop_reason is not StopReason.COMPLETED:
                raise CheckFailed(f"turn {i}: {turn.state} {turn.stop_reason} {turn.error}")
        wall = tm.stop()
        ctx = await engine.get_context(cid)
        check(
            to_chat_messages(n.message for n in ctx.history()) == expected_w1_history(W1_TURNS),
            "the W1 history differs from a fresh build",
        )

        scid = await engine.create_context(model=STREAM_MODEL)
        received: list[str] = []
        missed = 0
        sub = engine.subscribe(scid)

        async def subscriber() -> None:
            nonlocal missed
            turns = 0
            async with sub:
                async for ev in sub:
                    if isinstance(ev, ContentDelta):
                        received.append(ev.delta)
                    elif isinstance(ev, TurnCompleted):
                        turns += 1
                        if turns == W2_TURNS:
                            break
                    elif isinstance(ev, EventsMissed):
                        missed += ev.count

        async with anyio.create_task_group() as tg:
            tg.start_soon(subscriber)
            await anyio.lowlevel.checkpoint()
            t0 = time.perf_counter()
            for i in range(1, W2_TURNS + 1):
                await engine.send(scid, f"turn {i}")
        stream_wall = time.perf_counter() - t0
        check(missed == 0, f"the subscriber missed {missed} events")
        check("".join(received) == W2_TEXT * W2_TURNS, "the streamed deltas differ")
        sctx = await engine.get_context(scid)
        check(
            to_chat_messages(n.message for n in sctx.history()) == expected_w2_history(W2_TURNS),
            "the streamed history differs from a fresh build",
        )
    return _result(tm, wall, stream_wall, rss0, server_cpu=None)


# --------------------------------------------------------------------- over HTTP


KEEP_ALIVE = 600
"""Seconds the benchmark's server keeps an idle connection. The client's
connection for the posts sits idle while it reads a turn's events, and under
valgrind on a loaded machine that took longer than ``turnfsm serve``'s 5
seconds: the server closed it and the run failed at the next post."""


def serve(port: int) -> None:
    """The server process: the app over :func:`make_engine`, as ``turnfsm serve``
    runs it (but for :data:`KEEP_ALIVE`)."""
    from turnfsm.server import ServerConfig
    from turnfsm.server._run import run_server

    def listening(urls: list[str]) -> None:  # the port 0 took, for the client
        print(f"http_side: listening on {urls[0]}", file=sys.stderr, flush=True)

    run_server(
        make_engine,
        ServerConfig(),
        host="127.0.0.1",
        port=port,
        keep_alive=KEEP_ALIVE,
        on_listening=listening,
    )


LISTENING = re.compile(rb"http_side: listening on http://127\.0\.0\.1:([0-9]+)")


def _listening_port(proc: subprocess.Popen[bytes], err: IO[bytes], within: float) -> int:
    """The port the server process, started on port 0, says it listens on
    (its standard error is ``err``): a port picked free and handed over
    could be another process's by the time the server binds it."""
    deadline = time.monotonic() + within
    while True:
        err.seek(0)
        said = err.read()
        found = LISTENING.search(said)
        if found:
            return int(found.group(1))
        check(proc.poll() is None, f"the server exited ({proc.returncode}):\n{said[-2000:]!r}")
        check(time.monotonic() < deadline, "the server did not listen")
        time.sleep(0.05)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Wire:
    """One keep-alive HTTP/1.1 connection to the server, spoken with h11 over
    anyio's TCP stream (``TCP_NODELAY``): a request goes out in one write."""

    def __init__(self, stream: Any) -> None:
        import h11

        self._h11 = h11
        self._stream = stream
        self._conn = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, port: int) -> Wire:
        return cls(await anyio.connect_tcp("127.0.0.1", port))

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def _event(self) -> Any:
        h11 = self._h11
        while True:
            ev = self._conn.next_event()
            if ev is not h11.NEED_DATA:
                return ev
            try:
                data = await self._stream.receive(65536)
            except anyio.EndOfStream:
                data = b""
            self._conn.receive_data(data)

    async def _send(self, method: str, target: str, body: bytes | None, headers: Any) -> int:
        h11 = self._h11
        head = [("host", "127.0.0.1"), *headers]
        if body is not None:
            head += [("content-type", "application/json"), ("content-length", str(len(body)))]
        out = self._conn.send(h11.Request(method=method, target=target, headers=head))
        if body is not None:
            out += self._conn.send(h11.Data(data=body))
        out += self._conn.send(h11.EndOfMessage())
        await self._stream.send(out)
        resp = await self._event()
        if not isinstance(resp, h11.Response):
            raise CheckFailed(f"{method} {target}: {resp!r}")
        return int(resp.status_code)

    async def request(
        self, method: str, target: str, body: Any = None, headers: Any = ()
    ) -> tuple[int, Any]:
        """One request; its status and JSON body."""
        h11 = self._h11
        raw = None if body is None else json.dumps(body).encode()
        status = await self._send(method, target, raw, headers)
        chunks = []
        while True:
            ev = await self._event()
            if isinstance(ev, h11.Data):
                chunks.append(ev.data)
            elif isinstance(ev, h11.EndOfMessage):
                break
            else:
                raise CheckFailed(f"{method} {target}: {ev!r}")
        self._conn.start_next_cycle()
        return status, json.loads(b"".join(chunks)) if chunks else None

    async def stream(self, target: str, headers: Any = ()) -> tuple[int, AsyncIterator[bytes]]:
        """A streamed GET: its status and its body's pieces as they come."""
        h11 = self._h11
        status = await self._send("GET", target, None, headers)

        async def pieces() -> AsyncIterator[bytes]:
            while True:
                ev = await self._event()
                if isinstance(ev, h11.Data):
                    yield bytes(ev.data)
                elif isinstance(ev, h11.EndOfMessage | h11.ConnectionClosed):
                    return

        return status, pieces()


class Stream:
    """A context's event stream, read event by event (``id:``, ``event:``,
    ``data:``; frames end with a blank line), each event's JSON parsed."""

    def __init__(self, pieces: AsyncIterator[bytes]) -> None:
        self._pieces = pieces
        self._buffer = b""
        self._frames: list[bytes] = []
        self.seq = 0
        self.missed = 0

    async def _frame(self) -> bytes:
        while not self._frames:
            piece = await anext(self._pieces, None)
            if piece is None:
                raise CheckFailed("the event stream ended")
            *whole, self._buffer = (self._buffer + piece).replace(b"\r\n", b"\n").split(b"\n\n")
            self._frames.extend(whole)
        return self._frames.pop(0)

    async def next(self) -> tuple[str, dict[str, Any]]:
        """The next engine event (heartbeats skipped); checks that seqs follow on."""
        while True:
            kind, ident, data = "message", None, None
            for line in (await self._frame()).split(b"\n"):
                if line.startswith(b"data:"):
                    data = line[5:].strip()
                elif line.startswith(b"event:"):
                    kind = line[6:].strip().decode()
                elif line.startswith(b"id:"):
                    ident = line[3:].strip()
            if data is None or kind == "Heartbeat":
                continue
            if kind == "EventsMissed":
                self.missed += 1
            if ident is None or int(ident) != self.seq + 1:
                raise CheckFailed(f"{kind} has id {ident!r} after {self.seq}")
            self.seq += 1
            return kind, json.loads(data)

    async def until_rest(self, deltas: list[str] | None = None) -> dict[str, Any]:
        while True:
            kind, data = await self.next()
            if kind == "ContentDelta" and deltas is not None:
                deltas.append(data["delta"])
            elif kind == "TurnCompleted":
                return data


class Client:
    """What a W7 client does, over :class:`Wire` (``lean``) or one
    ``httpx.AsyncClient``."""

    def __init__(self, port: int, lean: bool) -> None:
        self.port = port
        self.lean = lean
        self._httpx: Any = None
        self._wire: Wire | None = None

    async def __aenter__(self) -> Client:
        import httpx

        self._httpx = httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._wire is not None:
            await self._wire.aclose()
        await self._httpx.aclose()

    async def ready(self) -> bool:
        import httpx

        try:
            return bool((await self._httpx.get("/readyz")).status_code == 200)
        except httpx.TransportError:
            return False

    async def call(self, method: str, target: str, body: Any = None) -> tuple[int, Any]:
        if self.lean:
            if self._wire is None:
                self._wire = await Wire.open(self.port)
            return await self._wire.request(method, target, body)
        r = await self._httpx.request(method, target, json=body)
        return r.status_code, r.json()

    async def turns(self, cid: str, turns: int, deltas: list[str] | None) -> None:
        target = f"/api/contexts/{cid}/events"
        if self.lean:
            wire = await Wire.open(self.port)
            try:
                status, pieces = await wire.stream(target, [("last-event-id", "0")])
                check(status == 200, f"events: {status}")
                await self._turns(cid, Stream(pieces), turns, deltas)
            finally:
                await wire.aclose()
            return
        async with self._httpx.stream("GET", target, headers={"Last-Event-ID": "0"}) as r:
            check(r.status_code == 200, f"events: {r.status_code}")
            await self._turns(cid, Stream(r.aiter_raw()), turns, deltas)

    async def _turns(self, cid: str, events: Stream, turns: int, deltas: list[str] | None) -> None:
        for i in range(1, turns + 1):
            status, body = await self.call(
                "POST", f"/api/contexts/{cid}/messages", {"content": f"turn {i}"}
            )
            check(status == 202, f"turn {i}: {status} {body}")
            done = await events.until_rest(deltas)
            if (done["state"], done["stop_reason"]) != ("Idle", "completed"):
                raise CheckFailed(f"turn {i}: {done}")
        check(events.missed == 0, f"the stream missed events {events.missed} times")

    async def history(self, cid: str) -> list[dict[str, Any]]:
        nodes: list[MessageNode] = []
        cursor: str | None = ""
        while cursor is not None:
            status, page = await self.call(
                "GET", f"/api/contexts/{cid}/messages?limit=500&cursor={cursor}"
            )
            check(status == 200, f"messages: {status} {page}")
            nodes += [records.from_python(MessageNode, n) for n in page["messages"]]
            cursor = page["next_cursor"]
        return to_chat_messages(n.message for n in nodes)


def over_http(lean: bool) -> dict[str, Any]:
    """Start the server process (not timed), measure as its client, stop it."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, SELF, "--serve", "0"], stdout=subprocess.DEVNULL, stderr=err
        )
        try:
            port = _listening_port(proc, err, READY_TIMEOUT)
            # the client's loop is uvloop, as the server's: lean, as a browser is
            result = anyio.run(_client, port, proc, lean, backend_options={"use_uvloop": True})
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            err.seek(0)
            printed = err.read().decode(errors="replace")
    check("Traceback" not in printed, f"the server printed a traceback:\n{printed}")
    return result


async def _client(port: int, proc: subprocess.Popen[bytes], lean: bool) -> dict[str, Any]:
    async with Client(port, lean) as client:
        deadline = time.monotonic() + READY_TIMEOUT
        while not await client.ready():
            check(proc.poll() is None, f"the server exited ({proc.returncode})")
            check(time.monotonic() < deadline, "the server did not get ready")
            await anyio.sleep(0.05)

        async def create(**body: Any) -> str:
            status, made = await client.call("POST", "/api/contexts", body)
            check(status == 201, f"create: {status} {made}")
            return str(made["id"])

        await client.turns(await create(), 1, None)  # warm-up, not timed
        cid = await create()
        rss0 = current_rss_mib()
        cpu0 = _cpu_seconds(proc.pid)
        tm = Timed.start()
        await client.turns(cid, W1_TURNS, None)
        wall = tm.stop()
        server_cpu = _cpu_seconds(proc.pid) - cpu0
        check(await client.history(cid) == expected_w1_history(W1_TURNS), "W1 history")

        scid = await create(model=STREAM_MODEL)
        deltas: list[str] = []
        t0 = time.perf_counter()
        await client.turns(scid, W2_TURNS, deltas)
        stream_wall = time.perf_counter() - t0
        check(len(deltas) == DELTAS, f"{len(deltas)} deltas, expected {DELTAS}")
        check("".join(deltas) == W2_TEXT * W2_TURNS, "the streamed deltas differ")
        check(await client.history(scid) == expected_w2_history(W2_TURNS), "W2 history")
    return _result(tm, wall, stream_wall, rss0, server_cpu=server_cpu)


def _result(
    tm: Timed, wall: float, stream_wall: float, rss0: float, server_cpu: float | None
) -> dict[str, Any]:
    extra: dict[str, Any] = {"deltas_per_s": DELTAS / stream_wall}
    if server_cpu is not None:
        # the server's CPU (every thread) and this process's (the client), per turn
        extra["server_cpu_us"] = server_cpu * 1e6 / W1_TURNS
        extra["client_cpu_us"] = tm.cpu * 1e6 / W1_TURNS
    return {
        "value": wall * 1e6 / W1_TURNS,
        "cpu_value": (tm.cpu + (server_cpu or 0.0)) * 1e6 / W1_TURNS,
        "unit": "us/turn",
        "wall_s": wall,
        "cpu_s": tm.cpu,
        "peak_rss_mib": peak_rss_mib(),
        "rss_start_mib": rss0,
        "extra": extra,
    }


def _server_instructions(turns: int) -> int:
    """The instructions the server process executes (valgrind's cachegrind)
    from its start to its exit, serving a warm-up turn and ``turns`` W1 turns
    from a lean client."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    with tempfile.TemporaryFile() as err:
        command = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            SELF,
            "--serve",
            "0",
        ]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            port = _listening_port(proc, err, 20 * READY_TIMEOUT)  # valgrind starts slowly
            anyio.run(_turns_only, port, proc, turns, backend_options={"use_uvloop": True})
        finally:
            proc.terminate()
            proc.wait(1200)
        err.seek(0)
        printed = err.read().decode(errors="replace")
    check("Traceback" not in printed, f"the server printed a traceback:\n{printed}")
    found = [ln for ln in printed.splitlines() if "I   refs:" in ln or "I refs:" in ln]
    check(bool(found), f"no instruction count from valgrind:\n{printed[-2000:]}")
    return int(found[-1].split(":")[1].replace(",", "").strip())


async def _turns_only(port: int, proc: subprocess.Popen[bytes], turns: int) -> None:
    async with Client(port, True) as client:
        deadline = time.monotonic() + 20 * READY_TIMEOUT  # valgrind starts slowly
        while not await client.ready():
            check(proc.poll() is None, f"the server exited ({proc.returncode})")
            check(time.monotonic() < deadline, "the server did not get ready")
            await anyio.sleep(0.2)
        for n in (1, turns):  # the warm-up turn on a context of its own, then the turns
            status, made = await client.call("POST", "/api/contexts", {})
            check(status == 201, f"create: {status} {made}")
            await client.turns(str(made["id"]), n, None)


def server_instructions(long: int = 220, short: int = 20) -> float:
    """The instructions the server executes per W1 turn: a session of ``long``
    turns minus one of ``short`` (start-up and shutdown cancel out), divided
    by the difference. Needs valgrind.

    The bytecode of turnfsm and of the harness is compiled first (as
    ``instructions.py`` does): else the first session, the long one, compiled
    what changed since the last run under valgrind, and the figure counted it
    (for a tree fresh from a checkout, several times the turn itself)."""
    import compileall

    import turnfsm

    for folder in (os.path.dirname(turnfsm.__file__), os.path.dirname(SELF)):
        compileall.compile_dir(folder, quiet=1)
    return (_server_instructions(long) - _server_instructions(short)) / (long - short)


def run(system: str) -> dict[str, Any]:
    """One measurement: ``system`` is ``inprocess``, ``http`` or ``httpx``."""
    if system == "inprocess":
        return anyio.run(inprocess)
    return over_http(lean=system == "http")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
    elif len(sys.argv) in (2, 4) and sys.argv[1] == "--instructions":
        counts = [int(a) for a in sys.argv[2:]] or [220, 20]
        print(f"server instructions per W1 turn: {server_instructions(*counts) / 1e6:.3f} M")
    else:
        sys.exit(
            "usage: http_side.py --serve PORT (the W7 server, 0: a free port; run.py starts it)\n"
            "       http_side.py --instructions [LONG SHORT] (the server's per turn, valgrind)"
        )
