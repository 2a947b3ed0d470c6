"""JSON text from outside nested too deeply: refused the same way whatever the
process's recursion limit, so that the model's own text is what is kept.

Each test runs under Python's default recursion limit and under a raised one
(as some applications and test runners set): ``json.loads`` alone raises
RecursionError under the first and decodes under the second."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from turnfsm.model import MAX_JSON_DEPTH
from turnfsm.model._json import MAX_DOCUMENT_DEPTH, JSONTooDeep, loads_json


@pytest.fixture(params=[1000, 20_000], ids=["default-limit", "raised-limit"])
def recursion_limit(request: pytest.FixtureRequest) -> Iterator[int]:
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(request.param)
    yield request.param
    sys.setrecursionlimit(before)


pytestmark = pytest.mark.usefixtures("recursion_limit")


def nested_text(depth: int) -> str:
    """An object ``depth`` levels deep, as a model writes it (no spaces)."""
    return '{"a":' * (depth - 1) + '{"b":1}' + "}" * (depth - 1)


def nested_value(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"b": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


DEEP = nested_text(5000)  # deeper than the default limit lets json.loads go
JUST_TOO_DEEP = nested_text(MAX_JSON_DEPTH + 1)
DEEPEST = nested_text(MAX_JSON_DEPTH)


# ---------------------------------------------------------------------- the decoder


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5000])
def test_a_text_deeper_than_the_rule_is_refused(depth: int) -> None:
    for text in (nested_text(depth), "[" * depth + "]" * depth, " [ " * depth + " ] " * depth):
        with pytest.raises(JSONTooDeep, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
            loads_json(text)
        with pytest.raises(JSONTooDeep):
            loads_json(text.encode())
        assert isinstance(JSONTooDeep(MAX_JSON_DEPTH), ValueError)  # caught as a decode error


def test_a_text_as_deep_as_the_rule_decodes() -> None:
    assert loads_json(DEEPEST) == nested_value(MAX_JSON_DEPTH)
    assert loads_json(DEEPEST.encode("utf-16")) == nested_value(MAX_JSON_DEPTH)
    wide = "[" + ",".join([nested_text(MAX_JSON_DEPTH - 1)] * 50) + "]"
    assert len(loads_json(wide)) == 50  # many brackets, none deeper than the rule


def test_brackets_inside_strings_are_not_depth() -> None:
    inside = "{" * 500 + "[" * 500 + '\\"' + "{" * 100 + "\\\\"
    text = '{"a": "' + inside + '", "b": ["\\u007b", "[[[", {"c": "}}}"}]}'
    assert loads_json(text) == {
        "a": "{" * 500 + "[" * 500 + '"' + "{" * 100 + "\\",
        "b": ["{", "[[[", {"c": "}}}"}],
    }


def test_a_document_has_its_own_bound() -> None:
    text = nested_text(MAX_DOCUMENT_DEPTH)
    assert loads_json(text, MAX_DOCUMENT_DEPTH) == nested_value(MAX_DOCUMENT_DEPTH)
    with pytest.raises(JSONTooDeep, match=f"deeper than {MAX_DOCUMENT_DEPTH} levels"):
        loads_json(nested_text(MAX_DOCUMENT_DEPTH + 1), MAX_DOCUMENT_DEPTH)


@pytest.mark.parametrize(
    "text", ['{"a": 1' + " " * 200, '"never closed' + "[" * 200, "]" * 100 + "[" * 10]
)
def test_text_that_is_not_json_is_still_a_decode_error(text: str) -> None:
    with pytest.raises(ValueError):
        loads_json(text)
