"""The workflow's Updates are made from its table of calls (``OPS``): one
Update per call, each with its validator, the same names and arguments as
before, and the cancel the one call admitted while another runs."""

from __future__ import annotations

import ast
import inspect
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.exceptions import ApplicationError
from temporalio.workflow import _Definition

from turnfsm.temporal import _workflow
from turnfsm.temporal._children import OPS
from turnfsm.temporal._workflow import ContextWorkflow

UPDATES = {"send", "approve", "deny", "answer", "cancel", "retry", "reset", "request", "resume"}


def _updates() -> dict[str | None, Any]:
    defn = _Definition.from_class(ContextWorkflow)
    assert defn is not None
    return dict(defn.updates)


def test_one_update_with_a_validator_per_call_of_the_table() -> None:
    updates = _updates()
    assert set(OPS) == UPDATES
    assert set(updates) == UPDATES | {"finish"}
    for name, defn in updates.items():
        assert defn.validator is not None, name
        assert defn.arg_types == [dict[str, Any]], name
        assert defn.ret_type is Any, name


def _workflow_at(*, calls: int, gone: bool = False) -> ContextWorkflow:
    wf = object.__new__(ContextWorkflow)  # (its init runs in a workflow only)
    wf.context_id, wf.calls, wf.gone = "c1", calls, gone
    return wf


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_only_a_cancel_is_admitted_while_a_call_runs(name: str) -> None:
    validator = _updates()[name].validator
    assert validator is not None
    validator(_workflow_at(calls=0), {})  # admitted
    if name == "cancel":
        validator(_workflow_at(calls=1), {})
    else:
        with pytest.raises(ApplicationError) as refused:
            validator(_workflow_at(calls=1), {})
        assert refused.value.type == "ContextBusy"
    with pytest.raises(ApplicationError) as gone:
        validator(_workflow_at(calls=0, gone=True), {})
    assert gone.value.type == "ContextNotFound"


def test_no_update_of_the_table_is_written_out_by_hand() -> None:
    source = inspect.getsource(_workflow)
    written = [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef)
        and any("workflow.update" in ast.unparse(d) for d in node.decorator_list)
    ]
    assert written == ["finish"]
    assert len(source.splitlines()) < 450


# ------------------------------------------------------------ the turn calls, written once

TURN_CALLS = ("send", "approve", "deny", "answer", "resume", "cancel", "retry", "reset")


def test_the_turn_calls_are_written_once_for_both_engines() -> None:
    from turnfsm.temporal._children import WorkflowEngine
    from turnfsm.temporal._client import TemporalEngine
    from turnfsm.temporal._turns import WorkflowTurns

    for engine in (TemporalEngine, WorkflowEngine):
        assert issubclass(engine._turn_calls, WorkflowTurns)  # the part that runs them
        assert [name for name in TURN_CALLS if name in vars(engine)] == []


class _Recorded:
    """Stands for the engine the workflow's table calls: records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args, kwargs))

        return call


def _engine_handing_calls_to(runs: list[tuple[str, str, dict[str, Any]]]) -> Any:
    from turnfsm import Engine
    from turnfsm.engine import Turn
    from turnfsm.temporal._turns import Runner, WorkflowTurns

    async def runner(context_id: str, op: str, args: dict[str, Any]) -> Turn:
        runs.append((context_id, op, args))
        return None  # type: ignore[return-value]

    class Elsewhere(WorkflowTurns):
        def _runner(self, context_id: str, op: str) -> Runner | None:
            return runner

    class HandingOn(Engine):
        _turn_calls = Elsewhere

    return HandingOn()


@pytest.mark.anyio
async def test_each_turn_call_reaches_the_table_with_its_arguments() -> None:
    runs: list[tuple[str, str, dict[str, Any]]] = []
    engine = _engine_handing_calls_to(runs)
    await engine.send("c1", "hello", "frontend_operator", message_id="m1")
    await engine.approve("c1", "call-1")
    await engine.deny("c1", ["call-1", "call-2"], "no")
    await engine.answer("c1", "call-3", "yes")
    for name in ("resume", "cancel", "retry", "reset"):
        await getattr(engine, name)("c1")
    assert [op for _, op, _ in runs] == list(TURN_CALLS)
    recorded = _Recorded()
    for cid, op, args in runs:
        await OPS[op](recorded, cid, args)  # type: ignore[arg-type]
    sent = recorded.calls[0]
    assert sent[:2] == ("send", ("c1", "hello", "frontend_operator"))
    assert sent[2]["message_id"] == "m1"
    assert recorded.calls[1:] == [
        ("approve", ("c1", ["call-1"]), {}),
        ("deny", ("c1", ["call-1", "call-2"], "no"), {}),
        ("answer", ("c1", "call-3", "yes"), {}),
        *((name, ("c1",), {}) for name in ("resume", "cancel", "retry", "reset")),
    ]


@pytest.mark.anyio
async def test_a_turn_call_for_a_workflow_is_checked_before_it_goes() -> None:
    from turnfsm import InvalidInput

    runs: list[tuple[str, str, dict[str, Any]]] = []
    engine = _engine_handing_calls_to(runs)
    for call, where in (
        (engine.send("c1", "hi", client_tools=[{"name": "x"}]), "client_tools"),
        (engine.send("c1", "hi", output_type=dict), "output_type"),
        (engine.send("c1", "hi", "system"), "role"),
        (engine.approve("c1", []), "call_ids"),
        (engine.answer("c1", "call-1", ""), "text"),
        (engine.resume(""), "context_id"),
    ):
        with pytest.raises(InvalidInput) as refused:
            await call
        assert refused.value.where == where
    assert runs == []
