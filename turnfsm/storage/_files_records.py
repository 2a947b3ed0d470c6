"""The files store's records: how each of a context's files is made and read
back (validated strictly), and the commit journal's format. The layout and
the crash rules are :mod:`turnfsm.storage._files`'s, which does the writing.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ContextNotFound, SchemaVersionError, StoreError
from ..model import SCHEMA_VERSION, ChatContext, InternalMessage, MessageNode
from ..records import from_json, to_python
from ._schema import (
    check_version,
    context_problems,
    json_path,
    upcast_branch,
    upcast_context,
    upcast_message,
    validation_problem,
)

_JOURNAL_FORMAT = 1
_M = TypeVar("_M")

# ---------------------------------------------------------------------- reading


@dataclass(slots=True, kw_only=True)
class _Metadata(ChatContext):
    """``metadata.json``: the context without its messages, and two fields of the layout."""

    detached_message_ids: list[str] = field(default_factory=list)
    """Pool messages no branch names (the pool is kept whole)."""
    steps_bytes: Annotated[int, Field(ge=0)] = 0
    """How much of ``steps.jsonl`` belongs to committed versions."""


@dataclass(slots=True, kw_only=True)
class _MessageFile(MessageNode):
    """``messages/{id}.json``: a message node and its schema version."""

    schema_version: int


class _StepLine(BaseModel):
    """One line of ``steps.jsonl``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    version: int
    from_: str = Field(alias="from")
    trigger: str
    to: str
    at: datetime
    detail: dict[str, Any] | None = None


class _SummaryConfig(BaseModel):
    """What ``list_contexts`` reads of a context's config."""

    model_config = ConfigDict(extra="ignore")
    title: str | None = None
    model_id: str | None = None
    archived: bool = False


class _Summary(BaseModel):
    """What ``list_contexts`` reads of ``metadata.json``."""

    model_config = ConfigDict(extra="ignore")
    id: str
    current_state: str
    version: int
    created_at: datetime
    updated_at: datetime
    parent_id: str | None = None
    config: _SummaryConfig | None = None


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _json_document(raw: bytes, path: Path | str) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StoreError(
            f"{path}: not UTF-8 text (byte {exc.start}); the file is left as it is"
        ) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StoreError(f"{path}: not valid JSON ({exc}); the file is left as it is") from None


def _validated(model: type[_M], raw: bytes, path: Path | str) -> _M:
    """``raw`` as ``model``, strictly, or a StoreError naming the file and the field."""
    try:
        return from_json(model, raw, strict=True)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            _json_document(raw, path)  # says why (not UTF-8, not JSON)
        raise StoreError(f"{path}: {validation_problem(exc)}; the file is left as it is") from None


def _record_version(raw: bytes, path: Path) -> tuple[dict[str, Any], int]:
    """A stored JSON object and its schema version (refused when newer)."""
    data = _json_document(raw, path)
    if not isinstance(data, dict):
        raise StoreError(f"{path}: $: expected a JSON object, found {type(data).__name__}")
    version = check_version(data.pop("schema_version", None), where=f"{path}: $.schema_version")
    return data, version


def _safe_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\x00" not in name and name not in (".", "..")


def _node_of(file: _MessageFile) -> MessageNode:
    return MessageNode(id=file.id, message=file.message, parent_id=file.parent_id)


def _read_message(path: Path, mid: str, named_at: str) -> MessageNode:
    try:
        raw = _read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        raise StoreError(f"{path}: missing, but metadata.json names it at {named_at}") from None
    try:
        file: _MessageFile | None = from_json(_MessageFile, raw, strict=True)
    except ValidationError:
        file = None
    if file is None or file.schema_version != SCHEMA_VERSION:
        data, version = _record_version(raw, path)
        if version == SCHEMA_VERSION:
            _validated(_MessageFile, raw, path)  # raises, naming the field
        data = upcast_message(data, version, where=str(path))
        data["schema_version"] = SCHEMA_VERSION
        file = _validated(_MessageFile, json.dumps(data, default=str).encode(), path)
    if file.id != mid:
        raise StoreError(f"{path}: $.id: the message is {file.id!r}, the file is named {mid!r}")
    return _node_of(file)


