"""``turnfsm audit export|verify``: a context's transitions as an audit log, and its check.

  turnfsm audit export ID [--store URL] [--out FILE]
      one JSON line per committed step: seq, context_id, version, timestamp,
      from, trigger, to, actor (user, llm, tool, approver, system), attempt,
      message_ids, tool_calls, tool_results (docs/states.md says how each is
      derived)

  turnfsm audit verify FILE
      check a log against the declared table: complete records, gap-free seq,
      one context, continuity (each step starts where the last ended, the
      first in Idle), declared edges only, time never going back, the actor and
      attempt each trigger implies, every tool call resolved

Exit status: export 0 written, 2 no such context or the store cannot be read
(a missing store is not created); verify 0 the log holds, 1 it does not (the
first offending line and why), 2 the file cannot be read (missing, not UTF-8;
- reads stdin).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio

from ..audit import audit_jsonl, audit_records, verify_audit_log
from ..storage import Store
from ._diagram import read_text, split_lines
from ._errors import command_parser
from ._store import add_store_option, open_cli_store

__all__ = ["add_parser", "export_log"]


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub, "audit", "export a context's transitions as an audit log, or verify one", __doc__, _run
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    ex = verbs.add_parser("export", help="the context's committed steps as JSON Lines")
    ex.add_argument("context_id", metavar="ID")
    add_store_option(ex)
    ex.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    ve = verbs.add_parser("verify", help="check an audit log against the declared table")
    ve.add_argument("file", metavar="FILE", help="the log (- for stdin)")


def _run(args: argparse.Namespace) -> int:
    if args.verb == "verify":
        return _verify(args.file)
    text = anyio.run(_export, args.store, args.context_id)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out} ({text.count(chr(10))} steps)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


async def _export(store_url: str | None, context_id: str) -> str:
    store, _ = open_cli_store(store_url, create=False)
    return await _log_of(store, context_id)


async def export_log(store_url: str, context_id: str) -> str:
    """The audit log (JSON Lines) of one stored context."""
    from ..storage import open_store

    return await _log_of(open_store(store_url), context_id)


async def _log_of(store: Store, context_id: str) -> str:
    try:
        ctx = await store.load(context_id)
        steps = await store.steps(context_id)
    finally:
        await store.aclose()
    records = audit_records(ctx.id, steps, ctx.message_pool.values())
    return audit_jsonl(records)


def _verify(file: str) -> int:
    lines = split_lines(read_text(Path(file)))
    result = verify_audit_log(lines)
    if not result.ok:
        print(f"{file}:{result.line}: {result.reason}")
        return 1
    calls = f"{result.tool_calls} tool calls, all resolved"
    if result.open_calls:
        calls = (
            f"{result.tool_calls} tool calls, {len(result.open_calls)} still waiting in "
            f"{result.final_state}"
        )
    print(
        f"ok: {file}: {result.steps} steps, declared edges only, ending in "
        f"{result.final_state}; {calls}"
    )
    return 0
