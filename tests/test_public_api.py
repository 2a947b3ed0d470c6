"""The public surface: an explicit, sorted ``__all__``, pinned here, and the split
between the application API (the root) and the packages for adapter, enhancer,
store and test authors.

``__all__`` follows ruff's RUF022 "isort-style" order, case-sensitive, as it is
written in turnfsm/__init__.py: SCREAMING_CASE names first, then CamelCase,
then the rest, each group in natural order.
"""

from __future__ import annotations

import importlib
import inspect
import re
from importlib.metadata import version
from types import ModuleType

import pytest

import turnfsm
import turnfsm.errors as errors_mod

EXPECTED_ALL = {
    "Approval",
    "ApprovalStatus",
    "ChatContext",
    "Child",
    "ChildInfo",
    "ContentDelta",
    "ContextBusy",
    "ContextNotFound",
    "Engine",
    "Event",
    "Failed",
    "FilesStore",
    "FinalAnswer",
    "Finished",
    "IllegalTransition",
    "InternalMessage",
    "InvalidInput",
    "LLMError",
    "LLMSummarizer",
    "MemoryStore",
    "MessageNode",
    "Mode",
    "NotAtRest",
    "OutputValidationError",
    "Question",
    "QuestionAsked",
    "Recovery",
    "RetryPolicy",
    "Role",
    "SQLiteStore",
    "State",
    "StateChanged",
    "StopReason",
    "StoreError",
    "Subscription",
    "Summarizer",
    "SummaryFunction",
    "Tool",
    "ToolApprovalRequested",
    "ToolCallError",
    "ToolCallRequest",
    "ToolCallResult",
    "ToolOutcome",
    "ToolRegistry",
    "Turn",
    "TurnCompleted",
    "TurnFSMError",
    "VersionConflict",
    "Worker",
    "__version__",
    "ask_user",
    "open_store",
    "question_tool",
    "records",
    "subtask",
    "tool",
}
MAX_ROOT_NAMES = 60
"""The application API at the root stays small enough to read in one sitting."""

PUBLIC_MODULES = [
    "turnfsm.model",
    "turnfsm.states",
    "turnfsm.engine",
    "turnfsm.tools",
    "turnfsm.enhancers",
    "turnfsm.storage",
    "turnfsm.events",
    "turnfsm.records",
    "turnfsm.errors",
    "turnfsm.testing",
    "turnfsm.adapters.llm",
    "turnfsm.adapters.inbound",
    "turnfsm.adapters.inbound.importers",
    "turnfsm.adapters.outbound",
    "turnfsm.adapters.outbound.exporters",
    "turnfsm.audit",
    "turnfsm.render",
]

# Names that are not the application's: each lives in the public module for those
# who write that part (and nowhere at the root).
AUTHOR_MODULES: dict[str, set[str]] = {
    "turnfsm.adapters.llm": {
        "LLM",
        "LLMChunk",
        "LLMRequest",
        "LLMResponse",
        "TextDelta",
        "ThinkingDelta",
        "ToolCallData",
        "ToolCallDelta",
    },
    "turnfsm.enhancers": {
        "SUMMARY_PROMPT",
        "BudgetExceeded",
        "Compaction",
        "CurrentMessageMarker",
        "Enhancer",
        "EstimatingCounter",
        "LLMRequest",
        "StickyFiles",
        "SystemPromptEnhancer",
        "TokenBudget",
        "TokenCounter",
        "ToolCallHistory",
        "ToolDefinitionsEnhancer",
        "UserLocale",
        "calibration",
        "current_message",
        "summary_block",
        "summary_of",
    },
    "turnfsm.storage": {"Commit", "ContextSummary", "StepLog", "Store"},
    "turnfsm.states": {"RESTING", "TRANSITIONS", "Transition", "Trigger"},
    "turnfsm.engine": {"Clock", "SystemClock"},
    "turnfsm.testing": {"AnswerSpec", "FakeClock", "ScriptedLLM", "SequentialIds"},
}


