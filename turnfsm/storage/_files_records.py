"""The files store's reading of a context: ``metadata.json`` (brought up from
older schema versions), the message files, the records of ``commits.jsonl``
laid over them, the summary ``list_contexts`` shows and ``lease.json``; every
file validated strictly, and the context as a whole after. The journal
(:mod:`turnfsm.storage._files_journal`) and the texts a commit writes
(:mod:`turnfsm.storage._files_write`) go by their names here too."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ContextNotFound, StoreError
from ..model import SCHEMA_VERSION, ChatContext, MessageNode
from ..records import from_json, to_python
from ._files_foreign import ForeignContextFolder, is_foreign
from ._files_journal import JOURNAL, _check_journal, _journal_bytes, _parse_journal
from ._files_json import TAIL, _json_document, _read_bytes, _record_version, _safe_name, _validated
from ._files_write import (
    _dumps,
    _id_line,
    _index_of,
    _message_file,
    _metadata_of,
    _metadata_text,
)
from ._schema import (
    check_version,
    context_problems,
    json_path,
    upcast_branch,
    upcast_context,
    upcast_message,
)

# ---------------------------------------------------------------------- reading


@dataclass(slots=True, kw_only=True)
class _Metadata(ChatContext):
    """``metadata.json``: the context without its messages, and two fields of the layout."""

    schema_version: int  # no default: a metadata.json without one is not turnfsm's
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
    return _metadata_from(_read_bytes(path), path)


def _metadata_from(raw: bytes, path: Path | str) -> _Metadata:
    """A metadata document at the current schema version (upcast when older), validated."""
    try:
        meta: _Metadata | None = from_json(_Metadata, raw, strict=True)
    except ValidationError:
        meta = None
    if meta is None or meta.schema_version != SCHEMA_VERSION:
        if isinstance(path, Path) and is_foreign(path.parent):
            raise ForeignContextFolder(path.parent, path)
        data, version = _record_version(raw, path)
        if version == SCHEMA_VERSION:
            _validated(_Metadata, raw, path)  # raises, naming the field
        meta = _upcast_metadata(data, version, path)
    return meta


def _upcast_metadata(data: dict[str, Any], version: int, path: Path | str) -> _Metadata:
    """A metadata document of an older schema version, brought up to date and validated."""
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
    return _validated(_Metadata, json.dumps(data, default=str).encode(), path)


# ---------------------------------------------------------------------- the tail


class _TailRecord(BaseModel):
    """One line of ``commits.jsonl``: what one commit changed of the two whole files.

    ``metadata`` is ``metadata.json`` after the commit with every branch's
    ``message_ids`` left empty (the small fields, which do not grow with the
    messages); ``branches`` the id lists the commit set whole (a fork);
    ``appended`` the new messages' entries of ``message_index.json``, in
    order, as ``[branch, id, role, message_type, created_at]``; ``replaced``
    the entries of replaced messages, ``[id, role, message_type, created_at]``."""

    model_config = ConfigDict(extra="forbid")
    version: int
    metadata: _Metadata
    branches: dict[str, list[str]]
    appended: list[tuple[str, str, str, str, str]]
    replaced: list[tuple[str, str, str, str]]


class _RecordHead(BaseModel):
    """What a partial read checks of a record's metadata but the last one's."""

    model_config = ConfigDict(extra="ignore")
    schema_version: int
    id: str
    version: int


class _TailIds(BaseModel):
    """A record of ``commits.jsonl`` as a partial read checks it (but the last):
    its shape, versions, context and ids; the metadata a later record replaces
    is not used."""

    model_config = ConfigDict(extra="forbid")
    version: int
    metadata: _RecordHead
    branches: dict[str, list[str]]
    appended: list[tuple[str, str, str, str, str]]
    replaced: list[tuple[str, str, str, str]]


class _TailSummary(BaseModel):
    """What ``list_contexts`` reads of the last record of ``commits.jsonl``."""

    model_config = ConfigDict(extra="ignore")
    metadata: _Summary


def _read_record(line: bytes, where: str) -> _TailRecord:
    """A record of ``commits.jsonl`` at the current schema version, validated."""
    try:
        rec: _TailRecord | None = from_json(_TailRecord, line, strict=True)
    except ValidationError:
        rec = None
    if rec is not None and rec.metadata.schema_version == SCHEMA_VERSION:
        return rec
    data = _json_document(line, where)
    meta = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(meta, dict):
        return _validated(_TailRecord, line, where)  # raises, naming the field
    version = check_version(
        meta.pop("schema_version", None), where=f"{where}: $.metadata.schema_version"
    )
    if version == SCHEMA_VERSION:
        return _validated(_TailRecord, line, where)  # raises, naming the field
    upcast = _upcast_metadata(meta, version, f"{where}: $.metadata")
    data["metadata"] = to_python(upcast)
    data["metadata"].update(
        detached_message_ids=upcast.detached_message_ids, steps_bytes=upcast.steps_bytes
    )
    return _validated(_TailRecord, json.dumps(data, default=str).encode(), where)


def _last_line(path: Path) -> bytes:
    """The last line of a file of JSON lines, with its newline (b"": empty or missing)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed by the with below)
    except (FileNotFoundError, NotADirectoryError):
        return b""
    with f:
        size = f.seek(0, os.SEEK_END)
        chunk = 16_384
        while True:
            start = max(0, size - chunk)
            f.seek(start)
            data = f.read(size - start)
            cut = data.rfind(b"\n", 0, max(len(data) - 1, 0))
            if cut >= 0 or start == 0:
                return data[cut + 1 :]
            chunk *= 4


