"""``turnfsm resume ID`` and ``turnfsm recover``: continue conversations that
were interrupted (Ctrl-C, a crash) in a non-resting state.

  turnfsm resume ID --store URL [model options, as for chat]
      continue one context, e.g. one stopped while the answer streamed: the
      interrupted call is retried and the turn finishes as chat shows it

  turnfsm recover --store URL [model options]
      resume every such context of the store, one line per context

The model options are chat's (--demo for the built-in demo model, --base-url,
--model, ...). The store must exist; it is never created here. A context at
rest has nothing to resume (exit 0).

Exit status: 0 done; 1 a resumed turn failed for good; 2 no such context or
store, bad options; 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio

from ..engine import Recovery
from ..states import State
from ._chat import add_model_options
from ._errors import command_parser

__all__ = ["add_parser", "recovery_lines"]


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub, "resume", "continue a conversation that was interrupted mid-turn", __doc__, _run_resume
    )
    p.add_argument("context_id", metavar="ID", help="the context to continue")
    add_model_options(p)
    r = command_parser(
        sub, "recover", "continue every interrupted conversation of a store", __doc__, _run_recover
    )
    add_model_options(r)


def _run_resume(args: argparse.Namespace) -> int:
    from ._chat_session import Chat  # for a resume, not its --help

    chat = Chat(args, sys.stdin, sys.stdout, sys.stderr, prog="turnfsm resume")
    return anyio.run(chat.resume, args.context_id)


def _run_recover(args: argparse.Namespace) -> int:
    async def go() -> int:
        from ._chat_session import Chat

        chat = Chat(args, sys.stdin, sys.stdout, sys.stderr, prog="turnfsm recover")
        async with chat.session(create=False) as (engine, url):
            result = await engine.recover()
        lines, failed = recovery_lines(result)
        for line in lines or [f"nothing to recover in {url}: every context is at rest"]:
            print(line)
        return 1 if failed else 0

    return anyio.run(go)


def recovery_lines(result: Recovery) -> tuple[list[str], bool]:
    """One line per context :meth:`Engine.recover` dealt with, and whether one
    failed (a resumed turn that ended in PermanentFailure, or a context that
    could not be resumed). A context another live engine holds is skipped,
    which is no failure."""
    lines: list[str] = []
    failed = False
    for turn in result.resumed.values():
        path = " -> ".join(turn.states)
        lines.append(f"{turn.context_id}: resumed, now {turn.state} ({path})")
        if turn.state is State.PERMANENT_FAILURE:
            failed = True
    for cid, why in result.skipped.items():
        lines.append(f"{cid}: skipped, {why}")
    for cid, error in result.failed.items():
        lines.append(f"{cid}: not resumed: {error}")
        failed = True
    return lines, failed
