"""The depth check's scan gives, for every text, the answer of the scan it
replaced: two regular expressions over the whole text, kept here as the
reference (``reference_loads``). Valid JSON deep and wide, strings holding
brackets, quotes and backslashes, text that is not JSON (a backslash outside
a string, an unterminated string, brackets that do not match), at limits
small enough that the passes and the exact count are all reached."""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kit import examples  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm.model._json import (
    MAX_DOCUMENT_DEPTH,
    MAX_JSON_DEPTH,
    JSONTooDeep,
    _outside_strings,
    _structure,
    _without_empty_pairs,
    loads_json,
)

# ---------------------------------------------------------------------- the reference

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\[\s\S][^"\\]*)*"?')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"{": 1, "[": 1, "}": -1, "]": -1}
_EMPTY_PAIR = re.compile(r"\{\}|\[\]")
_PASSES = 4


def _opens(text: str) -> int:
    return text.count("{") + text.count("[")


def reference_brackets(text: str) -> str:
    return _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))


def reference_depth_over(text: str, max_depth: int) -> bool:
    if _opens(text) <= max_depth:
        return False
    brackets = reference_brackets(text)
    for taken in range(_PASSES):
        if _opens(brackets) + taken <= max_depth:
            return False
        brackets = _EMPTY_PAIR.sub("", brackets)
    steps = accumulate(map(_BRACKET_STEP.__getitem__, brackets))
    return max(steps, default=0) + _PASSES > max_depth


def reference_loads(text: str | bytes, max_depth: int) -> Any:
    if len(text) > 2 * max_depth + 1:
        if not isinstance(text, str):
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        if reference_depth_over(text, max_depth):
            raise JSONTooDeep(max_depth)
    return json.loads(text)


def outcome(decode: Any, text: str | bytes, max_depth: int) -> tuple[str, str]:
    try:
        return "value", repr(decode(text, max_depth))
    except (ValueError, RecursionError) as exc:  # RecursionError: both let json.loads try
        return type(exc).__name__, str(exc)


def assert_same(text: str, max_depth: int) -> None:
    assert _outside_strings(text, *_structure(text)) == reference_brackets(text)
    for given_text in (text, text.encode("utf-8", "surrogatepass")):
        assert outcome(loads_json, given_text, max_depth) == outcome(
            reference_loads, given_text, max_depth
        )


# ---------------------------------------------------------------------- the texts

_LIMITS = st.sampled_from([0, 1, 2, 3, 4, 5, 6, 8, 12])

# pieces of strings: brackets, quotes and backslashes (escaped or not), unicode
_STRING_TEXT = st.text(
    st.sampled_from(['"', "\\", "[", "]", "{", "}", "a", " ", "é", "\u2028", "😀", "\x00", "\n"]),
    max_size=8,
)
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), _STRING_TEXT
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_STRING_TEXT, inner, max_size=4),
    max_leaves=30,
)


@st.composite
def valid_json(draw: st.DrawFn) -> str:
    """A JSON text, sometimes wrapped some levels deeper, written as
    ``json.dumps`` writes it (escaped to ASCII or not, spaced or not)."""
    value = draw(_VALUES)
    for wrap in draw(st.lists(st.sampled_from(["list", "dict"]), max_size=14)):
        value = [value] if wrap == "list" else {"k[": value}
    ascii_only = draw(st.booleans())
    compact = draw(st.booleans())
    separators = (",", ":") if compact else None
    return json.dumps(value, ensure_ascii=ascii_only, separators=separators)


_TOKENS = st.sampled_from(
    [
        *["{", "}", "[", "]", '"', "\\", "\\\\", '\\"', ",", ":", " ", "a", "1", "é"],
        *["\ud800", "\x7f", '"[{"', "{}", "[]", '"\\\\"', '"\\""', "\\u005b", "😀"],
    ]
)
token_soup = st.lists(_TOKENS, max_size=60).map("".join)


@st.composite
def broken_json(draw: st.DrawFn) -> str:
    """A JSON text with a piece cut out or a token put in."""
    text = draw(valid_json())
    at = draw(st.integers(0, len(text)))
    if draw(st.booleans()):
        return text[:at] + text[at + draw(st.integers(1, 4)) :]
    return text[:at] + draw(_TOKENS) + text[at:]


# ---------------------------------------------------------------------- the properties


@given(valid_json(), _LIMITS)
@settings(max_examples=examples(500), deadline=None)
@example('["a\\\\", [[["\\\\\\"[[["]]]]', 2)
@example('{"k": "\\u005b\\\\\\\\\\"[", "x": [[[[1]]]]}', 3)
def test_valid_json_gets_the_reference_answer(text: str, max_depth: int) -> None:
    assert_same(text, max_depth)


@given(st.one_of(token_soup, broken_json()), _LIMITS)
@settings(max_examples=examples(1000), deadline=None)
@example('\\"' + "[" * 10, 3)  # a backslash before a quote outside a string
@example("\\\\\\" + '"' + "[[[[" + '"' + "[[[[", 3)
@example('"unterminated [[[[ \\', 2)
@example('"a"\\' + "[" * 8 + '"', 3)
@example("[{}]" * 3 + "[[[[{]]]]", 2)  # unmatched: the passes leave it
@example("]" * 6 + "[" * 6, 3)
def test_text_that_is_not_json_gets_the_reference_answer(text: str, max_depth: int) -> None:
    assert_same(text, max_depth)


@given(st.text(st.sampled_from("[]{}"), max_size=40))
@settings(max_examples=examples(500), deadline=None)
def test_a_pass_takes_out_what_the_expression_took_out(brackets: str) -> None:
    assert _without_empty_pairs(brackets) == _EMPTY_PAIR.sub("", brackets)


@pytest.mark.parametrize("max_depth", [MAX_JSON_DEPTH, MAX_DOCUMENT_DEPTH])
def test_wide_and_deep_documents_at_the_real_limits(max_depth: int) -> None:
    small = {"id": 1, "tags": ["a", "b"], "note": 'a "quoted" [word] \\ {}', "d": {"w": [1]}}
    chain = "[" * (max_depth - 1) + "[]" + "]" * (max_depth - 1)  # exactly max_depth levels
    for text in (
        json.dumps([small] * 2000),
        "[" + ",".join([json.dumps(small)] * 500 + [chain[1:-1]]) + "]",  # deepest
        "[" + ",".join([json.dumps(small)] * 500 + [chain]) + "]",  # one level too deep
        "[" + ",".join([json.dumps(small)] * 50 + ['"\\\\"' + chain]) + "]",  # not JSON
    ):
        assert_same(text, max_depth)
    with pytest.raises(JSONTooDeep):
        loads_json("[" + chain + "]", max_depth)
    assert loads_json(chain, max_depth) is not None
