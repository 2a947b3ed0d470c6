"""Typed answers through a provider's own mechanism, as pure functions over
plain JSON values (no SDK here).

An :class:`~turnfsm.model.LLMRequest` whose ``output`` has mode ``native``
asks the adapter to send the answer's JSON Schema the provider's way
(:func:`native_spec` says whether it does). The request builders put it in
their own field (``response_format``, ``text.format``,
``output_config.format``, ``responseJsonSchema``); this module gives them
the schema to send.

OpenAI's strict mode takes a subset of JSON Schema: every object closed
(``additionalProperties: false``), every property required, a root object,
and only the keywords the API lists. :func:`strict_schema` rewrites a schema
into that subset when the rewrite keeps what the schema means, and raises
:class:`NotStrictCompatible` (saying where, and why) when it cannot:

- an object with properties that says nothing of ``additionalProperties`` is
  closed (extra keys carry nothing the schema declares; a pydantic model
  drops them); ``additionalProperties: false`` stays; ``true`` or a schema
  cannot be kept, nor can an object with no properties (any keys);
- an optional property becomes required only when null already stands for
  its absence (its schema accepts null and its default is null, as a
  pydantic ``x: T | None = None`` says); any other optional property cannot
  be kept optional;
- ``default``, ``examples``, ``$comment``, ``$schema``, ``deprecated``,
  ``readOnly`` and ``writeOnly`` are annotations (they validate nothing):
  dropped;
- a ``$ref`` with keywords beside it is replaced by its definition merged
  with them, as is a one-entry ``allOf``, when no keyword but ``title`` and
  ``description`` has a value in both that differs (else both would have to
  hold, which one schema cannot say here);
- any keyword outside the subset (``oneOf``, ``not``, ``if``,
  ``patternProperties``, ``minLength``, a ``format`` the API does not know,
  ...) cannot be kept.

The input is never changed; the result is a new schema.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...model import LLMRequest, OutputSpec

__all__ = [
    "NativeSchema",
    "NotStrictCompatible",
    "closed_schema",
    "native_schema",
    "native_spec",
    "strict_schema",
]

_ANNOTATIONS = frozenset(
    {"default", "examples", "$comment", "$schema", "deprecated", "readOnly", "writeOnly"}
)
_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "title",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    }
)
"""The keywords OpenAI's strict mode takes."""
_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
"""The string formats OpenAI's strict mode takes."""
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


class NotStrictCompatible(ValueError):
    """A schema that strict mode cannot take without changing what it means."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


@dataclass(frozen=True, slots=True)
class NativeSchema:
    """The schema a provider with a strict switch gets: ``strict`` says whether
    it is strict-compatible (and sent with ``strict: true``); ``reason`` why
    it is not, when the spec asked for strict and the schema could not be."""

    schema: dict[str, Any]
    strict: bool
    reason: str | None = None

    def record(self, spec: OutputSpec) -> dict[str, Any]:
        """What the adapter keeps in the request's metadata (``native_output``)."""
        out: dict[str, Any] = {"name": spec.name, "digest": spec.digest, "strict": self.strict}
        if self.reason is not None:
            out["not_strict"] = self.reason
        return out


def native_spec(request: LLMRequest) -> OutputSpec | None:
    """The request's answer type when the adapter is to send it natively
    (mode ``native``); ``None`` when there is none or the messages already
    say it (mode ``instruction``)."""
    spec = request.output
    return spec if spec is not None and spec.mode == "native" else None


