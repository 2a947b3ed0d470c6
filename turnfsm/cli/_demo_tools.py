"""The demo tools of ``turnfsm chat``: ``clock`` (the time in a timezone),
``calculator`` (arithmetic only, parsed, never ``eval``'d, see
:func:`calculate`) and ``read_file`` (a text file under the working directory;
each call needs approval; no path escapes it)."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..tools import Tool, ToolError, tool

__all__ = ["builtin_tools", "calculate"]

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_MAX_EXPRESSION = 200
_MAX_EXPONENT = 1000
_MAX_INT_BITS = 4096


def calculate(expression: str) -> int | float:
    """Evaluate arithmetic: numbers, ``+ - * / // % **``, unary signs, parentheses.

    The expression is parsed (``ast``), never evaluated as code; anything else
    (names, calls, attributes, strings) is refused, as are exponents above
    1000 and integers above 4096 bits. Raises :class:`~turnfsm.tools.ToolError`.
    """
    text = expression.strip()
    if not text:
        raise ToolError("give an arithmetic expression, e.g. '2 * (3 + 4)'")
    if len(text) > _MAX_EXPRESSION:
        raise ToolError(f"the expression is longer than {_MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not an arithmetic expression: {exc.msg}") from None

    def ev(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            assert isinstance(node.value, int | float)
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _check(_UNARY[type(node.op)](ev(node.operand)))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
                raise ToolError(f"exponents above {_MAX_EXPONENT} are not allowed")
            return _check(_BINARY[type(node.op)](left, right))
        raise ToolError(
            f"only numbers and + - * / // % ** ( ) are allowed, not {type(node).__name__}"
        )

    try:
        return ev(tree)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("the result is too large") from None


def _check(value: Any) -> int | float:
    if isinstance(value, complex):
        raise ToolError("the result is not a real number")
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        raise ToolError("the result is too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is too large")
    result: int | float = value
    return result


def builtin_tools(root: Path | None = None) -> list[Tool]:
    """The chat's demo tools; ``read_file`` reads under ``root`` (default: the
    working directory) and needs approval for every call."""
    base = (root or Path.cwd()).resolve()

    @tool
    def clock(timezone: str = "UTC") -> dict[str, str]:
        """The current date and time in a timezone.

        Args:
            timezone: An IANA timezone name, e.g. "Europe/Paris" (default UTC).
        """
        try:
            zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ToolError(f"unknown timezone {timezone!r}; use an IANA name") from None
        now = datetime.now(zone)
        return {
            "timezone": timezone,
            "iso": now.isoformat(timespec="seconds"),
            "weekday": now.strftime("%A"),
        }

    @tool
    def calculator(expression: str) -> dict[str, Any]:
        """Evaluate an arithmetic expression exactly (no variables or functions).

        Args:
            expression: Numbers with + - * / // % ** and parentheses, e.g. "2 * (3 + 4)".
        """
        return {"expression": expression, "result": calculate(expression)}

    @tool(approval="required", blocking=True)
    def read_file(path: str, max_bytes: int = 20_000) -> dict[str, Any]:
        """Read a text file in the user's working directory.

        Args:
            path: The file's path, relative to the working directory.
            max_bytes: Read at most this many bytes (up to 100000).
        """
        target = (base / path).resolve()
        if not target.is_relative_to(base):
            raise ToolError(f"{path!r} is outside the working directory")
        if not target.is_file():
            raise ToolError(f"{path!r} is not a file in the working directory")
        limit = max(1, min(max_bytes, 100_000))
        with target.open("rb") as f:
            data = f.read(limit + 1)
        return {
            "path": target.relative_to(base).as_posix(),
            "content": data[:limit].decode("utf-8", "replace"),
            "truncated": len(data) > limit,
        }

    return [clock, calculator, read_file]