def _read_metadata(path: Path) -> _Metadata:
    """metadata.json at the current schema version (upcast when older), validated."""
    raw = _read_bytes(path)
    try:
        meta: _Metadata | None = from_json(_Metadata, raw, strict=True)
    except ValidationError:
        meta = None
    if meta is None or meta.schema_version != SCHEMA_VERSION:
        data, version = _record_version(raw, path)
        if version == SCHEMA_VERSION:
            _validated(_Metadata, raw, path)  # raises, naming the field
        branches = data.get("branches")
        if isinstance(branches, dict):
            data["branches"] = {
                name: upcast_branch(b, version, where=f"{path}: {json_path(('branches', name))}")
                if isinstance(b, dict)
                else b
                for name, b in branches.items()
            }
        data = upcast_context(data, version, where=str(path))
        data["schema_version"] = SCHEMA_VERSION
        meta = _validated(_Metadata, json.dumps(data, default=str).encode(), path)
    return meta


def _read_context(folder: Path, context_id: str) -> tuple[ChatContext, int]:
    """The whole context in ``folder`` and the committed length of its steps, validated."""
    path = folder / "metadata.json"
    try:
        meta = _read_metadata(path)
    except (FileNotFoundError, NotADirectoryError):
        raise ContextNotFound(context_id) from None
    if meta.id != context_id:
        raise StoreError(f"{path}: $.id: the context is {meta.id!r}, its folder {context_id!r}")
    pool: dict[str, MessageNode] = {}
    named: list[tuple[str, tuple[str | int, ...]]] = [
        (mid, ("branches", name, "message_ids", i))
        for name, b in meta.branches.items()
        for i, mid in enumerate(b.message_ids)
    ]
    named += [(mid, ("detached_message_ids", i)) for i, mid in enumerate(meta.detached_message_ids)]
    messages = folder / "messages"
    for mid, loc in named:
        if mid in pool:
            continue
        if not _safe_name(mid):
            raise StoreError(f"{path}: {json_path(loc)}: {mid!r} cannot be a message file name")
        pool[mid] = _read_message(messages / f"{mid}.json", mid, json_path(loc))
    fields = {f.name: getattr(meta, f.name) for f in dataclasses.fields(ChatContext)}
    fields["message_pool"] = pool
    ctx = ChatContext(**fields)
    problems = context_problems(ctx)
    if problems:
        loc, problem = problems[0]
        raise StoreError(f"{path}: {json_path(loc)}: {problem}; the file is left as it is")
    return ctx, meta.steps_bytes


# ---------------------------------------------------------------------- the journal


def _journal_bytes(
    context_id: str,
    from_version: int,
    to_version: int,
    files: list[tuple[str, bytes]],
    steps: tuple[int, bytes] | None,
) -> bytes:
    """A header line (JSON), then the bodies: every file's content, then the steps."""
    body = b"".join(data for _, data in files) + (steps[1] if steps else b"")
    header = {
        "turnfsm_journal": _JOURNAL_FORMAT,
        "context": context_id,
        "from_version": from_version,
        "to_version": to_version,
        "files": [[name, len(data)] for name, data in files],
        "steps": [steps[0], len(steps[1])] if steps else None,
        "crc32": zlib.crc32(body),
    }
    return json.dumps(header).encode() + b"\n" + body


