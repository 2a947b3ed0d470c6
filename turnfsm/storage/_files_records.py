"""The files store's records: how each of a context's files is made and read
back (validated strictly), and the commit journal's format. The layout and
the crash rules are :mod:`turnfsm.storage._files`'s, which does the writing.
"""

from __future__ import annotations

import dataclasses
import json
import os
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
from ._files_foreign import ForeignContextFolder, is_foreign
from ._schema import (
    check_version,
    context_problems,
    json_path,
    upcast_branch,
    upcast_context,
    upcast_message,
    validation_problem,
)

JOURNAL = "commit.journal"
_JOURNAL_FORMAT = 1
_JOURNAL_TAIL_FORMAT = 2
"""A journal that appends to ``commits.jsonl`` or empties it: its header has ``tail``."""
TAIL = "commits.jsonl"
"""The commits since ``metadata.json`` and ``message_index.json`` were last
written whole: one record (a JSON line) each."""
_M = TypeVar("_M")

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


def _record_version(raw: bytes, path: Path | str) -> tuple[dict[str, Any], int]:
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


def _record_text(
    ctx: ChatContext,
    detached: list[str],
    steps_bytes: int,
    branches: Mapping[str, list[str]],
    appended: Sequence[tuple[str, MessageNode]],
    replaced: Sequence[MessageNode],
) -> bytes:
    """A record of ``commits.jsonl`` (see :class:`_TailRecord`), one line."""
    empty = {name: dataclasses.replace(b, message_ids=[]) for name, b in ctx.branches.items()}
    small = dataclasses.replace(ctx, branches=empty, message_pool={})
    doc = {
        "version": ctx.version,
        "metadata": {
            "schema_version": SCHEMA_VERSION,
            **to_python(small, exclude={"message_pool"}),
            "detached_message_ids": detached,
            "steps_bytes": steps_bytes,
        },
        "branches": branches,
        "appended": [[name, node.id, *_entry(node.message)] for name, node in appended],
        "replaced": [[node.id, *_entry(node.message)] for node in replaced],
    }
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str)
    return text.encode() + b"\n"


def _entry(msg: InternalMessage) -> list[str]:
    """A message's role, type and time as ``message_index.json`` lists them."""
    return [str(msg.role), str(msg.message_type), msg.metadata.created_at.isoformat()]


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


# ---------------------------------------------------------------------- the journal


def _journal_bytes(
    context_id: str,
    from_version: int,
    to_version: int,
    files: list[tuple[str, bytes]],
    steps: tuple[int, bytes] | None,
    tail: tuple[int, bytes] | None = None,
) -> bytes:
    """A header line (JSON), then the bodies: every file's content, the steps,
    then what goes at ``tail[0]`` of ``commits.jsonl`` (a journal without it is
    of format 1, as before the tail existed)."""
    body = b"".join(data for _, data in files) + (steps[1] if steps else b"")
    header: dict[str, Any] = {
        "turnfsm_journal": _JOURNAL_FORMAT if tail is None else _JOURNAL_TAIL_FORMAT,
        "context": context_id,
        "from_version": from_version,
        "to_version": to_version,
        "files": [[name, len(data)] for name, data in files],
        "steps": [steps[0], len(steps[1])] if steps else None,
    }
    if tail is not None:
        header["tail"] = [tail[0], len(tail[1])]
        body += tail[1]
    header["crc32"] = zlib.crc32(body)
    return json.dumps(header).encode() + b"\n" + body


class _JournalHeader(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turnfsm_journal: int
    context: str
    from_version: int
    to_version: int
    files: list[tuple[str, int]]
    steps: tuple[int, int] | None
    tail: tuple[int, int] | None = None
    crc32: int


def _journal_file_name(name: str) -> bool:
    """What a journal may write: the two head files and message files."""
    if name in ("metadata.json", "message_index.json"):
        return True
    folder, _, file = name.partition("/")
    return folder == "messages" and file.endswith(".json") and _safe_name(file)


_Parsed = tuple[
    _JournalHeader, list[tuple[str, bytes]], tuple[int, bytes] | None, tuple[int, bytes] | None
]


def _check_journal(
    folder: Path,
    context_id: str,
    header: _JournalHeader,
    files: list[tuple[str, bytes]],
    tail: tuple[int, bytes] | None,
) -> None:
    """Refuse a journal that does not follow on from what is stored: its first
    version must be the stored one (the last record's of ``commits.jsonl``
    before the journal's own, else ``metadata.json``'s), or its last one
    ``metadata.json``'s when it writes the whole files and got that far."""
    meta = folder / "metadata.json"
    data = _json_document(_read_bytes(meta), meta)
    version = data.get("version") if isinstance(data, dict) else None
    placed = version == header.to_version and any(n == "metadata.json" for n, _ in files)
    if not placed:  # the whole tail when the journal empties it: that comes last
        log = folder / TAIL
        try:
            raw = _read_bytes(log)
        except (FileNotFoundError, NotADirectoryError):
            raw = b""
        if tail is not None and tail[1]:
            raw = raw[: tail[0]]
        last = raw[raw.rfind(b"\n", 0, len(raw) - 1) + 1 :] if raw else b""
        if last:
            record = _json_document(last, log)
            version = record.get("version") if isinstance(record, dict) else None
    if header.context != context_id or (not placed and version != header.from_version):
        raise StoreError(
            f"{folder / JOURNAL}: a commit journal of context {header.context!r} from version "
            f"{header.from_version} to {header.to_version}, but {meta} (and {TAIL}) "
            f"hold context {context_id!r} at version {version!r}; both are left as they are"
        )


def _parse_journal(raw: bytes, path: Path) -> _Parsed:
    """A journal's header, files, steps and tail (each as ``_journal_bytes`` took them)."""
    head, sep, body = raw.partition(b"\n")
    if not sep:
        raise StoreError(f"{path}: a damaged commit journal (no header line); left as it is")
    header = _validated(_JournalHeader, head, path)
    if header.turnfsm_journal not in (_JOURNAL_FORMAT, _JOURNAL_TAIL_FORMAT):
        raise SchemaVersionError(
            f"{path} (journal format)", header.turnfsm_journal, _JOURNAL_TAIL_FORMAT
        )
    if (header.tail is not None) != (header.turnfsm_journal == _JOURNAL_TAIL_FORMAT):
        raise StoreError(f"{path}: a damaged commit journal (its tail and its format disagree)")
    steps_size = header.steps[1] if header.steps else 0
    tail_size = header.tail[1] if header.tail else 0
    size = sum(n for _, n in header.files) + steps_size + tail_size
    if len(body) != size or zlib.crc32(body) != header.crc32:
        raise StoreError(f"{path}: a damaged commit journal (its body does not match its header)")
    files = []
    at = 0
    for name, n in header.files:
        if not _journal_file_name(name):
            raise StoreError(f"{path}: a damaged commit journal (file name {name!r})")
        files.append((name, body[at : at + n]))
        at += n
    steps = (header.steps[0], body[at : at + steps_size]) if header.steps else None
    at += steps_size
    tail = (header.tail[0], body[at:]) if header.tail else None
    return header, files, steps, tail


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
