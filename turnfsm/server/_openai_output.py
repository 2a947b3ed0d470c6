"""``response_format`` on ``/v1/chat/completions``: the answer's type, as the
engine's output type (docs/structured-output.md, docs/server.md).

- ``{"type": "json_schema", "json_schema": {"name", "schema", "strict",
  "description"}}``: the schema is the turn's output type, named ``name``; an
  answer that does not match it goes back to the model with its errors (the
  ``output_invalid`` step) and the completion's content is the validated JSON.
- ``{"type": "json_object"}``: any JSON object.
- ``{"type": "text"}`` or no ``response_format``: the server's own output type,
  if it has one (usually none: any text).

A ``response_format`` of another shape is a 422 naming the JSON path
(``body.response_format...``) before anything is stored.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Final

from ..engine._output import TypedOutput, schema_output
from ..errors import InvalidInput

__all__ = ["ANY_OBJECT", "output_of"]

_WHERE: Final = "body.response_format"
_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")

ANY_OBJECT: Final[dict[str, Any]] = {"type": "object"}
"""The schema ``json_object`` asks for."""


def output_of(response_format: Any) -> TypedOutput | None:
    """The output type a request's ``response_format`` asks for (None: none
    asked, the server's own applies); :class:`InvalidInput` naming the path of
    what is malformed."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise InvalidInput(_WHERE, "must be an object with a 'type'")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return dataclasses.replace(schema_output(ANY_OBJECT, _WHERE), name="json_object")
    if kind != "json_schema":
        raise InvalidInput(
            f"{_WHERE}.type", f"must be 'text', 'json_object' or 'json_schema', not {kind!r}"
        )
    spec = response_format.get("json_schema")
    where = f"{_WHERE}.json_schema"
    if not isinstance(spec, dict):
        raise InvalidInput(where, "must be an object with a 'name' and a 'schema'")
    name = spec.get("name")
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise InvalidInput(
            f"{where}.name", "must be 1 to 64 letters, digits, '_' or '-' (as OpenAI requires)"
        )
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidInput(f"{where}.strict", "must be true, false or null")
    schema = spec.get("schema", ANY_OBJECT)
    typed = schema_output(schema, f"{where}.schema", strict=strict is True)
    return dataclasses.replace(typed, name=name)
