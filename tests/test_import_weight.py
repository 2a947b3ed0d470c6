"""What ``import turnfsm`` brings into a process.

Every object a module leaves behind is traversed by each full pass of the
garbage collector, and those passes run in the middle of turns: importing
structlog (with rich and pygments behind it) at ``import turnfsm`` once made
every streamed chunk slower and the process larger. The
engine imports these only when it first needs them (a log line that passes
its level, the server, the OpenAI adapters, a PostgreSQL store, ``jsonschema``
for the first output type given as a JSON Schema dict, ``tenacity`` for the
first retry policy made).

Likewise the parts of turnfsm an engine on a memory store does not use: the
SQLite, files and PostgreSQL stores (and ``sqlite3`` and ``asyncio`` behind
them), the importers and exporters, rendering, the audit, the replay scripts,
the CLI, the server and the MCP client (``turnfsm.tools.mcp``, on the ``mcp``
SDK, imported by whoever connects to an MCP server). ``turnfsm.SQLiteStore``
and the like still resolve, by importing their module when first asked for.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit import first_by_default  # tests/ is on sys.path (no tests/__init__.py)

LAZY = (
    "structlog",
    "rich",
    "pygments",
    "openai",
    "anthropic",
    "google",
    "httpx",
    "fastapi",
    "starlette",
    "psycopg",
    "mcp",
    "mcp_types",
    "sqlite3",
    "asyncio",
    "opentelemetry",
    "prometheus_client",
    "temporalio",
    "jsonschema",
    "tenacity",
)

LAZY_PARTS = (
    "turnfsm.storage._sqlite",
    "turnfsm.storage._files",
    "turnfsm.storage._postgres",
    "turnfsm.storage._eventlog",
    "turnfsm.adapters.inbound.importers",
    "turnfsm.adapters.outbound",
    "turnfsm.render",
    "turnfsm.audit",
    "turnfsm.replay",
    "turnfsm.cli",
    "turnfsm.server",
    "turnfsm.relay",
    "turnfsm.observability",
    "turnfsm.tools.mcp",
    "turnfsm.temporal",
)
"""turnfsm's own modules that ``import turnfsm`` leaves out."""


# Every case starts with ``import turnfsm`` (a submodule's import runs the
# package's first), so each runs in a child forked from one interpreter that
# has done that and nothing else: the state a fresh ``python -c`` reaches
# after ``import turnfsm``, without importing turnfsm again for every case.
# The parent touches only os and sys, which every interpreter starts with; a
# child returns from serve() and runs its case as the script's rest, in a
# namespace of its own, so the interpreter's exit (atexit, flushing, the exit
# status, an uncaught exception's traceback) is a fresh one's.
_FORK_SERVER = """
import os, sys
import turnfsm


def serve():
    while True:
        case = sys.stdin.readline().rstrip("\\n")
        if not case:
            sys.exit(0)
        pid = os.fork()
        if pid == 0:
            return case
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        sys.stdout.write(f"{status}\\n")
        sys.stdout.flush()


case = serve()
for fd, name in ((1, "out"), (2, "err")):
    os.dup2(os.open(os.path.join(case, name), os.O_WRONLY | os.O_CREAT, 0o600), fd)
with open(os.path.join(case, "code.py")) as source:
    exec(compile(source.read(), "<string>", "exec"), {"__name__": "__main__"})
"""


