"""``turnfsm import FILE``: import a conversation kept in another format;
``turnfsm import --format sessions DIR``: every session file of a folder.

Formats (``--format``, detected by default): ``session`` (session records:
MessageRecord / ToolCallRecord), ``entries`` (alternating user/assistant
entries), ``openai`` (an OpenAI chat ``messages`` list), ``request`` (a
``contextManagement`` or legacy ``messages`` request body), ``chatcontext``
(the architecture's context document: a ChatContext as its fields, with its
ids, branches and state kept), ``context`` (a
context as ``turnfsm contexts export`` writes it; older schema versions are
upgraded). The conversation
becomes a context in state Idle; with ``--store URL`` it is stored there.

``context-folder`` reads the context folders another program wrote
(``metadata.json``, ``message_index.json``, ``messages/{id}.json``): DIR is one
context folder, or a ``contexts/`` or ``data/`` folder of them; each context is
imported on its own, as the ``sessions`` files are (one line each, a context
already stored skipped, one that cannot be imported reported with its file and
JSON path while the others are imported, exit status 2 if one could not be).
A folder given with ``--format auto`` is read as ``context-folder`` when it is
in that layout, else as ``sessions``.

``sessions`` reads a folder: each ``*.json`` file in it is one session in the session records
format, imported as the context whose id is the file's name without
``.json``. One line per file; a file already stored (that id) is skipped, so
importing the folder again adds nothing; a file that cannot be imported is
reported with its JSON path and the others are imported all the same (exit
status 2 if any could not be). The folder is only read.

Prints the new context's id, then a one-line summary; with ``--json``, the
whole context as JSON instead.

Exit status: 0 imported; 2 the file cannot be read, is not JSON, cannot be
converted (one line on stderr with the JSON path), or the store refused it
(a bad store URL, the context already stored).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import anyio

from .. import records
from ..adapters.inbound import (
    IMPORT_FORMATS,
    ImportFormat,
    detect_format,
    import_context,
)
from ..errors import InvalidInput, StoreError, TurnFSMError
from ..model import ChatContext
from ..model._json import MAX_DOCUMENT_DEPTH, loads_json
from ..storage._schema import context_from_document
from ..storage._secrets import redact
from ._errors import CLIError, command_parser
from ._import_context_folder import FORMAT as FOLDER_FORMAT
from ._import_context_folder import import_context_folder_cli, is_context_folder_layout
from ._import_folder import import_folder, summary

__all__ = ["add_parser", "summary"]

_PROG = "turnfsm import"


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub, "import", "import a conversation from another format into a context", __doc__, _run
    )
    p.add_argument(
        "file",
        metavar="FILE",
        help="a JSON file ('-' reads standard input), or a folder of session files "
        "(--format sessions) or of context folders (--format context-folder)",
    )
    p.add_argument(
        "--format",
        choices=("auto", *IMPORT_FORMATS, "context", "sessions", FOLDER_FORMAT),
        default="auto",
        help="the file's format (default: auto, detected from its shape); sessions: "
        "every *.json session file of a folder; context-folder: the context folders "
        "(metadata.json, messages/) of a folder",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help="store the context there (sqlite:///path.db, files:///dir, ...); "
        "without it, nothing is stored",
    )
    p.add_argument("--json", action="store_true", help="print the whole context as JSON")


def _fail(message: str) -> int:
    print(f"{_PROG}: {message}", file=sys.stderr)
    return 2


def _is_context(data: Any) -> bool:
    """A context exported by ``turnfsm contexts export``."""
    return isinstance(data, dict) and {"message_pool", "branches", "schema_version"} <= set(data)


def _read(name: str) -> Any:
    text = sys.stdin.read() if name == "-" else Path(name).read_text("utf-8")
    return loads_json(text, MAX_DOCUMENT_DEPTH)


def _run(args: argparse.Namespace) -> int:
    name: str = args.file
    folder = name != "-" and Path(name).is_dir()
    if args.format == FOLDER_FORMAT or (
        args.format == "auto" and folder and is_context_folder_layout(Path(name))
    ):
        return import_context_folder_cli(_PROG, Path(name), args.store, args.json)
    if args.format == "sessions" or (args.format == "auto" and folder):
        if args.json:
            raise CLIError("--json prints one context: not with a folder (--format sessions)")
        return import_folder(_PROG, Path(name), args.store)
    if folder:
        raise CLIError(
            f"{name}: a folder; --format sessions reads a folder of session files, "
            f"--format {FOLDER_FORMAT} a folder of context folders"
        )
    try:
        data = _read(name)
    except OSError as exc:
        return _fail(f"{name}: cannot read: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        return _fail(f"{name}: not UTF-8 text: {exc.reason} at byte {exc.start}")
    except json.JSONDecodeError as exc:
        return _fail(f"{name}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    try:
        fmt: str
        if args.format == "context" or (args.format == "auto" and _is_context(data)):
            fmt = "context"
            ctx = context_from_document(data, where=name)
        else:
            known: ImportFormat = detect_format(data) if args.format == "auto" else args.format
            fmt = known
            ctx = import_context(data, known)
    except (InvalidInput, StoreError) as exc:
        return _fail(f"{name}: {exc}".replace("\n", " "))
    if args.store:
        try:
            anyio.run(_store, args.store, ctx)
        except _NoStore as exc:
            return _fail(str(exc))
        except ValueError as exc:  # a malformed URL (InvalidInput is one too)
            return _fail(f"{redact(args.store)}: {exc}")
        except (TurnFSMError, OSError) as exc:  # refused, e.g. the id is already stored
            return _fail(f"{redact(args.store)}: {exc}")
    if args.json:
        print(json.dumps(records.to_python(ctx), indent=2, ensure_ascii=False))
        return 0
    print(ctx.id)
    where = f"; stored in {redact(args.store)}" if args.store else " (not stored: give --store URL)"
    print(summary(ctx, fmt) + where)
    return 0


class _NoStore(Exception):
    pass


async def _store(url: str, ctx: ChatContext) -> None:
    """Store ``ctx`` through ``turnfsm.storage.open_store(url)``, looked up when
    called (the function may return the store or an awaitable of it), then close
    the store if it can be closed."""
    storage = importlib.import_module("turnfsm.storage")
    open_store = getattr(storage, "open_store", None)
    if open_store is None:
        raise _NoStore("--store needs turnfsm.storage.open_store, which this build lacks")
    store = open_store(url)
    if inspect.isawaitable(store):
        store = await store
    try:
        await store.create(ctx)
    finally:
        for closer in ("aclose", "close"):
            fn = getattr(store, closer, None)
            if callable(fn):
                done = fn()
                if inspect.isawaitable(done):
                    await done
                break
