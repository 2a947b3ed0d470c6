"""The hub: the app's engine, tenants, event channels and running calls.

The routes reach it as ``request.app.state.hub`` (``_deps.py``); the lifespan
of the app (``_app.py``) runs :meth:`Hub.lifespan`.
"""

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import structlog

from .. import events as event_types  # EVENT_ADAPTER is built on first use
from ..engine import Engine, Subscription, Turn
from ..engine._accepted import ON_ACCEPTED
from ..errors import ContextBusy, ContextNotFound, TemporalUnavailable, TurnFSMError
from ..events import Event, StateChanged
from ..relay import EventRelay
from ..storage import ContextOutline, ContextOutlines, outline_of
from ..storage._eventlog import LogNote, open_event_log
from ._channels import Channel, Listener
from ._config import ServerConfig
from ._errors import ApiError
from ._flags import Flag, running_loop
from ._limits import TurnLimit
from ._slots import SharedSlots, shared_slots_for
from ._tenants import DEFAULT_TENANT, TenantTable

__all__ = ["IDLE_CHANNELS", "KNOWN_OWNERS", "Hub", "Job", "next_batch"]

log = structlog.get_logger("turnfsm.server")

IDLE_CHANNELS = 64
"""Channels kept (with their recent events) once no stream and no call uses them."""
KNOWN_OWNERS = 4096
"""Contexts whose tenant the hub remembers for the tenant-wide streams."""


_FIRST_STEPS = frozenset({"StateChanged", "ToolResult", "ContextChanged"})
"""The events that show a launched call has taken its first step."""


class Job:
    """One engine call run in a task the app owns (it outlives the request)."""

    def __init__(self, context_id: str) -> None:
        self.context_id = context_id
        # Flags, not anyio.Events: two are made every turn (``_flags.py``)
        self.done = Flag()
        self.turn: Turn | None = None
        self.error: Exception | None = None
        self.started = Flag()
        """Set at the call's first step (or when it returned or failed)."""
        self.state: str | None = None
        """The state the call had reached when :meth:`Hub.launch` returned
        (None: it had taken no step yet)."""

    async def run(
        self,
        fn: Callable[[], Awaitable[Turn]],
        hub: "Hub",
        tenant: str | None = None,
        channel: Channel | None = None,
        slot: int | None = None,
    ) -> None:
        # a call refused because another runs must not hide that one
        mine = hub.running.setdefault(self.context_id, self) is self
        # a call another host runs (Temporal) is started once that host accepted it
        ON_ACCEPTED.set(self.started.set)
        try:
            self.turn = await fn()
        except Exception as exc:
            self.error = exc
            log.info("call_failed", context_id=self.context_id, error=str(exc))
        finally:
            if slot is not None and tenant is not None and hub.slots is not None:
                # given back while the call still shows as running: a client
                # that sees it done may start the next turn at once, on any server
                await hub.slots.release(tenant, slot)
            if mine and hub.running.get(self.context_id) is self:
                del hub.running[self.context_id]
            if tenant is not None:
                hub.turn_limit.release(tenant)
            if channel is not None:
                hub.release(channel)
            self.started.set()
            self.done.set()


async def next_batch(sub: Subscription, job: Job, wait: float = 0.1) -> tuple[list[Event], bool]:
    """The events of ``job``'s turn that ``sub`` holds now, else the next one
    within ``wait`` seconds: ``(batch, idle)``, ``idle`` true when the time
    passed with none (a stream may send a keep-alive then). A stream that reads
    its turn's events loops on it until the job is done and a batch is empty.
    When the engine closes, it waits for the job to end."""
    batch: list[Event] = sub.drain()
    if batch or job.done.is_set():
        return batch, False
    with anyio.move_on_after(wait) as waited:
        try:
            batch = [await sub.__anext__()]
        except StopAsyncIteration:  # the engine closed: the turn ends too
            await job.done.wait()
    return batch, waited.cancelled_caught