class Fresh:
    """Runs code as ``python -c`` would, in a child of the fork server."""

    def __init__(self, server: subprocess.Popen[str], cases: Path) -> None:
        self._server = server
        self._cases = cases
        self._count = itertools.count()

    def run(self, code: str) -> subprocess.CompletedProcess[str]:
        case = self._cases / str(next(self._count))
        case.mkdir()
        (case / "code.py").write_text(code)
        assert self._server.stdin is not None and self._server.stdout is not None
        self._server.stdin.write(f"{case}\n")
        self._server.stdin.flush()
        status = self._server.stdout.readline()
        assert status, "the fork server exited"
        done = subprocess.CompletedProcess(
            ["-c", code], int(status), (case / "out").read_text(), (case / "err").read_text()
        )
        assert done.returncode == 0, f"the case exited {done.returncode}:\n{done.stderr}"
        return done


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fresh]:
    # leaving the with closes the server's stdin, which ends it, and waits
    with subprocess.Popen(
        [sys.executable, "-c", _FORK_SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as server:
        yield Fresh(server, tmp_path_factory.mktemp("fresh"))


def _all_modules_after(fresh: Fresh, code: str) -> set[str]:
    out = fresh.run(f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))")
    return set(json.loads(out.stdout.splitlines()[-1]))


def _modules_after(fresh: Fresh, code: str) -> set[str]:
    return {name.split(".")[0] for name in _all_modules_after(fresh, code)}


def test_import_turnfsm_leaves_heavy_modules_out(fresh: Fresh) -> None:
    loaded = _modules_after(fresh, "import turnfsm")
    assert "turnfsm" in loaded
    assert sorted(loaded & set(LAZY)) == []


def test_import_turnfsm_leaves_its_stores_and_tools_out(fresh: Fresh) -> None:
    loaded = _all_modules_after(fresh, "import turnfsm")
    assert "turnfsm.engine" in loaded
    assert sorted(loaded & set(LAZY_PARTS)) == []


LAZY_NAMES = [
    ("turnfsm.SQLiteStore", "turnfsm.storage._sqlite"),
    ("turnfsm.FilesStore", "turnfsm.storage._files"),
    ("turnfsm.storage.SQLiteStore", "turnfsm.storage._sqlite"),
    ("turnfsm.storage.FilesStore", "turnfsm.storage._files"),
    ("turnfsm.storage.PostgresStore", "turnfsm.storage._postgres"),
    ("turnfsm.adapters.inbound.import_context", "turnfsm.adapters.inbound.importers._detect"),
    ("turnfsm.engine.wait_fixed", "tenacity.wait"),
]


# each case is a fresh interpreter
@pytest.mark.parametrize(
    ("name", "module"), first_by_default(LAZY_NAMES, [f"{n}-{m}" for n, m in LAZY_NAMES])
)
def test_lazy_names_resolve_to_their_module(fresh: Fresh, name: str, module: str) -> None:
    home, _, attr = name.rpartition(".")
    code = f"import {home}, sys\nvalue = getattr({home}, {attr!r})\nprint(value.__module__)"
    out = fresh.run(code)
    assert out.stdout.strip() == module


def test_open_store_imports_sqlite_when_opened(fresh: Fresh, tmp_path: object) -> None:
    code = f"""
import sys
from turnfsm import open_store
assert "turnfsm.storage._sqlite" not in sys.modules
store = open_store("sqlite:////{str(tmp_path).lstrip("/")}/t.db")
print(type(store).__name__, "turnfsm.storage._sqlite" in sys.modules)
"""
    out = fresh.run(code)
    assert out.stdout.strip() == "SQLiteStore True"


def test_the_scripted_llm_leaves_the_replay_runner_out(fresh: Fresh) -> None:
    loaded = _all_modules_after(
        fresh, "from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds"
    )
    assert "turnfsm.testing" in loaded
    assert sorted(m for m in loaded if m.startswith("turnfsm.replay")) == []


def test_testing_still_names_replay_result(fresh: Fresh) -> None:
    code = "from turnfsm.testing import ReplayResult; print(ReplayResult.__module__)"
    out = fresh.run(code)
    assert out.stdout.strip().startswith("turnfsm.replay")


ENGINE_MODULES = ["turnfsm.engine", "turnfsm.events", "turnfsm.replay"]


@pytest.mark.parametrize("module", first_by_default(ENGINE_MODULES, ENGINE_MODULES))
def test_engine_modules_leave_heavy_modules_out(fresh: Fresh, module: str) -> None:
    loaded = _modules_after(fresh, f"import {module}")
    assert sorted(loaded & set(LAZY)) == []


def test_a_failing_tap_still_logs(fresh: Fresh) -> None:
    # the tap's failure path imports structlog when it runs, and logs
    code = """
import anyio, sys
from turnfsm import Engine

async def main():
    async with Engine() as engine:
        def boom(event):
            raise RuntimeError("tap broke")
        with engine.tap(boom):
            cid = await engine.create_context()
            await engine.send(cid, "hi")
anyio.run(main)
print("structlog" in sys.modules)
"""
    out = fresh.run(code)
    assert out.stdout.strip().splitlines()[-1] == "True"
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out.stderr)
    assert "event_tap_failed" in plain
    assert "tap broke" in out.stderr