def isort_key(name: str) -> tuple[int, list[int | str]]:
    """RUF022's order: SCREAMING_CASE, then CamelCase, then anything else; natural
    sort inside each group (case-sensitive)."""
    if len(name) == 1 or all(c.isupper() or c.isdigit() or c == "_" for c in name):
        group = 0
    else:
        first = next((c for c in name if c.isalnum()), "")
        group = 1 if first.isupper() else 2
    natural: list[int | str] = [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]
    return group, natural


def test_isort_key_orders_like_ruff() -> None:
    names = ["tool", "__version__", "Approval", "LLM", "TRANSITIONS", "Tool2", "Tool10", "A"]
    assert sorted(names, key=isort_key) == [
        "A",
        "LLM",
        "TRANSITIONS",
        "Approval",
        "Tool2",
        "Tool10",
        "__version__",
        "tool",
    ]


def test_all_is_sorted_as_written() -> None:
    assert turnfsm.__all__ == sorted(turnfsm.__all__, key=isort_key)


def test_all_has_no_duplicates() -> None:
    dupes = {n for n in turnfsm.__all__ if turnfsm.__all__.count(n) > 1}
    assert not dupes


def test_all_is_a_list_of_str() -> None:
    assert isinstance(turnfsm.__all__, list)
    assert all(isinstance(n, str) for n in turnfsm.__all__)


def test_every_name_in_all_resolves() -> None:
    missing = [n for n in turnfsm.__all__ if not hasattr(turnfsm, n)]
    assert not missing


def test_all_is_the_pinned_public_surface() -> None:
    actual = set(turnfsm.__all__)
    assert actual == EXPECTED_ALL, (
        f"added: {sorted(actual - EXPECTED_ALL)}; removed: {sorted(EXPECTED_ALL - actual)}"
    )


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from turnfsm import *", namespace)
    namespace.pop("__builtins__", None)
    assert set(namespace) == set(turnfsm.__all__)


def test_version_matches_the_installed_distribution() -> None:
    assert turnfsm.__version__ == version("turnfsm")


def test_public_names_come_from_public_or_private_modules_of_ours() -> None:
    for name in turnfsm.__all__:
        obj = getattr(turnfsm, name)
        mod = getattr(obj, "__module__", None)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert mod is not None and mod.startswith("turnfsm"), (name, mod)


def test_the_root_holds_at_most_sixty_names() -> None:
    assert len(turnfsm.__all__) <= MAX_ROOT_NAMES, len(turnfsm.__all__)


def test_every_error_lives_in_errors_and_the_root_has_their_base() -> None:
    assert "TurnFSMError" in turnfsm.__all__
    for name in errors_mod.__all__:
        err = getattr(errors_mod, name)
        assert issubclass(err, errors_mod.TurnFSMError), name
    at_root = {n for n in turnfsm.__all__ if n in errors_mod.__all__}
    assert at_root <= set(errors_mod.__all__)
    for name in at_root:
        assert getattr(turnfsm, name) is getattr(errors_mod, name)


@pytest.mark.parametrize("name", sorted(turnfsm.MOVED))
def test_a_moved_name_still_resolves_with_a_warning_naming_its_module(name: str) -> None:
    home = importlib.import_module(turnfsm.MOVED[name])
    assert name in home.__all__
    assert name not in turnfsm.__all__
    with pytest.warns(DeprecationWarning, match=rf"turnfsm\.{name} moved to {home.__name__}"):
        obj = getattr(turnfsm, name)
    assert obj is getattr(home, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        turnfsm.Nope  # noqa: B018
    with pytest.raises(ImportError):
        exec("from turnfsm import Nope", {})


def test_moved_names_are_not_star_imported() -> None:
    namespace: dict[str, object] = {}
    exec("from turnfsm import *", namespace)
    assert not set(namespace) & set(turnfsm.MOVED)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_public_module_all_resolves(module_name: str) -> None:
    mod: ModuleType = importlib.import_module(module_name)
    names = mod.__all__
    assert names, module_name
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module_name}.__all__ names that do not resolve: {missing}"
    assert len(names) == len(set(names)), f"{module_name}.__all__ has duplicates"
    assert names == sorted(names, key=isort_key), f"{module_name}.__all__ is not sorted"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_public_module_all_exports_nothing_private(module_name: str) -> None:
    mod = importlib.import_module(module_name)
    private = [n for n in mod.__all__ if n.startswith("_")]
    assert not private


