"""The kill test: worker and server processes on one PostgreSQL, SIGKILLed and
paused at random while clients drive tool loops, then a check of everything
stored.

Processes (each started again at once after a kill):

- 3 workers: ``turnfsm worker`` (or, with ``planted``, ``python -m
  tests.scale.planted_worker``: the same worker whose commits skip the
  fencing check);
- 2 servers: ``turnfsm serve`` on 127.0.0.1, one with ``--turns workers``
  (posted messages run on the workers) and one with ``--turns here``.

All of them run the scripted model and tools of ``tests/scale/model.py``: a
turn is a streamed tool loop calling ``lookup`` (idempotent) and ``charge``
(not idempotent; each run appends a line to a side-effect file). Clients, each
on one server (the servers run without tokens), post messages, wait for their
contexts to rest, approve what waits for approval (a ``charge`` whose outcome
a crash left unknown) and retry what failed for good.

Faults, one every second or so: a SIGKILL of any process, or a pause of a
worker that holds leases (SIGSTOP until every one of its leases was claimed by
another worker, then SIGCONT): the paused worker wakes up holding stale
leases, which is what fencing tokens are for. The time between two faults is
drawn from a window proportional to the turn (:data:`WINDOW` turns), measured
first on this machine and store: :data:`PROBES` turns through the servers
before any fault, from the post to the context's rest (their median). A
killed process is started again after 0 to a quarter of the window's upper
end (0.4 seconds for a turn of half a second).

Progress: the turns that finished while the faults went on (a client's
message posted and its context back at rest before the faults ended) must
reach the floor, :data:`PROGRESS_FLOOR` per context; a run below it fails
whatever else it found, since faults that let no turn finish prove nothing.

The checker (:func:`check`) then requires, per context: every acknowledged
message stored once, in order, each answered once; one result per tool call;
``charge`` run at most once per message unless the call is marked
``outcome_unknown``, and at least once when it has a successful result; and
one owner per commit: along the step rows in commit order the recorded
fencing tokens never go down and each token has one owner, and no row was
committed under a token after a larger token of that context had been granted
(an observer reads the ``leases`` table every few milliseconds and notes when
each token was first seen, as does a pause while it waits for the paused
worker's leases to be claimed; a commit's ``at`` is taken before its transaction
starts, so a row whose ``at`` is later than that sighting was committed by a
writer whose fence should have refused it).

By hand::

    python tests/scale/kill.py [--seconds 30] [--planted] [--seed N]

starts a throwaway PostgreSQL (``tests/storage/pg.py``) unless ``--url`` names one.
A failed run keeps its folder (the processes' logs and effects) and says where.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from fleet import Proc, all_started, keep_or_remove, to_servers  # noqa: E402
from storage.pg import Cluster, find_bin_dir  # noqa: E402

from turnfsm.model import Role  # noqa: E402
from turnfsm.storage import StepLog  # noqa: E402
from turnfsm.storage._postgres import PostgresStore, upgrade  # noqa: E402

LEASE_TTL = 2.0
THINK = 0.15
RESTING = ("Idle", "AwaitingToolApproval", "PermanentFailure")
MODEL = ["--llm", "tests.scale.model:make_llm", "--tools", "tests.scale.model:TOOLS"]


START_LINE = ("turnfsm worker: ", ", concurrency ")
"""How a worker's start line begins, and a part of it (written once it handles SIGTERM)."""


