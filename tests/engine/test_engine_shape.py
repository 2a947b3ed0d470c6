"""The engine's shape: ``Engine`` holds the parts that do its work (no mixin of
them, no protocol restating it), sub-contexts live in one package, and no chain
of the engine's own imports grows back to the height it had.

Everything here reads the source with ``ast`` or the class as it is made; nothing
runs a call.
"""

from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path

from test_layering import PKG_DIR, imports_in, module_graph, package_modules

from turnfsm import Engine
from turnfsm.engine import _engine

ENGINE_DIR = PKG_DIR / "engine"

# The one base Engine still has: its settings as read-only properties. Anything
# else in its bases is a part that should be held.
KEPT_BASES = {"EngineSettings"}

# The longest chain of engine-internal imports (module -> module it imports,
# TYPE_CHECKING and function-level imports included), counted in modules.
MAX_CHAIN = 15


def _engine_sources() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(ENGINE_DIR)): ast.parse(path.read_text("utf-8"))
        for path in sorted(ENGINE_DIR.rglob("*.py"))
    }


def test_engine_inherits_no_part_of_its_work() -> None:
    bases = {base.__name__ for base in Engine.__mro__[1:] if base is not object}
    assert bases <= KEPT_BASES, bases
    assert "ContextManagement" not in bases


def test_the_parts_are_held_not_inherited() -> None:
    engine = Engine()
    parts = {type(v).__name__ for v in vars(engine).values()}
    assert {"ContextManager", "SubContexts", "TurnCalls", "Listeners", "EngineToolsets"} <= parts
    for name in ("fork", "create_context", "spawn", "finish", "send", "subscribe"):
        method = getattr(Engine, name)
        assert method.__qualname__ == f"Engine.{name}", method  # defined on Engine itself
        assert inspect.getdoc(method), name  # and documented there


def test_no_protocol_restates_the_engine() -> None:
    for name, tree in _engine_sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                assert node.name != "EngineAPI", name
                bases = {ast.unparse(b) for b in node.bases}
                if bases & {"Protocol", "typing.Protocol"}:
                    declared = {
                        t.target.id
                        for t in node.body
                        if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)
                    }
                    assert "_d" not in declared, (name, node.name)  # the driver, exposed


def test_no_method_is_written_for_another_class() -> None:
    """A method whose ``self`` is annotated runs on some other object: the mark
    of a mixin typed through a protocol."""
    for name, tree in _engine_sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for fn in node.body:
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.args.args:
                        first = fn.args.args[0]
                        assert first.arg != "self" or first.annotation is None, (name, fn.name)


def test_sub_contexts_live_in_one_package() -> None:
    assert not (ENGINE_DIR / "_children.py").exists()
    assert not (ENGINE_DIR / "_subcontexts.py").exists()
    assert not (ENGINE_DIR / "_api.py").exists()
    package = ENGINE_DIR / "_subcontexts"
    assert (package / "__init__.py").is_file()
    for path in ENGINE_DIR.glob("*.py"):
        source = path.read_text("utf-8")
        for marker in ("Change.CHILD_", "SUMMARY_KEY", "list_children("):
            assert marker not in source, (path.name, marker)  # such code is in the package


def test_the_engine_modules_of_this_shape_stay_under_600_lines() -> None:
    mine = [
        ENGINE_DIR / f
        for f in ("_engine.py", "_manage.py", "_turn_calls.py", "_listening.py", "_toolsets.py")
    ]
    mine += sorted((ENGINE_DIR / "_subcontexts").glob("*.py"))
    long = {p.name: n for p in mine if (n := len(p.read_text("utf-8").splitlines())) >= 600}
    assert not long, long
    assert Path(_engine.__file__).resolve().parent == ENGINE_DIR


def longest_engine_chain() -> list[str]:
    """The longest chain of imports among ``turnfsm.engine``'s own modules (its
    ``__init__``, which only re-exports, left out)."""
    modules = package_modules()
    known = set(modules)
    found = []
    for name, (path, is_pkg) in modules.items():
        found += imports_in(name, is_pkg, path.read_text("utf-8"), filename=str(path), known=known)
    graph = module_graph(found, known)
    engine = {m for m in known if m.startswith("turnfsm.engine.")}

    @functools.cache
    def longest(module: str) -> tuple[str, ...]:
        best: tuple[str, ...] = (module,)
        for target in sorted(graph.get(module, ())):
            if target in engine:
                chain = (module, *longest(target))
                if len(chain) > len(best):
                    best = chain
        return best

    return list(max((longest(m) for m in sorted(engine)), key=len))


def test_the_engine_import_chain_stays_short() -> None:
    chain = longest_engine_chain()
    assert len(chain) <= MAX_CHAIN, " -> ".join(chain)


if __name__ == "__main__":  # the chain, for a reader
    print(len(longest_engine_chain()), " -> ".join(longest_engine_chain()))
