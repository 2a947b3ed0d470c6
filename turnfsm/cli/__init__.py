"""L4: the ``turnfsm`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import _audit, _chat, _contexts, _demo, _diagram, _import, _record, _replay

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnfsm",
        description="Drive LLM conversations with an explicit, declared finite-state machine.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _demo.add_parser(sub)
    _chat.add_parser(sub)
    _replay.add_parser(sub)
    _record.add_parser(sub)
    _contexts.add_parser(sub)
    _import.add_parser(sub)
    _diagram.add_parser(sub)
    _audit.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    code: int = args.run(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
