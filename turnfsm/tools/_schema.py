"""Arguments of a tool: JSON schemas and the binders that validate arguments against them.

A *binder* takes the arguments object the model sent (already parsed from JSON)
and returns the keyword arguments for the tool function, or raises
:class:`InvalidArguments` with pydantic-style error details. Two kinds exist:

- :func:`binder_from_function` builds a pydantic model from a function's
  signature (``pydantic.create_model``), its JSON schema (cleaned for OpenAI)
  and a binder that validates with that model;
- :func:`binder_from_spec` checks the basics of a hand-written JSON schema
  (required keys, unknown keys when ``additionalProperties`` is false, the JSON
  type of each property) without a JSON-schema library.

Everything is computed once, when the tool is defined; a binder only validates.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic.fields import FieldInfo

from turnfsm.errors import ToolDefinitionError

__all__ = [
    "Binder",
    "InvalidArguments",
    "binder_from_function",
    "binder_from_spec",
    "check_name",
    "parse_docstring",
]

Binder = Callable[[dict[str, Any]], dict[str, Any]]
"""Validated keyword arguments from an arguments object; raises :class:`InvalidArguments`."""

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class InvalidArguments(Exception):
    """The arguments do not fit the tool's schema; ``details`` are pydantic-style errors."""

    def __init__(self, details: list[dict[str, Any]]) -> None:
        self.details = details
        super().__init__("; ".join(f"{_where(d['loc'])}: {d['msg']}" for d in details) or "invalid")


def _where(loc: list[Any]) -> str:
    return ".".join(str(part) for part in loc) or "(arguments)"


