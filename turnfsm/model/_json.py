"""What a stored payload may hold: one set of rules for every store.

Tool arguments, tool results, message metadata and every text that enters
from outside end up as JSON in a store. JSON cannot hold everything Python
can, and a store that accepts what it cannot load back strands the
conversation. So every payload is checked (or, for output of a model or a
tool, converted visibly) before it is committed:

- depth: at most :data:`MAX_JSON_DEPTH` nested containers;
- size: at most :data:`MAX_JSON_BYTES` bytes as UTF-8 JSON;
- keys: strings; ``int``/``float``/``bool``/``None`` keys become their JSON
  text (as :func:`json.dumps` would, but recorded); any other key is refused;
- numbers: finite; ``nan``/``inf``/``-inf`` become the strings ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"`` (recorded); an integer has at most
  :data:`MAX_INT_DIGITS` digits (Python refuses to print or parse longer ones);
- text: no lone surrogates (they cannot be encoded as UTF-8); from a model or
  a tool each becomes U+FFFD (recorded); from an API caller it is refused;
- values: ``str``, ``int``, ``float``, ``bool``, ``None``, ``list``/``tuple``
  and ``dict``; a pydantic model or dataclass is not converted here.

:func:`check_json` refuses (for input from callers); :func:`clean_json`
converts and returns notes saying what changed and where (for output of a
model or a tool). Both name the place by a JSON path (``$.a[2].b``).

A JSON text from outside (a model's tool-call arguments, a request body, a
file) is decoded with :func:`loads_json`, which refuses a text nested
deeper than the rule allows before parsing it, so that what is refused does
not depend on the process's recursion limit.

Ids (context ids, message ids, branch names) are keys in every store, so
they have a rule of their own, :func:`id_problem`: a ``str`` of 1 to
:data:`MAX_ID_LENGTH` characters with no control character (Unicode
category Cc) and no lone surrogate.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_INT_DIGITS",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_TITLE_LENGTH",
    "JSONProblem",
    "check_json",
    "check_text",
    "clean_json",
    "clean_text",
    "has_lone_surrogate",
    "id_problem",
    "title_problem",
]

MAX_JSON_DEPTH = 64
"""Nested lists and objects allowed in one payload (the payload itself is depth 1)."""

MAX_DOCUMENT_DEPTH = 2 * MAX_JSON_DEPTH
"""Nesting allowed in a whole document read from a file (an import, a script,
a stored record): its own structure around payloads of at most
:data:`MAX_JSON_DEPTH` each."""

MAX_JSON_BYTES = 16 * 1024 * 1024
"""Largest payload, as UTF-8 JSON text."""

MAX_INT_DIGITS = 4300
"""Longest integer, in decimal digits (Python's default limit for int/str conversion)."""

_MAX_INT_BITS = int(MAX_INT_DIGITS * math.log2(10))  # every int of this many bits prints
MAX_ID_LENGTH = 200
"""Longest id or branch name, in characters."""

MAX_TITLE_LENGTH = 1000
"""Longest title of a context, in characters."""

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


# a JSON string, escapes and all; an unterminated one runs to the end of the text
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\[\s\S][^"\\]*)*"?')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
# every byte but the quote, the backslash and the brackets
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"\\[]{}')
_BRACKET_STEP = {"{": 1, "[": 1, "}": -1, "]": -1}
_PASSES = 4


class JSONTooDeep(ValueError):
    """A JSON text nested deeper than ``max_depth`` containers (not parsed)."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        super().__init__(f"nested too deeply (more than {max_depth} levels)")


def _opens(text: str) -> int:
    return text.count("{") + text.count("[")


def _structure(text: str) -> tuple[bytes, bytes]:
    """``text`` as UTF-8, and its quotes, backslashes and brackets alone (what
    is not ASCII is none of them)."""
    raw = text.encode("utf-8", "surrogatepass")
    return raw, raw.translate(None, _NOT_STRUCTURE)


def _outside_strings(text: str, raw: bytes, kept: bytes) -> str:
    """The brackets of ``text`` outside its strings, in order, as
    ``_JSON_STRING`` and ``_NOT_BRACKET`` leave them, from its
    :func:`_structure` ``raw`` and ``kept``, with no regular expression run
    over the whole text (on a wide text that was most of the cost)."""
    # an escaped backslash or quote decides where a string ends; a pair not in
    # ``kept`` is not in the text (nor made by taking out the first kind)
    pairs, quoted = b"\\\\" in kept, b'\\"' in kept
    if pairs:  # escaped backslashes first, from the left as a string reads them
        raw = raw.replace(b"\\\\", b"")
    if quoted:  # an escaped quote leaves a lone backslash: in a string, unless not JSON there
        raw = raw.replace(b'\\"', b"\\")
    if pairs or quoted:
        kept = raw.translate(None, _NOT_STRUCTURE)
    # a string with no bracket in it is two quotes in a row: taken out in one
    # step, which takes nothing from what is outside the strings
    kept = kept.replace(b'""', b"")
    if b'"' in kept:  # an unterminated string runs to the end, as the expression's does
        kept = b"".join(kept.split(b'"')[::2])
    if b"\\" in kept:  # a backslash outside a string: the expression reads it its own way
        return _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return kept.decode("ascii")


def _without_empty_pairs(brackets: str) -> str:
    """``brackets`` with every ``{}`` and ``[]`` in it taken out at once (not
    those the taking out makes): the two never overlap, and ``{}`` is marked
    first so that taking it out makes no ``[]`` for the second step."""
    return brackets.replace("{}", ".").replace("[]", "").replace(".", "")


def _depth_over(text: str, max_depth: int) -> bool:
    """Whether ``text`` opens more than ``max_depth`` containers at once,
    counting brackets outside strings (exact for valid JSON; for text that is
    not, at least the depth :func:`json.loads` reaches before it stops)."""
    raw, kept = _structure(text)
    # every bracket of the text, those in strings too: few enough, none too deep
    if kept.count(b"{") + kept.count(b"[") <= max_depth:
        return False
    brackets = _outside_strings(text, raw, kept)
    # each pass takes away the innermost pairs, one level: a wide document of
    # small objects is gone in a few passes of C, with no step per bracket
    for taken in range(_PASSES):
        if _opens(brackets) + taken <= max_depth:
            return False
        brackets = _without_empty_pairs(brackets)
    steps = accumulate(map(_BRACKET_STEP.__getitem__, brackets))
    return max(steps, default=0) + _PASSES > max_depth


def loads_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """:func:`json.loads`, refusing with :class:`JSONTooDeep` (a ValueError,
    like every decode error) a text of more than ``max_depth`` nested lists
    and objects. The depth is measured before parsing, so the same text is
    refused under any recursion limit, and never recursed into deeply."""
    # valid JSON needs two characters per level: a short text cannot be too deep,
    # and one that is not JSON fails to parse long before the limit matters
    if len(text) > 2 * max_depth + 1:
        if not isinstance(text, str):  # decoded as json.loads decodes bytes
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        if _depth_over(text, max_depth):
            raise JSONTooDeep(max_depth)
    return json.loads(text)


class JSONProblem(ValueError):
    """A payload breaks one of the rules above; ``path`` says where."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def has_lone_surrogate(text: str) -> bool:
    """True if ``text`` holds a code point that UTF-8 cannot encode."""
    if text.isascii():  # a flag of the string: no search over ASCII text
        return False
    return _SURROGATE.search(text) is not None


def check_text(text: str, path: str = "$") -> None:
    """Refuse a text with a lone surrogate (input from a caller)."""
    if text.isascii():  # a flag of the string: no search over ASCII text
        return
    m = _SURROGATE.search(text)
    if m is not None:
        raise JSONProblem(
            path, f"lone surrogate U+{ord(m.group()):04X} at offset {m.start()} (not valid Unicode)"
        )


def id_problem(value: object) -> str | None:
    """Why ``value`` is not a usable id or branch name, or None if it is."""
    if (
        type(value) is str
        and 0 < len(value) <= MAX_ID_LENGTH
        and value.isascii()
        and value.isprintable()
    ):
        return None  # every call's ids: _line_problem's own fast path, without its frame
    return _line_problem(value, MAX_ID_LENGTH, "")


def title_problem(value: object) -> str | None:
    """Why ``value`` is not a usable title (one line of 1 to
    :data:`MAX_TITLE_LENGTH` characters, no control character, no lone
    surrogate), or None if it is."""
    return _line_problem(value, MAX_TITLE_LENGTH, " (a title is one line)")


def _line_problem(value: object, limit: int, control_note: str) -> str | None:
    """Why ``value`` is not a string of 1 to ``limit`` characters with no
    control character and no lone surrogate, or None if it is."""
    if not isinstance(value, str):
        return f"must be a string, not {'None' if value is None else type(value).__name__}"
    if not value:
        return "must not be empty"
    if len(value) > limit:
        return f"is {len(value)} characters long; at most {limit}"
    if value.isascii() and value.isprintable():
        # printable ASCII (U+0020 to U+007E) holds neither a control character
        # nor a surrogate: passed without the two searches
        return None
    m = _CONTROL.search(value)
    if m is not None:
        return (
            f"holds the control character U+{ord(m.group()):04X} at offset {m.start()}"
            + control_note
        )
    m = _SURROGATE.search(value)
    if m is not None:
        return f"lone surrogate U+{ord(m.group()):04X} at offset {m.start()} (not valid Unicode)"
    return None


def clean_text(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate replaced by U+FFFD, and how many were."""
    if type(text) is str and text.isascii():  # no surrogate in it: no regex to run
        return text, 0
    return _SURROGATE.subn("\ufffd", text)


def _key_text(key: Any) -> str | None:
    if isinstance(key, bool) or key is None:
        return json.dumps(key)
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        return _NON_FINITE.get(key, "NaN" if key != key else repr(key))
    return None


def _non_finite(value: float, path: str, notes: list[str] | None) -> str:
    """A NaN or infinity: refused when checking, else stored as its name."""
    text = "NaN" if value != value else _NON_FINITE[value]
    if notes is None:
        raise JSONProblem(path, f"{text} is not a JSON number")
    notes.append(f"{path}: {text} stored as the string {text!r}")
    return text


def _scalar_key(key: Any, path: str, notes: list[str] | None) -> str:
    """A key that is not a string: refused when checking or when it is not a
    scalar, else stored as the string JSON writes for it."""
    key_text = _key_text(key)
    if key_text is None or notes is None:
        raise JSONProblem(path, f"key {key!r} ({type(key).__name__}) is not a string")
    notes.append(f"{path}: key {key!r} stored as the string {key_text!r}")
    return key_text


def _walk(value: Any, path: str, depth: int, notes: list[str] | None, size: list[int]) -> Any:
    """Check (``notes is None``) or convert ``value``; returns the converted value.

    ``size[0]`` grows by an upper bound of each value's bytes as JSON, so
    that the exact size is only measured when the bound is over the limit.
    """
    if isinstance(value, str):
        size[0] += 6 * len(value) + 3  # "\uXXXX" is the longest form of one character
        if notes is None:
            check_text(value, path)
            return value
        cleaned, n = clean_text(value)
        if n:
            notes.append(f"{path}: {n} lone surrogate(s) replaced by U+FFFD")
        return cleaned
    size[0] += 32  # a scalar, and the separator before it
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            raise JSONProblem(path, f"an integer of more than {MAX_INT_DIGITS} digits")
        if value.bit_length() > 64:
            size[0] += len(str(value))
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return _non_finite(value, path, notes)
    if isinstance(value, list | tuple | dict):
        if depth >= MAX_JSON_DEPTH:
            raise JSONProblem(path, f"nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if isinstance(key, str):
                    size[0] += 6 * len(key) + 4
                    name = key
                    if notes is None:
                        check_text(key, f"{path} (a key)")
                    else:
                        name, n = clean_text(key)
                        if n:
                            notes.append(f"{path}: a key's lone surrogate(s) replaced by U+FFFD")
                else:
                    name = _scalar_key(key, path, notes)
                    size[0] += 6 * len(name) + 4
                if name in out:
                    raise JSONProblem(path, f"two keys become the same string {name!r}")
                out[name] = _walk(item, f"{path}.{name}", depth + 1, notes, size)
            return out
        return [_walk(item, f"{path}[{i}]", depth + 1, notes, size) for i, item in enumerate(value)]
    raise JSONProblem(path, f"a {type(value).__name__} is not a JSON value")


class _NotPlain(Exception):
    """Raised by :func:`_plain` on anything it leaves to :func:`_walk`."""


_NOT_PLAIN = _NotPlain()


def _plain(value: Any, depth: int, size: list[int]) -> Any:
    """:func:`_walk`'s converting pass for the common case, with no paths built:
    a copy of ``value`` when it is plain JSON already (exact str, int of at
    most 64 bits, finite float, bool, None, list, tuple, dict with str keys,
    no lone surrogate, not too deep), adding to ``size[0]`` what ``_walk``
    would add. On anything else it raises ``_NotPlain`` and the caller walks
    again with ``_walk``, which then writes the notes and errors."""
    kind = type(value)
    if kind is str:
        if not value.isascii() and _SURROGATE.search(value) is not None:
            raise _NOT_PLAIN
        size[0] += 6 * len(value) + 3
        return value
    size[0] += 32
    if value is None or kind is bool:
        return value
    if kind is int:
        if value.bit_length() > 64:
            raise _NOT_PLAIN
        return value
    if kind is float:
        if value - value == 0:  # finite
            return value
        raise _NOT_PLAIN
    if depth >= MAX_JSON_DEPTH:
        raise _NOT_PLAIN
    if kind is dict:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str or (not key.isascii() and _SURROGATE.search(key) is not None):
                raise _NOT_PLAIN
            size[0] += 6 * len(key) + 4
            # a string value checked here, as ``_plain`` would: most are, and
            # each call is a frame of its own
            if type(item) is str and item.isascii():
                size[0] += 6 * len(item) + 3
                out[key] = item
            else:
                out[key] = _plain(item, depth + 1, size)
        return out
    if kind is list or kind is tuple:
        return [_plain(item, depth + 1, size) for item in value]
    raise _NOT_PLAIN


def _check_size(value: Any, path: str, bound: int, limit: int = MAX_JSON_BYTES) -> None:
    if bound <= limit:
        return
    size = len(json.dumps(value, ensure_ascii=False).encode())
    if size > limit:
        raise JSONProblem(path, f"{size} bytes as JSON, over the limit of {limit}")


def check_json(value: Any, path: str = "$", *, max_bytes: int | None = MAX_JSON_BYTES) -> None:
    """Raise :class:`JSONProblem` unless ``value`` can be stored as it is.

    ``max_bytes=None`` skips the size check (for a whole document that holds
    many payloads, such as an imported conversation).
    """
    size = [0]
    _walk(value, path, 0, None, size)
    if max_bytes is not None:
        _check_size(value, path, size[0], max_bytes)


def plain_json_copy(value: Any) -> tuple[bool, Any]:
    """``(True, copy)`` when ``value`` is plain JSON that :func:`clean_json`
    would copy unchanged with no note (and within the size limit), else
    ``(False, None)``: the caller then converts it the long way."""
    size = [0]
    try:
        converted = _plain(value, 0, size)
    except _NotPlain:
        return False, None
    _check_size(converted, "$", size[0])
    return True, converted


def clean_json(value: Any, path: str = "$") -> tuple[Any, list[str]]:
    """``value`` converted to storable JSON, with a note per conversion.

    Raises :class:`JSONProblem` for what has no visible conversion (a key
    that is not a scalar, an object with no JSON form, too deep, too large).
    """
    notes: list[str] = []
    size = [0]
    try:  # plain JSON (a tool's dict, a call's arguments): no path strings
        converted = _plain(value, 0, size)
    except _NotPlain:
        size[0] = 0
        converted = _walk(value, path, 0, notes, size)
    _check_size(converted, path, size[0])
    return converted, notes
