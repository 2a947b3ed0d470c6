"""What is the same in several places is written in one: the lease call every
store answers the same way, the parser every CLI command makes the same way,
and the ``async with`` exit of what closes whatever its body raised."""

from __future__ import annotations

import argparse
import ast
import inspect
from pathlib import Path

import pytest

import turnfsm
from turnfsm.adapters.llm._common import OwnedClient
from turnfsm.cli import build_parser
from turnfsm.engine._subscribers import EventTap, Subscription
from turnfsm.relay import EventRelay
from turnfsm.storage import FilesStore, MemoryStore, SQLiteStore
from turnfsm.storage._base import Lease, TakesLeases

PKG = Path(turnfsm.__file__).resolve().parent


def test_the_stores_acquire_a_lease_through_one_method() -> None:
    from turnfsm.storage._pg_leases import LeaseRows

    for store in (FilesStore, SQLiteStore, LeaseRows):
        assert store.acquire_lease is TakesLeases.acquire_lease, store
        own = store.__mro__[: store.__mro__.index(TakesLeases)]
        assert any("_take_lease" in vars(c) for c in own), store


def test_the_workflow_store_takes_its_lease_through_the_same_method() -> None:
    pytest.importorskip("temporalio")
    from turnfsm.temporal._stand_ins import WorkflowStore

    assert WorkflowStore.acquire_lease is TakesLeases.acquire_lease


@pytest.mark.anyio
async def test_the_workflow_store_gives_token_one_every_time() -> None:
    pytest.importorskip("temporalio")
    from turnfsm.temporal._stand_ins import WorkflowStore

    store = WorkflowStore(None)  # type: ignore[arg-type]  # leases need no host
    first = await store.acquire_lease("c", "me", 5.0, now=100.0)
    again = await store.acquire_lease("c", "me", 5.0, now=101.0)
    assert first == Lease("c", "me", 1, 105.0)
    assert again == Lease("c", "me", 1, 106.0)


@pytest.mark.anyio
async def test_a_store_taking_a_lease_gets_what_was_asked_with_its_token() -> None:
    class Counting(TakesLeases):
        async def _take_lease(self, wanted: Lease, now: float, take_over: int | None) -> int:
            self.asked = (wanted, now, take_over)
            return 7

    store = Counting()
    lease = await store.acquire_lease("c", "me", 2.5, now=10.0, take_over=6)
    assert lease == Lease("c", "me", 7, 12.5)
    assert store.asked == (Lease("c", "me", 0, 12.5), 10.0, 6)


@pytest.mark.anyio
async def test_a_lease_held_against_the_asker_is_none() -> None:
    class Held(TakesLeases):
        async def _take_lease(self, wanted: Lease, now: float, take_over: int | None) -> None:
            return None

    assert await Held().acquire_lease("c", "me", 1.0, now=0.0) is None


def test_the_memory_store_keeps_its_own_acquire() -> None:
    # the in-memory store takes a lease around every engine call (it has no
    # leases in commits): the call stays one coroutine there
    assert "acquire_lease" in vars(MemoryStore)


def test_every_command_parser_is_made_by_command_parser() -> None:
    cli = PKG / "cli"
    restated = []
    for path in sorted(cli.glob("*.py")):
        if path.name in ("__init__.py", "_errors.py"):
            continue
        if "RawDescriptionHelpFormatter" in path.read_text(encoding="utf-8"):
            restated.append(path.name)
    assert restated == []


def test_every_command_runs_guarded_under_its_own_name() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, sub in commands.items():
        run = sub.get_default("run")
        assert run is not None, name
        assert run.__qualname__ == "guarded.<locals>.guarded_run", name
        prog = inspect.getclosurevars(run).nonlocals["prog"]
        assert prog == f"turnfsm {name}"


@pytest.mark.parametrize(
    ("cls", "method"),
    [
        (OwnedClient, "__aexit__"),
        (Subscription, "__aexit__"),
        (EventRelay, "__aexit__"),
        (EventTap, "__exit__"),
    ],
)
def test_exits_that_do_not_read_the_exception_take_it_whole(cls: type, method: str) -> None:
    params = list(inspect.signature(getattr(cls, method)).parameters.values())
    assert [p.kind for p in params] == [
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    ]
    tree = ast.parse(inspect.getsource(getattr(cls, method)).strip())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "exc_info" not in names  # never read: it is there for the protocol only