@dataclass(slots=True)
class _Stored:
    """A context's small fields and branches as stored: ``metadata.json`` with
    the records of ``commits.jsonl`` applied."""

    meta: _Metadata
    """The current metadata, every branch's ``message_ids`` whole."""
    raw: bytes
    """``metadata.json``'s bytes."""
    meta_id: tuple[int, int, int]
    """``metadata.json``'s :func:`_file_id`."""
    tail_bytes: int
    """The length of ``commits.jsonl`` (0: none)."""
    last: bytes
    """Its last record, with its newline (b"": none)."""


def _read_state(folder: Path, context_id: str, *, every: bool = True) -> _Stored:
    """``metadata.json`` and ``commits.jsonl``, validated: the context's
    current metadata. Every record must follow on from the version before it
    (``metadata.json``'s for the first). ``every=False`` (a partial read)
    validates of a record but the last only what it uses: its shape, version,
    context and ids, not the metadata the next record replaces."""
    path = folder / "metadata.json"
    try:
        raw = _read_bytes(path)
        meta_id = _file_id(path)
    except (FileNotFoundError, NotADirectoryError):
        raise ContextNotFound(context_id) from None
    meta = _metadata_from(raw, path)
    if meta.id != context_id:
        raise StoreError(f"{path}: $.id: the context is {meta.id!r}, its folder {context_id!r}")
    tail = path.parent / TAIL
    try:
        log = _read_bytes(tail)
    except (FileNotFoundError, NotADirectoryError):
        log = b""
    if not log:
        return _Stored(meta, raw, meta_id, 0, b"")
    if not log.endswith(b"\n"):
        raise StoreError(f"{tail}: does not end with a whole record; the file is left as it is")
    ids = {name: list(b.message_ids) for name, b in meta.branches.items()}
    last: _Metadata = meta
    version = meta.version
    lines = log.split(b"\n")[:-1]
    for n, line in enumerate(lines, 1):
        where = f"{tail}: line {n}"
        rec: _TailRecord | _TailIds
        if every or n == len(lines):
            rec = _read_record(line, where)
            last = rec.metadata
        else:
            rec = _validated(_TailIds, line, where)
            check_version(rec.metadata.schema_version, where=f"{where}: $.metadata.schema_version")
        if rec.version != version + 1 or rec.metadata.version != rec.version:
            raise StoreError(
                f"{where}: $.version: a commit to version {rec.version} (its metadata "
                f"at {rec.metadata.version}) after version {version}; the file is "
                "left as it is"
            )
        if rec.metadata.id != context_id:
            raise StoreError(f"{where}: $.metadata.id: the context is {rec.metadata.id!r}")
        for name, listed in rec.branches.items():
            ids[name] = list(listed)
        for i, (name, mid, *_) in enumerate(rec.appended):
            if name not in ids:
                raise StoreError(f"{where}: $.appended[{i}]: unknown branch {name!r}")
            ids[name].append(mid)
        version = rec.version
    if set(ids) != set(last.branches):
        raise StoreError(
            f"{tail}: line {len(lines)}: $.metadata.branches: {sorted(last.branches)}, "
            f"but the records name {sorted(ids)}; the file is left as it is"
        )
    branches = {
        name: dataclasses.replace(b, message_ids=ids[name]) for name, b in last.branches.items()
    }
    current = dataclasses.replace(last, branches=branches)
    return _Stored(current, raw, meta_id, len(log), lines[-1] + b"\n")


def _file_id(path: Path) -> tuple[int, int, int]:
    """Which file ``path`` is: its inode, size and time of change (every atomic
    write puts a new file in place)."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _read_summary(folder: Path) -> _Summary:
    """What ``list_contexts`` shows of a context: the last record of
    ``commits.jsonl``, else ``metadata.json`` (neither validated further)."""
    last = _last_line(folder / TAIL)
    if last:
        return _validated(_TailSummary, last, folder / TAIL).metadata
    path = folder / "metadata.json"
    return _validated(_Summary, _read_bytes(path), path)


def _read_context(folder: Path, context_id: str) -> tuple[ChatContext, _Stored]:
    """The whole context in ``folder``, validated, and its metadata as stored
    (with the committed length of its steps)."""
    path = folder / "metadata.json"
    stored = _read_state(folder, context_id)
    meta = stored.meta
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
    return ctx, stored


def _read_lease(folder: Path) -> dict[str, Any] | None:
    """``lease.json``: owner (None once released), fencing token, expiry."""
    path = folder / "lease.json"
    try:
        data = _json_document(_read_bytes(path), path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("token"), int)
        or not isinstance(data.get("expires_at"), int | float)
        or not isinstance(data.get("owner"), str | None)
    ):
        raise StoreError(f"{path}: not a lease record")
    return data


__all__ = [
    "JOURNAL",
    "TAIL",
    "_check_journal",
    "_dumps",
    "_file_id",
    "_id_line",
    "_index_of",
    "_journal_bytes",
    "_message_file",
    "_metadata_of",
    "_metadata_text",
    "_parse_journal",
    "_read_bytes",
    "_read_context",
    "_read_lease",
    "_read_message",
    "_read_metadata",
    "_read_summary",
    "_safe_name",
]