class Hub:
    """The app's engine, tenant table, event channels and running calls (set
    up by the lifespan).

    Per context, a :class:`~turnfsm.server._channels.Channel` puts the events
    of this process's engine and those other processes relayed (the event
    log and its doorbell) in one order, deduplicated by seq, for the streams
    on it. A channel exists while a stream or a running call of this server
    needs it; then it stays among the :data:`IDLE_CHANNELS` most recently
    used (a reconnect just after a turn gets its deltas from the ring), and
    goes: memory does not grow with the contexts ever touched.
    """

    def __init__(self, factory: Callable[[], Engine], config: ServerConfig) -> None:
        self.factory = factory
        self.config = config
        self._engine: Engine | None = None
        self._tenants: TenantTable | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._calls: set[asyncio.Task[None]] = set()
        """The tasks of launched calls, under asyncio (:meth:`_run`)."""
        self.running: dict[str, Job] = {}
        self.starting: dict[str, list[Job]] = {}
        """Per context, the launched calls waiting for their first step."""
        self.turn_limit = TurnLimit(config.max_turns_per_tenant)
        self.slots: SharedSlots | None = None
        """The limit across the servers of one PostgreSQL database (``_slots.py``)."""
        self.ready = False
        self.closing = anyio.Event()
        self.channels: dict[str, Channel] = {}
        """The channels a stream or a running call uses."""
        self.idle: OrderedDict[str, Channel] = OrderedDict()
        """Channels nobody uses, least recently used first (at most IDLE_CHANNELS)."""
        self.owners: OrderedDict[str, str] = OrderedDict()
        """The tenant of recently seen contexts (at most KNOWN_OWNERS), for the
        tenant-wide streams of events from contexts without a channel."""
        self.listeners: dict[str, set[Listener]] = {}
        """Per tenant, the tenant-wide streams (``/api/events``)."""
        self._unknown: dict[str, list[LogNote]] = {}
        """Contexts whose tenant is being read, with the notes that came meanwhile."""

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise ApiError(503, "not_ready", "the server is starting or stopping")
        return self._engine

    @property
    def tenants(self) -> TenantTable:
        assert self._tenants is not None
        return self._tenants

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        engine = self.factory()
        event_log = open_event_log(engine.store)
        await event_log.open()
        self._tenants = TenantTable(event_log)
        self.slots = shared_slots_for(engine.store, self.config.max_turns_per_tenant)
        try:
            async with (
                engine,
                EventRelay(engine, event_log),
                anyio.create_task_group() as tg,
            ):
                self._engine, self._tg = engine, tg
                local = engine.tap(self._on_local)
                tg.start_soon(event_log.listen, self._on_note, self._on_listening)
                if self.slots is not None:
                    tg.start_soon(self.slots.run)
                if self.config.recover_on_start and self.config.turns == "here":
                    recovery = await engine.recover()
                    log.info(
                        "recovered",
                        resumed=sorted(recovery.resumed),
                        skipped=sorted(recovery.skipped),
                        failed=sorted(recovery.failed),
                    )
                tg.start_soon(self._cancel_on_closing)
                self.ready = True
                try:
                    yield
                finally:
                    self.ready = False
                    self.closing.set()
                    self._wake_streams()
                    try:
                        await self._stop_running()
                    finally:  # cancelled or not: no call outlives the engine
                        await self._end_calls()
                    tg.cancel_scope.cancel()
                    local.close()
        finally:
            self._engine = None
            if self.slots is not None:
                await self.slots.aclose()
            await event_log.aclose()

    def _wake_streams(self) -> None:
        """Wake every waiting event stream: the server stops (``closing``),
        and each then sends its last event and ends."""
        for ch in list(self.channels.values()):
            for listener in list(ch.listeners):
                listener.nudge()
        for streams in list(self.listeners.values()):
            for listener in list(streams):
                listener.nudge()

    async def _end_calls(self) -> None:
        """Cancel the tasks of the calls still running (past the shutdown
        grace) and wait for them, as the app's task group does its own."""
        calls = list(self._calls)
        for task in calls:
            task.cancel()
        if calls:
            with anyio.CancelScope(shield=True):
                await asyncio.wait(calls)

    def _run(
        self,
        job: Job,
        fn: Callable[[], Awaitable[Turn]],
        tenant: str | None,
        channel: Channel,
        slot: int | None,
    ) -> None:
        """Run ``job`` in a task of its own. Under asyncio a plain task, kept
        in :attr:`_calls` until it ends: the app's anyio task group makes two
        cancel scopes, a handle and a look-up of the running library for each
        task it starts, and a task starts every turn. Under another async
        library (trio), in the app's task group."""
        loop = running_loop()
        if loop is None:
            assert self._tg is not None
            self._tg.start_soon(job.run, fn, self, tenant, channel, slot)
            return
        task = loop.create_task(job.run(fn, self, tenant, channel, slot))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _cancel_on_closing(self) -> None:
        await self.closing.wait()
        self.ready = False
        self._wake_streams()
        await self._stop_running()

    async def _stop_running(self) -> None:
        """Cancel the running calls cleanly (each ends at Idle, its text kept).
        Not with ``turns="temporal"``: the turns run on Temporal, not here,
        and go on after this server stops (a call here only waits for one)."""
        if self.config.turns == "temporal":
            return
        with anyio.move_on_after(self.config.shutdown_grace):
            for cid, job in list(self.running.items()):
                try:
                    await self.engine.cancel(cid)
                except TurnFSMError as exc:
                    log.info("cancel_on_shutdown_failed", context_id=cid, error=str(exc))
                await job.done.wait()

    # ------------------------------------------------------------------ tenants

    async def outline(self, context_id: str) -> ContextOutline:
        """The context without its messages, read from the store (not the
        engine's loaded copy, which turns of another process may have left
        behind): on a store that reads it alone (SQLite, PostgreSQL, files), at
        a cost that does not grow with the conversation."""
        store = self.engine.store
        if isinstance(store, ContextOutlines):
            return await store.outline(context_id)
        return outline_of(await store.load(context_id))

    async def owner(self, context_id: str) -> str | None:
        """The tenant of a stored context (a child: its parent's); ContextNotFound.

        A context's tenant is set once, when it is made, so the tenant of a
        context this hub has seen (:attr:`owners`) is not read again: a
        request on it reads no table (with a SQLite store, each read is a
        hand-off to the log's reader thread, one at a time for all requests;
        with PostgreSQL, a round trip). A context deleted by another process
        is then found missing by the call itself (``404`` all the same)."""
        known = self.owners.get(context_id)
        if known is not None:
            return known
        cid: str | None = context_id
        for _ in range(100):
            assert cid is not None
            tenant = await self.tenants.get(cid)
            if tenant is not None:
                return tenant
            ctx = (await self.outline(cid)).context
            if ctx.parent_id is None:
                return DEFAULT_TENANT if not self.config.tokens else None
            cid = ctx.parent_id
        return None

    async def check(self, context_id: str, tenant: str) -> None:
        """ContextNotFound unless ``tenant`` owns the context (never a 403)."""
        if await self.owner(context_id) != tenant:
            raise ContextNotFound(context_id)
        self.tap(context_id, tenant)

    async def adopt(self, context_id: str, tenant: str) -> None:
        """A context just made becomes ``tenant``'s (stored, and remembered)."""
        await self.tenants.set(context_id, tenant)
        self.tap(context_id, tenant)

    def tap(self, context_id: str, tenant: str) -> None:
        """Remember the context's tenant (its events then reach the tenant's
        streams even when no channel is open on it)."""
        self.owners[context_id] = tenant
        self.owners.move_to_end(context_id)
        while len(self.owners) > KNOWN_OWNERS:
            self.owners.popitem(last=False)

    # ------------------------------------------------------------------ channels

    def hold(self, context_id: str) -> Channel:
        """The context's channel, used until :meth:`release`."""
        ch = self.channels.get(context_id)
        if ch is None:
            ch = self.idle.pop(context_id, None) or Channel(context_id, self.listeners)
            self.channels[context_id] = ch
        ch.tenant = self.owners.get(context_id, ch.tenant)
        ch.users += 1
        return ch

    def release(self, ch: Channel) -> None:
        ch.users -= 1
        if ch.users > 0 or self.channels.get(ch.context_id) is not ch:
            return
        del self.channels[ch.context_id]
        self.idle[ch.context_id] = ch
        while len(self.idle) > IDLE_CHANNELS:
            self.idle.popitem(last=False)

    def channel(self, context_id: str) -> Channel | None:
        return self.channels.get(context_id) or self.idle.get(context_id)

    def offer(self, context_id: str, item: Event | int) -> None:
        """An event (or a doorbell: a seq to read from the log) of a context,
        from this process's engine or another's."""
        ch = self.channel(context_id)
        if ch is not None:
            if ch.take(item) and self._tg is not None:
                self._tg.start_soon(ch.fill, self.tenants)
            return
        if not isinstance(item, int) and self.listeners:
            tenant = self.owners.get(context_id)
            for stream in list(self.listeners.get(tenant or "", ())):
                stream.put(item)

    def _on_local(self, ev: Event) -> bool:
        """An event of this process's engine as it goes out (the engine's tap:
        no queue, no task), to the channels and the tenant streams. True when
        it started a launched call: the engine then lets the request answer
        (its ``202``) before it goes on with the turn."""
        ch = self.channels.get(ev.context_id)
        # next in line on a channel in use: what offer() ends in
        if ch is None or not ch.send_next(ev):
            self.offer(ev.context_id, ev)
        if self.starting and ev.kind in _FIRST_STEPS:
            waiting = False
            for job in self.starting.get(ev.context_id, ()):
                if isinstance(ev, StateChanged):
                    job.state = ev.to_state
                if not job.started.is_set():
                    job.started.set()
                    waiting = True
            return waiting
        return False

    def _on_note(self, note: LogNote) -> None:
        """A doorbell from the event log (another process, or this one's echo)."""
        ch = self.channel(note.context_id) or self._for_tenant_streams(note)
        if ch is None:
            return  # nobody here streams it
        if ch.next is None and note.first is not None and not ch.filling:
            ch.next = note.first  # a new channel: from the first event rung with it
        if note.event is None:
            self.offer(note.context_id, note.seq)
            return
        try:
            if isinstance(note.event, str):
                ev = event_types.EVENT_ADAPTER.validate_json(note.event)
            else:
                ev = event_types.EVENT_ADAPTER.validate_python(note.event)
        except ValueError:
            self.offer(note.context_id, note.seq)
        else:
            self.offer(note.context_id, ev)

    def _for_tenant_streams(self, note: LogNote) -> Channel | None:
        """A channel for a context no stream here holds, when its tenant has
        streams here (``/api/events``): an idle one, so that its events from
        other processes (a worker's, another server's) reach them in order,
        durable ones read from the log. A context this server has not seen has
        its tenant read first, its notes kept meanwhile (:meth:`_owner_of`)."""
        if not self.listeners:
            return None
        cid = note.context_id
        waiting = self._unknown.get(cid)
        if waiting is not None:  # its tenant is being read: in order, after it
            waiting.append(note)
            return None
        tenant = self.owners.get(cid)
        if tenant is None:
            if self._tg is not None and len(self._unknown) < KNOWN_OWNERS:
                self._unknown[cid] = [note]
                self._tg.start_soon(self._owner_of, cid)
            return None
        if tenant not in self.listeners:
            return None
        ch = self.hold(cid)
        self.release(ch)  # idle: kept for the next notes (at most IDLE_CHANNELS)
        return ch

    async def _owner_of(self, context_id: str) -> None:
        """Read the tenant of a context whose notes came before anything here
        said it, then take its notes kept meanwhile."""
        try:
            tenant = await self.owner(context_id)
        except Exception:  # deleted meanwhile, or the table cannot say: dropped
            tenant = None
        notes = self._unknown.pop(context_id, [])
        if tenant is None:
            return
        self.tap(context_id, tenant)
        for note in notes:
            self._on_note(note)

    async def _on_listening(self) -> None:
        """Listening (again): notes rung meanwhile are lost, so each channel
        reads the log up to its newest kept event."""
        ids = [*self.channels, *self.idle]
        if not ids:
            return
        try:
            newest = await self.tenants.log.newest(ids)
        except Exception as exc:  # the next note of each context reads the log anyway
            log.warning("event_log_read_failed", error=str(exc))
            return
        for cid, seq in newest.items():
            self.offer(cid, seq)

    async def untap(self, context_ids: list[str]) -> None:
        for cid in context_ids:
            ch = self.channels.pop(cid, None) or self.idle.pop(cid, None)
            if ch is not None:
                ch.close()
            self.owners.pop(cid, None)

    # ------------------------------------------------------------------ calls

    @asynccontextmanager
    async def reserve(self, tenant: str) -> AsyncIterator[None]:
        """``429`` over the tenant's limit before a request makes what its turn
        needs (a new context, an imported history): a slot is held meanwhile,
        in this server (:meth:`TurnLimit.reserved`) and, on PostgreSQL, among
        every server's (kept for the launch that follows: ``_slots.py``)."""
        with self.turn_limit.reserved(tenant):
            slot = None if self.slots is None else await self.slots.acquire(tenant)
            try:
                yield
            except BaseException:
                if slot is not None:
                    assert self.slots is not None
                    await self.slots.release(tenant, slot)
                raise
            if slot is not None:
                assert self.slots is not None
                self.slots.park(tenant, slot)

    async def launch(
        self, context_id: str, fn: Callable[[], Awaitable[Turn]], *, wait: bool
    ) -> "Job":
        """Run ``fn`` in the app's task group. With ``wait``, until it returns;
        else until it took its first step (or failed its checks, raised here)."""
        assert self._tg is not None
        other = self.running.get(context_id)
        # on Temporal the context's workflow decides (for every server at once),
        # and a call here may still wait for its result after the context rested
        if other is not None and self.config.turns != "temporal":
            # A call of this server runs on the context: the engine would
            # refuse this one. Refused here, before it takes a turn slot:
            # only a turn that runs holds one.
            raise ContextBusy(context_id, other.state or "running")
        job = Job(context_id)
        tenant = self.owners.get(context_id)
        if tenant is not None:  # 429 over the tenant's limit (docs/server.md, "Tenants and tokens")
            self.turn_limit.acquire(tenant)
        self.running[context_id] = job  # no await since the check: busy for the next one
        slot = None
        if tenant is not None and self.slots is not None:  # every server's turns
            slot = self.slots.take_parked(tenant)
            if slot is None:
                try:
                    slot = await self.slots.acquire(tenant)
                except BaseException:
                    del self.running[context_id]
                    self.turn_limit.release(tenant)
                    raise
        if wait:
            self._run(job, fn, tenant, self.hold(context_id), slot)
            await job.done.wait()
        else:
            # _on_local sets job.started at the call's first step (the job
            # itself when it returned or failed)
            starting = self.starting.setdefault(context_id, [])
            starting.append(job)
            try:
                self._run(job, fn, tenant, self.hold(context_id), slot)
                await self._started(job)
            finally:
                starting.remove(job)
                if not starting and self.starting.get(context_id) is starting:
                    del self.starting[context_id]
        if job.done.is_set() and job.error is not None:
            raise job.error
        return job

    async def _started(self, job: Job) -> None:
        """Until the launched call took its first step. On Temporal, for
        ``temporal_answer_within`` seconds at most: a request never stays
        open on a Temporal that does not answer (the call goes on)."""
        if self.config.turns != "temporal":
            await job.started.wait()
            return
        within = self.config.temporal_answer_within
        with anyio.move_on_after(within):
            await job.started.wait()
        if not job.started.is_set():
            log.warning("call_unanswered", context_id=job.context_id, seconds=within)
            raise TemporalUnavailable(
                f"the Temporal server did not take the call within {within:g} s; whether "
                "it accepted it is not known: read the context before calling again",
                accepted=None,
            )
