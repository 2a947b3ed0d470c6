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
