"""The layers of ``docs/architecture.md``: imports go downward only, third-party
imports stay in one place, no module imports itself through others (no import
circle), and no module is longer than :data:`MAX_MODULE_LINES`.

Every module under turnfsm/ is parsed with ``ast`` (nothing is imported), so a
violation in a module that is never imported is caught too. Layers::

    L0  errors, model/, events        errors imports nothing of ours; model may use
                                      errors; events may use model and errors
    L1  states/                       L0 (+ transitions)
        audit/                        L0 and states/ (audit logs: records, export,
                                      verification; render/ draws them)
    L2  adapters/ enhancers/ tools/   L0-L1; never each other
        storage/ render/
    L3  engine/                       L0-L2
        replay/                       L0-L3
        relay                         L0-L3 (the event relay: engine events to the log)
    L4  server/ cli/ testing          anything; nothing outside L4 imports them
        __main__ pytest_plugin
        observability/

The package root (turnfsm/__init__.py) re-exports the public API: it may import
anything below L4, and no module inside the package imports it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

import turnfsm

PKG_DIR = Path(turnfsm.__file__).resolve().parent
TESTS_DIR = Path(__file__).resolve().parent

LAYER: dict[str, int] = {
    "errors": 0,
    "_numbers": 0,
    "_lazy": 0,
    "model": 0,
    "events": 0,
    "records": 0,
    "states": 1,
    "audit": 1,
    "adapters": 2,
    "enhancers": 2,
    "tools": 2,
    "storage": 2,
    "render": 2,
    "engine": 3,
    "replay": 3,
    "relay": 3,  # the event relay: a server's or a worker's events to the event log
    "server": 4,
    "cli": 4,
    "testing": 4,
    "__main__": 4,  # ``python -m turnfsm``: the CLI's entry point
    "pytest_plugin": 4,  # the test kit's pytest plugin, beside testing.py
    "observability": 4,  # OTLP export set-up and Prometheus metrics (docs/observability.md)
    "temporal": 4,  # turns as Temporal workflows, on the temporal extra (docs/temporal.md)
}
L0 = {c for c, n in LAYER.items() if n == 0}
L1 = {c for c, n in LAYER.items() if n == 1}
L2 = {c for c, n in LAYER.items() if n == 2}
L3 = {c for c, n in LAYER.items() if n == 3}
L4 = {c for c, n in LAYER.items() if n == 4}

# What each component may import of turnfsm (besides itself).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "_numbers": {"errors"},
    "_lazy": set(),
    "model": {"errors"},
    "events": {"model", "errors"},
    "records": {"model"},
    "states": L0,
    "audit": L0 | {"states"},
    **{c: L0 | L1 for c in L2},  # never another L2 package
    "engine": L0 | L1 | L2,
    "replay": L0 | L1 | L2 | L3,
    "relay": L0 | L1 | L2 | {"engine"},
    **{c: set(LAYER) | {"<root>"} for c in L4},
    "<root>": L0 | L1 | L2 | L3,
}

# Third-party packages that may be imported in one place only.
THIRD_PARTY_HOME: dict[str, tuple[str, ...]] = {
    "transitions": ("turnfsm.states._machine",),
    "openai": ("turnfsm.adapters.llm.openai",),
    "anthropic": ("turnfsm.adapters.llm.anthropic",),
    "google": ("turnfsm.adapters.llm.gemini",),
    "tenacity": ("turnfsm.engine._retry",),
    "jsonschema": ("turnfsm.engine._output",),
    "fastapi": ("turnfsm.server",),
    "starlette": ("turnfsm.server",),
    "sse_starlette": ("turnfsm.server",),
    "psycopg": ("turnfsm.storage._pg_schema",),
    "psycopg_pool": ("turnfsm.storage._pg_schema",),
    "uvicorn": ("turnfsm.server",),
    "jinja2": ("turnfsm.server._web",),
    "temporalio": ("turnfsm.temporal",),
    # the engine's spans use the API only; the SDK, the exporters and the
    # Prometheus client are the observability package's (docs/observability.md)
    "opentelemetry": ("turnfsm.engine._observing._otel_spans", "turnfsm.observability"),
    "prometheus_client": ("turnfsm.observability",),
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the absolute name imported
    where: str  # file:line
    text: str  # the statement, for the report

    def __str__(self) -> str:
        return f"{self.module} ({self.where}): {self.text}  ->  {self.target}"


def _module_name(path: Path, root: Path) -> tuple[str, bool]:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    is_pkg = parts[-1] == "__init__"
    if is_pkg:
        parts.pop()
    return ".".join(parts), is_pkg


def package_modules(root: Path = PKG_DIR) -> dict[str, tuple[Path, bool]]:
    """Every module of the package: name -> (file, is_package)."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        name, is_pkg = _module_name(path, root)
        out[name] = (path, is_pkg)
    return out


