"""Output types: what a typed answer must be (docs/structured-output.md).

:func:`output_type` turns what a caller gives as ``output_type`` (a pydantic
model, a dataclass, any type a pydantic ``TypeAdapter`` takes, or a JSON Schema
dict) into one :class:`TypedOutput`: the JSON Schema the model is asked for
(its name, its digest) and the validator of an answer's text. A type that
cannot be one is refused at the call (:class:`~turnfsm.errors.OutputTypeError`),
never at the answer.

A JSON Schema dict is checked, and answers validated, with the ``jsonschema``
library (the draft the schema's ``$schema`` names, else 2020-12); the other
kinds with pydantic. The answer's text is JSON, once a surrounding Markdown
fence (```` ```json ... ``` ````) is taken off (:func:`unfenced`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pydantic

from ..errors import OutputTypeError
from ..model import JSONProblem, TurnOutput, check_json
from ..model._json import JSONTooDeep, loads_json

__all__ = [
    "DEFAULT_OUTPUT_RETRIES",
    "OutputInvalid",
    "Outputs",
    "TypedOutput",
    "json_path",
    "output_type",
    "schema_output",
    "unfenced",
]

DEFAULT_OUTPUT_RETRIES = 1
"""How many answers that do not match the output type are sent back, by default."""

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\r?\n(.*?)\r?\n?```\Z", re.S)
_MAX_REGISTERED = 256


class OutputInvalid(Exception):
    """An answer that does not match its output type: ``problems`` are
    ``(path, message)`` pairs, ``path`` a JSON path (``$``, ``$.items[0]``)."""

    def __init__(self, problems: tuple[tuple[str, str], ...]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p}: {m}" for p, m in problems))


@dataclass(frozen=True, slots=True, eq=False)
class TypedOutput:
    """An output type: its JSON Schema as the model is asked for it, and the
    validator of an answer's (unfenced) text."""

    name: str
    schema: dict[str, Any]
    digest: str
    validate: Callable[[str], Any]
    """The answer's text to its value; :class:`OutputInvalid` when it does not match."""
    strict: bool = True

    def stored(self, retries: int) -> TurnOutput:
        """The record a turn keeps in its progress."""
        return TurnOutput(
            name=self.name,
            schema=self.schema,
            digest=self.digest,
            strict=self.strict,
            retries=retries,
        )


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces: the text a schema's digest is taken of."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _digest(schema: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(schema).encode("utf-8")).hexdigest()


def _name(raw: object) -> str:
    """``raw`` as a schema name: letters, digits, ``_`` and ``-``, 1 to 64 of them."""
    text = _NAME_CHARS.sub("_", raw if isinstance(raw, str) else "").strip("_")[:64]
    return text or "output"


def json_path(parts: Iterable[object]) -> str:
    """A JSON path (``$.a[0].b``) from the keys and indexes leading to a value."""
    out = "$"
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif isinstance(part, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(str(part), ensure_ascii=False)}]"
    return out


def unfenced(text: str) -> str:
    """The answer's text without surrounding whitespace and, when the whole
    answer is one Markdown code fence (```` ```json ```` or a bare
    ```` ``` ````), without the fence."""
    stripped = text.strip()
    found = _FENCE.match(stripped)
    return found.group(1).strip() if found is not None else stripped


def _storable(schema: dict[str, Any], where: str) -> None:
    """A schema the store can hold as a turn's progress keeps it (depth, size,
    numbers), else :class:`OutputTypeError` naming the path."""
    try:
        check_json({"output": {"schema": schema}})
    except JSONProblem as exc:
        at = exc.path.removeprefix("$.output.schema")
        raise OutputTypeError(where + at, f"cannot be stored: {exc.reason}") from None


def _decoded(text: str) -> Any:
    try:
        return loads_json(text)
    except JSONTooDeep as exc:
        raise OutputInvalid((("$", str(exc)),)) from None
    except json.JSONDecodeError as exc:
        raise OutputInvalid((("$", f"not valid JSON: {exc.msg} at character {exc.pos}"),)) from None


