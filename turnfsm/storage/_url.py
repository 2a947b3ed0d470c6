"""Store URLs: :func:`open_store`.

=====================================  ===================================================
``memory://``                          :class:`~turnfsm.storage.MemoryStore` (nothing kept)
``sqlite:///relative/path.db``         :class:`~turnfsm.storage.SQLiteStore`; three
                                       slashes: a path relative to the working directory
``sqlite:////absolute/path.db``        four slashes: an absolute path
``sqlite:///chats.db?synchronous=NORMAL&busy_timeout=10``
                                       options of the SQLite store
``files:///dir``, ``files:////dir``    the file store, same path rule;
                                       ``?fsync=false`` turns its fsyncs off
``postgresql://user@host:5432/db``     :class:`~turnfsm.storage.PostgresStore` (needs
                                       ``turnfsm[postgres]``); libpq's URL, passed as it is
=====================================  ===================================================

``open_store(url, create=False)`` opens only a store that exists: a missing
SQLite file or files folder is a :class:`~turnfsm.errors.StoreError` and
nothing is created (for read-only uses).

The path rule is SQLAlchemy's: what follows ``scheme:///`` is the path as
written, so ``sqlite:///data/chats.db`` is ``data/chats.db`` and
``sqlite:////var/lib/chats.db`` is ``/var/lib/chats.db``. A host part
(``sqlite://host/...``) is refused. Percent-escapes in the path are decoded.

No message shows a URL's password: each quotes it as
:func:`~turnfsm.storage._secrets.redact` gives it (``user:***@``,
``?password=***``).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from ..errors import InvalidInput, StoreError
from ._base import Store
from ._files_foreign import foreign_layout
from ._memory import MemoryStore
from ._secrets import redact

__all__ = [
    "SCHEMES",
    "SQLITE_OPTIONS",
    "absolute_url",
    "open_store",
    "path_and_options",
    "store_location",
]

SCHEMES = ("memory://", "sqlite:///path.db", "files:///dir", "postgresql://user@host/db")
"""The URL forms :func:`open_store` knows, for error messages."""

SQLITE_OPTIONS = frozenset({"synchronous", "busy_timeout"})
"""The options a ``sqlite://`` URL may have."""


_FILES_OPTIONS = {"fsync"}


