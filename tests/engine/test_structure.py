"""The drive loop split by job: the steps a call takes are plain functions
(no await, no anyio), ``decide`` is a plain call, the lease protocol is its
own object, the busy set lives with the loaded contexts, and the host the
effects see is what waits or reaches outside."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pydantic
import pytest

from turnfsm import Engine, State
from turnfsm.engine import _decide, _drive, _host, _lease, _loaded, _steps, _typed
from turnfsm.testing import ScriptedLLM

ENGINE = Path(_drive.__file__).parent
OWNED = (
    "_drive",
    "_host",
    "_decide",
    "_leases",
    "_lease",
    "_steps",
    "_loaded",
    "_calls",
    "_call_llm",
    "_call_pieces",
    "_run_tools",
    "_approval",
    "_backoff",
    "_runtime",
    "_recovery",
)


def _tree(name: str) -> ast.Module:
    return ast.parse((ENGINE / f"{name}.py").read_text())


def test_the_steps_module_neither_awaits_nor_imports_anyio() -> None:
    tree = _tree("_steps")
    imported = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    imported |= {
        (n.module or "").split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.level == 0
    }
    assert "anyio" not in imported and "asyncio" not in imported
    asyncs = [n.name for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef)]
    assert asyncs == []
    assert not any(isinstance(n, ast.Await) for n in ast.walk(tree))
    for name in _steps.__all__:
        assert not inspect.iscoroutinefunction(getattr(_steps, name)), name


def test_decide_and_the_typed_check_are_plain_calls() -> None:
    for fn in (_decide.decide, _decide.validates, _typed.check_answer):
        assert not inspect.iscoroutinefunction(fn), fn
    assert not any(isinstance(n, ast.Await) for n in ast.walk(_tree("_decide")))


def test_the_lease_protocol_is_its_own_object() -> None:
    defined = {
        n.name
        for n in ast.walk(_tree("_drive"))
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    assert not defined & {"_enter", "_enter_claimed", "_confirm_claim", "_hold_again", "_StaleCopy"}
    methods = set(vars(_lease.CallLease))
    assert {
        "enter",
        "enter_claimed",
        "confirm_claim",
        "hold_again",
        "let_go",
        "commit_failed",
    } <= methods


def test_the_busy_set_lives_with_the_loaded_contexts() -> None:
    assigned = [
        t.attr
        for n in ast.walk(_tree("_drive"))
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Attribute)
    ]
    assert "busy" not in assigned
    assert "busy" in inspect.getsource(_loaded.Loaded.__init__)


def test_the_host_keeps_what_waits_or_reaches_outside() -> None:
    members = {n for n in vars(_host.Host) if not n.startswith("_")}
    assert members == {"settings", "subtask_host", "now", "step", "commit"}


def test_the_owned_modules_stay_well_under_the_limit() -> None:
    for name in OWNED:
        lines = len((ENGINE / f"{name}.py").read_text().splitlines())
        assert lines < 600, (name, lines)
    assert len((ENGINE / "_drive.py").read_text().splitlines()) < 450


class _Crash(BaseException):
    """What no handler of the engine takes: a process going down, say."""


@pytest.mark.anyio
async def test_a_typed_answer_is_stored_before_the_validator_runs() -> None:
    class Strict(pydantic.BaseModel):
        n: int

        @pydantic.field_validator("n")
        @classmethod
        def _down(cls, value: int) -> int:
            raise _Crash

    llm = ScriptedLLM([{"text": '{"n": 1}'}])
    async with Engine(llm=llm, output_type=Strict) as engine:
        cid = await engine.create_context()
        with pytest.raises(_Crash):
            await engine.send(cid, "go")
        stored = await engine.store.load(cid)
    assert stored.current_state == State.PROCESSING_LLM_RESPONSE
    assert [n.message.text for n in stored.history()][-1] == '{"n": 1}'
