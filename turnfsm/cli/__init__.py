"""L4: the ``turnfsm`` command."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .. import __version__
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


COMMANDS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("_demo", (("demo", "play a scripted conversation (no API key, no network)"),)),
    (
        "_chat",
        (
            (
                "chat",
                "chat with a model (OpenAI, Anthropic, Google, or OpenAI-compatible) "
                "on the terminal",
            ),
        ),
    ),
    (
        "_resume",
        (
            ("resume", "continue a conversation that was interrupted mid-turn"),
            ("recover", "continue every interrupted conversation of a store"),
        ),
    ),
    ("_replay", (("replay", "replay scripts through the engine, offline, and check them"),)),
    ("_record", (("record", "record a conversation as a replay script"),)),
    ("_contexts", (("contexts", "list, show, export or delete stored conversations"),)),
    ("_import", (("import", "import a conversation from another format into a context"),)),
    (
        "_export",
        (("export", "write stored contexts into a folder of session files ({id}.json)"),),
    ),
    (
        "_diagram",
        (
            (
                "diagram",
                "state diagrams: the declared machine, a run's path, a turn, a diff of two runs",
            ),
        ),
    ),
    ("_audit", (("audit", "export a context's transitions as an audit log, or verify one"),)),
    ("_db", (("db", "the store's table layout (turnfsm db upgrade)"),)),
    ("_serve", (("serve", "serve the engine over HTTP (REST and server-sent events)"),)),
    ("_worker", (("worker", "run the turns handed off through the store (no HTTP)"),)),
    (
        "_temporal",
        (
            (
                "temporal-worker",
                "run the context workflows and their activities on a Temporal server (no HTTP)",
            ),
        ),
    ),
    (
        "_temporal_prune",
        (
            (
                "temporal-prune",
                "delete the payloads kept in the store for Temporal that no workflow "
                "history refers to any more",
            ),
        ),
    ),
)
"""Each command's module (its ``add_parser`` adds the commands), with the
commands it adds and their help lines, in the order ``--help`` lists them. A
command's module, and what it imports (the server, Temporal, the model SDKs,
the stores), is imported only when that command is run or asked for its help:
the one-line help of the others is all ``turnfsm --help`` needs of them."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``turnfsm`` parser. With ``argv``, only the command it names gets its
    options (its module imported); the others stand in it by name and help line,
    which is all ``turnfsm --help`` shows of them. Without, every command gets its
    options (for tools and tests that parse any command line)."""
    parser = Parser(
        prog="turnfsm",
        description="Drive LLM conversations with an explicit, declared finite-state machine.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"turnfsm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = None if argv is None else _command_of(argv)
    for module, commands in COMMANDS:
        if argv is None or any(name == chosen for name, _ in commands):
            importlib.import_module(f"{__name__}.{module}").add_parser(sub)
        else:
            for name, line in commands:
                sub.add_parser(name, help=line)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first argument that is not an option (the
    options before a command, ``--help`` and ``--version``, take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit status (see ``turnfsm --help``)."""
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
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
