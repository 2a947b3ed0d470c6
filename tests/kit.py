"""The one way the engine suites make a deterministic engine.

``make_engine(answers)`` is an :class:`~turnfsm.Engine` on a
:class:`~turnfsm.testing.ScriptedLLM` of those answers (or the ``llm`` given),
a :class:`~turnfsm.testing.FakeClock` and sequential ids, with whatever other
``Engine`` arguments are passed; it returns the engine, the LLM and the clock.
A suite that always wants the same tools binds them once::

    make_engine = functools.partial(kit.make_engine, tools=[book, lookup])

``wait_ready(url)`` is the one way a test waits for a server it started: it
returns when ``/readyz`` answers 200, whatever the machine's load.

``listening_url(process, log)`` (``listening_on_pipe(process)`` for a
standard error that is a pipe) is the address a server the test started on
port 0 says it got: a test never picks a free port and hands it over, as
another process (an xdist worker's server) can take it in between.
``refusing_port()`` is a port nothing listens on, for as long as it lasts.

``serve_in_process(*argv)`` runs ``turnfsm serve ARGV`` (the CLI's own
parsing, settings, store and engine) in a thread of the test's process, for a
test whose subject is the served API, its output or its settings: no
interpreter to start and import the server's stack again. It stops the
server as SIGTERM does and puts back what a server sets for its process. A
test whose subject is the process (signals, exit codes, a crash's standard
error, two processes on a store, what a fresh process imports, the installed
script) starts ``turnfsm`` itself.

``first_by_default(cases, ids)`` are the cases of a parametrized sweep whose
cases are long (each starts ``turnfsm`` again, or is a seed of a random
sweep): the first runs in the README's test command, the others only with
``-m sweep`` (CI's step of its own).

``skip_without(name)`` skips a test module when an optional dependency is
not installed, without importing it as ``pytest.importorskip`` would: the
server's stack is a second of CPU, which every xdist worker would pay at
collection whether or not it runs a test that needs it.

``weather_turn()`` runs one tool-loop turn (the user asks, the model calls
``weather``, the tool answers, the model says "15 C.") on a fresh engine, and
gives the engine, the context id, the turn and the engine's own records of
the turn's four messages (not the copies the turn hands out), for a test of
what the engine keeps.

``examples(n)`` is how many examples a property test draws: a fifth of ``n``
(at least ten) in the README's test command, where each property shows it
holds on a sample, and all ``n`` with ``TURNFSM_EXAMPLES=full``, which CI sets
in a step of its own for the hypothesis tests (``-m hypothesis``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.util
import io
import logging
import os
import queue
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import httpx
import pytest

from turnfsm import Engine, Turn, tool
from turnfsm.engine._turn import _SLOT
from turnfsm.model import InternalMessage
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

__all__ = [
    "READY_WITHIN",
    "SWEEP",
    "Made",
    "examples",
    "first_by_default",
    "listening_on_pipe",
    "listening_url",
    "make_engine",
    "refusing_port",
    "serve_in_process",
    "skip_without",
    "wait_ready",
    "weather_turn",
]

READY_WITHIN = 300.0
"""Seconds a server may take to get ready before a test gives up: a bound
against a server that never comes up, not a measure of how fast it starts."""


def skip_without(name: str, reason: str | None = None) -> None:
    """Skip the calling module (at its top level) when ``name`` cannot be
    found; found, it is imported only where a test uses it."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(reason or f"could not import {name!r}", allow_module_level=True)


FULL_EXAMPLES = os.environ.get("TURNFSM_EXAMPLES") == "full"