def test_import_turnfsm_builds_no_pydantic_schema(fresh: Fresh) -> None:
    # the adapters and models are built on first use: --help and a usage error
    # do not pay for them (nor for pydantic's plugin look-up behind the first)
    code = """
import sys
import turnfsm
from turnfsm import events, records
from turnfsm.adapters.inbound import InboundRequest
from turnfsm.adapters.llm import AnswerSpec
from turnfsm.tools import _question
print(sorted(n for n in ("EVENT_ADAPTER",) if n in vars(events)), len(records._ADAPTERS),
      InboundRequest.__pydantic_complete__, AnswerSpec.__pydantic_complete__,
      "ask_user" in vars(_question), "pydantic.plugin._loader" in sys.modules)
"""
    out = fresh.run(code)
    assert out.stdout.split() == ["[]", "0", "False", "False", "False", "False"]


def test_an_engine_imports_tenacity_for_its_first_retry(fresh: Fresh) -> None:
    """An engine made without a retry policy runs turns without ``tenacity``:
    the default policy is made, and ``tenacity`` imported, by the first retry
    (or the first read of ``Engine.retry_policy``); one policy for every engine."""
    code = """
import asyncio, sys
from turnfsm import Engine, RetryPolicy
from turnfsm.testing import FakeClock, ScriptedLLM

async def main():
    answers = [{"text": "one"}, {"llm_error": {"status": 503}}, {"text": "two"}]
    clock = FakeClock()
    async with Engine(llm=ScriptedLLM(answers), clock=clock) as engine:
        cid = await engine.create_context()
        await engine.send(cid, "first")
        print("tenacity" in sys.modules)
        turn = await engine.send(cid, "second")
        print("tenacity" in sys.modules, turn.text, len(clock.sleeps))
        import tenacity
        from turnfsm import engine as module
        policy = engine.retry_policy
        print(policy == RetryPolicy(max_attempts=3, wait=policy.wait),
              type(policy.wait) is tenacity.wait_random_exponential,
              Engine().retry_policy is policy,
              module.wait_exponential is tenacity.wait_exponential, "wait_fixed" in dir(module))

asyncio.run(main())
"""
    out = fresh.run(code)
    assert out.stdout.split() == ["False", "True", "two", "1", *["True"] * 5]


def test_lazily_built_names_work_when_first_used(fresh: Fresh) -> None:
    code = """
import turnfsm
from turnfsm import events, records, tools
from turnfsm.events import ContentDelta, event_bytes
ask = turnfsm.ask_user
delta = ContentDelta(context_id="c", seq=1, timestamp=0.0, message_id="m", delta="x",
                     index=0, attempt=0)
print(ask is tools.ask_user is tools._question.ask_user, ask.name,
      event_bytes(delta) == events.EVENT_ADAPTER.dump_json(delta),
      events.EVENT_ADAPTER is vars(events)["EVENT_ADAPTER"],
      records.from_json(records.TokenUsage, records.to_json(records.TokenUsage(
          prompt_tokens=1, completion_tokens=2, total_tokens=3))).total_tokens)
"""
    out = fresh.run(code)
    assert out.stdout.split() == ["True", "ask_user", "True", "True", "3"]


SERVER_LAZY_PARTS = (
    "turnfsm.storage._sqlite",
    "turnfsm.storage._sql",
    "turnfsm.storage._log_reader",
    "turnfsm.adapters.inbound.importers",
    "turnfsm.adapters.outbound",
    "turnfsm.render",
    "turnfsm.audit",
)
"""turnfsm's own modules that ``import turnfsm.server`` leaves to the store
that needs them (SQLite) or the first request that does (audit, diagrams,
the web view's audit page, the session format, an OpenAI history)."""


def test_the_server_leaves_out_what_few_requests_use(fresh: Fresh) -> None:
    pytest.importorskip("fastapi")
    code = f"""
import sys
import turnfsm.server
from turnfsm import events
print("jinja2" in sys.modules, "EVENT_ADAPTER" in vars(events))
print(sorted(m for m in sys.modules if m.startswith({SERVER_LAZY_PARTS!r})))
"""
    out = fresh.run(code)
    assert out.stdout.splitlines() == ["False False", "[]"]


def test_a_sql_store_builds_the_adapters_of_its_load_with_its_module(fresh: Fresh) -> None:
    # a fresh process's first load (W5) does not build them inside its clock
    code = """
from turnfsm import records, storage
before = len(records._ADAPTERS)
storage.SQLiteStore
print(before, sorted(t.__name__ for t in records._ADAPTERS))
"""
    out = fresh.run(code)
    built = "['Branch', 'ChatConfig', 'ChatContext', 'MessageNode', 'TokenUsage', 'TurnProgress']"
    assert out.stdout.strip() == f"0 {built}"