class _JournalHeader(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turnfsm_journal: int
    context: str
    from_version: int
    to_version: int
    files: list[tuple[str, int]]
    steps: tuple[int, int] | None
    crc32: int


def _journal_file_name(name: str) -> bool:
    """What a journal may write: the two head files and message files."""
    if name in ("metadata.json", "message_index.json"):
        return True
    folder, _, file = name.partition("/")
    return folder == "messages" and file.endswith(".json") and _safe_name(file)


def _parse_journal(
    raw: bytes, path: Path
) -> tuple[_JournalHeader, list[tuple[str, bytes]], tuple[int, bytes] | None]:
    head, sep, body = raw.partition(b"\n")
    if not sep:
        raise StoreError(f"{path}: a damaged commit journal (no header line); left as it is")
    header = _validated(_JournalHeader, head, path)
    if header.turnfsm_journal != _JOURNAL_FORMAT:
        raise SchemaVersionError(f"{path} (journal format)", header.turnfsm_journal, 1)
    size = sum(n for _, n in header.files) + (header.steps[1] if header.steps else 0)
    if len(body) != size or zlib.crc32(body) != header.crc32:
        raise StoreError(f"{path}: a damaged commit journal (its body does not match its header)")
    files = []
    at = 0
    for name, n in header.files:
        if not _journal_file_name(name):
            raise StoreError(f"{path}: a damaged commit journal (file name {name!r})")
        files.append((name, body[at : at + n]))
        at += n
    steps = (header.steps[0], body[at:]) if header.steps else None
    return header, files, steps


# ---------------------------------------------------------------------- writing


def _dumps(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, indent=2, default=str).encode() + b"\n"


def _metadata_of(ctx: ChatContext, steps_bytes: int) -> dict[str, Any]:
    data = to_python(ctx, exclude={"message_pool"})
    on_branches = {m for b in ctx.branches.values() for m in b.message_ids}
    return {
        "schema_version": SCHEMA_VERSION,
        **data,
        "detached_message_ids": [m for m in ctx.message_pool if m not in on_branches],
        "steps_bytes": steps_bytes,
    }


def _json_str(text: str) -> str:
    """A string as ``_dumps`` writes it (the same encoder: ``ensure_ascii=False``)."""
    return json.dumps(text, ensure_ascii=False)


def _index_head(mid: str, msg: InternalMessage) -> str:
    """A message's entry in ``message_index.json`` up to its branch, as ``_dumps``
    writes it inside the ``messages`` list (made by hand: the indenting encoder
    is pure Python, and this runs once per message, not per commit)."""
    return (
        f'    {{\n      "id": {_json_str(mid)},\n      "role": {_json_str(str(msg.role))},\n'
        f'      "message_type": {_json_str(str(msg.message_type))},\n'
        f'      "created_at": {_json_str(msg.metadata.created_at.isoformat())},\n'
        '      "branch": '
    )


def _index_tail(branch: str) -> str:
    """What ends an entry of ``branch`` (see :func:`_index_head`)."""
    return f"{_json_str(branch)}\n    }}"


def _index_text(entries: Sequence[bytes | bytearray]) -> bytes:
    """``message_index.json`` from its entries, each branch's joined with ``",\\n"``."""
    parts = [part for part in entries if part]
    if not parts:
        return b'{\n  "messages": []\n}\n'
    return b"".join([b'{\n  "messages": [\n', b",\n".join(parts), b"\n  ]\n}\n"])


def _index_of(ctx: ChatContext) -> bytes:
    pool = ctx.message_pool
    heads = {mid: _index_head(mid, node.message) for mid, node in pool.items()}
    return _index_text(
        [
            ",\n".join([heads[mid] + tail for mid in branch.message_ids]).encode()
            for tail, branch in ((_index_tail(name), b) for name, b in ctx.branches.items())
        ]
    )


def _id_line(mid: str) -> bytes:
    """A message id as a line of a ``message_ids`` list in ``metadata.json``."""
    return f"        {_json_str(mid)}".encode()


def _metadata_text(
    ctx: ChatContext, ids: Mapping[str, bytes | bytearray], detached: list[str], steps_bytes: int
) -> bytes:
    """``_dumps(_metadata_of(ctx, steps_bytes))``, byte for byte, without encoding
    every message id again: ``ids`` holds each branch's ``message_ids`` lines
    already encoded and joined with ``",\\n"`` (:func:`_id_line`); the rest of
    the document is small. ``ctx.message_pool`` is not used."""
    empty = {name: dataclasses.replace(b, message_ids=[]) for name, b in ctx.branches.items()}
    head = dataclasses.replace(ctx, branches=empty, message_pool={})
    data = to_python(head, exclude={"message_pool"})
    token = f"turnfsm-ids-{secrets.token_hex(8)}"
    for i, name in enumerate(ctx.branches):
        data["branches"][name]["message_ids"] = f"{token}-{i}"
    doc = {
        "schema_version": SCHEMA_VERSION,
        **data,
        "detached_message_ids": detached,
        "steps_bytes": steps_bytes,
    }
    text = (json.dumps(doc, ensure_ascii=False, indent=2, default=str) + "\n").encode()
    parts: list[bytes | bytearray] = []
    at = 0
    for i, name in enumerate(ctx.branches):
        mark = f'"{token}-{i}"'.encode()
        found = text.find(mark, at)
        if found < 0 or text.find(mark, found + 1) >= 0:  # cannot happen: a random token
            raise StoreError(f"cannot write the metadata of context {ctx.id!r}")
        listed = ids[name]
        parts.append(text[at:found])
        parts += [b"[\n", listed, b"\n      ]"] if listed else [b"[]"]
        at = found + len(mark)
    parts.append(text[at:])
    return b"".join(parts)


def _message_file(node: MessageNode) -> tuple[str, bytes]:
    if not _safe_name(node.id):
        raise StoreError(f"message id {node.id!r} cannot be a file name")
    data = {"schema_version": SCHEMA_VERSION, **to_python(node)}
    return f"messages/{node.id}.json", _dumps(data)