def examples(full: int) -> int:
    """``full`` under ``TURNFSM_EXAMPLES=full``, else a fifth of it (at least ten)."""
    return full if FULL_EXAMPLES else min(full, max(10, full // 5))


SWEEP = pytest.mark.sweep


def first_by_default(cases: Iterable[Any], ids: Iterable[str]) -> list[Any]:
    """The first case by default, every case with ``-m sweep``; a tuple is
    the values of several argument names."""
    return [
        pytest.param(
            *(case if isinstance(case, tuple) else (case,)),
            id=name,
            marks=() if n == 0 else SWEEP,
        )
        for n, (case, name) in enumerate(zip(cases, ids, strict=True))
    ]


class Made(NamedTuple):
    engine: Engine
    llm: Any
    clock: FakeClock


def make_engine(
    answers: Any = None,
    *,
    llm: Any = None,
    tools: Iterable[Any] = (),
    clock: FakeClock | None = None,
    **kwargs: Any,
) -> Made:
    if llm is None:
        llm = ScriptedLLM([] if answers is None else answers)
    clock = clock or FakeClock()
    engine = Engine(llm=llm, tools=tools, clock=clock, ids=SequentialIds(), **kwargs)
    return Made(engine, llm, clock)


def _weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "temp_c": 15}


class WeatherTurn(NamedTuple):
    engine: Engine
    context_id: str
    turn: Turn
    held: tuple[InternalMessage, ...]
    """The engine's own records of the turn's messages."""


@contextlib.asynccontextmanager
async def weather_turn() -> AsyncIterator[WeatherTurn]:
    answers: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}]},
        {"text": "15 C."},
    ]
    # the tool made here, not when the module is imported (every suite imports it)
    engine, _, _ = make_engine(answers, tools=[tool(_weather, name="weather")])
    async with engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "weather in Oslo?")
        yield WeatherTurn(engine, cid, turn, _SLOT.__get__(turn, Turn).records)


async def cancel_while_running(
    engine: Engine, cid: str, text: str, ready: anyio.Event
) -> tuple[Turn, list[Turn]]:
    """Send ``text`` in a task, wait for ``ready``, cancel from this task;
    return the turn ``cancel`` gave and what the interrupted ``send`` returned."""
    sent: list[Turn] = []

    async def run() -> None:
        sent.append(await engine.send(cid, text))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await ready.wait()
            turn = await engine.cancel(cid)
    return turn, sent


@functools.cache
def loopback_tls() -> ssl.SSLContext:
    """httpx's default TLS settings, built once for every client of the tests
    (``verify=``): a client given none builds them again, loading the CA
    certificates, most of what making a client costs. The servers the tests
    start speak plain HTTP on the loopback."""
    return httpx.create_ssl_context()


def wait_ready(
    url: str,
    *,
    process: subprocess.Popen[Any] | None = None,
    log: Path | Callable[[], str] | None = None,
    path: str = "/readyz",
    within: float = READY_WITHIN,
) -> None:
    """Return once ``url + path`` answers 200: the server is up and ready.

    A refused connection is tried again a moment later; a server that accepts
    the connection is given all the time left to answer, so a loaded machine
    makes this slower, never wrong. ``process`` (the server's, when the test
    started one) must stay alive meanwhile; ``log`` (a file, or a function
    giving text) is shown when it dies or the server never gets ready."""

    def said() -> str:
        if log is None:
            return ""
        return log() if callable(log) else log.read_text(errors="replace")

    last = "no answer"
    # one client for every try, as each new client (httpx.get makes one) loads
    # the system's CA certificates again unless given loopback_tls(); the bound
    # starts once it is made, so a short one still gets a try on a loaded machine
    with httpx.Client(verify=loopback_tls()) as client:
        deadline = time.monotonic() + within
        while True:
            if process is not None and process.poll() is not None:
                raise AssertionError(f"the server exited ({process.returncode}):\n{said()}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{url}{path} not ready in {within:g} s ({last}):\n{said()}")
            try:
                answer = client.get(url + path, timeout=left)
            except httpx.TransportError as exc:
                last = repr(exc)
            else:
                if answer.status_code == 200:
                    return
                last = f"{answer.status_code} {answer.text[:200]}"
            time.sleep(0.05)


LISTENING = re.compile(r"listening on (http://\S+?)(?:,|\s|$)")
"""The line a server says the address it listens on in (``turnfsm serve:
listening on http://127.0.0.1:PORT``); the first URL when it names several."""


def _said(log: Path | Callable[[], str]) -> str:
    return log() if callable(log) else log.read_text(errors="replace")