def imports_in(
    module: str, is_pkg: bool, source: str, *, filename: str = "<src>", known: set[str]
) -> list[Import]:
    """Every import of a module's source, resolved to absolute names.

    ``from pkg import name`` counts as importing ``pkg.name`` when that is a module
    of ours. ``importlib.import_module("x")`` / ``__import__("x")`` with a literal
    name count too. Imports under ``if TYPE_CHECKING:`` and inside functions count.
    """
    tree = ast.parse(source, filename=filename)
    package = module.split(".") if is_pkg else module.split(".")[:-1]
    found: list[Import] = []
    lines = source.splitlines()

    def add(node: ast.AST, target: str) -> None:
        text = lines[node.lineno - 1].strip()  # type: ignore[attr-defined]
        found.append(Import(module, target, f"{filename}:{node.lineno}", text))  # type: ignore[attr-defined]

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(node, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.module == "__future__":
                continue
            if node.level:
                base_parts = package[: len(package) - (node.level - 1)]
                if node.level - 1 > len(package) - 1:
                    raise ValueError(f"{filename}:{node.lineno}: relative import beyond top")
                base = ".".join(base_parts + (node.module.split(".") if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(node, sub if sub in known else base)
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (
                    isinstance(node.func, ast.Name)
                    and node.func.id in {"import_module", "__import__"}
                )
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
        ):
            add(node, node.args[0].value)
    return found


def component(module: str) -> str:
    """The layering unit of a turnfsm module: 'model', 'engine', ..., or '<root>'."""
    parts = module.split(".")
    assert parts[0] == "turnfsm", module
    return parts[1] if len(parts) > 1 else "<root>"


def _is_ours(target: str) -> bool:
    return target == "turnfsm" or target.startswith("turnfsm.")


def _under(module: str, home: str) -> bool:
    return module == home or module.startswith(home + ".")


def violations(imports: Iterable[Import]) -> list[str]:
    out: list[str] = []
    for imp in imports:
        src = component(imp.module)
        if _is_ours(imp.target):
            dst = component(imp.target)
            if dst == src and dst != "<root>":
                continue
            if dst == "<root>" and imp.target == "turnfsm" and src == "<root>":
                continue
            if dst not in LAYER and dst != "<root>":
                out.append(f"{imp}: '{dst}' is not a layer of docs/architecture.md")
            elif dst not in ALLOWED.get(src, set()):
                out.append(
                    f"{imp}: {src} (L{LAYER.get(src, '-')}) may not import "
                    f"{dst} (L{LAYER.get(dst, '-')})"
                )
            continue
        top = imp.target.split(".")[0]
        homes = THIRD_PARTY_HOME.get(top)
        if homes is not None and not any(_under(imp.module, h) for h in homes):
            out.append(f"{imp}: '{top}' may only be imported in {', '.join(homes)}")
    return out


@functools.cache
def all_imports() -> tuple[Import, ...]:
    modules = package_modules()
    known = set(modules)
    found: list[Import] = []
    for name, (path, is_pkg) in modules.items():
        rel = path.relative_to(PKG_DIR.parent).as_posix()
        found += imports_in(name, is_pkg, path.read_text("utf-8"), filename=rel, known=known)
    return tuple(found)


# --- the checks ---------------------------------------------------------------------------


def test_the_package_has_the_layered_modules() -> None:
    modules = package_modules()
    assert len(modules) > 10
    for expected in ["turnfsm.errors", "turnfsm.events", "turnfsm.model", "turnfsm.states"]:
        assert expected in modules
    assert "turnfsm.states._machine" in modules


def test_every_module_belongs_to_a_declared_layer() -> None:
    stray = [m for m in package_modules() if component(m) not in LAYER and m != "turnfsm"]
    assert not stray, "modules outside the layers of docs/architecture.md:\n" + "\n".join(stray)


def test_imports_respect_the_layering() -> None:
    bad = violations(all_imports())
    if bad:
        pytest.fail("layering violations:\n" + "\n".join(bad), pytrace=False)


def test_third_party_imports_stay_in_their_home() -> None:
    bad = [v for v in violations(all_imports()) if "may only be imported" in v]
    if bad:
        pytest.fail("third-party imports outside their home:\n" + "\n".join(bad), pytrace=False)


def test_transitions_is_imported_by_the_machine_module() -> None:
    # The rule is not vacuous: the one home does import it.
    targets = {(i.module, i.target.split(".")[0]) for i in all_imports()}
    assert ("turnfsm.states._machine", "transitions") in targets
    assert ("turnfsm.engine._retry", "tenacity") in targets


def test_nothing_below_l4_imports_l4() -> None:
    bad = [
        str(i)
        for i in all_imports()
        if _is_ours(i.target) and component(i.target) in L4 and component(i.module) not in L4
    ]
    if bad:
        pytest.fail("imports of L4 from below:\n" + "\n".join(bad), pytrace=False)


def test_only_the_pins_test_imports_transitions_among_tests() -> None:
    offenders: list[str] = []
    for path in sorted(TESTS_DIR.rglob("*.py")):
        source = path.read_text("utf-8")
        if "transitions" not in source:
            continue  # no import of it can be written without its name: nothing to parse
        for imp in imports_in(f"tests.{path.stem}", False, source, filename=path.name, known=set()):
            if (
                imp.target.split(".")[0] == "transitions"
                and path.name != "test_transitions_pins.py"
            ):
                offenders.append(str(imp))
    assert not offenders, "\n".join(offenders)


# --- the checker itself -------------------------------------------------------------------

KNOWN = {
    "turnfsm",
    "turnfsm.errors",
    "turnfsm.events",
    "turnfsm.model",
    "turnfsm.model._message",
    "turnfsm.states",
    "turnfsm.states._machine",
    "turnfsm.tools",
    "turnfsm.storage",
    "turnfsm.engine",
    "turnfsm.engine._retry",
    "turnfsm.testing",
    "turnfsm.adapters",
    "turnfsm.adapters.llm",
    "turnfsm.adapters.llm.scripted",
}


def _check(module: str, source: str, *, is_pkg: bool = False) -> list[str]:
    is_pkg = is_pkg or module == "turnfsm"
    return violations(imports_in(module, is_pkg, source, known=KNOWN))


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("turnfsm.model._x", "from ..states import State"),
        ("turnfsm.model._x", "from ..events import Event"),
        ("turnfsm.errors", "from .model import Role"),
        ("turnfsm.events", "from turnfsm.states import State"),
        ("turnfsm.states._table", "from ..tools import Tool"),
        ("turnfsm.states._table", "import turnfsm.engine"),
        ("turnfsm.states._table", "from ..audit import Actor"),
        ("turnfsm.audit._log", "from ..render import RunPath"),
        ("turnfsm.audit._log", "from ..storage import StepLog"),
        ("turnfsm.tools._run", "from ..storage import Store"),
        ("turnfsm.tools._run", "from turnfsm import storage"),
        ("turnfsm.adapters.llm.scripted", "from ...enhancers import Enhancer"),
        ("turnfsm.storage._memory", "from ..engine import Engine"),
        ("turnfsm.engine._engine", "from ..replay import Runner"),
        ("turnfsm.engine._engine", "from ..testing import FakeClock"),
        ("turnfsm.engine._engine", "from .. import testing"),
        ("turnfsm.tools._run", "from turnfsm import Tool"),
        ("turnfsm", "from .testing import FakeClock"),
        ("turnfsm.engine._engine", "import transitions"),
        ("turnfsm.states._table", "from transitions import Machine"),
        ("turnfsm.adapters.llm.scripted", "import openai"),
        ("turnfsm.engine._engine", "from tenacity import retry"),
        ("turnfsm.engine._engine", "import fastapi"),
        ("turnfsm.tools._run", "import importlib\nimportlib.import_module('openai')"),
        ("turnfsm.model._x", "def f():\n    from turnfsm.engine import Engine"),
        (
            "turnfsm.model._x",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..states import State",
        ),
        ("turnfsm.newthing", "import os"),
    ],
)
def test_checker_catches(module: str, source: str) -> None:
    found = _check(module, source)
    if module == "turnfsm.newthing":
        assert component(module) not in LAYER
        return
    assert found, f"{module}: {source!r} should be a violation"
    assert module in found[0]


