"""The store the commands use: ``--store URL``, else ``$TURNFSM_STORE``, else
the embedded default, a SQLite file in the user's data folder."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import InvalidInput, StoreError
from ..storage import Store, open_store
from ..storage._secrets import redact, scrub
from ..storage._url import absolute_url, store_location
from ._errors import CLIError

__all__ = [
    "add_store_option",
    "approval_mode",
    "default_store_url",
    "denial_reason",
    "open_cli_store",
    "store_location",
]


def approval_mode(given: str | None) -> str:
    """``--approve`` as given, else the rule every command shares: ask on a
    terminal, deny when there is no one to ask (piped input, CI)."""
    if given:
        return given
    return "ask" if sys.stdin is not None and sys.stdin.isatty() else "none"


DENIED_BY_DEFAULT = (
    "no one to ask: stdin is not a terminal, where calls that need approval are denied by default"
)
HOW_TO_APPROVE = "--approve all approves them; --approve ask reads y/N from stdin"


def denial_reason(given: str | None) -> str:
    """Why a call was denied without asking: ``--approve none`` as given, or
    the default policy without a terminal."""
    return f"--approve {given}" if given else DENIED_BY_DEFAULT


def default_store_url(*, create: bool = True) -> str:
    """``$TURNFSM_STORE``, else the SQLite file in the user's data folder (whose
    folder is made only when ``create``)."""
    env = os.environ.get("TURNFSM_STORE")
    if env:
        return env
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    folder = base / "turnfsm"
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'turnfsm.db'}"


def open_cli_store(url: str | None, *, create: bool = True) -> tuple[Store, str]:
    """The store of ``--store`` (or the default) and its URL as messages show
    it (its password as ``***``); a bad, missing (read-only commands:
    ``create=False``) or unavailable store is a one-line usage error naming
    the URL, without its password. A relative ``sqlite:///`` or ``files:///``
    path is made absolute first (``sqlite:///chats.db`` in ``/srv`` is
    ``sqlite:////srv/chats.db``: the same store), so every message shows where
    the store is."""
    where = absolute_url(url or default_store_url(create=create))
    shown = redact(where)
    try:
        store = open_store(where, create=create)
        check_now = getattr(store, "check_now", None)
        if check_now is not None:  # a server store: connect now, fail before starting
            check_now()
        return store, shown
    except InvalidInput as exc:
        message = exc.reason
    except StoreError as exc:
        message = str(exc)
    except OSError as exc:
        named = os.path.abspath(exc.filename) if isinstance(exc.filename, str) else where
        message = f"{named}: {exc.strerror or exc}"
    message = scrub(message)
    if shown not in message:
        message = f"{shown}: {message}"
    raise CLIError(f"--store: {message}")


def add_store_option(p: argparse.ArgumentParser, *, default: str | None = None) -> None:
    p.add_argument(
        "--store",
        metavar="URL",
        default=default,
        help="where conversations are kept: sqlite:///path.db, files:///dir or memory:// "
        "(default: $TURNFSM_STORE, else a SQLite file in the user's data folder)",
    )
