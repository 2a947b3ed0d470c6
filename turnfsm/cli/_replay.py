"""``turnfsm replay FILE...``: run replay scripts offline and check them.

Scripts are .json, .yaml or .yml files, named one by one or found in the
folders given (not their subfolders). With --store URL each replay is kept
there as its own context: when the store already holds contexts, the replay's
ids get a run prefix (r2-id-1, ...), so replaying again never collides, nor
do replays into one store at the same moment (the context's create claims
the prefix; a replay that loses the race takes the next one).

Exit status: 0 every check holds; 1 a check or the tape failed (the report
says at which step, what was expected and what the engine did); 2 a script is
invalid (its JSON path and the reason) or cannot be read (missing, not UTF-8,
nested too deeply), a path does not exist, a folder holds no script, or the
store URL is bad.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ._errors import CLIError, command_parser
from ._store import open_cli_store

if TYPE_CHECKING:
    from ..replay import ReplayResult

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub, "replay", "replay scripts through the engine, offline, and check them", __doc__, _run
    )
    p.add_argument(
        "paths", nargs="+", metavar="FILE", help="script files (.json, .yaml) or folders of them"
    )
    p.add_argument(
        "--trace-out",
        metavar="FILE",
        help="write what was observed: {trace, events, messages} (one script only)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON result per script")
    p.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help="keep the replayed conversations in this store (default: in memory)",
    )


SUFFIXES = (".json", ".yaml", ".yml")
"""What a script file's name ends with, in a folder or named on its own."""


def _is_script(p: Path) -> bool:
    return p.suffix.lower() in SUFFIXES


def _expand(paths: list[str]) -> list[Path]:
    """The script files: every path must exist, a file must be a script, and a
    folder must hold at least one (so a mistyped path never passes)."""
    kinds = ", ".join(SUFFIXES)
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if _is_script(f) and f.is_file())
            if not found:
                raise CLIError(f"{raw}: the folder holds no script ({kinds})")
            files.extend(found)
        elif not p.exists():
            raise CLIError(f"{raw}: no such file or folder")
        elif not _is_script(p):
            raise CLIError(f"{raw}: not a script file (a script ends in {kinds})")
        else:
            files.append(p)
    return files


async def _replay_in(script: Any, store_url: str | None) -> ReplayResult:
    from ..replay import replay

    if store_url is None:
        return await replay(script)
    store, _ = open_cli_store(store_url)
    return await replay(script, store=store)


def _run(args: argparse.Namespace) -> int:
    # the runner and the script's model are imported to run: building the model
    # looks up pydantic's plugins, which --help and a usage error do not need
    from ..replay import ScriptError, load_script

    files = _expand(args.paths)
    if args.trace_out and len(files) != 1:
        raise CLIError("--trace-out needs exactly one script")
    worst = 0
    passed = failed = invalid = 0
    for path in files:
        try:
            script = load_script(path)
        except ScriptError as exc:
            invalid += 1
            worst = 2
            if args.json:
                print(
                    json.dumps(
                        {
                            "name": str(path),
                            "ok": False,
                            "invalid": True,
                            "problems": [{"path": p, "reason": r} for p, r in exc.problems],
                        }
                    )
                )
            else:
                problems = "; ".join(
                    f"{where}: {' '.join(str(reason).split())}" for where, reason in exc.problems
                )
                print(f"INVALID {exc.source}: {problems}", file=sys.stderr)
            continue
        result: ReplayResult = anyio.run(_replay_in, script, args.store)
        if args.trace_out:
            Path(args.trace_out).write_text(
                json.dumps(result.trace_out(), indent=2, ensure_ascii=False) + "\n"
            )
        if result.ok:
            passed += 1
        else:
            failed += 1
            worst = max(worst, 1)
        if args.json:
            print(json.dumps({"file": str(path), **result.to_json()}, ensure_ascii=False))
        else:
            print(result.report())
    if not args.json:
        print(f"{passed} passed, {failed} failed, {invalid} invalid")
    return worst