def native_schema(spec: OutputSpec) -> NativeSchema:
    """The schema to send with a strict switch: the strict-compatible form when
    ``spec.strict`` asks for it and :func:`strict_schema` can make one, else
    the schema as given with ``strict`` false."""
    if not spec.strict:
        return NativeSchema(copy.deepcopy(spec.schema), strict=False)
    try:
        return NativeSchema(strict_schema(spec.schema), strict=True)
    except NotStrictCompatible as exc:
        return NativeSchema(copy.deepcopy(spec.schema), strict=False, reason=str(exc))


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` rewritten into OpenAI's strict subset (see the module's
    docstring); :class:`NotStrictCompatible` when that would change it."""
    if not isinstance(schema, Mapping):
        raise NotStrictCompatible(
            "$", f"a schema must be a JSON object, got {type(schema).__name__}"
        )
    root = dict(schema)
    out = _Strict(root).node(root, "$", ())
    if out.get("type") != "object":
        raise NotStrictCompatible("$", "the root must be an object (type 'object')")
    return out


def closed_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with ``additionalProperties: false`` on every object with
    properties that says nothing of it (extra keys carry nothing the schema declares), and nothing
    else changed: what a provider that wants closed objects but no more gets."""
    out = copy.deepcopy(dict(schema))
    _close(out)
    return out


def _close(node: object) -> None:
    if not isinstance(node, dict):
        return
    if isinstance(node.get("properties"), dict) and node["properties"]:
        node.setdefault("additionalProperties", False)
    for key in _SUBSCHEMA_MAPS:
        children = node.get(key)
        if isinstance(children, dict):
            for child in children.values():
                _close(child)
    for key in _SUBSCHEMA_LISTS:
        children = node.get(key)
        if isinstance(children, list):
            for child in children:
                _close(child)
    for key in ("items", "additionalProperties", "not"):
        _close(node.get(key))


def _accepts_null(node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if "const" in node and node["const"] is None:
        return True
    enum = node.get("enum")
    if isinstance(enum, list) and None in enum:
        return True
    variants = node.get("anyOf")
    return isinstance(variants, list) and any(
        isinstance(v, Mapping) and _accepts_null(v) for v in variants
    )


def _merged(target: Mapping[str, Any], beside: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A referenced (or ``allOf``) schema and the keywords beside it as one:
    both must hold, which one dict says only when no keyword of both has two
    values, but the annotations ``title`` and ``description`` (the ones
    beside win)."""
    shared = sorted(
        k
        for k in (set(target) & set(beside)) - _ANNOTATIONS - {"title", "description"}
        if target[k] != beside[k]
    )
    if shared:
        raise NotStrictCompatible(
            path, f"keywords beside a reference that it has too: {', '.join(shared)}"
        )
    return {**target, **beside}


class _Strict:
    """One rewrite: the root (for ``$ref`` look-ups) and the walk."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root

    def resolve(self, ref: object, path: str) -> dict[str, Any]:
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise NotStrictCompatible(
                path, f"only local references ('#/...') can be inlined: {ref!r}"
            )
        target: object = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                raise NotStrictCompatible(path, f"the reference {ref!r} points nowhere")
            target = target[part]
        if not isinstance(target, Mapping):
            raise NotStrictCompatible(path, f"the reference {ref!r} is not a schema")
        return dict(target)

    def node(self, raw: object, path: str, inlined: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(raw, Mapping):
            raise NotStrictCompatible(path, "a schema must be a JSON object")
        node = {k: v for k, v in raw.items() if k not in _ANNOTATIONS}
        all_of = node.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
            del node["allOf"]
            node = _merged(all_of[0], node, path)
        ref = node.get("$ref")
        if ref is not None and len(node) > 1:
            if ref in inlined:
                raise NotStrictCompatible(path, f"the reference {ref!r} refers to itself")
            del node["$ref"]
            merged = _merged(self.resolve(ref, path), node, path)
            return self.node(merged, path, (*inlined, str(ref)))
        unknown = sorted(set(node) - _KEYWORDS)
        if unknown:
            raise NotStrictCompatible(path, f"strict mode does not take {', '.join(unknown)}")
        fmt = node.get("format")
        if fmt is not None and fmt not in _FORMATS:
            raise NotStrictCompatible(path, f"strict mode does not take the format {fmt!r}")
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("$defs", "definitions"):
                out[key] = self.children(value, f"{path}.{key}", inlined)
            elif key == "properties":
                out[key] = self.children(value, f"{path}.properties", inlined)
            elif key == "items":
                out[key] = self.node(value, f"{path}.items", inlined)
            elif key == "anyOf":
                if not isinstance(value, list):
                    raise NotStrictCompatible(path, "'anyOf' must be a list")
                out[key] = [
                    self.node(v, f"{path}.anyOf[{n}]", inlined) for n, v in enumerate(value)
                ]
            else:
                out[key] = copy.deepcopy(value)
        kind = out.get("type")
        if kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in out:
            self.close(out, node, path)
        return out

    def children(self, value: object, path: str, inlined: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise NotStrictCompatible(path, "must be a JSON object of schemas")
        return {str(k): self.node(v, f"{path}.{k}", inlined) for k, v in value.items()}

    def close(self, out: dict[str, Any], node: Mapping[str, Any], path: str) -> None:
        extra = node.get("additionalProperties", False)
        if extra is not False:
            raise NotStrictCompatible(
                path, f"an object that allows other keys (additionalProperties: {extra!r})"
            )
        if not isinstance(node.get("properties"), Mapping) or not node["properties"]:
            raise NotStrictCompatible(
                path, "an object with no properties (any keys) cannot be closed"
            )
        out["additionalProperties"] = False
        properties: dict[str, Any] = out["properties"]
        required = node.get("required", [])
        if not isinstance(required, list):
            raise NotStrictCompatible(path, "'required' must be a list")
        raw_properties = node.get("properties") or {}
        for name in properties:
            if name in required:
                continue
            raw = raw_properties.get(name)
            if not (
                isinstance(raw, Mapping)
                and "default" in raw
                and raw["default"] is None
                and _accepts_null(properties[name])
            ):
                raise NotStrictCompatible(
                    f"{path}.properties.{name}",
                    "an optional property whose absence null does not stand for "
                    "(strict mode requires every property)",
                )
        missing = [r for r in required if r not in properties]
        if missing:
            raise NotStrictCompatible(path, f"required but not a property: {', '.join(missing)}")
        out["required"] = list(properties)