@pytest.mark.parametrize("module_name", sorted(AUTHOR_MODULES))
def test_author_types_live_in_their_module_not_at_the_root(module_name: str) -> None:
    mod = importlib.import_module(module_name)
    names = AUTHOR_MODULES[module_name]
    assert names <= set(mod.__all__), sorted(names - set(mod.__all__))
    at_root = sorted(names & set(turnfsm.__all__))
    assert not at_root, f"adapter/author types at the root: {at_root}"


def test_the_application_api_stays_at_the_root() -> None:
    app = {"Engine", "State", "Turn", "StopReason", "Tool", "tool", "Approval", "ApprovalStatus"}
    app |= {"MemoryStore", "SQLiteStore", "FilesStore", "open_store", "ChatContext"}
    app |= {"MessageNode", "InternalMessage", "StateChanged", "ContentDelta", "TurnCompleted"}
    app |= {"TurnFSMError", "ContextNotFound", "InvalidInput", "records"}
    assert app <= set(turnfsm.__all__), sorted(app - set(turnfsm.__all__))


def test_top_level_reexports_are_the_same_objects() -> None:
    for module_name in PUBLIC_MODULES:
        mod = importlib.import_module(module_name)
        for name in mod.__all__:
            if name in turnfsm.__all__:
                assert getattr(turnfsm, name) is getattr(mod, name), (module_name, name)


# --- the error hierarchy ------------------------------------------------------------------


def _error_classes() -> dict[str, type[BaseException]]:
    return {
        name: obj
        for name, obj in vars(errors_mod).items()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == errors_mod.__name__
    }


def _docstring_tree() -> dict[str, str | None]:
    """name -> parent name, parsed from the tree drawn in errors.py's docstring."""
    doc = errors_mod.__doc__ or ""
    body = doc.split("The tree::", 1)[1]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in body.splitlines():
        m = re.match(r"^([\s│├└─]*?)([A-Z][A-Za-z]+)(\s|$)", line)
        if not m or not line.strip():
            continue
        if parents and not re.search(r"[├└│]", m.group(1)) and stack:
            break  # text after the tree
        col = len(m.group(1))
        name = m.group(2)
        while stack and stack[-1][0] >= col:
            stack.pop()
        parents[name] = stack[-1][1] if stack else None
        stack.append((col, name))
    return parents


def test_errors_module_defines_errors() -> None:
    assert len(_error_classes()) >= 10


def test_every_error_is_a_turnfsm_error() -> None:
    for name, cls in _error_classes().items():
        assert issubclass(cls, errors_mod.TurnFSMError), name


def test_errors_all_lists_every_error_class() -> None:
    assert set(errors_mod.__all__) == set(_error_classes())


def test_docstring_tree_mentions_every_error_class() -> None:
    doc = errors_mod.__doc__ or ""
    missing = [n for n in _error_classes() if not re.search(rf"\b{n}\b", doc)]
    assert not missing, f"not in the tree of errors.py's docstring: {missing}"


def test_docstring_tree_matches_the_class_hierarchy() -> None:
    tree = _docstring_tree()
    classes = _error_classes()
    assert set(tree) == set(classes)
    assert tree["TurnFSMError"] is None
    for name, parent in tree.items():
        if parent is None:
            continue
        assert classes[parent] in classes[name].__bases__, (
            f"the tree draws {name} under {parent}; its bases are {classes[name].__bases__}"
        )


def test_llm_errors_carry_retryability_as_data() -> None:
    assert errors_mod.TransientLLMError.retryable is True
    assert errors_mod.PermanentLLMError.retryable is False
