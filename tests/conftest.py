from __future__ import annotations

import gc
import os
import re
import signal
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# Bytecode is written, as Python does by default, even where the environment
# says not to (PYTHONDONTWRITEBYTECODE, set on some machines): pytest keeps each
# test module it rewrites for its assertions only as bytecode, and without it
# every test process (each xdist worker) rewrites every test module again; every
# `turnfsm` and `python` a test starts would compile the package from source
# again. This conftest is imported before any test module is collected.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

MEMORY_TEMP = Path("/dev/shm")
"""Linux's memory-backed file system, where the run keeps its temporary files
when it may (``_memory_temp_root``)."""

MEMORY_TEMP_FREE = 2 << 30
"""The free space it must have: a container's default ``/dev/shm`` is far
smaller, and a full one would fail tests that have nothing to do with it."""


def _memory_temp_root() -> Path | None:
    """``MEMORY_TEMP`` when the run's temporary files should go there: it is a
    writable tmpfs with ``MEMORY_TEMP_FREE`` to spare, and neither ``TMPDIR``
    nor ``PYTEST_DEBUG_TEMPROOT`` names a place of the user's choosing."""
    if os.environ.get("TMPDIR") or os.environ.get("PYTEST_DEBUG_TEMPROOT"):
        return None
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            kinds = {f[1]: f[2] for f in (line.split() for line in mounts) if len(f) > 2}
        space = os.statvfs(MEMORY_TEMP)
    except OSError:
        return None
    if kinds.get(str(MEMORY_TEMP)) != "tmpfs" or not os.access(MEMORY_TEMP, os.W_OK | os.X_OK):
        return None
    return MEMORY_TEMP if space.f_bavail * space.f_frsize >= MEMORY_TEMP_FREE else None


# The tests' files (each tmp_path, the stores, databases and servers the tests
# make) go to memory where it can hold them: they are thrown away after the
# run, and on a disk every store commit's fsync, every SQLite transaction and
# every folder removed costs system time and waits on the device, while no test
# can tell a disk's durability from the page cache's (their crashes kill
# processes, not the machine). TMPDIR carries it to each xdist worker and each
# process a test starts; tempfile's cached choice is dropped so that this
# process reads it too.
_memory = _memory_temp_root()
if _memory is not None:
    os.environ["TMPDIR"] = str(_memory)
    tempfile.tempdir = None

# A run started in the background by a shell without job control (``pytest &``
# in a script) inherits SIGINT ignored, and so would every process a test
# starts: Python leaves an ignored SIGINT ignored, and the tests that interrupt
# a ``turnfsm`` process with Ctrl-C would see it run on. Python's own handler
# here makes the processes started from now on begin with SIGINT's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(optionalhook=True)  # pytest -p no:xdist has no such hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` starts three workers per core: the tests
    spend much of their time waiting (on the ``turnfsm`` processes, servers and
    databases they start, on timeouts), so a worker per core leaves the cores
    idle for part of the run. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides
    when it is set (xdist's own reading of it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return 3 * len(os.sched_getaffinity(0))


def _xdist_run(config: pytest.Config) -> str | None:
    """The run's ``testrunuid`` on the controller of an xdist run, else None."""
    if hasattr(config, "workerinput") or config.getoption("collectonly"):
        return None
    if config.getoption("dist", "no") == "no" or not config.getoption("tx", None):
        return None
    uid: str | None = config.getoption("testrunuid", None)
    return uid


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist the workers share one PostgreSQL cluster
    (``tests/storage/pg.py``) and one Temporal dev server
    (``tests/temporal/devserver.py``): the controller names the run (xdist's
    ``--testrunuid``, which xdist hands to each worker) before the workers
    start, and makes the run's folder where the first worker to need a server
    records it (``tests/run_folder.py``)."""
    if config.getoption("dist", "no") == "no" or hasattr(config, "workerinput"):
        return
    if config.getoption("tx", None) and config.getoption("testrunuid", None) is None:
        config.option.testrunuid = uuid.uuid4().hex
    uid = _xdist_run(config)
    if uid is not None:
        from run_folder import begin_run

        begin_run(uid)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller stops the run's shared servers once every worker is
    done (workers never stop them)."""
    uid = _xdist_run(config)
    if uid is not None:
        from run_folder import end_run

        end_run(uid)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", autouse=True)
def _collected_after_the_module() -> Iterator[None]:
    """The garbage collector runs once a test module is done, in the teardown
    of its last test: a socket, file or client the module left unclosed is
    reported there (``filterwarnings = error`` makes its ``ResourceWarning``,
    raised in a finalizer, a failure), not in whatever test of whatever module
    the collector happens to run next in the same process. What is left alive
    then is frozen out of later passes (``gc.freeze()``): each module's pass,
    and the collector's own passes during its tests, look at that module's
    objects only, not again at every import and fixture before them."""
    yield
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``slow`` tests (long conversations, many contexts: seconds each),
    ``browser`` tests (a real headless Chromium), the ``load`` test (a server
    under 200 clients) and the ``mcp`` tests (the reference MCP servers from npm,
    several servers, a server killed by a signal) run only when selected:
    ``pytest -m slow``, ``-m browser``, ``-m load``, ``-m mcp``; the ``soak`` test
    (a server's memory over 10,000 turns) with ``-m soak``; the Temporal kill
    test with ``-m temporal_kill``; the cases of a sweep beyond its first (a
    ``turnfsm`` process each, or a seed each) with ``-m sweep``; a real Arize
    Phoenix with ``-m phoenix``; every golden script on Temporal (beyond one of
    each kind) with ``-m temporal``."""
    named = set(re.findall(r"\w+", config.option.markexpr or ""))
    markers = (
        "sweep",
        "slow",
        "browser",
        "load",
        "mcp",
        "phoenix",
        "soak",
        "temporal",
        "temporal_kill",
    )
    skips = {m: pytest.mark.skip(reason=f"{m}: run with -m {m}") for m in markers if m not in named}
    # each item's markers are read once (every xdist worker runs this over the
    # whole collection), not once for each marker asked about
    for item in items:
        has = {mark.name for mark in item.iter_markers()}
        for marker, skip in skips.items():
            if marker in has:
                item.add_marker(skip)