@pytest.mark.parametrize(
    ("module", "source", "is_pkg"),
    [
        ("turnfsm.model._context", "from ._message import Role", False),
        ("turnfsm.model", "from ._message import Role", True),
        ("turnfsm.model._x", "from ..errors import InvalidInput", False),
        ("turnfsm.events", "from .model import InternalMessage", False),
        ("turnfsm.states._machine", "from transitions import Machine", False),
        ("turnfsm.states._machine", "from ..errors import IllegalTransition", False),
        ("turnfsm.tools._run", "from turnfsm.model import ToolCallRequest", False),
        ("turnfsm.tools._run", "from ..states import State", False),
        ("turnfsm.audit._log", "from ..states import State", False),
        ("turnfsm.render._docs", "from ..audit import actor_of", False),
        ("turnfsm.adapters.llm.scripted", "from ...errors import LLMError", False),
        ("turnfsm.adapters.llm", "from .scripted import ScriptedLLM", True),
        ("turnfsm.adapters.llm.openai", "import openai", False),
        ("turnfsm.engine._retry", "import tenacity\nfrom tenacity.wait import wait_base", False),
        ("turnfsm.engine._engine", "from ..tools import Tool\nfrom ..storage import Store", False),
        ("turnfsm.server.app", "import fastapi\nfrom turnfsm import Engine", False),
        ("turnfsm.testing", "from .adapters.llm import ScriptedLLM", False),
        ("turnfsm.cli", "from .. import testing\nimport turnfsm", True),
        ("turnfsm", "from .engine import Engine", True),
    ],
)
def test_checker_allows(module: str, source: str, is_pkg: bool) -> None:
    assert _check(module, source, is_pkg=is_pkg) == []


