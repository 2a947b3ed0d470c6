"""``lazy_names``: a package's names imported from their homes when first
asked for (the stores, the importers, tenacity's waits, the telemetry set-up)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from turnfsm._lazy import lazy_names


@pytest.fixture
def package() -> Iterator[types.ModuleType]:
    """A throwaway module whose names live in ``json`` and ``turnfsm._numbers``."""
    module = types.ModuleType("lazy_probe")
    module.__getattr__ = lazy_names(  # type: ignore[method-assign]
        "lazy_probe", {"dumps": "json", "whole_number": "turnfsm._numbers"}
    )
    sys.modules["lazy_probe"] = module
    yield module
    del sys.modules["lazy_probe"]


def test_a_listed_name_is_imported_from_its_home_and_kept(package: types.ModuleType) -> None:
    import json

    import turnfsm._numbers

    assert "dumps" not in vars(package)
    assert package.dumps is json.dumps
    assert vars(package)["dumps"] is json.dumps  # later lookups are plain
    assert package.whole_number is turnfsm._numbers.whole_number


def test_a_name_not_listed_is_an_attribute_error(package: types.ModuleType) -> None:
    with pytest.raises(AttributeError, match="module 'lazy_probe' has no attribute 'loads'"):
        package.loads  # noqa: B018
    assert not hasattr(package, "nothing")


def test_a_relative_home_is_resolved_against_the_package() -> None:
    import turnfsm.storage as storage

    getattr_ = lazy_names("turnfsm.storage", {"MemoryStore": "._memory"})
    from turnfsm.storage._memory import MemoryStore

    assert getattr_("MemoryStore") is MemoryStore
    assert storage.MemoryStore is MemoryStore


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("turnfsm.storage", "SQLiteStore"),
        ("turnfsm.engine", "wait_fixed"),
        ("turnfsm.adapters.inbound", "import_openai_messages"),
        ("turnfsm.observability", "EngineMetrics"),
    ],
)
def test_the_packages_resolve_their_lazy_names(module: str, name: str) -> None:
    package = sys.modules.get(module) or __import__(module, fromlist=["_"])
    assert getattr(package, name).__name__ == name
    with pytest.raises(AttributeError, match=f"module {module!r} has no attribute 'Nope'"):
        package.Nope  # noqa: B018
