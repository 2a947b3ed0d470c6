"""No engine class restates a part's call to forward it: ``Engine``,
``TemporalEngine`` and ``WorkflowEngine`` define no method whose body only
hands its arguments to a part (or to the base class), and the Temporal
engines define none of the calls their parts change. Read with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "turnfsm"
ENGINES = {
    "Engine": PKG / "engine" / "_engine.py",
    "TemporalEngine": PKG / "temporal" / "_client.py",
    "WorkflowEngine": PKG / "temporal" / "_children.py",
}
CHANGED_BY_PARTS = {
    "send", "approve", "deny", "answer", "resume", "cancel", "retry", "reset",
    "submit", "submit_results", "send_request", "recover", "finish", "delete_context",
}  # fmt: skip


def _forwards(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the method's body (its docstring aside) is one ``return`` of a
    call of the same name on a part (``self.<part>.<name>``) or on the base
    class (``super().<name>``)."""
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
        return False
    value = body[0].value
    if isinstance(value, ast.Await):
        value = value.value
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return False
    if value.func.attr != fn.name:
        return False
    target = value.func.value
    to_part = isinstance(target, ast.Attribute) and ast.unparse(target).startswith("self.")
    to_base = isinstance(target, ast.Call) and ast.unparse(target) == "super()"
    return to_part or to_base


def _methods(path: Path, cls: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text("utf-8"))
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    return [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


@pytest.mark.parametrize("cls", sorted(ENGINES))
def test_no_engine_method_only_forwards(cls: str) -> None:
    forwarding = [fn.name for fn in _methods(ENGINES[cls], cls) if _forwards(fn)]
    assert forwarding == [], f"{cls}: use delegate() or a part for {forwarding}"


@pytest.mark.parametrize("cls", ["TemporalEngine", "WorkflowEngine"])
def test_the_temporal_engines_define_no_call_their_parts_change(cls: str) -> None:
    names = {fn.name for fn in _methods(ENGINES[cls], cls)}
    assert names & CHANGED_BY_PARTS == set()


def test_the_check_finds_a_forwarding_method() -> None:
    source = '''
class E:
    async def approve(self, context_id: str, call_ids: list[str]) -> None:
        """Text."""
        return await self._turns.approve(context_id, call_ids)

    def tap(self, fn: object) -> object:
        return self._listeners.tap(fn)

    async def resume(self, context_id: str) -> None:
        return await super().resume(context_id)

    async def checked(self, context_id: str) -> None:
        check(context_id)
        return await self._turns.checked(context_id)

    def new_id(self) -> str:
        return self._d.settings.ids()
'''
    (cls,) = ast.parse(source).body
    assert isinstance(cls, ast.ClassDef)
    found = [fn.name for fn in cls.body if isinstance(fn, ast.AsyncFunctionDef | ast.FunctionDef)]
    assert [n for n, fn in zip(found, cls.body, strict=True) if _forwards(fn)] == [  # type: ignore[arg-type]
        "approve",
        "tap",
        "resume",
    ]