@dataclass
class Report:
    """What a run did and what the checker found."""

    problems: list[str] = field(default_factory=list)
    contexts: int = 0
    acked: int = 0
    kills: int = 0
    pauses: int = 0
    stale_wakeups: int = 0
    """Pauses after which another worker had claimed every lease of the paused one."""
    turn_seconds: float = 0.0
    """The measured turn (see the module docstring) the fault window is scaled to."""
    turns_under_faults: int = 0
    """Turns that finished (posted, then at rest) while the faults went on."""
    too_many: int = 0
    """Messages refused with ``429 too_many_turns`` and sent again (nothing stored)."""
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds from the start to: the servers ready, the end of the faults, rest."""


@dataclass
class Client:
    """One client: its server, its contexts and the messages acknowledged on each."""

    server: Proc
    contexts: list[str] = field(default_factory=list)
    acked: dict[str, list[str]] = field(default_factory=dict)


class Run:
    def __init__(
        self,
        url: str,
        folder: Path,
        *,
        seconds: float,
        planted: bool,
        seed: int,
        clients: int,
        contexts_per_client: int,
        min_stale: int,
        window: tuple[float, float],
    ) -> None:
        self.url = url
        self.min_stale = min_stale
        self.window = window
        self.folder = folder
        self.seconds = seconds
        self.planted = planted
        self.rng = random.Random(seed)
        self.effects = folder / "effects.txt"
        self.env = {
            **os.environ,
            "TURNFSM_SCALE_EFFECTS": str(self.effects),
            "TURNFSM_SCALE_THINK": str(THINK),
            "PYTHONPATH": str(ROOT),
        }
        self.report = Report()
        worker = (
            [sys.executable, "-m", "tests.scale.planted_worker"]
            if planted
            else [sys.executable, "-m", "turnfsm", "worker"]
        )
        common = [*MODEL, "--store", url, "--lease-ttl", str(LEASE_TTL)]
        self.workers = [
            Proc(f"worker{i}", [*worker, *common, "--concurrency", "8", "--poll", "0.2"], "worker")
            for i in range(3)
        ]
        self.servers = []
        for i, turns in enumerate(("workers", "here")):
            argv = [sys.executable, "-m", "turnfsm", "serve", *common, "--port", "0"]
            argv += ["--turns", turns]
            self.servers.append(Proc(f"server{i}-{turns}", argv, "server"))
        self.hooks = to_servers(self.servers)  # http://NAME/ is where server NAME listens
        self.procs = [*self.workers, *self.servers]
        self.clients = [Client(self.servers[i % 2]) for i in range(clients)]
        self.contexts_per_client = contexts_per_client
        self.seen: dict[tuple[str, int], float] = {}
        """(context, token) -> when the observer first saw that token granted."""
        self.states: dict[str, str] = {}
        self.states_at = 0.0
        """When the snapshot in ``states`` was taken (its query started)."""
        self.looks: list[asyncio.Task[None]] = []
        self.caught = 0
        """With ``planted``: contexts on which a look after a stale wake-up found
        a commit the fence should have refused."""
        self.chaos_over = asyncio.Event()
        self.stop = asyncio.Event()
        self.store = PostgresStore(url, max_size=4)

    # ------------------------------------------------------------------ processes

    async def wait_ready(self, proc: Proc, deadline: float = 60.0) -> None:
        if proc.kind != "server":
            return
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
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, signal.SIGKILL)
        proc.popen.wait()
        proc.kills += 1
        self.report.kills += 1

    async def pause(self, proc: Proc) -> None:
        """SIGSTOP a worker holding leases until every one of them was claimed by
        another worker (or a few ttls went by), then SIGCONT it."""
        held = await self._leases_of(proc.pid)
        if not held:
            return
        os.kill(proc.pid, signal.SIGSTOP)
        proc.pauses += 1
        self.report.pauses += 1
        end = time.monotonic() + 3 * LEASE_TTL + 2
        stale = False
        try:
            while time.monotonic() < end:
                await asyncio.sleep(0.05)
                now = await self._tokens(list(held))
                seen_at = time.time()
                for cid, token in now.items():
                    # a sighting of its own: the observer shares this event loop
                    # with the clients and may look only after the paused worker
                    # woke and committed (a stale commit it would then miss)
                    self.seen.setdefault((cid, token), seen_at)
                if all(now.get(cid, 0) > token for cid, token in held.items()):
                    self.report.stale_wakeups += 1
                    stale = True
                    break
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
        if stale and self.planted:
            self.looks.append(asyncio.create_task(self._look_for_stale_commits(list(held))))

    async def _look_for_stale_commits(self, cids: list[str]) -> None:
        """With ``planted``: after a stale wake-up, give the woken worker a
        moment to commit, then run the fencing check on what it held (the run
        goes on until this found something, within its bound)."""
        await asyncio.sleep(LEASE_TTL / 2)
        for cid in cids:
            if check_fencing(cid, await self.store.steps(cid), self.seen):
                self.caught += 1

    async def _leases_of(self, pid: int) -> dict[str, int]:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT context_id, token FROM leases WHERE owner LIKE %s AND expires_at > %s",
                (f"%:{pid}:%", time.time()),
            )
            return {cid: token for cid, token in await cur.fetchall()}

    async def _tokens(self, cids: list[str]) -> dict[str, int]:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT context_id, token FROM leases WHERE context_id = ANY(%s)", (cids,)
            )
            return {cid: token for cid, token in await cur.fetchall()}

    async def chaos(self) -> None:
        """Faults for ``seconds``, and on (30 seconds at most) until at least
        ``min_stale`` pauses woke a worker holding stale leases (with
        ``planted``: and one of them was seen to commit under its stale lease)
        and at least ``MIN_KILLS`` processes were killed."""
        end = time.monotonic() + self.seconds

        def short() -> tuple[bool, bool]:  # (stale wake-ups, kills) still wanted
            r = self.report
            stale = r.stale_wakeups < self.min_stale or (self.planted and not self.caught)
            return stale, r.kills < MIN_KILLS

        low, high = (f * self.report.turn_seconds for f in self.window)
        while time.monotonic() < end or (any(short()) and time.monotonic() < end + 30):
            await asyncio.sleep(self.rng.uniform(low, high))
            if time.monotonic() < end:  # min_stale 0: kills only
                pause = self.min_stale > 0 and self.rng.random() < 0.4
            else:  # past the time: only what is still wanted
                more_stale, more_kills = short()
                pause = more_stale and not (more_kills and self.rng.random() < 0.5)
            if pause:
                holding = [w for w in self.workers if await self._leases_of(w.pid)]
                if holding:
                    await self.pause(self.rng.choice(holding))
                    continue
            proc = self.rng.choice(self.procs)
            self.kill(proc)
            await asyncio.sleep(self.rng.uniform(0.0, high / 4))
            proc.start(self.env, self.folder)
        await asyncio.gather(*self.looks)
        self.chaos_over.set()
        self.report.phases["faults_over"] = time.monotonic() - self.t0

    # ------------------------------------------------------------------ observers

    async def observe(self) -> None:
        """Note when each (context, token) is first seen in ``leases``, and keep a
        snapshot of every context's state."""
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                started = time.time()
                cur = await conn.execute("SELECT context_id, token FROM leases")
                rows = await cur.fetchall()
                seen_at = time.time()
                for cid, token in rows:
                    self.seen.setdefault((cid, token), seen_at)
                cur = await conn.execute("SELECT id, state FROM contexts")
                self.states = dict(await cur.fetchall())
                self.states_at = started
                await asyncio.sleep(0.01)

    # ------------------------------------------------------------------ clients

    async def client(self, me: Client, k: int) -> None:
        base = f"http://{me.server.name}"
        async with httpx.AsyncClient(base_url=base, timeout=60, event_hooks=self.hooks) as http:
            for _ in range(self.contexts_per_client):
                r = await self._request(http, "POST", "/api/contexts", json={})
                cid = r.json()["id"]
                me.contexts.append(cid)
                me.acked[cid] = []
            await asyncio.gather(*(self._drive(http, me, cid, k) for cid in me.contexts))

    async def _drive(self, http: httpx.AsyncClient, me: Client, cid: str, k: int) -> None:
        n = 0
        while not self.chaos_over.is_set() or n < 3:
            await self._until_rest(http, cid, time.time())
            ref = f"m{k}x{me.contexts.index(cid)}x{n}"
            await self._post_message(http, cid, ref)
            me.acked[cid].append(ref)
            n += 1
            await self._until_rest(http, cid, time.time())
            if not self.chaos_over.is_set():
                self.report.turns_under_faults += 1

    async def measure_turn(self) -> float:
        """Seconds a turn takes here before any fault: the median of
        :data:`PROBES` turns, each on a context of its own, through each
        server in turn (posted, then at rest)."""
        took = []
        for n in range(PROBES):
            server = self.servers[n % len(self.servers)]
            async with httpx.AsyncClient(
                base_url=f"http://{server.name}", timeout=60, event_hooks=self.hooks
            ) as http:
                r = await self._request(http, "POST", "/api/contexts", json={})
                cid = r.json()["id"]
                began = time.time()
                await self._post_message(http, cid, f"probe{n}")
                await self._until_rest(http, cid, began)
                took.append(time.time() - began)
        return statistics.median(took)

    async def _request(self, http: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
        """Send until the server answers (it may be down, being restarted)."""
        while True:
            try:
                r = await http.request(method, path, **kw)
            except httpx.TransportError:
                await asyncio.sleep(0.2)
                continue
            if r.status_code >= 500:
                await asyncio.sleep(0.2)
                continue
            return r

    async def _post_message(self, http: httpx.AsyncClient, cid: str, ref: str) -> None:
        """Post until acknowledged; after a lost answer, look in the store first
        (a server that died cannot commit later)."""
        while True:
            try:
                r = await http.post(f"/api/contexts/{cid}/messages", json={"content": ref})
            except httpx.TransportError:
                r = None
            if r is not None and r.status_code in (200, 202):
                return
            if r is not None and r.status_code == 409:
                await self._until_rest(http, cid, time.time())
                continue
            if r is not None and r.status_code == 429:
                # the tenant's turns on every server of the database are at the
                # limit (a paused server keeps its slots): nothing was stored
                self.report.too_many += 1
                await asyncio.sleep(min(float(r.headers.get("Retry-After", "1")), 1.0))
                continue
            if r is not None and r.status_code < 500:
                raise RuntimeError(f"{cid}: message refused: {r.status_code} {r.text}")
            await asyncio.sleep(0.3)
            ctx = await self.store.load(cid)
            if any(self._user_text(n) == ref for n in ctx.message_pool.values()):
                return

    @staticmethod
    def _user_text(node: Any) -> str | None:
        m = node.message
        if m.role is not Role.USER:
            return None
        return "".join(getattr(p, "text", "") for p in m.content)

    async def _until_rest(self, http: httpx.AsyncClient, cid: str, after: float) -> None:
        """Wait for a snapshot taken after ``after`` that shows the context at
        Idle; approve what waits for approval, retry what failed."""
        while True:
            await asyncio.sleep(0.05)
            if self.states_at <= after:
                continue
            state = self.states.get(cid)
            if state == "Idle":
                return
            if state == "AwaitingToolApproval":
                ctx = await self.store.load(cid)
                ids = [c.id for c in ctx.pending_tool_calls()]
                if ids:
                    await self._request(
                        http, "POST", f"/api/contexts/{cid}/tools/approve", json={"approve": ids}
                    )
                after = time.time()
            elif state == "PermanentFailure":
                await self._request(http, "POST", f"/api/contexts/{cid}/retry")
                after = time.time()

    # ------------------------------------------------------------------ the run

    async def main(self) -> Report:
        t0 = self.t0 = time.monotonic()
        await upgrade(self.url)
        self.effects.touch()
        for proc in self.procs:
            proc.start(self.env, self.folder)
        observer = asyncio.create_task(self.observe())
        try:
            await asyncio.gather(*(self.wait_ready(p) for p in self.servers))
            self.report.phases["ready"] = time.monotonic() - t0
            self.report.turn_seconds = await self.measure_turn()
            self.report.phases["measured"] = time.monotonic() - t0
            chaos = asyncio.create_task(self.chaos())
            try:
                await asyncio.wait_for(
                    asyncio.gather(*(self.client(c, k) for k, c in enumerate(self.clients))),
                    timeout=self.seconds + 60,
                )
                self.report.phases["rest"] = time.monotonic() - t0
            finally:
                chaos.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await chaos
                for proc in self.workers:  # a paused worker goes on
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGCONT)
        finally:
            self.stop.set()
            await observer
            await all_started(
                self.procs,
                self.env,
                self.folder,
                ready=self.wait_ready,
                start_line=START_LINE,
                deadline=60.0,
            )
            for proc in self.procs:
                assert proc.popen is not None
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGTERM)
            for proc in self.procs:
                assert proc.popen is not None
                try:
                    self.report.exit_codes[proc.name] = proc.popen.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.popen.kill()
                    self.report.exit_codes[proc.name] = None
        await self.check()
        await self.store.aclose()
        self.report.seconds = time.monotonic() - t0
        return self.report

    async def check(self) -> None:
        lines = self.effects.read_text().splitlines()
        runs = Counter(line.split()[0] for line in lines)
        acked = {cid: refs for c in self.clients for cid, refs in c.acked.items()}
        self.report.contexts = len(acked)
        self.report.acked = sum(len(v) for v in acked.values())
        problems = self.report.problems
        for name, code in self.report.exit_codes.items():
            if name.startswith("worker") and code != 0:
                problems.append(f"{name} exited with {code} on SIGTERM (expected 0)")
        floor = PROGRESS_FLOOR * len(acked)
        if self.report.turns_under_faults < floor:
            low, high = self.window
            problems.append(
                f"no progress: {self.report.turns_under_faults} turns finished while the "
                f"faults went on, below the progress floor of {floor} ({PROGRESS_FLOOR} per "
                f"context): faults every {low:g}-{high:g} turns of "
                f"{self.report.turn_seconds:.2f}s left the workers no time to finish turns"
            )
        for cid, refs in acked.items():
            ctx = await self.store.load(cid)
            steps = await self.store.steps(cid)
            problems += check_context(cid, ctx, steps, refs, runs)
            problems += check_fencing(cid, steps, self.seen)


