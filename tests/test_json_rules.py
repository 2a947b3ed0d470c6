"""The payload rules of turnfsm.model._json: what check_json refuses, what
clean_json converts (and notes), and the id rule."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit import examples  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm.model import (
    MAX_ID_LENGTH,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    JSONProblem,
    check_json,
    check_text,
    clean_json,
    clean_text,
    has_lone_surrogate,
    id_problem,
)
from turnfsm.model._json import (
    MAX_INT_DIGITS,
    MAX_TITLE_LENGTH,
    _check_size,
    _walk,
    title_problem,
)


def nested(levels: int) -> Any:
    """``levels`` nested lists around a 1 (``nested(1) == [1]``)."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


# --------------------------------------------------------------------------- check_json


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(10**300),
        1.5,
        "",
        "héllo 😀",
        [],
        {},
        {"a": [1, 2.5, None, {"b": "c"}]},
        (1, 2),
        nested(MAX_JSON_DEPTH),
    ],
)
def test_check_json_accepts_storable_values(value: Any) -> None:
    check_json(value)  # no error
    assert clean_json(value)[1] == []


@pytest.mark.parametrize(
    ("value", "path", "words"),
    [
        ({"a": {"b": "x\ud800"}}, "$.a.b", "lone surrogate U+D800"),
        (["\udfff"], "$[0]", "lone surrogate U+DFFF"),
        ({"k\udc00": 1}, "$ (a key)", "lone surrogate"),
        ({"a": math.nan}, "$.a", "NaN"),
        ([1, math.inf], "$[1]", "Infinity"),
        ([-math.inf], "$[0]", "-Infinity"),
        ({1: "x"}, "$", "key 1 (int)"),
        ({None: "x"}, "$", "key None"),
        ({(1, 2): "x"}, "$", "key (1, 2) (tuple)"),
        ({"a": {1, 2}}, "$.a", "set"),
        ({"a": object()}, "$.a", "object"),
        ({"a": b"bytes"}, "$.a", "bytes"),
        ({"a": [10**MAX_INT_DIGITS]}, "$.a[0]", "digits"),
        (nested(MAX_JSON_DEPTH + 1), "$" + "[0]" * MAX_JSON_DEPTH, "deeper than"),
    ],
)
def test_check_json_refuses_with_the_path(value: Any, path: str, words: str) -> None:
    with pytest.raises(JSONProblem) as info:
        check_json(value)
    assert info.value.path == path
    assert words in info.value.reason
    assert isinstance(info.value, ValueError)


def test_check_json_names_the_root_it_is_given() -> None:
    with pytest.raises(JSONProblem) as info:
        check_json({"a": {"b": math.nan}}, "parameters")
    assert info.value.path == "parameters.a.b"
    assert str(info.value).startswith("parameters.a.b: ")


def test_a_cycle_is_refused_by_depth_not_by_recursion() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(JSONProblem, match="deeper than"):
        check_json(loop)
    with pytest.raises(JSONProblem, match="deeper than"):
        clean_json(loop)


def test_size_limit_and_its_opt_out() -> None:
    big = "x" * (MAX_JSON_BYTES + 1)
    with pytest.raises(JSONProblem, match="over the limit"):
        check_json({"t": big})
    check_json({"t": big}, max_bytes=None)
    with pytest.raises(JSONProblem, match="over the limit of 10"):
        check_json("a" * 20, max_bytes=10)
    with pytest.raises(JSONProblem, match="over the limit"):
        clean_json([big])


def test_size_counts_utf8_bytes_not_characters() -> None:
    text = "é" * 8  # 16 bytes as UTF-8, 18 as JSON with its quotes
    check_json(text, max_bytes=18)
    with pytest.raises(JSONProblem):
        check_json(text, max_bytes=17)


def test_a_long_int_is_refused_before_json_dumps_would_fail() -> None:
    check_json(10 ** (MAX_INT_DIGITS - 1))  # 4300 digits: json.dumps prints it
    assert len(json.dumps(10 ** (MAX_INT_DIGITS - 1))) == MAX_INT_DIGITS
    with pytest.raises(JSONProblem, match="digits"):
        clean_json({"n": 10**5000})


# --------------------------------------------------------------------------- clean_json


def test_clean_json_converts_visibly() -> None:
    value = {
        "nan": math.nan,
        "inf": [math.inf, -math.inf],
        7: "seven",
        2.5: "half",
        True: "yes",
        None: "nothing",
        "text": "a\ud800b",
        "k\udfff": 0,
        "tuple": (1, 2),
    }
    cleaned, notes = clean_json(value)
    assert cleaned == {
        "nan": "NaN",
        "inf": ["Infinity", "-Infinity"],
        "7": "seven",
        "2.5": "half",
        "true": "yes",
        "null": "nothing",
        "text": "a\ufffdb",
        "k\ufffd": 0,
        "tuple": [1, 2],
    }
    assert json.loads(json.dumps(cleaned)) == cleaned
    assert notes == [
        "$.nan: NaN stored as the string 'NaN'",
        "$.inf[0]: Infinity stored as the string 'Infinity'",
        "$.inf[1]: -Infinity stored as the string '-Infinity'",
        "$: key 7 stored as the string '7'",
        "$: key 2.5 stored as the string '2.5'",
        "$: key True stored as the string 'true'",
        "$: key None stored as the string 'null'",
        "$.text: 1 lone surrogate(s) replaced by U+FFFD",
        "$: a key's lone surrogate(s) replaced by U+FFFD",
    ]
    check_json(cleaned)  # what clean_json gives passes check_json