def check_name(name: object, what: str) -> str:
    """``name`` if it is a valid OpenAI tool name, else :class:`ToolDefinitionError`."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ToolDefinitionError(
            f"{what}: tool name {name!r} is not valid; a tool name is 1 to 64 characters "
            "from a-z, A-Z, 0-9, '_' and '-'"
        )
    return name


# --------------------------------------------------------------------------- docstrings

_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARGS_SECTION = re.compile(r"^(\s*)(?:Args|Arguments|Parameters|Params)\s*:\s*$")
_ARG_ENTRY = re.compile(r"^\s*\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (first paragraph) and the Google-style ``Args:`` entries of ``doc``."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).expandtabs().splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line):
            break
        summary.append(line.strip())

    params: dict[str, str] = {}
    start = next((i for i, line in enumerate(lines) if _ARGS_SECTION.match(line)), None)
    if start is not None:
        header_indent = len(lines[start]) - len(lines[start].lstrip())
        entry_indent: int | None = None
        current: str | None = None
        for line in lines[start + 1 :]:
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            if indent <= header_indent:
                break
            match = _ARG_ENTRY.match(line)
            if entry_indent is None:
                entry_indent = indent
            if match and indent <= entry_indent:
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
    return " ".join(summary), params


# --------------------------------------------------------------------------- schemas

# Keywords whose value is a schema, a list of schemas, or a map of name -> schema.
# Only these are walked, so a property called "title" or a default value holding a
# "title" key survive the clean-up.
_ONE_SCHEMA = frozenset(
    {
        "items",
        "additionalProperties",
        "not",
        "contains",
        "propertyNames",
        "if",
        "then",
        "else",
        "additionalItems",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_SCHEMA_LIST = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SCHEMA_MAP = frozenset({"properties", "$defs", "definitions", "patternProperties"})


def _clean(schema: Any) -> Any:
    """``schema`` without pydantic's ``title`` keywords."""
    if isinstance(schema, list):
        return [_clean(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAP and isinstance(value, dict):
            value = {name: _clean(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LIST or key in _ONE_SCHEMA:
            value = _clean(value)
        out[key] = value
    return out


def _object_schema(raw: dict[str, Any]) -> dict[str, Any]:
    """The cleaned top-level schema, keys in the order OpenAI documents them."""
    rest = _clean(raw)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": rest.pop("properties", {}),
        "required": rest.pop("required", []),
        "additionalProperties": False,
    }
    rest.pop("type", None)
    rest.pop("additionalProperties", None)
    schema.update(rest)
    return schema


def _pydantic_details(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"type": err["type"], "loc": list(err["loc"]), "msg": err["msg"]}
        for err in exc.errors(include_url=False, include_context=False, include_input=False)
    ]


def _has_own_description(annotation: Any) -> bool:
    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(
        isinstance(meta, FieldInfo) and meta.description is not None
        for meta in annotation.__metadata__
    )


def _signature_and_hints(
    fn: Callable[..., Any], what: str
) -> tuple[inspect.Signature, dict[str, Any]]:
    """``fn``'s signature and its resolved type hints (ToolDefinitionError when
    either cannot be read)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"{what}: cannot read its signature: {exc}") from exc
    # A partial's hints are its function's; a callable object's are its __call__'s.
    source: Any = fn.func if isinstance(fn, functools.partial) else fn
    if not (inspect.isfunction(source) or inspect.ismethod(source) or inspect.isclass(source)):
        source = getattr(source, "__call__", source)  # noqa: B004
    try:
        hints = typing.get_type_hints(source, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"{what}: cannot resolve its type annotations: {type(exc).__name__}: {exc}"
        ) from exc
    return signature, hints


def binder_from_function(
    fn: Callable[..., Any], tool_name: str, arg_docs: Mapping[str, str]
) -> tuple[dict[str, Any], Binder]:
    """The JSON schema of ``fn``'s parameters and a binder validating with a pydantic model.

    Raises :class:`ToolDefinitionError` naming the function and the parameter when a
    parameter is not annotated, is ``*args`` / ``**kwargs`` / positional-only, or its
    type cannot be described as JSON schema.
    """
    what = f"tool function {getattr(fn, '__qualname__', fn)!r}"
    signature, hints = _signature_and_hints(fn, what)

    fields: dict[str, Any] = {}
    renames: dict[str, str] = {}
    for index, param in enumerate(signature.parameters.values()):
        pname = param.name
        if param.kind is param.VAR_POSITIONAL or param.kind is param.VAR_KEYWORD:
            star = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise ToolDefinitionError(
                f"{what}: parameter '{star}{pname}' is not allowed; a tool takes named, "
                "annotated parameters only"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"{what}: parameter {pname!r} is positional-only; tools are called with "
                "keyword arguments"
            )
        if pname not in hints:
            raise ToolDefinitionError(
                f"{what}: parameter {pname!r} has no type annotation; every parameter of a "
                "tool needs one (it becomes the JSON schema the model sees)"
            )
        annotation = hints[pname]
        default = ... if param.default is param.empty else param.default
        description = None if _has_own_description(annotation) else arg_docs.get(pname)
        # A field name that pydantic reserves (leading underscore, or an attribute of
        # BaseModel such as ``json`` or ``schema``) is stored under a safe name with the
        # parameter's name as its alias: the schema and validation use the alias.
        options: dict[str, Any] = {}
        if description is not None:
            options["description"] = description
        if pname.startswith("_") or hasattr(BaseModel, pname):
            field_name = f"p{index}_{pname.lstrip('_')}"
            renames[field_name] = pname
            options["alias"] = pname
        else:
            field_name = pname
        fields[field_name] = (annotation, Field(default, **options))

    try:
        model: type[BaseModel] = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid", protected_namespaces=()),
            **fields,
        )
        raw_schema = model.model_json_schema()
    except Exception as exc:
        raise ToolDefinitionError(
            f"{what}: {_culprit(fields, renames)}cannot be described as JSON schema: "
            f"{type(exc).__name__}: {exc}"
        ) from exc

    validate = model.__pydantic_validator__.validate_python

    if not renames:

        def bind(arguments: dict[str, Any]) -> dict[str, Any]:
            try:
                values: dict[str, Any] = validate(arguments).__dict__
            except ValidationError as exc:
                raise InvalidArguments(_pydantic_details(exc)) from None
            return values

    else:

        def bind(arguments: dict[str, Any]) -> dict[str, Any]:
            try:
                values: dict[str, Any] = validate(arguments).__dict__
            except ValidationError as exc:
                raise InvalidArguments(_pydantic_details(exc)) from None
            return {renames.get(key, key): value for key, value in values.items()}

    return _object_schema(raw_schema), bind


def _culprit(fields: dict[str, Any], renames: dict[str, str]) -> str:
    """``"parameter 'x' "`` for the first field whose type has no JSON schema, else ``""``."""
    for field_name, (annotation, _) in fields.items():
        try:
            TypeAdapter(annotation).json_schema()
        except Exception:
            return f"parameter {renames.get(field_name, field_name)!r} "
    return ""


# --------------------------------------------------------------------------- spec schemas

_JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})


def _json_type(value: object) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def binder_from_spec(tool_name: str, schema: dict[str, Any]) -> Binder:
    """A binder checking the basics of the hand-written object schema ``schema``.

    Checked: required keys are present, no unknown keys when ``additionalProperties``
    is false, and each property's JSON ``type`` (a name or a list of names). Nested
    schemas, formats, enums and ranges are not checked.
    """
    what = f"tool {tool_name!r}"
    if schema.get("type", "object") != "object":
        raise ToolDefinitionError(
            f"{what}: parameters must be a JSON schema of type 'object', not {schema.get('type')!r}"
        )
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise ToolDefinitionError(f"{what}: 'properties' must be an object")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(key, str) for key in required):
        raise ToolDefinitionError(f"{what}: 'required' must be a list of property names")
    closed = schema.get("additionalProperties") is False

    types: dict[str, tuple[frozenset[str], str]] = {}
    for key, sub in properties.items():
        if not isinstance(sub, dict):
            raise ToolDefinitionError(f"{what}: the schema of property {key!r} must be an object")
        declared = sub.get("type")
        if declared is None:
            continue
        names = [declared] if isinstance(declared, str) else declared
        if not isinstance(names, list) or not names:
            raise ToolDefinitionError(f"{what}: property {key!r} has an invalid 'type'")
        unknown = [name for name in names if name not in _JSON_TYPES]
        if unknown:
            raise ToolDefinitionError(
                f"{what}: property {key!r} has unknown JSON type(s) {unknown}; use "
                f"{', '.join(sorted(_JSON_TYPES))}"
            )
        allowed = set(names)
        if "number" in allowed:
            allowed.add("integer")
        types[key] = (frozenset(allowed), " or ".join(names))
    required_keys = tuple(required)
    known = frozenset(properties)

    def bind(arguments: dict[str, Any]) -> dict[str, Any]:
        errors: list[dict[str, Any]] = []
        for key in required_keys:
            if key not in arguments:
                errors.append({"type": "missing", "loc": [key], "msg": "Field required"})
        for key, value in arguments.items():
            check = types.get(key)
            if check is None:
                if closed and key not in known:
                    errors.append(
                        {
                            "type": "extra_forbidden",
                            "loc": [key],
                            "msg": "Extra inputs are not permitted",
                        }
                    )
                continue
            found = _json_type(value)
            if found not in check[0]:
                errors.append(
                    {
                        "type": "json_type",
                        "loc": [key],
                        "msg": f"Input should be of JSON type {check[1]}, not {found}",
                    }
                )
        if errors:
            raise InvalidArguments(errors)
        return arguments

    return bind
