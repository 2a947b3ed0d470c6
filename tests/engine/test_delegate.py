"""The engine's delegated methods (``turnfsm.engine._delegate``): what
``help``, ``inspect`` and mypy see of them, and what a call on an engine runs."""

from __future__ import annotations

import inspect
import pathlib
import pydoc
import tomllib

import pytest

from turnfsm import Engine
from turnfsm.engine._delegate import Delegate, delegate
from turnfsm.engine._turn_calls import TurnCalls
from turnfsm.testing import ScriptedLLM

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.anyio

DELEGATED = {n: a for n, a in vars(Engine).items() if isinstance(a, Delegate)}


def test_every_forwarding_call_is_delegated() -> None:
    expected = {
        "create_context", "fork", "switch_branch", "set_branch_prompts", "update_config",
        "spawn", "finish", "children", "delete_context",
        "send", "submit", "approve", "deny", "answer", "retry", "reset", "cancel",
        "request_cancel", "resume", "recover", "send_request", "submit_results",
        "subscribe", "subscribe_all", "tap", "observe",
    }  # fmt: skip
    assert set(DELEGATED) == expected


@pytest.mark.parametrize("name", sorted(DELEGATED))
def test_class_access_reads_as_the_parts_method(name: str) -> None:
    d = DELEGATED[name]
    part_method = d.__wrapped__
    assert getattr(Engine, name) is d
    assert inspect.signature(Engine.__dict__[name]) == inspect.signature(part_method)
    assert next(iter(inspect.signature(d).parameters)) == "self"
    assert d.__doc__ and d.__doc__ == part_method.__doc__
    assert d.__qualname__ == f"Engine.{name}" and d.__module__ == Engine.__module__
    assert inspect.getdoc(getattr(Engine, name)) == inspect.getdoc(part_method)


async def test_instance_access_is_the_parts_bound_method() -> None:
    engine = Engine(llm=ScriptedLLM([]))
    for name, d in DELEGATED.items():
        bound = getattr(engine, name)
        assert bound.__self__ is getattr(engine, d.part)
        assert bound.__func__ is d.__wrapped__
        params = inspect.signature(bound).parameters
        assert "self" not in params
        assert list(params) == list(inspect.signature(d).parameters)[1:]
    cid = await engine.create_context()
    assert await Engine.children(engine, cid) == []  # called on the class, as a method is


def test_help_shows_the_parts_signature_and_text() -> None:
    text = pydoc.render_doc(Engine.approve, renderer=pydoc.plaintext)
    assert "approve(self, context_id: 'str', call_ids: 'str | Sequence[str]') -> 'Turn'" in text
    assert "Approve pending tool calls" in text
    assert "Approve pending tool calls" in pydoc.render_doc(Engine, renderer=pydoc.plaintext)


def test_a_delegate_named_otherwise_than_its_part_is_refused() -> None:
    with pytest.raises((TypeError, RuntimeError)) as info:  # 3.11 wraps it in RuntimeError

        class Wrong:
            accept = delegate("_turns", TurnCalls.approve)

    error = info.value.__cause__ or info.value
    assert isinstance(error, TypeError)
    assert "Wrong.accept delegates to a method named approve" in str(error)


def test_the_typing_checks_are_in_mypys_own_files() -> None:
    """``delegate_types.py`` is checked by the project's strict mypy run (its
    configured ``files``), not by a mypy started here: each of its ``type:
    ignore`` lines must stay in use (``warn_unused_ignores`` on its module), so a
    call mypy stops refusing fails that run."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True
    assert "tests/engine/delegate_types.py" in config["files"]
    overrides = [o for o in config["overrides"] if "delegate_types" in o["module"]]
    assert [o.get("warn_unused_ignores") for o in overrides] == [True]
    text = (ROOT / "tests" / "engine" / "delegate_types.py").read_text()
    assert text.count("# type: ignore[") == 3


def test_an_engine_reads_each_delegated_call_once() -> None:
    engine = Engine(llm=ScriptedLLM([]))
    assert "approve" not in vars(engine)
    first = engine.approve
    assert vars(engine)["approve"] is first  # later reads find it on the engine
    assert engine.approve is first
    fresh = Engine(llm=ScriptedLLM([]))
    assert fresh.approve.__self__ is fresh._turns  # each engine its own part's