def test_clean_json_key_text_is_what_json_dumps_would_write() -> None:
    for key in (1, -3, 2.5, 1e100, True, False, None, math.nan, math.inf):
        cleaned, _ = clean_json({key: 0})
        assert list(cleaned) == list(json.loads(json.dumps({key: 0})))


def test_clean_json_refuses_what_has_no_visible_conversion() -> None:
    for value, path in [
        ({"a": {(1, 2): 3}}, "$.a"),
        ({"a": [{1, 2}]}, "$.a[0]"),
        ({"a": object()}, "$.a"),
        (nested(MAX_JSON_DEPTH + 1), "$" + "[0]" * MAX_JSON_DEPTH),
    ]:
        with pytest.raises(JSONProblem) as info:
            clean_json(value)
        assert info.value.path == path


def test_clean_json_refuses_keys_that_collide() -> None:
    with pytest.raises(JSONProblem, match="same string '1'"):
        clean_json({1: "int", "1": "str"})


def test_clean_json_does_not_change_its_input() -> None:
    value = {"a": [math.nan], 1: "x"}
    clean_json(value)
    assert 1 in value and math.isnan(value["a"][0])


# --------------------------------------------------------------------------- text


def test_text_helpers() -> None:
    assert has_lone_surrogate("a\ud83db")
    assert not has_lone_surrogate("a😀b")
    assert not has_lone_surrogate("plain ASCII\x00")
    check_text("plain ASCII")
    assert clean_text("\ud800x\udc00") == ("\ufffdx\ufffd", 2)
    assert clean_text("fine") == ("fine", 0)
    check_text("fine")
    with pytest.raises(JSONProblem) as info:
        check_text("ab\ud800", "content[0].text")
    assert info.value.path == "content[0].text"
    assert "offset 2" in info.value.reason


# --------------------------------------------------------------------------- ids


@pytest.mark.parametrize(
    "value",
    ["a", "id-1", "x" * MAX_ID_LENGTH, "ünïcode ok", "0123abcd-1f", "with space"],
)
def test_id_rule_accepts(value: str) -> None:
    assert id_problem(value) is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (None, "must be a string, not None"),
        (12, "must be a string, not int"),
        (b"id", "must be a string, not bytes"),
        ("", "must not be empty"),
        ("x" * (MAX_ID_LENGTH + 1), f"at most {MAX_ID_LENGTH}"),
        ("a\nb", "control character U+000A"),
        ("a\x00", "control character U+0000"),
        ("a\x85", "control character U+0085"),
        ("a\x7f", "control character U+007F"),
        ("id\x1f", "control character U+001F at offset 2"),
        ("a\ud800", "lone surrogate U+D800"),
    ],
)
def test_id_rule_refuses(value: Any, words: str) -> None:
    reason = id_problem(value)
    assert reason is not None and words in reason


def test_the_id_rule_reads_every_code_point_alike() -> None:
    """Printable ASCII is passed without the searches: every code point
    below U+00A0 is refused or accepted as the searches alone would."""
    for n in range(0xA0):
        value = f"id{chr(n)}x"
        control = n < 0x20 or 0x7F <= n <= 0x9F
        reason = id_problem(value)
        assert (reason is not None) is control, (n, reason)
        if control:
            assert reason == f"holds the control character U+{n:04X} at offset 2"


# clean_json tries a pass without path strings first (``_plain``) and walks
# again with ``_walk`` on anything unusual: the result must be the walk's.
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.sampled_from(["a", "é", "\ud800", "\udfff", "\x00", "z"]), max_size=4),
)
_keys = st.one_of(
    st.text(alphabet=st.sampled_from(["k", "é", "\udc80"]), max_size=3),
    st.integers(min_value=-3, max_value=3),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=True),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_keys, inner, max_size=3),
    ),
    max_leaves=12,
)


def _walked(value: Any) -> tuple[str, Any, list[str]]:
    notes: list[str] = []
    size = [0]
    try:
        converted = _walk(value, "$", 0, notes, size)
        _check_size(converted, "$", size[0])
    except JSONProblem as exc:
        return "error", str(exc), []
    return "ok", converted, notes


@given(_values)
@settings(max_examples=examples(300), deadline=None)
def test_clean_json_fast_pass_gives_what_the_walk_gives(value: Any) -> None:
    try:
        converted, notes = clean_json(value)
        got: tuple[str, Any, list[str]] = ("ok", converted, notes)
    except JSONProblem as exc:
        got = ("error", str(exc), [])
    expected = _walked(value)
    # repr: NaN compares unequal to itself, and a tuple must have become a list
    assert repr(got) == repr(expected)
    if got[0] == "ok":
        assert json.dumps(got[1], allow_nan=False) is not None  # storable as it is


@pytest.mark.parametrize(
    ("check", "limit", "note"),
    [(id_problem, MAX_ID_LENGTH, ""), (title_problem, MAX_TITLE_LENGTH, " (a title is one line)")],
)
def test_ids_and_titles_are_one_line_of_bounded_text(
    check: Callable[[object], str | None], limit: int, note: str
) -> None:
    assert check("a" * limit) is None
    assert check(None) == "must be a string, not None"
    assert check(7) == "must be a string, not int"
    assert check("") == "must not be empty"
    assert check("a" * (limit + 1)) == f"is {limit + 1} characters long; at most {limit}"
    assert check("ab\ncd") == f"holds the control character U+000A at offset 2{note}"
    assert check("ab\ud800") == "lone surrogate U+D800 at offset 2 (not valid Unicode)"