def schema_output(
    schema: object, where: str = "output_type", *, strict: bool = True
) -> TypedOutput:
    """A JSON Schema dict as an output type: checked against its metaschema
    (:class:`OutputTypeError` naming the path of what is wrong), named by its
    ``title``; an answer's value is its decoded JSON."""
    if not isinstance(schema, dict):
        raise OutputTypeError(
            where, f"a JSON Schema must be an object, not {type(schema).__name__}"
        )
    try:
        text = canonical_json(schema)
    except (TypeError, ValueError) as exc:
        raise OutputTypeError(where, f"the schema is not JSON data: {exc}") from None
    copy: dict[str, Any] = json.loads(text)
    _storable(copy, where)
    # imported here: most engines never see a JSON Schema dict, and jsonschema
    # (with referencing, attrs, rpds) is a large part of what importing turnfsm costs
    import jsonschema  # type: ignore[import-untyped]

    cls = jsonschema.validators.validator_for(copy, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(copy)
    except jsonschema.SchemaError as exc:
        at = json_path(exc.absolute_path)
        raise OutputTypeError(where + at[1:], f"not a valid JSON Schema: {exc.message}") from None
    checker = cls(copy)

    def validate(answer: str) -> Any:
        value = _decoded(answer)
        problems = tuple(
            (json_path(e.absolute_path), e.message)
            for e in sorted(checker.iter_errors(value), key=lambda e: list(map(str, e.path)))
        )
        if problems:
            raise OutputInvalid(problems)
        return value

    return TypedOutput(_name(copy.get("title")), copy, _digest(copy), validate, strict)


def _type_name(tp: Any) -> str:
    origin = getattr(tp, "__origin__", None)
    if origin is not None:  # list[int], dict[str, Item], Literal[...]
        return _name(repr(tp).replace("typing.", ""))
    return _name(getattr(tp, "__name__", None))


def output_type(tp: object, where: str = "output_type", *, strict: bool = True) -> TypedOutput:
    """What a caller gives as ``output_type``, as a :class:`TypedOutput`: a
    JSON Schema dict (:func:`schema_output`), else a type pydantic can
    validate (a model, a dataclass, ``list[int]``, a ``TypedDict``, ...),
    whose answer's value is the validated Python object. Anything else is
    :class:`OutputTypeError` naming ``where``."""
    if isinstance(tp, TypedOutput):
        return tp
    if isinstance(tp, dict):
        return schema_output(tp, where, strict=strict)
    if (
        tp is None
        or isinstance(tp, str | bytes | int | float | bool | list | tuple | set)
        or inspect.isroutine(tp)
    ):
        raise OutputTypeError(where, f"must be a type or a JSON Schema dict, not {tp!r}")
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(cast(Any, tp))
        schema = adapter.json_schema()
    except Exception as exc:
        raise OutputTypeError(
            where, f"{tp!r} cannot be an output type: {type(exc).__name__}: {exc}"
        ) from None
    _storable(schema, where)
    validate_json = adapter.validate_json

    def validate(answer: str) -> Any:
        _decoded(answer)  # a JSON error says where, in the same words for every kind
        try:
            return validate_json(answer)
        except pydantic.ValidationError as exc:
            raise OutputInvalid(
                tuple((json_path(e["loc"]), e["msg"]) for e in exc.errors(include_url=False))
            ) from None
        except Exception as exc:  # a validator of the application's that raised
            what = f"the validator raised {type(exc).__name__}: {exc}"
            raise OutputInvalid((("$", what),)) from None

    return TypedOutput(_type_name(tp), schema, _digest(schema), validate, strict)


@dataclass(slots=True)
class Outputs:
    """An engine's output types: its default (``Engine(output_type=...)``)
    and those the calls gave, by digest, so that a turn's stored schema finds
    the Python type it came from (a context reloaded in a process that never
    saw it validates with the stored JSON Schema, and its value is the JSON)."""

    default: TypedOutput | None = None
    retries: int = DEFAULT_OUTPUT_RETRIES
    known: dict[str, TypedOutput] = field(default_factory=dict)

    def remember(self, typed: TypedOutput) -> TypedOutput:
        known = self.known
        known.pop(typed.digest, None)
        known[typed.digest] = typed
        if len(known) > _MAX_REGISTERED:
            del known[next(iter(known))]
        return typed

    def of(self, stored: TurnOutput) -> TypedOutput:
        """The output type a turn stored: the Python type it came from when
        this engine knows it, else its JSON Schema."""
        found = self.known.get(stored.digest)
        if found is None:
            found = self.remember(schema_output(stored.schema, strict=stored.strict))
        return found