ABANDONED_FROM = ("AwaitingToolApproval", "PermanentFailure")
"""The resting states a user message leaves a turn unfinished from (the declared
table: pending calls closed as superseded, a failed turn left as it is)."""


def abandoned(steps: list[StepLog]) -> list[str | None]:
    """For each user message, in order: the state the next one came in, when
    that abandoned its turn (see :data:`ABANDONED_FROM`), else None."""
    came = [s.from_state for s in steps if s.trigger == "user_message" and s.detail is None]
    return [after if after in ABANDONED_FROM else None for after in [*came[1:], None]]


def check_context(
    cid: str,
    ctx: Any,
    steps: list[StepLog],
    refs: list[str],
    runs: Counter[str],
    unknown: frozenset[str] = frozenset(),
) -> list[str]:
    """Everything acknowledged stored once and answered once; one result per
    call; ``charge`` run once per message unless its outcome was unknown.

    ``unknown``: messages whose sender never learnt that they were stored (no
    answer, or a 5xx; on Temporal such a call may still run later): one of
    them may be stored after the sender saw the context at rest and sent the
    next, which then came while its turn waited for approval or had failed,
    and left it unanswered, as the declared table does. That, and only that
    (read from the step log), excuses a missing answer."""
    out: list[str] = []
    if ctx.current_state != "Idle":
        out.append(f"{cid}: ends in {ctx.current_state}, not Idle")
    history = [n.message for n in ctx.history()]
    users = [
        "".join(getattr(p, "text", "") for p in m.content) for m in history if m.role is Role.USER
    ]
    if users != refs:
        out.append(f"{cid}: user messages {users} but acknowledged {refs}")
    answers = Counter(
        "".join(getattr(p, "text", "") for p in m.content)
        for m in history
        if m.role is Role.ASSISTANT and not m.tool_calls
    )
    left = abandoned(steps)
    for i, ref in enumerate(refs):
        n = answers[f"done {ref}."]
        if n == 0 and ref in unknown and i < len(left) and left[i] is not None:
            continue  # its turn was left by the next message (see the docstring)
        if n != 1:
            after = f" (the next message came in {left[i]})" if i < len(left) and left[i] else ""
            out.append(f"{cid}: message {ref} answered {n} times{after}")
    calls = {c.id: c for m in history for c in (m.tool_calls or [])}
    results = Counter(m.tool_result.request_id for m in history if m.tool_result is not None)
    for call_id, call in calls.items():
        if results[call_id] != 1:
            out.append(f"{cid}: call {call_id} has {results[call_id]} results")
        if call.tool_name != "charge":
            continue
        ref = str(call.arguments.get("ref"))
        ok = any(
            m.tool_result is not None
            and m.tool_result.request_id == call_id
            and m.tool_result.success
            for m in history
        )
        if runs[ref] > 1 and not call.outcome_unknown:
            out.append(f"{cid}: charge({ref}) ran {runs[ref]} times without outcome_unknown")
        if ok and runs[ref] < 1:
            out.append(f"{cid}: charge({ref}) has a result but never ran")
    for extra in set(results) - set(calls):
        out.append(f"{cid}: a result for {extra}, which is no call")
    return out


