"""The primitives every file of a files-store context is read with: its bytes,
its JSON, strict validation against a model (an error names the file and the
field), a record's schema version, and the names that are safe as file names."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from ..errors import StoreError
from ..model._json import MAX_DOCUMENT_DEPTH, loads_json
from ..records import from_json
from ._schema import (
    check_version,
    validation_problem,
)

# ---------------------------------------------------------------------- reading


TAIL = "commits.jsonl"
"""The commits since ``metadata.json`` and ``message_index.json`` were last
written whole: one record (a JSON line) each."""
_M = TypeVar("_M")


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
        return loads_json(text, MAX_DOCUMENT_DEPTH)
    except ValueError as exc:  # too deep included
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


# ---------------------------------------------------------------------- the journal