def open_store(url: str, *, create: bool = True) -> Store:
    """The store a URL names (see the module docstring for the forms).

    With ``create=False`` the store must already exist; nothing is created.

    Raises :class:`~turnfsm.errors.InvalidInput` for a malformed URL or an
    unknown scheme, and :class:`~turnfsm.errors.StoreError` when the store
    cannot be opened (a damaged file, a backend not available).
    """
    if isinstance(url, str):
        redact(url)  # its password remembered for scrub()
    if not isinstance(url, str) or "://" not in url:
        hint = _hint(url) if isinstance(url, str) else ""
        raise InvalidInput(
            "url", f"{redact(url)!r} is not a store URL; use one of {', '.join(SCHEMES)}{hint}"
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme == "memory":
        if url.split("://", 1)[1]:
            raise InvalidInput(
                "url", f"{redact(url)!r}: a memory:// store takes no path or options"
            )
        return MemoryStore()
    if scheme == "sqlite":
        path, options = path_and_options(url)
        unknown = set(options) - SQLITE_OPTIONS
        if unknown:
            raise InvalidInput(
                "url",
                f"{redact(url)!r}: unknown sqlite option(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(SQLITE_OPTIONS))}",
            )
        kwargs: dict[str, Any] = {}
        if "synchronous" in options:
            kwargs["synchronous"] = options["synchronous"]
        if "busy_timeout" in options:
            try:
                kwargs["busy_timeout"] = float(options["busy_timeout"])
            except ValueError:
                raise InvalidInput(
                    "url", f"{redact(url)!r}: busy_timeout must be a number of seconds"
                ) from None
        if not create:
            _must_exist(url, path, folder=False)
        # imported when a SQLite store is opened: an in-memory engine never loads sqlite3
        from ._sqlite import SQLiteStore

        return SQLiteStore(path, **kwargs)
    if scheme == "files":
        path, options = path_and_options(url)
        if not create:
            _must_exist(url, path, folder=True)
        return _files_store(url, path, options)
    if scheme in ("postgresql", "postgres"):
        return _postgres_store(url, create=create)
    raise InvalidInput(
        "url", f"{redact(url)!r}: unknown store scheme {scheme!r}; use one of {', '.join(SCHEMES)}"
    )


def _postgres_store(url: str, *, create: bool) -> Store:
    """The PostgreSQL store: imported only when asked for (it needs psycopg).
    With ``create=False`` a database without turnfsm's tables is refused on
    first use."""
    from ._postgres import PostgresStore

    return PostgresStore(url, create=create)


def _must_exist(url: str, path: str, *, folder: bool) -> None:
    p = Path(path)
    where = os.path.abspath(path)  # the folder a relative path is in, shown
    if folder and not (p / "contexts").is_dir():
        foreign = foreign_layout(p)  # another program's folders: say how to import them
        raise foreign or StoreError(
            f"{redact(url)!r}: no files store at {where} (it is not created here)"
        )
    if not folder and not p.is_file():
        raise StoreError(f"{redact(url)!r}: no SQLite store at {where} (it is not created here)")


def absolute_url(url: str) -> str:
    """``url`` with its path made absolute, for a ``sqlite://`` or ``files://``
    URL whose path is relative to the working directory
    (``sqlite:///chats.db`` in ``/srv``: ``sqlite:////srv/chats.db``); any
    other URL, or one that does not parse, as it is. The store it names is the
    same; messages about it then show the whole path."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("sqlite", "files"):
        return url
    try:
        path, _ = path_and_options(url)
    except InvalidInput:
        return url
    if os.path.isabs(path):
        return url
    rest = url.split("://", 1)[1]
    query = rest[rest.index("?") :] if "?" in rest else ""
    try:
        absolute = quote(os.path.abspath(path))
    except (UnicodeEncodeError, ValueError):  # a path no file can have: open_store says so
        return url
    return f"{url.split('://', 1)[0]}:///{absolute}{query}"


def store_location(url: str) -> str:
    """Where the store ``url`` names keeps its data, for people: the absolute
    path of a SQLite file or files folder, ``memory (nothing is kept)``, else
    the URL without its password."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "memory":
        return "memory:// (nothing is kept)"
    if scheme in ("sqlite", "files"):
        try:
            path, _ = path_and_options(url)
        except InvalidInput:
            return redact(url)
        return os.path.abspath(path)
    return redact(url)


def _hint(url: str) -> str:
    """The URL meant by something that is not one: a path (``/srv/x.db``,
    ``x.db``), or a ``sqlite:``/``files:`` URL short of its slashes
    (``sqlite:/srv/x.db``); empty when nothing fits."""
    if not url.strip() or "@" in url:
        return ""
    scheme, sep, rest = url.partition(":")
    if sep and scheme.lower() in ("sqlite", "files"):
        if not rest.strip("/"):
            return ""
        path, kind = rest, ("a SQLite file" if scheme.lower() == "sqlite" else "a files store")
    else:
        scheme, path, kind = "sqlite", url, "a SQLite file"
    return f" (for {kind} at {path}: {scheme.lower()}:///{path})"


def path_and_options(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if parts.netloc:
        # sqlite://srv/x.db: srv taken for a host; the path meant is one of two
        meant = f"{parts.netloc}{parts.path}"
        if "@" in meant:
            meant = "path"
        raise InvalidInput(
            "url",
            f"{redact(url)!r}: a {parts.scheme}:// URL has no host; "
            f"write {parts.scheme}:///{meant} for {meant} under the working directory, "
            f"or {parts.scheme}:////{meant} for /{meant}",
        )
    if parts.fragment:
        raise InvalidInput("url", f"{redact(url)!r}: a store URL has no #fragment")
    path = unquote(parts.path)
    path = path[1:] if path.startswith("/") else path
    if not path:
        raise InvalidInput("url", f"{redact(url)!r}: the URL names no path")
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise InvalidInput("url", f"{redact(url)!r}: malformed query") from None
    options: dict[str, str] = {}
    for key, value in pairs:
        if key in options:
            raise InvalidInput("url", f"{redact(url)!r}: option {key!r} is given twice")
        options[key] = value
    return path, options


def _flag(url: str, key: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise InvalidInput("url", f"{redact(url)!r}: {key} must be true or false, not {value!r}")


def _files_store(url: str, path: str, options: dict[str, str]) -> Store:
    name = f"{__package__}._files"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        raise StoreError(
            f"{redact(url)!r}: the files:// store is not available in this build "
            f"({name} is missing)"
        ) from exc
    factory = getattr(module, "FilesStore", None)
    if factory is None:
        raise StoreError(f"{redact(url)!r}: {name} defines no FilesStore")
    unknown = set(options) - _FILES_OPTIONS
    if unknown:
        raise InvalidInput(
            "url",
            f"{redact(url)!r}: unknown files option(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(_FILES_OPTIONS))}",
        )
    kwargs = {key: _flag(url, key, value) for key, value in options.items()}
    try:
        return cast(Store, factory(path, **kwargs))
    except OSError as exc:
        raise StoreError(f"{redact(url)!r}: cannot open the folder: {exc.strerror or exc}") from exc
