"""One exit-code rule for every subcommand, and the one place that applies it.

0 success; 1 a check that ran and failed (a replay mismatch, an audit log that
does not verify, a stale generated file, a failed model call); 2 bad usage or
input (bad arguments, an unknown context id, a bad or missing store, an
unreadable file or script); 130 interrupted (Ctrl-C). Anything else is a bug:
one line naming it, exit 1, and the traceback with ``TURNFSM_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from .._numbers import whole_number
from ..errors import InvalidInput, TurnFSMError
from ..model._json import JSONTooDeep

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "CLIError",
    "Parser",
    "count",
    "guarded",
    "read_line",
    "run_guarded",
    "seconds",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
"""128 + SIGTERM: ``chat`` stopped by SIGTERM (after stopping what it started)."""
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE, what a shell reports for a writer whose reader went away."""

DEBUG_ENV = "TURNFSM_DEBUG"


class CLIError(Exception):
    """A problem a command reports in one line, with its exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        self.code = code
        super().__init__(message)


_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?(?:[\w.]+\.)?([^`]+?)`")


def plain(text: str) -> str:
    """Help text without reStructuredText markup: ``x`` and :class:`~a.B` become x and B."""
    return _ROLE.sub(r"\1", text).replace("``", "")


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, and whose help is plain text."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        return plain(super().format_help())

    def format_usage(self) -> str:
        return plain(super().format_usage())


def seconds(maximum: float) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds from 0 to ``maximum``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not 0 <= value <= maximum:  # also refuses NaN
            raise argparse.ArgumentTypeError(f"{text} is not between 0 and {maximum:g} seconds")
        return value

    parse.__name__ = "seconds"
    return parse


def count(minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``minimum`` to ``maximum``, in
    ASCII digits (:func:`turnfsm._numbers.whole_number`)."""

    def parse(text: str) -> int:
        try:  # the one reading of a client's number (ASCII digits, bounded)
            return whole_number(text, "number", minimum, maximum)
        except InvalidInput as exc:
            raise argparse.ArgumentTypeError(exc.reason) from None

    parse.__name__ = "number"
    return parse


async def read_line() -> str:
    """A line of stdin ("" at its end), read so that an interrupt at a prompt
    ends the command at once (:func:`~turnfsm.cli._stdin.read_line_from`)."""
    from ._stdin import read_line_from

    return await read_line_from(sys.stdin)


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _describe(exc: BaseException) -> tuple[int, str]:
    """The exit code and the line for an exception that ended a command."""
    if isinstance(exc, CLIError):
        return exc.code, str(exc)
    if isinstance(exc, TurnFSMError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return EXIT_USAGE, f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    if isinstance(exc, JSONTooDeep):
        return EXIT_USAGE, f"the input cannot be read: {exc}"
    if isinstance(exc, json.JSONDecodeError):
        return EXIT_USAGE, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, RecursionError):
        return EXIT_USAGE, "the input is nested too deeply to read"
    if isinstance(exc, OSError):
        name = exc.filename if exc.filename is not None else ""
        reason = exc.strerror or str(exc)
        return EXIT_USAGE, f"{name}: {reason}" if name else reason
    return EXIT_FAILED, f"unexpected error: {type(exc).__name__}: {exc}"


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at devnull so that the interpreter's
    final flush does not fail again (the recipe of the Python signal docs)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def command_parser(
    sub: Any, name: str, help: str, doc: str | None, run: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """A command's parser, made as every command's is: its module's docstring
    as the description, shown as written (its paragraphs and tables kept), and
    ``run`` ending as :func:`guarded` says under the name ``turnfsm NAME``."""
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.set_defaults(run=guarded(f"turnfsm {name}", run))
    return p


def guarded(prog: str, run: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    """A command's ``run`` that ends as :func:`run_guarded` says, however it is called."""

    def guarded_run(args: argparse.Namespace) -> int:
        return run_guarded(prog, lambda: run(args))

    return guarded_run


def run_guarded(prog: str, run: Callable[[], int]) -> int:
    """Run a command; every way it can end becomes an exit code and at most one line."""
    debug = bool(os.environ.get(DEBUG_ENV))
    try:
        code = run()
        sys.stdout.flush()  # a reader that went away shows here, while it can be handled
        return code
    except KeyboardInterrupt:
        _say(prog, "interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        code, line = _describe(exc)
        if debug:
            traceback.print_exc()
        elif code == EXIT_FAILED:
            line += f" (run with {DEBUG_ENV}=1 for the traceback)"
        _say(prog, line)
        return code


def _say(prog: str, line: str) -> None:
    """The one line, without the password of any store URL given (``scrub``)."""
    from ..storage._secrets import scrub

    with contextlib.suppress(OSError, ValueError):
        print(f"{prog}: {scrub(_one_line(line))}", file=sys.stderr, flush=True)