def listening_url(
    process: subprocess.Popen[Any],
    log: Path | Callable[[], str],
    *,
    within: float = READY_WITHIN,
    said: re.Pattern[str] = LISTENING,
) -> str:
    """The URL ``process``, a server started on port 0, says it listens on,
    read from its ``log`` (a file, or a function giving text) as it comes:
    the first group of ``said``. Fails, with the log, when the process exits
    first or does not say it within ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        found = said.search(_said(log)) if not isinstance(log, Path) or log.exists() else None
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise AssertionError(
                f"the server exited ({process.returncode}) before it listened:\n{_said(log)}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"the server did not listen in {within:g} s:\n{_said(log)}")
        time.sleep(0.05)


def listening_on_pipe(
    process: subprocess.Popen[str], *, within: float = READY_WITHIN
) -> tuple[str, str]:
    """:func:`listening_url` for a server whose standard error is a text
    pipe: it is read up to the line that names the URL (not beyond, so
    ``communicate()`` reads the rest). Returns the URL and the text read,
    which the pipe no longer holds."""
    stream = process.stderr
    assert stream is not None, "the server's standard error is not a pipe"
    lines: queue.SimpleQueue[str] = queue.SimpleQueue()

    def read() -> None:  # a thread, as a pipe's readline has no timeout
        while True:
            line = stream.readline()
            lines.put(line)
            if not line or LISTENING.search(line):
                return

    threading.Thread(target=read, daemon=True).start()
    read_so_far: list[str] = []
    deadline = time.monotonic() + within
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            said = "".join(read_so_far)
            raise AssertionError(f"the server did not listen in {within:g} s:\n{said}") from None
        read_so_far.append(line)
        said = "".join(read_so_far)
        if not line:
            process.wait(30)
            raise AssertionError(
                f"the server exited ({process.returncode}) before it listened:\n{said}"
            )
        found = LISTENING.search(line)
        if found:
            return found.group(1), said


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A port of 127.0.0.1 that refuses connections while the block runs:
    bound and never listened on, so no other process can take it meanwhile
    (a port found free and let go of could be listened on at once)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


class _Said(io.StringIO):
    """A standard stream two threads write to (the server's and the test's)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            return super().write(text)

    def text(self) -> str:
        with self._lock:
            return self.getvalue()


@contextlib.contextmanager
def _process_state_kept() -> Iterator[None]:
    """Put back, on leaving, what ``run_server`` and the CLI set for their
    process: the collector's thresholds and freeze, structlog's configuration
    and the loggers it bound to standard error (cached on first use), the
    ``logging`` loggers uvicorn configures, the signal handlers,
    sse-starlette's process-wide exit flag, the environment, ``sys.path`` and
    the modules a ``--llm``/``--tools`` option imported from the working
    folder."""
    import structlog
    from sse_starlette.sse import AppStatus

    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    configured, config = structlog.is_configured(), structlog.get_config()
    loggers = {
        name: (lg.level, lg.propagate, lg.disabled, list(lg.handlers), list(lg.filters))
        for name in ("", "uvicorn", "uvicorn.error", "uvicorn.access")
        for lg in [logging.getLogger(name)]
    }
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    app_exit = AppStatus.should_exit
    environ, path, modules = dict(os.environ), list(sys.path), set(sys.modules)
    here = os.getcwd()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not frozen:
            gc.unfreeze()
        if configured:
            structlog.configure(**config)
        else:
            structlog.reset_defaults()
        for name, module in list(sys.modules.items()):
            if name.startswith("turnfsm"):  # the server's loggers, bound on first use
                for value in list(vars(module).values()):
                    if isinstance(value, structlog._config.BoundLoggerLazyProxy):
                        vars(value).pop("bind", None)
        for name, (level, propagate, disabled, hs, fs) in loggers.items():
            lg = logging.getLogger(name)
            lg.setLevel(level)
            lg.propagate, lg.disabled, lg.handlers, lg.filters = propagate, disabled, hs, fs
        for sig, handler in handlers.items():
            if signal.getsignal(sig) is not handler and handler is not None:
                signal.signal(sig, handler)
        AppStatus.should_exit = app_exit
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            where = getattr(sys.modules[name], "__file__", None) or ""
            if _from_working_folder(name, where, here):
                del sys.modules[name]


