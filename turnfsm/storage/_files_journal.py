"""The files store's commit journal: its format (a header line, then the
bodies), made, parsed, and checked against what is stored before a journal a
crash left is applied again. The crash rules are :mod:`turnfsm.storage._files`'s.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..errors import SchemaVersionError, StoreError
from ._files_json import TAIL, _json_document, _read_bytes, _safe_name, _validated

JOURNAL = "commit.journal"
_JOURNAL_FORMAT = 1
_JOURNAL_TAIL_FORMAT = 2
"""A journal that appends to ``commits.jsonl`` or empties it: its header has ``tail``."""


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
