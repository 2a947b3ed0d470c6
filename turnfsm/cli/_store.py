"""The store the commands use: ``--store URL``, else ``$TURNFSM_STORE``, else
the embedded default, a SQLite file in the user's data folder."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

__all__ = ["add_store_option", "default_store_url"]


def default_store_url() -> str:
    env = os.environ.get("TURNFSM_STORE")
    if env:
        return env
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    folder = base / "turnfsm"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'turnfsm.db'}"


def add_store_option(p: argparse.ArgumentParser, *, default: str | None = None) -> None:
    p.add_argument(
        "--store",
        metavar="URL",
        default=default,
        help="where conversations are kept: sqlite:///path.db, files:///dir or memory:// "
        "(default: $TURNFSM_STORE, else a SQLite file in the user's data folder)",
    )
