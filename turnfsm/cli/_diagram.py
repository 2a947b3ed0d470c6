"""``turnfsm diagram``: the declared machine, one conversation's path, or where two runs part.

  turnfsm diagram [--format mermaid|dot|svg|png] [--out FILE]
      the declared machine, from the transition table

  turnfsm diagram --context ID [--store URL] [--format mermaid|dot|svg|png] [--times]
  turnfsm diagram --trace TRACE.json [--format ...] [--times]
      the declared machine with the path one conversation took drawn over it: a
      stored context, or a ``turnfsm replay --trace-out`` file (an audit log from
      ``turnfsm audit export`` works too)

  turnfsm diagram --context ID --store URL --sequence [--turn N]
      a Mermaid sequenceDiagram of one turn (the last by default)

  turnfsm diagram --diff A B
      where two traces (--trace-out files or audit logs) of the same script diverge

  turnfsm diagram --regenerate [--root DIR] [--check]
      rewrite diagrams/fsm.{mmd,dot,svg,png} and docs/states.md from the table

Exit status: 0 done (--diff: the traces are the same); 1 --diff: they
differ, --regenerate --check: a generated file is stale; 2 an error (no
such context, store or file, Graphviz missing, unreadable input, --format png
to a terminal). --context never creates a store.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from .. import records as record_io
from ..audit import AuditRecord, audit_records, records_from_audit_lines
from ..model import MessageNode
from ..model._json import MAX_DOCUMENT_DEPTH, loads_json
from ..render import (
    GENERATED,
    PNG_DIGEST_KEY,
    RenderError,
    RunPath,
    diff_paths,
    dot_digest,
    dot_source,
    generated_files,
    generated_texts,
    mermaid_state_diagram,
    path_from_audit_lines,
    path_from_steps,
    path_from_trace_out,
    png_text,
    render_png,
    render_svg,
    sequence_diagram,
    svg_digest,
)
from ._errors import CLIError, command_parser, count
from ._store import add_store_option, open_cli_store

__all__ = ["add_parser", "read_text", "regenerate", "split_lines"]

FORMATS = ("mermaid", "dot", "svg", "png")


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub,
        "diagram",
        "state diagrams: the declared machine, a run's path, a turn, a diff of two runs",
        __doc__,
        _run,
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--context", metavar="ID", help="draw the path of this stored context")
    what.add_argument(
        "--trace", metavar="FILE", help="draw the path of a replay --trace-out file or audit log"
    )
    what.add_argument(
        "--diff", nargs=2, metavar=("A", "B"), help="compare two traces or audit logs"
    )
    what.add_argument(
        "--regenerate",
        action="store_true",
        help="rewrite diagrams/ and docs/states.md of the repository from the table",
    )
    p.add_argument("--format", choices=FORMATS, default="mermaid", help="default: mermaid")
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    add_store_option(p)
    p.add_argument(
        "--times", action="store_true", help="with a path: write the time spent in each state"
    )
    p.add_argument(
        "--sequence",
        action="store_true",
        help="with --context/--trace: a Mermaid sequenceDiagram of one turn",
    )
    p.add_argument(
        "--turn",
        type=count(1, 1_000_000),
        metavar="N",
        help="with --sequence: turn N (from 1; default: last)",
    )
    p.add_argument(
        "--root", metavar="DIR", default=".", help="with --regenerate: the repository root"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="with --regenerate: write nothing; exit 1 if a generated file is stale",
    )


def _run(args: argparse.Namespace) -> int:
    return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    if args.regenerate:
        return regenerate(Path(args.root), check=args.check)
    if args.check:
        raise RenderError("--check goes with --regenerate")
    if not args.out and args.format == "png" and sys.stdout.isatty():
        raise CLIError("a PNG is binary: give --out FILE, or redirect the output to a file")
    if args.diff:
        return _diff(*args.diff)
    if args.sequence or args.turn is not None:
        if not (args.context or args.trace):
            raise RenderError("--sequence needs --context ID or --trace FILE")
        if args.format != "mermaid":
            raise RenderError("a sequence diagram is Mermaid only (leave out --format)")
    if args.context or args.trace:
        run = _load_context(args) if args.context else _load_file(Path(args.trace))
        if args.sequence or args.turn is not None:
            text = sequence_diagram(run.records, run.pool, turn=args.turn)
            return _emit(args, text.encode("utf-8"))
        return _emit(args, _draw(run.path, args.format, times=args.times, title=run.title))
    if args.times:
        raise RenderError("--times goes with --context or --trace")
    return _emit(args, _draw(None, args.format))


def _draw(path: RunPath | None, fmt: str, *, times: bool = False, title: str = "") -> bytes:
    if fmt == "mermaid":
        return mermaid_state_diagram(path, times=times, title=title).encode("utf-8")
    dot = dot_source(path, times=times, title=title)
    if fmt == "dot":
        return dot.encode("utf-8")
    if fmt == "svg":
        return render_svg(dot)
    return render_png(dot, text={PNG_DIGEST_KEY: f"sha256:{dot_digest(dot)}"})


def _emit(args: argparse.Namespace, data: bytes) -> int:
    if args.out:
        Path(args.out).write_bytes(data)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return 0


# ---------------------------------------------------------------------- inputs


@dataclass(slots=True)
class _Run:
    path: RunPath
    records: list[AuditRecord]
    pool: dict[str, MessageNode]
    title: str


def _load_context(args: argparse.Namespace) -> _Run:
    async def load() -> _Run:
        store, _ = open_cli_store(args.store, create=False)
        try:
            ctx = await store.load(args.context)
            steps = await store.steps(args.context)
        finally:
            await store.aclose()
        path = path_from_steps(steps, start=ctx.created_at)
        records = audit_records(ctx.id, steps, ctx.message_pool.values())
        title = f"context {ctx.id} (now {ctx.current_state}, {len(steps)} steps)"
        return _Run(path, records, dict(ctx.message_pool), title)

    return anyio.run(load)


def read_text(path: Path) -> str:
    """A file's text (``-``: stdin); RenderError when it cannot be read or is not UTF-8."""
    try:
        data = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as exc:
        raise RenderError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RenderError(f"{path} is not UTF-8 text") from None


