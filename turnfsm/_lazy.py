"""Names a module imports when first asked for (PEP 562).

A package whose names need a heavy import (a store's driver, a third-party
SDK, the importers) lists each name with its home module; :func:`lazy_names`
makes the package's module ``__getattr__`` from that list. The first lookup
imports the home, keeps the value in the package's namespace (later lookups
are plain) and returns it; a name not in the list is an ``AttributeError``,
as for any module.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(module: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``module`` for the names of ``homes``, each
    mapped to its home: an absolute module name, or one relative to
    ``module`` (``"._sqlite"``)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, module), name)
        vars(sys.modules[module])[name] = value
        return value

    return __getattr__
