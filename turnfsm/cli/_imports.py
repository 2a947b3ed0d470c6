"""What ``--llm`` and ``--tools module:attribute`` name: the application's own
model adapter and tools, imported as uvicorn imports an app (the working
directory first on ``sys.path``, as its ``--app-dir`` default does)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from ..tools import Tool
from ._errors import CLIError

__all__ = ["add_app_options", "llm_label", "load_llm", "load_tools", "named"]


def add_app_options(p: argparse.ArgumentParser) -> None:
    """``--tools`` and ``--llm``, as every command that runs a model has them."""
    p.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="add tools (a tool, or a list of them); MODULE is looked for in the "
        "working directory first, then on PYTHONPATH (repeatable)",
    )
    p.add_argument(
        "--llm",
        metavar="MODULE:ATTR",
        help="the model adapter to use instead (an object with stream(request), or a "
        "function of no arguments returning one); MODULE as for --tools",
    )


def _import(module: str) -> Any:
    """``module``, with the working directory first on ``sys.path`` (where
    ``python -m`` and uvicorn's ``--app-dir .`` look too; it stays there, so
    that the module's own later imports of its siblings work)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    return importlib.import_module(module)


def named(flag: str, spec: str) -> Any:
    """The object ``module:attribute`` names."""
    module, sep, attr = spec.partition(":")
    names = [*module.split("."), *attr.split(".")]
    if not sep or not all(name.isidentifier() for name in names):
        # a path (../x), a relative module (.x), an empty part: never imported
        raise CLIError(
            f"{flag} {spec!r}: expected module:attribute, dotted Python names "
            "(e.g. mypackage.tools:search)"
        )
    try:
        found: Any = _import(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            raise CLIError(
                f"{flag} {spec!r}: no module named {exc.name!r} in the working directory "
                f"({os.getcwd()}) or on PYTHONPATH; run from the folder that holds it, "
                "or add that folder to PYTHONPATH"
            ) from None
        raise CLIError(f"{flag} {spec!r}: importing {module} failed: {exc}") from None
    except ImportError as exc:
        raise CLIError(f"{flag} {spec!r}: importing {module} failed: {exc}") from None
    except Exception as exc:  # the module's own code failed as it was imported
        raise CLIError(
            f"{flag} {spec!r}: importing {module} failed: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        for part in attr.split("."):
            found = getattr(found, part)
    except AttributeError as exc:
        raise CLIError(f"{flag} {spec!r}: {exc}") from None
    return found


def load_tools(specs: list[str]) -> list[Tool]:
    """The tools ``module:attribute`` names (a tool, or a list of them)."""
    out: list[Tool] = []
    for spec in specs:
        found = named("--tools", spec)
        items = list(found) if isinstance(found, list | tuple) else [found]
        for item in items:
            if not isinstance(item, Tool):
                raise CLIError(f"--tools {spec!r}: {item!r} is not a tool (use @tool)")
            out.append(item)
    return out


def load_llm(spec: str) -> Any:
    """The model adapter ``--llm module:attribute`` names: the object, or what
    the function or class it names returns when called with no arguments."""
    found = named("--llm", spec)
    # a class has a stream function too: it is made, as a factory is called
    factory = isinstance(found, type) or not callable(getattr(found, "stream", None))
    llm = found() if factory and callable(found) else found
    if not callable(getattr(llm, "stream", None)):
        raise CLIError(f"--llm {spec!r}: {found!r} is no model adapter (no stream method)")
    return llm


def llm_label(spec: str, llm: Any) -> str:
    """What a ``--llm`` model is called (banners, a new context's model, the
    metrics' model label): its own ``model`` when it names one, else the
    ``module:attribute`` it was given as."""
    own = getattr(llm, "model", None)
    return own if isinstance(own, str) and own else spec
