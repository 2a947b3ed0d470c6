"""The strict-compatible form of an answer's schema (pure), checked as
properties on a few schemas: pydantic models flat, nested, recursive and with
optional fields, and schemas that cannot be made strict.

For each schema that can be made strict: the result is in OpenAI's strict
subset (every object closed, every property required, only the keywords the
API takes), every answer a model could give under it is an answer the
original schema accepts (the rewrite only narrows), and every complete answer
the pydantic model itself dumps is still accepted (it does not narrow too
far). The answers are generated (hypothesis), and mutated: a key dropped, an
extra key, a value replaced by null.
"""

from __future__ import annotations

import copy
import json
from enum import StrEnum
from typing import Any, Literal

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit import examples  # tests/ is on sys.path (no tests/__init__.py)
from pydantic import BaseModel, Field

from turnfsm.adapters.llm._output import (
    NotStrictCompatible,
    closed_schema,
    native_schema,
    strict_schema,
)
from turnfsm.model import OutputSpec

_STRICT_KEYWORDS = {
    "type",
    "description",
    "title",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
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


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


class Flat(BaseModel):
    """A flat answer."""

    name: str = Field(description="who")
    count: int = Field(ge=0, le=10)
    ratio: float
    ok: bool
    tags: list[str] = Field(max_length=3)
    colour: Colour
    mood: Literal["happy", "sad"]


class Address(BaseModel):
    city: str
    zip: str


class Nested(BaseModel):
    home: Address = Field(description="where they live")  # a $ref with a sibling
    others: list[Address]
    mode: Literal["a"] = Field(json_schema_extra={"allOf": [{"const": "a"}]})


class Optional_(BaseModel):
    title: str
    note: str | None = None
    where: Address | None = None
    scores: list[int] | None = None


class Tree(BaseModel):
    label: str
    children: list[Tree]


STRICT_MODELS: list[type[BaseModel]] = [Flat, Nested, Optional_, Tree]


def _instances(model: type[BaseModel]) -> st.SearchStrategy[BaseModel]:
    """Instances of ``model`` (finite numbers: JSON has no infinity; small trees)."""
    if model is Tree:
        return st.recursive(
            st.builds(Tree, children=st.just([])),
            lambda sub: st.builds(Tree, children=st.lists(sub, max_size=3)),
            max_leaves=8,
        )
    finite = st.floats(allow_nan=False, allow_infinity=False)
    return st.builds(model, **({"ratio": finite} if model is Flat else {}))


def _walk(node: Any, path: str = "$") -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(node, dict):
        return []
    out = [(path, node)]
    for key in ("properties", "$defs"):
        for name, child in (node.get(key) or {}).items():
            out += _walk(child, f"{path}.{key}.{name}")
    if isinstance(node.get("items"), dict):
        out += _walk(node["items"], f"{path}.items")
    for n, child in enumerate(node.get("anyOf") or ()):
        out += _walk(child, f"{path}.anyOf[{n}]")
    return out


def _assert_strict_subset(schema: dict[str, Any]) -> None:
    assert schema["type"] == "object"
    for path, node in _walk(schema):
        assert set(node) <= _STRICT_KEYWORDS, (path, set(node) - _STRICT_KEYWORDS)
        if node.get("type") == "object":
            assert node["additionalProperties"] is False, path
            assert node["required"] == list(node["properties"]), path
        if "$ref" in node:
            assert set(node) == {"$ref"}, path  # a reference stands alone


def _answers(model: type[BaseModel]) -> st.SearchStrategy[Any]:
    """Answers near the model's: its dumps, and the same with a key dropped,
    an extra key, or a value replaced by null (at the top or one level down)."""
    dumps = _instances(model).map(lambda m: json.loads(m.model_dump_json()))

    def mutate(value: dict[str, Any], how: str, pick: int) -> Any:
        out = copy.deepcopy(value)
        target = out
        nested = [v for v in out.values() if isinstance(v, dict)]
        if nested and pick % 2:
            target = nested[pick % len(nested)]
        keys = sorted(target)
        key = keys[pick % len(keys)]
        if how == "drop":
            del target[key]
        elif how == "extra":
            target["unexpected"] = 1
        else:
            target[key] = None
        return out

    mutated = st.builds(
        mutate, dumps, st.sampled_from(["drop", "extra", "null"]), st.integers(0, 50)
    )
    return st.one_of(dumps, mutated)


def _valid(schema: dict[str, Any], value: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.hypothesis
@pytest.mark.parametrize("model", STRICT_MODELS, ids=lambda m: m.__name__)
def test_a_pydantic_model_becomes_strict_and_keeps_its_meaning(model: type[BaseModel]) -> None:
    original = model.model_json_schema()
    before = copy.deepcopy(original)
    strict = strict_schema(original)
    assert original == before  # the input is not changed
    _assert_strict_subset(strict)
    strict_ok, original_ok = _validator(strict), _validator(original)

    @settings(
        max_examples=examples(80), suppress_health_check=[HealthCheck.too_slow], deadline=None
    )
    @given(_answers(model))
    def narrows_only(answer: Any) -> None:
        if strict_ok.is_valid(answer):
            assert original_ok.is_valid(answer), answer

    @settings(
        max_examples=examples(40), suppress_health_check=[HealthCheck.too_slow], deadline=None
    )
    @given(_instances(model))
    def keeps_every_full_answer(instance: BaseModel) -> None:
        assert strict_ok.is_valid(json.loads(instance.model_dump_json()))

    narrows_only()
    keeps_every_full_answer()


def test_an_optional_property_is_required_only_where_null_means_absent() -> None:
    strict = strict_schema(Optional_.model_json_schema())
    assert strict["required"] == ["title", "note", "where", "scores"]
    # the model must now say null where it would have left the key out
    assert not _valid(strict, {"title": "t"})
    assert _valid(strict, {"title": "t", "note": None, "where": None, "scores": None})
    assert Optional_.model_validate(
        {"title": "t", "note": None, "where": None, "scores": None}
    ) == (Optional_.model_validate({"title": "t"}))


def test_a_reference_with_a_description_is_inlined_and_a_lone_one_stays() -> None:
    strict = strict_schema(Nested.model_json_schema())
    home = strict["properties"]["home"]
    assert home["description"] == "where they live"
    assert home["properties"]["city"] == {"title": "City", "type": "string"}
    assert home["additionalProperties"] is False
    assert strict["properties"]["others"]["items"] == {"$ref": "#/$defs/Address"}
    assert strict["$defs"]["Address"]["additionalProperties"] is False
    assert strict["properties"]["mode"]["const"] == "a"  # a one-entry allOf merged in


class WithDefault(BaseModel):
    size: int = 5


class AnyMap(BaseModel):
    counts: dict[str, int]


class Cat(BaseModel):
    kind: Literal["cat"]


class Dog(BaseModel):
    kind: Literal["dog"]


class Pet(BaseModel):
    pet: Cat | Dog = Field(discriminator="kind")


class Link(BaseModel):
    url: str = Field(json_schema_extra={"format": "uri"})


class Short(BaseModel):
    code: str = Field(min_length=2)


NOT_STRICT: list[tuple[str, dict[str, Any], str]] = [
    ("default", WithDefault.model_json_schema(), "$.properties.size: an optional property"),
    ("map", AnyMap.model_json_schema(), "$.properties.counts: an object that allows other keys"),
    ("one_of", Pet.model_json_schema(), "strict mode does not take discriminator, oneOf"),
    ("format", Link.model_json_schema(), "$.properties.url: strict mode does not take the format"),
    (
        "min_length",
        Short.model_json_schema(),
        "$.properties.code: strict mode does not take minLength",
    ),
    (
        "null_default_not_nullable",
        {"type": "object", "properties": {"x": {"type": "string", "default": None}}},
        "$.properties.x: an optional property",
    ),
    (
        "ref_and_a_rule_of_its_own",
        {
            "type": "object",
            "properties": {"n": {"$ref": "#/$defs/N", "minimum": 3}},
            "required": ["n"],
            "$defs": {"N": {"type": "integer", "minimum": 0}},
        },
        "$.properties.n: keywords beside a reference that it has too: minimum",
    ),
    ("root_array", {"type": "array", "items": {"type": "string"}}, "$: the root must be an object"),
    ("open", {"type": "object"}, "$: an object with no properties"),
    (
        "self_ref",
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A", "description": "x"}},
            "required": ["a"],
            "$defs": {"A": {"$ref": "#/$defs/A", "title": "loop"}},
        },
        "refers to itself",
    ),
]


@pytest.mark.parametrize(
    ("schema", "why"), [c[1:] for c in NOT_STRICT], ids=[c[0] for c in NOT_STRICT]
)
def test_a_schema_that_cannot_be_made_strict_goes_as_given_with_strict_false(
    schema: dict[str, Any], why: str
) -> None:
    with pytest.raises(NotStrictCompatible) as info:
        strict_schema(schema)
    assert why in str(info.value)
    sent = native_schema(OutputSpec("answer", schema, "d"))
    assert (sent.schema, sent.strict) == (schema, False)
    assert sent.reason is not None and why in sent.reason
    assert sent.schema is not schema  # a copy: the spec's schema is never shared


def test_a_spec_that_does_not_ask_for_strict_is_not_rewritten() -> None:
    schema = Flat.model_json_schema()
    sent = native_schema(OutputSpec("answer", schema, "d", strict=False))
    assert (sent.schema, sent.strict, sent.reason) == (schema, False, None)


def test_closing_adds_additional_properties_false_and_nothing_else() -> None:
    original = Optional_.model_json_schema()
    closed = closed_schema(original)
    assert closed["additionalProperties"] is False
    assert closed["$defs"]["Address"]["additionalProperties"] is False
    assert closed["required"] == ["title"]  # optional stays optional
    assert closed["properties"]["note"] == original["properties"]["note"]
    assert "additionalProperties" not in original  # the input is not changed
    assert closed_schema({"type": "object"}) == {"type": "object"}  # any keys stays open