def check_fencing(cid: str, steps: list[StepLog], seen: dict[tuple[str, int], float]) -> list[str]:
    """One owner per commit (see the module docstring)."""
    out: list[str] = []
    last = 0
    owners: dict[int, str] = {}
    granted = sorted((token, at) for (c, token), at in seen.items() if c == cid)
    for s in steps:
        token, owner = s.lease_token, s.lease_owner
        where = f"{cid} v{s.version} {s.trigger}"
        if token is None or owner is None:
            out.append(f"{where}: committed without a lease")
            continue
        if token < last:
            out.append(f"fencing: {where}: token {token} after {last}")
        last = max(last, token)
        if owners.setdefault(token, owner) != owner:
            out.append(f"fencing: {where}: token {token} of {owner} and of {owners[token]}")
        at = s.at.timestamp()
        for later, sighted in granted:
            if later > token and sighted < at:
                out.append(
                    f"fencing: {where}: committed under token {token} by {owner} "
                    f"{at - sighted:.3f}s after token {later} was granted"
                )
                break
    return out


MIN_KILLS = 3
"""SIGKILLs a run makes at the least (it goes on past ``seconds`` for them)."""
WINDOW = (1.2, 3.2)
"""Seconds between two faults, in measured turns: 0.6 to 1.6 seconds for a
turn of half a second (2 model calls of :data:`THINK` seconds, the commits)."""
PROBES = 4
"""Turns measured before the faults start."""
PROGRESS_FLOOR = 1
"""Turns per context that must finish while the faults go on, at the least."""


