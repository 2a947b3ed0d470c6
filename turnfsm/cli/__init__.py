"""L4: the ``turnfsm`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__
from . import (
    _audit,
    _chat,
    _contexts,
    _db,
    _demo,
    _diagram,
    _export,
    _import,
    _record,
    _replay,
    _resume,
    _serve,
    _temporal,
    _temporal_prune,
    _worker,
)
from ._errors import EXIT_USAGE, Parser, run_guarded

__all__ = ["main"]

EPILOG = """\
exit status, the same for every command:
  0    success
  1    a check that ran and failed: a replay mismatch, an audit log that does not
       verify, diagram --diff finding a difference, a stale generated file, a model
       call that failed for good; also an unexpected error (one line; set
       TURNFSM_DEBUG=1 for the traceback)
  2    bad usage or input: bad arguments, an unknown context id, a bad, missing or
       unavailable store URL, an unreadable file or script
  130  interrupted (Ctrl-C): the store is left consistent; continue the
       conversation with `turnfsm resume ID` (or all of them: `turnfsm recover`)
  143  chat stopped by SIGTERM, once it has stopped the MCP servers it started
       (worker: 0 on SIGTERM; serve: the signal's own status)
  Output piped into a reader that stops early (`| head`) ends quietly (141).

tool approvals: on a terminal the commands ask; without one (piped, in CI) a tool
call that needs approval is denied unless --approve all (demo: --yes) is given.

commands on stored conversations (contexts, export, audit export, diagram --context,
resume, recover, chat --context) never create a store: a missing one is an error.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="turnfsm",
        description="Drive LLM conversations with an explicit, declared finite-state machine.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"turnfsm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _demo.add_parser(sub)
    _chat.add_parser(sub)
    _resume.add_parsers(sub)
    _replay.add_parser(sub)
    _record.add_parser(sub)
    _contexts.add_parser(sub)
    _import.add_parser(sub)
    _export.add_parser(sub)
    _diagram.add_parser(sub)
    _audit.add_parser(sub)
    _db.add_parser(sub)
    _serve.add_parser(sub)
    _worker.add_parser(sub)
    _temporal.add_parser(sub)
    _temporal_prune.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit status (see ``turnfsm --help``)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error already said
        return done.code if isinstance(done.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    code: int = run_guarded(f"turnfsm {args.command}", lambda: args.run(args))
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