def test_checker_resolves_relative_imports() -> None:
    [imp] = imports_in(
        "turnfsm.adapters.llm.scripted", False, "from ...errors import X", known=KNOWN
    )
    assert imp.target == "turnfsm.errors"
    [imp] = imports_in("turnfsm.adapters.llm", True, "from . import scripted", known=KNOWN)
    assert imp.target == "turnfsm.adapters.llm.scripted"
    [imp] = imports_in("turnfsm.adapters.llm", True, "from .. import inbound", known=KNOWN)
    assert imp.target == "turnfsm.adapters"  # unknown submodule: the package itself


# --- no import circles ---------------------------------------------------------------------


def module_graph(imports: Iterable[Import], modules: Iterable[str]) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (a package counts as its ``__init__``;
    ``from pkg import name`` of a non-module name counts as importing ``pkg``)."""
    known = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for imp in imports:
        if not _is_ours(imp.target):
            continue
        target = imp.target
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in known and target != imp.module:
            graph.setdefault(imp.module, set()).add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module
    (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_import_circles() -> None:
    # Imports under TYPE_CHECKING and inside functions count: a circle of either
    # kind is two modules that cannot be understood (or moved) one without the other.
    graph = module_graph(all_imports(), package_modules())
    found = circles(graph)
    if found:
        pytest.fail(
            "import circles (each group imports itself through the others):\n"
            + "\n".join(" <-> ".join(group) for group in found),
            pytrace=False,
        )


def test_circle_finder_finds_circles_and_only_circles() -> None:
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},
        "d": {"e"},
        "e": set(),
        "f": {"f", "e"},  # a module importing itself is no circle of modules
        "g": {"h"},
        "h": {"g"},
    }
    assert sorted(circles(graph)) == [["a", "b", "c"], ["g", "h"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_module_graph_resolves_names_to_modules() -> None:
    modules = {"turnfsm.engine", "turnfsm.engine._drive", "turnfsm.engine._decide"}
    imports = [
        *imports_in("turnfsm.engine._decide", False, "from ._drive import Driver", known=modules),
        *imports_in("turnfsm.engine._drive", False, "from . import _decide", known=modules),
        *imports_in("turnfsm.engine", True, "from ._drive import X", known=modules),
    ]
    graph = module_graph(imports, modules)
    assert graph["turnfsm.engine._decide"] == {"turnfsm.engine._drive"}
    assert graph["turnfsm.engine._drive"] == {"turnfsm.engine._decide"}
    assert circles(graph) == [["turnfsm.engine._decide", "turnfsm.engine._drive"]]


# --- no module a newcomer cannot read through ----------------------------------------------

MAX_MODULE_LINES = 700
"""Past this, a module holds more than one thing: split it by responsibility."""


def test_no_module_is_longer_than_the_limit() -> None:
    long = {
        name: n
        for name, (path, _) in package_modules().items()
        if (n := len(path.read_text("utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
