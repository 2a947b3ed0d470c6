"""A context folder written by another program, read (never changed) and
imported as the context document of :mod:`._chat_context`.

The layout, one folder per context::

    data/contexts/{context-id}/
        metadata.json          the context without its messages: id, parent_id,
                               config, branches (each with its message_ids and
                               parent_message_id), active_branch_name,
                               current_state, created_at, updated_at
        message_index.json     {"messages": [{"id", "role", "message_type",
                               "created_at", "branch"}, ...]}  (optional)
        messages/{msg-id}.json one message node each: {"id", "message": {"role",
                               "content", "tool_calls", "tool_result",
                               "message_type", "metadata", ...}, "parent_id"}

:func:`context_folders` finds the context folders of a path (a context
folder, a ``contexts/`` folder, or the ``data/`` folder that holds one);
:func:`import_context_folder` imports one; :func:`import_context_folders`
imports every one a path holds, each on its own (:class:`FolderImport`).

How the files become one context document: ``metadata.json``'s fields, with
``message_pool`` made of the message files (the pool is every
``messages/*.json``, whether a branch names it or not; nodes given in
``metadata.json``'s own ``message_pool`` join them, and one given both ways must
be the same). ``message_index.json`` is an index of the message files: each
entry must have its file, and what it says of a message must agree with the
file (role and message type in any spelling; ``created_at`` as the same
instant); a message whose file has no ``metadata`` (or no ``created_at``)
takes its time from the index, and one without ``message_type`` takes the
index's. Then the rules of :mod:`._chat_context` apply: ids kept, roles,
approval statuses and message types read in any spelling, the state one at
rest, unknown fields kept in ``metadata.extra``.

What this module adds to those rules:

- ``metadata.json`` must have ``id`` and ``branches``, every branch its
  ``message_ids``, every message file its ``message`` with a ``role``, the
  index its ``messages`` with an ``id`` each: without them the conversation
  cannot be told;
- a message type that is none of turnfsm's five (``Text``, ``Plan``,
  ``Question``, ``ToolCall``, ``ToolResult``, in any spelling) becomes what the
  message is (``ToolCall`` when it asks for tools, ``ToolResult`` when it holds
  a result, else ``Text``), and the original is kept in
  ``metadata.extra["message_type"]``;
- the index's fields beyond the five above are kept in the message's
  ``metadata.extra["index"]``, and its top-level fields beyond ``messages`` as
  the context's field ``message_index`` (so in ``metadata.extra["source"]`` of
  the active branch's first message, with the context's other unknown fields);
- a folder whose ``metadata.json`` has a ``schema_version`` is a turnfsm files
  store's own context, not another program's, and is refused;
- files the layout does not name are not read; :class:`FolderImport` lists them.

Every problem is a :class:`ContextFolderError`: the file, the JSON path in it,
and what is wrong (``.../messages/msg-1.json: $.message.role: missing``).
Nothing is written: the files are only opened for reading.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .... import records
from ....errors import InvalidInput
from ....model import ChatContext
from ....model._json import MAX_DOCUMENT_DEPTH, JSONTooDeep, loads_json
from ._chat_context import import_chat_context, is_message_type, same_spelling
from ._checks import (
    Ids,
    expect_array,
    expect_object,
    expect_string,
    merge_extra,
    object_key,
    parse_timestamp,
    unmapped_fields,
)

__all__ = [
    "ContextFolderError",
    "FolderImport",
    "context_folders",
    "import_context_folder",
    "import_context_folders",
]

METADATA = "metadata.json"
INDEX = "message_index.json"
MESSAGES = "messages"
_INDEX_KEYS = ("id", "role", "message_type", "created_at", "branch")


class ContextFolderError(InvalidInput):
    """A file of a context folder cannot be imported: ``file`` names it,
    ``where`` is the JSON path of the problem in it (``$`` for the file as a
    whole), ``reason`` says what is wrong."""

    def __init__(self, file: Path, where: str, reason: str) -> None:
        super().__init__(where, reason)
        self.file = file
        self.args = (f"{file}: {where}: {reason}",)


@dataclass(frozen=True, slots=True)
class FolderImport:
    """What became of one context folder: its context, or why it has none."""

    folder: Path
    context: ChatContext | None = None
    error: ContextFolderError | None = None
    not_read: tuple[str, ...] = ()
    """Entries of the folder the layout does not name (``system_prompt.json``,
    ``messages/notes.txt``), relative to it: not read, not imported."""


# ---------------------------------------------------------------------- reading


@contextmanager
def _in(file: Path) -> Iterator[None]:
    """The checks of :mod:`._checks` name a JSON path; this names the file too."""
    try:
        yield
    except ContextFolderError:
        raise
    except InvalidInput as exc:
        raise ContextFolderError(file, exc.where, exc.reason) from None


def _read_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ContextFolderError(path, "$", "missing") from None
    except OSError as exc:
        raise ContextFolderError(path, "$", f"cannot be read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContextFolderError(path, "$", f"not UTF-8 text (byte {exc.start})") from None
    try:
        return loads_json(text, MAX_DOCUMENT_DEPTH)
    except json.JSONDecodeError as exc:
        raise ContextFolderError(
            path, "$", f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except JSONTooDeep as exc:
        raise ContextFolderError(path, "$", f"cannot be read: {exc}") from None


def _object(path: Path) -> dict[str, Any]:
    data = _read_json(path)
    with _in(path):
        return expect_object(data, "$")


def _required(obj: dict[str, Any], key: str, file: Path, at: str = "$") -> Any:
    if key not in obj:
        raise ContextFolderError(file, object_key(at, key), "missing")
    return obj[key]


def _message_file(path: Path, mid: str) -> dict[str, Any]:
    """``messages/{mid}.json``: a node holding a message with a role."""
    node = _object(path)
    given = node.get("id", mid)
    if given != mid:
        raise ContextFolderError(path, "$.id", f"is {given!r}, but the file is named {mid}.json")
    message = _required(node, "message", path)
    with _in(path):
        expect_object(message, "$.message")
    _required(message, "role", path, "$.message")
    return {**node, "id": mid}


@dataclass(slots=True)
class _Folder:
    """One context folder as read: the document being built, and where each part came from."""

    folder: Path
    meta: dict[str, Any]
    pool: dict[str, Any]
    files: dict[str, Path]
    """Message id -> its file (a message given only in metadata.json has none)."""
    extras: dict[str, dict[str, Any]]
    """Message id -> what this module keeps in its ``metadata.extra``."""
    not_read: list[str]
    roles: list[tuple[str, str, str]] = field(default_factory=list)
    """(message id, JSON path of its index entry, the role the index gives)."""

    @property
    def meta_path(self) -> Path:
        return self.folder / METADATA

    @property
    def index_path(self) -> Path:
        return self.folder / INDEX

    def no_file(self, mid: str) -> str:
        return f"no message {mid!r}: there is no file {MESSAGES}/{mid}.json"

    def locate(self, where: str) -> tuple[Path, str]:
        """The file and JSON path of a path of the assembled document."""
        parts = [("$.message_index", self.index_path)]  # message_index.json's other fields
        if where.startswith("$.message_pool"):
            for mid, file in self.files.items():  # a key spelled either way the checks spell it
                parts += [
                    (object_key("$.message_pool", mid), file),
                    (f"$.message_pool.{mid}", file),
                ]
        parts.sort(key=lambda part: -len(part[0]))  # the longest: ids "a" and "a.b"
        for prefix, file in parts:
            if where == prefix or where.startswith((prefix + ".", prefix + "[", prefix + " ")):
                return file, "$" + where[len(prefix) :]
        return self.meta_path, where


def _read_messages(f: _Folder) -> None:
    folder = f.folder / MESSAGES
    if not folder.is_dir():
        if folder.exists():
            f.not_read.append(MESSAGES)
        return
    for entry in sorted(folder.iterdir()):
        name = entry.name
        if name.startswith(".") or not name.endswith(".json") or not entry.is_file():
            f.not_read.append(f"{MESSAGES}/{name}")
            continue
        mid = name[: -len(".json")]
        f.pool[mid] = _message_file(entry, mid)
        f.files[mid] = entry
    inline = f.meta.get("message_pool")
    if inline is None:
        return
    with _in(f.meta_path):
        inline = expect_object(inline, "$.message_pool")
    for mid, node in inline.items():
        file = f.files.get(mid)
        if file is None:
            f.pool[mid] = node
        elif not isinstance(node, dict) or {**node, "id": mid} != f.pool[mid]:
            raise ContextFolderError(
                file, "$", f"differs from {METADATA}'s {object_key('$.message_pool', mid)}"
            )


def _same_instant(a: datetime, b: Any) -> bool:
    try:
        return parse_timestamp(b, "$") == a
    except InvalidInput:
        return True  # not a timestamp: the message's own check says so, naming its file


def _agree(f: _Folder, entry: dict[str, Any], at: str, mid: str) -> None:
    """An index entry against its message: what both give agrees; what only the
    index gives (the time, the message type) is taken."""
    node = f.pool[mid]
    message = node.get("message")
    if not isinstance(message, dict):
        return
    source = f"{MESSAGES}/{mid}.json" if mid in f.files else METADATA
    with _in(f.index_path):
        if entry.get("role") is not None:  # checked once the message's own role is
            f.roles.append((mid, at, expect_string(entry["role"], f"{at}.role")))
        if entry.get("message_type") is not None:
            said = expect_string(entry["message_type"], f"{at}.message_type")
            own = message.get("message_type")
            if own is None:
                message["message_type"] = said
            elif isinstance(own, str) and not same_spelling(said, own):
                raise InvalidInput(f"{at}.message_type", f"is {said!r}, but {source} says {own!r}")
        at_time = parse_timestamp(entry.get("created_at"), f"{at}.created_at")
    if at_time is None:
        return
    meta = message.get("metadata")
    if meta is None:
        message["metadata"] = {"created_at": entry["created_at"]}
    elif isinstance(meta, dict):
        own = meta.get("created_at")
        if own is None:
            message["metadata"] = {**meta, "created_at": entry["created_at"]}
        elif not _same_instant(at_time, own):
            raise ContextFolderError(
                f.index_path,
                f"{at}.created_at",
                f"is {entry['created_at']!r}, but {source} says {own!r}",
            )


def _read_index(f: _Folder) -> None:
    path = f.index_path
    if not path.is_file():
        if path.exists():
            f.not_read.append(INDEX)
        return
    index = _object(path)
    entries = _required(index, "messages", path)
    seen: dict[str, int] = {}
    with _in(path):
        for i, item in enumerate(expect_array(entries, "$.messages")):
            at = f"$.messages[{i}]"
            entry = expect_object(item, at)
            mid = expect_string(_required(entry, "id", path, at), f"{at}.id")
            if mid in seen:
                raise InvalidInput(
                    f"{at}.id", f"{mid!r} is listed twice (also at $.messages[{seen[mid]}])"
                )
            seen[mid] = i
            if mid not in f.pool:
                raise InvalidInput(f"{at}.id", f.no_file(mid))
            _agree(f, entry, at, mid)
            if left := unmapped_fields(entry, _INDEX_KEYS):
                f.extras.setdefault(mid, {})["index"] = left
    if left := unmapped_fields(index, ("messages",)):
        if "message_index" in f.meta:
            raise ContextFolderError(
                f.meta_path,
                "$.message_index",
                f"this name keeps the other fields of {INDEX}; rename the field",
            )
        f.meta["message_index"] = left


def _check_links(f: _Folder) -> None:
    """Every message a branch names has its file (or is in metadata.json's pool)."""
    with _in(f.meta_path):
        branches = expect_object(f.meta["branches"], "$.branches")
        for name, branch in branches.items():
            at = object_key("$.branches", name)
            if not isinstance(branch, dict):
                continue  # the context document's own check says what it must be
            ids = expect_array(
                _required(branch, "message_ids", f.meta_path, at), f"{at}.message_ids"
            )
            for i, mid in enumerate(ids):
                if isinstance(mid, str) and mid not in f.pool:
                    raise InvalidInput(f"{at}.message_ids[{i}]", f.no_file(mid))
            parent = branch.get("parent_message_id")
            if isinstance(parent, str) and parent not in f.pool:
                raise InvalidInput(f"{at}.parent_message_id", f.no_file(parent))


def _other_types(f: _Folder) -> None:
    """A message type none of turnfsm's: kept in ``metadata.extra``, the type derived."""
    for mid, node in f.pool.items():
        message = node.get("message") if isinstance(node, dict) else None
        if not isinstance(message, dict):
            continue
        kind = message.get("message_type")
        if isinstance(kind, str) and not is_message_type(kind):
            f.extras.setdefault(mid, {})["message_type"] = kind
            message["message_type"] = None


def _with_extras(f: _Folder, ctx: ChatContext) -> ChatContext:
    data = records.to_python(ctx)
    for mid, ours in f.extras.items():
        meta = data["message_pool"][mid]["message"]["metadata"]
        file = f.files.get(mid, f.meta_path)
        at = "$" if mid in f.files else object_key("$.message_pool", mid)
        with _in(file):
            meta["extra"] = merge_extra(meta["extra"], ours, f"{at}.message.metadata.extra")
    return records.from_python(ChatContext, data)


def _read_folder(
    folder: Path, now: datetime | None, ids: Ids | None
) -> tuple[ChatContext, list[str]]:
    meta_path = folder / METADATA
    meta = _object(meta_path)
    if "schema_version" in meta:
        raise ContextFolderError(
            meta_path,
            "$.schema_version",
            "this is a context of a turnfsm files store, not another program's: "
            "use that store (--store files://...) or export the context "
            "(turnfsm contexts export)",
        )
    for key in ("id", "branches"):
        _required(meta, key, meta_path)
    f = _Folder(folder, meta, {}, {}, {}, [])
    for entry in sorted(folder.iterdir()):
        if entry.name not in (METADATA, INDEX, MESSAGES):
            f.not_read.append(entry.name)
    _read_messages(f)
    _read_index(f)
    _check_links(f)
    _other_types(f)
    doc = {**f.meta, "message_pool": f.pool}
    try:
        ctx = import_chat_context(doc, now=now, ids=ids)
    except InvalidInput as exc:
        file, where = f.locate(exc.where)
        raise ContextFolderError(file, where, exc.reason) from None
    for mid, at, said in f.roles:
        own = ctx.message_pool[mid].message.role.value
        if not same_spelling(said, own):
            source = f"{MESSAGES}/{mid}.json" if mid in f.files else METADATA
            raise ContextFolderError(
                f.index_path, f"{at}.role", f"is {said!r}, but {source} says {own!r}"
            )
    if f.extras:
        ctx = _with_extras(f, ctx)
    return ctx, f.not_read


# ---------------------------------------------------------------------- the public calls


def context_folders(path: str | Path) -> list[Path]:
    """The context folders ``path`` holds: itself when it has ``metadata.json``;
    else every folder (not a dot-name) of its ``contexts/`` folder, or of itself
    when it has none and one of them has ``metadata.json``. A folder that is
    none of these is a :class:`ContextFolderError`."""
    root = Path(path)
    if not root.is_dir():
        reason = "is not a folder" if root.exists() else "missing"
        raise ContextFolderError(root, "$", reason)
    if (root / METADATA).exists():
        return [root]
    contexts = root / "contexts"
    base = contexts if contexts.is_dir() else root
    found = sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    if base is root and not any((p / METADATA).is_file() for p in found):
        raise ContextFolderError(
            root / METADATA,
            "$",
            "missing: the folder is neither a context folder (metadata.json), a data "
            "folder (contexts/{id}/metadata.json) nor a contexts folder ({id}/metadata.json)",
        )
    if not found:
        raise ContextFolderError(base, "$", "holds no context folder: there is nothing to import")
    return found


def import_context_folder(
    folder: str | Path, *, now: datetime | None = None, ids: Ids | None = None
) -> ChatContext:
    """One context folder as a :class:`ChatContext` (see the module);
    :class:`ContextFolderError` naming the file and the JSON path of a problem."""
    ctx, _ = _read_folder(Path(folder), now, ids)
    return ctx


def import_context_folders(
    path: str | Path, *, now: datetime | None = None, ids: Ids | None = None
) -> list[FolderImport]:
    """Every context folder ``path`` holds (:func:`context_folders`), each
    imported on its own: a folder that cannot be imported has its error, and the
    others are imported all the same. Two folders with the same id: the second
    is an error. :class:`ContextFolderError` when ``path`` holds no context folder."""
    out: list[FolderImport] = []
    seen: dict[str, Path] = {}
    for folder in context_folders(path):
        try:
            ctx, not_read = _read_folder(folder, now, ids)
            if ctx.id in seen:
                raise ContextFolderError(
                    folder / METADATA, "$.id", f"{ctx.id!r} is also the id of {seen[ctx.id]}"
                )
        except ContextFolderError as exc:
            out.append(FolderImport(folder, error=exc))
            continue
        seen[ctx.id] = folder
        out.append(FolderImport(folder, ctx, not_read=tuple(not_read)))
    return out