def run(
    url: str,
    *,
    seconds: float = 30.0,
    planted: bool = False,
    seed: int | None = None,
    clients: int = 6,
    contexts_per_client: int = 2,
    logs: str | None = None,
    min_stale: int = 2,
    window: tuple[float, float] = WINDOW,
) -> Report:
    seed = random.randrange(1 << 30) if seed is None else seed
    folder = Path(logs or tempfile.mkdtemp(prefix="turnfsm-kill-"))
    folder.mkdir(parents=True, exist_ok=True)
    r = Run(
        url,
        folder,
        seconds=seconds,
        planted=planted,
        seed=seed,
        clients=clients,
        contexts_per_client=contexts_per_client,
        min_stale=min_stale,
        window=window,
    )
    failed = True
    try:
        report = asyncio.run(r.main())
        failed = bool(report.problems) != planted  # a planted bug must be found
        return report
    finally:
        keep_or_remove(folder, failed=failed, remove=not logs, procs=r.procs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a PostgreSQL database (default: a throwaway cluster)")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--planted", action="store_true", help="workers without the fencing check")
    p.add_argument("--seed", type=int)
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
            url, seconds=args.seconds, planted=args.planted, seed=args.seed, logs=args.logs
        )
    finally:
        if cluster is not None:
            cluster.stop()
    for problem in report.problems[:50]:
        print(problem)
    print(
        f"{report.contexts} contexts, {report.acked} acknowledged messages, "
        f"{report.turns_under_faults} turns finished under faults (a turn "
        f"{report.turn_seconds:.2f}s), "
        f"{report.kills} kills, {report.pauses} pauses ({report.stale_wakeups} woke stale), "
        f"{report.too_many} sent again after 429, "
        f"{len(report.problems)} problems, {report.seconds:.1f}s "
        f"({', '.join(f'{k} {v:.1f}s' for k, v in report.phases.items())})"
    )
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
