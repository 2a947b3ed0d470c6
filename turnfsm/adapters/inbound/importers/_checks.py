"""What every importer checks, each check naming the JSON path of what is wrong,
and where ids and the current time come from."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ....errors import InvalidInput
from ....model import JSONProblem, check_json, id_problem
from ....model._json import loads_json

__all__ = [
    "Ids",
    "check_base64",
    "check_source",
    "expect_array",
    "expect_object",
    "expect_string",
    "kind_of",
    "merge_extra",
    "new_id",
    "object_key",
    "optional_string",
    "parse_timestamp",
    "required_field",
    "resolve_now",
    "split_data_url",
    "tool_arguments",
    "unmapped_fields",
    "uuid_hex",
]

Ids = Callable[[], str]


def uuid_hex() -> str:
    return uuid.uuid4().hex


# --- small checks, each naming the JSON path ----------------------------------------------


def kind_of(value: Any) -> str:
    """The JSON name of a value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def expect_object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(path, f"must be an object, not {kind_of(value)}")
    return value


def expect_array(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInput(path, f"must be an array, not {kind_of(value)}")
    return value


def expect_string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(path, f"must be a string, not {kind_of(value)}")
    return value


def object_key(path: str, key: str) -> str:
    """``path`` and one object key, as a JSON path (``$.message_pool["m-1"]``)."""
    plain = key and all(c.isalnum() or c == "_" for c in key) and key.isascii()
    return f"{path}.{key}" if plain else f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def required_field(obj: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        raise InvalidInput(f"{path}.{key}", "missing")
    return obj[key]


def optional_string(obj: Mapping[str, Any], key: str, path: str) -> str | None:
    value = obj.get(key)
    return None if value is None else expect_string(value, f"{path}.{key}")


_DATETIME: TypeAdapter[datetime] = TypeAdapter(datetime)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def parse_timestamp(value: Any, path: str) -> datetime | None:
    """An ISO 8601 string (or Unix seconds) as an aware datetime; ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidInput(path, f"must be an ISO 8601 timestamp, not {kind_of(value)}")
    try:
        return _utc(_DATETIME.validate_python(value))
    except ValidationError as exc:
        raise InvalidInput(path, f"not a timestamp: {value!r}") from exc


def unmapped_fields(obj: Mapping[str, Any], known: Iterable[str]) -> dict[str, Any]:
    """The fields of ``obj`` this module does not map, kept verbatim."""
    skip = set(known)
    return {k: v for k, v in obj.items() if k not in skip}


def merge_extra(extra: dict[str, Any], ours: Mapping[str, Any], path: str) -> dict[str, Any]:
    """``extra`` plus the importer's own keys; a source field of the same name is an error."""
    for key in ours:
        if key in extra:
            raise InvalidInput(
                f"{path}.{key}",
                "this field name is used by the importer itself in metadata.extra; "
                "rename the field",
            )
    return {**extra, **ours}


def check_base64(data: str, path: str) -> None:
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput(path, "is not valid base64") from exc


def split_data_url(url: str, path: str) -> tuple[str, str]:
    """``data:<mime>;base64,<data>`` as (mime, data)."""
    head, sep, data = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise InvalidInput(path, "must be a base64 data URL (data:<mime type>;base64,<data>)")
    mime = head[len("data:") : -len(";base64")] or "application/octet-stream"
    check_base64(data, path)
    return mime, data


def tool_arguments(value: Any, path: str) -> tuple[dict[str, Any], str | None]:
    """Tool call arguments: an object, or JSON text; text that is not a JSON object
    is kept verbatim as ``raw_arguments`` (with empty ``arguments``)."""
    if value is None:
        return {}, None
    if isinstance(value, dict):
        return value, None
    if isinstance(value, str):
        try:
            decoded = loads_json(value)
        except ValueError:  # not JSON, or nested too deeply to be stored
            return {}, value
        if not isinstance(decoded, dict):
            return {}, value
        try:
            check_json(decoded, path)
        except JSONProblem as exc:
            raise InvalidInput(exc.path, f"{exc.reason} (in the JSON text of {path})") from None
        return decoded, None
    raise InvalidInput(path, f"must be an object or a JSON string, not {kind_of(value)}")


def check_source(data: Any) -> None:
    """Refuse a source that holds what a store cannot load back (the size of the
    whole source is not limited: it holds many payloads)."""
    try:
        check_json(data, "$", max_bytes=None)
    except JSONProblem as exc:
        raise InvalidInput(exc.path, exc.reason) from None


def new_id(ids: Ids) -> str:
    if not callable(ids):
        raise InvalidInput("ids", f"must be a callable returning ids, not {kind_of(ids)}")
    value = ids()
    reason = id_problem(value)
    if reason is not None:
        raise InvalidInput("ids", f"the id factory returned {value!r}: {reason}")
    return value


def resolve_now(now: datetime | None) -> datetime:
    if now is not None and not isinstance(now, datetime):
        raise InvalidInput("now", f"must be a datetime or None, not {kind_of(now)}")
    return _utc(now) if now is not None else datetime.now(UTC)
