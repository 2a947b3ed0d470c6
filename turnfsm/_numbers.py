"""Whole numbers a client gives: one parser for every one of them.

Page cursors and limits, ``Last-Event-ID``, a ``Content-Length``, the CLI's
ports, sizes and counts: each is read by :func:`whole_number`, as ASCII
digits only (no sign, no spaces, no ``_``, no other script's digits such as
``²``, which ``str.isdigit`` accepts and ``int`` refuses, or Arabic-Indic
digits, which ``int`` reads) and no more of them than the range's top has, so that no
string reaches Python's limit on the digits of an integer. Anything else is
an :class:`~turnfsm.errors.InvalidInput` naming the field.
"""

from __future__ import annotations

from .errors import InvalidInput

__all__ = ["whole_number"]

_DIGITS = frozenset(b"0123456789")


def whole_number(text: str | bytes, where: str, lo: int, hi: int) -> int:
    """``text`` as a whole number from ``lo`` to ``hi`` (both ``>= 0``), else
    :class:`InvalidInput` with ``where`` (the field) and what was wrong."""
    raw = text.encode("ascii", "replace") if isinstance(text, str) else bytes(text)
    if not raw or len(raw) > len(str(hi)) or not _DIGITS.issuperset(raw):
        # the value as given, cut short, only for the error (every request reads one)
        given = text if isinstance(text, str) else text.decode("latin-1")
        shown = given[:40] + ("..." if len(given) > 40 else "")
        raise InvalidInput(
            where, f"must be a whole number from {lo} to {hi} (ASCII digits), not {shown!r}"
        )
    value = int(raw)
    if not lo <= value <= hi:
        raise InvalidInput(where, f"must be a whole number from {lo} to {hi}, not {value}")
    return value