def split_lines(text: str) -> list[str]:
    """Lines of a JSON Lines text: ``\\n`` ends a line (not the other Unicode
    line breaks, which JSON strings may hold); a final line end adds no line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _load_file(path: Path) -> _Run:
    """A replay --trace-out file, or an audit log (JSON Lines)."""
    text = read_text(path)
    whole: Any = None
    with contextlib.suppress(ValueError):
        whole = loads_json(text, MAX_DOCUMENT_DEPTH)
    if isinstance(whole, dict) and "trace" in whole:
        run_path = path_from_trace_out(whole)
        try:
            messages = record_io.from_python(list[MessageNode], whole.get("messages") or [])
        except ValueError as exc:
            raise RenderError(f"{path}: a message is malformed: {exc}") from None
        events = whole.get("events") or []
        cid = next(
            (str(e["context_id"]) for e in events if isinstance(e, dict) and "context_id" in e),
            path.stem,
        )
        records = audit_records(cid, run_path.steps, messages)
        title = f"{path.name} (now {run_path.current}, {len(run_path.steps)} steps)"
        return _Run(run_path, records, {m.id: m for m in messages}, title)
    lines = split_lines(text)
    try:
        run_path = path_from_audit_lines(lines)
    except RenderError as exc:
        raise RenderError(
            f"{path} is neither a replay --trace-out file nor an audit log: {exc}"
        ) from None
    records = records_from_audit_lines(lines)
    title = f"{path.name} (now {run_path.current}, {len(run_path.steps)} steps)"
    return _Run(run_path, records, {}, title)


def _diff(a: str, b: str) -> int:
    pa, pb = _load_file(Path(a)).path, _load_file(Path(b)).path
    result = diff_paths(pa, pb)
    print(result.report(a, b))
    return 0 if result.same else 1


# ---------------------------------------------------------------------- regenerate


def _is_repo_root(root: Path) -> bool:
    pyproject = root / "pyproject.toml"
    try:
        return 'name = "turnfsm"' in pyproject.read_text("utf-8")
    except OSError:
        return False


def regenerate(root: Path, *, check: bool = False, say: Callable[[str], None] = print) -> int:
    """Rewrite the repository's generated files from the table: ``diagrams/fsm.mmd``,
    ``fsm.dot``, ``fsm.svg``, ``fsm.png`` and ``docs/states.md``.

    The command is ``turnfsm diagram --regenerate`` (or ``python
    scripts/regen_diagrams.py``), run from the repository root. Text files are
    rewritten when their bytes differ; the SVG and PNG when the DOT digest they
    carry differs from the DOT's (so another Graphviz version does not churn
    them). With ``check``, nothing is written and 1 means a file is stale.
    """
    if not _is_repo_root(root):
        raise RenderError(
            f"{root.resolve()} is not the turnfsm repository root (no pyproject.toml naming "
            "turnfsm); run from there or give --root DIR"
        )
    texts = generated_texts()
    digest = dot_digest(texts["diagrams/fsm.dot"])
    stale = []
    for name in GENERATED:
        target = root / name
        try:
            current = target.read_bytes()
        except FileNotFoundError:
            stale.append(name)
            continue
        if name in texts:
            if current != texts[name].encode("utf-8"):
                stale.append(name)
        elif name.endswith(".svg"):
            if svg_digest(current.decode("utf-8", "replace")) != digest:
                stale.append(name)
        else:
            try:
                found = png_text(current).get(PNG_DIGEST_KEY)
            except ValueError:
                found = None
            if found != f"sha256:{digest}":
                stale.append(name)
    if check:
        for name in stale:
            say(f"stale: {name}")
        if stale:
            say("run `turnfsm diagram --regenerate` (or python scripts/regen_diagrams.py)")
            return 1
        say(f"up to date: {', '.join(GENERATED)}")
        return 0
    files = generated_files() if stale else {}
    for name in GENERATED:
        if name in stale:
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(files[name])
            say(f"wrote {name}")
        else:
            say(f"unchanged {name}")
    return 0