def _from_working_folder(name: str, where: str, here: str) -> bool:
    """Whether the module ``name`` (its file ``where``) is one of the user's,
    imported from the working folder ``here``. Not a module of an environment
    that sits in that folder (a ``.venv`` in the checkout), nor one of
    turnfsm's: such a module imported for the first time during the block
    stays, since a second import would make new classes where others keep the
    first ones (httpx, for one, matches httpcore's errors by class)."""
    if not where.startswith(here + os.sep):
        return False
    if where.startswith(sys.prefix + os.sep) or where.startswith(sys.base_prefix + os.sep):
        return False
    return name != "turnfsm" and not name.startswith("turnfsm.")


class Served:
    """A ``turnfsm serve`` run by :func:`serve_in_process`: its ``url``,
    what it said on standard error (:meth:`said`), its exit code once
    stopped (``code``)."""

    def __init__(self, said: _Said, stop: Callable[[], None], thread: threading.Thread) -> None:
        self.url = ""
        self.code: int | None = None
        self._said = said
        self.stop = stop
        """Stop it as SIGTERM would (``ServerStop.stop``); returns at once."""
        self._thread = thread

    def said(self) -> str:
        return self._said.text()

    def stopped(self, within: float = READY_WITHIN) -> None:
        """Wait until the command has returned (``code``)."""
        self._thread.join(within)
        assert not self._thread.is_alive(), f"serve did not stop:\n{self.said()}"


@contextlib.contextmanager
def serve_in_process(
    *argv: str, env: Mapping[str, str] | None = None, within: float = READY_WITHIN
) -> Iterator[Served]:
    """``turnfsm serve ARGV`` as ``turnfsm.cli.main`` runs it, in a thread of
    this process, its standard output and error kept (:meth:`Served.said`),
    with ``env`` added to the environment while it runs; yields once
    ``/readyz`` answers. On leaving, it is stopped as SIGTERM
    stops it (``run_server``'s ``stop``) and must exit 0, and what it set for
    the process is put back. Fails, with what it said, when it exits before
    it listens."""
    from turnfsm.cli import main
    from turnfsm.server import _run

    stop = _run.ServerStop()
    installed = _run.run_server
    real = getattr(installed, "__wrapped__", installed)  # another run's, when one runs
    listening = threading.Event()
    urls: list[str] = []

    @functools.wraps(real)
    def run_server(*args: Any, **kwargs: Any) -> None:
        if threading.current_thread() is not thread:  # another run's, or a test's own
            installed(*args, **kwargs)
            return
        given = kwargs.pop("on_listening", None)

        def on_listening(listened: list[str]) -> None:
            if given is not None:
                given(listened)
            urls.extend(listened)
            listening.set()

        real(*args, on_listening=on_listening, stop=stop, **kwargs)

    def run() -> None:
        served.code = main(["serve", *argv])

    said = _Said()
    thread = threading.Thread(target=run, name="turnfsm serve", daemon=True)
    served = Served(said, stop.stop, thread)

    with contextlib.ExitStack() as undo:
        undo.enter_context(_process_state_kept())
        os.environ.update(env or {})
        undo.enter_context(contextlib.redirect_stdout(said))
        undo.enter_context(contextlib.redirect_stderr(said))
        _run.run_server = run_server
        undo.callback(setattr, _run, "run_server", installed)
        thread.start()
        try:
            deadline = time.monotonic() + within
            while not listening.wait(0.05):
                if not thread.is_alive():
                    raise AssertionError(
                        f"serve exited ({served.code}) before it listened:\n{said.text()}"
                    )
                if time.monotonic() > deadline:
                    raise AssertionError(f"serve did not listen in {within:g} s:\n{said.text()}")
            served.url = urls[0]
            wait_ready(served.url, log=said.text, within=within)
            yield served
        finally:
            stop.stop()
            thread.join(within)
        served.stopped(0)
        assert served.code == 0, f"serve exited {served.code}:\n{said.text()}"
