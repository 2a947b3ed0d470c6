"""``turnfsm contexts list|show|export|delete --store URL``: the stored conversations.

``export ID`` writes the context as JSON: by default (``--format context``) the
whole context, every branch, as ``turnfsm import`` reads it back; with
``--format session|entries|openai`` one branch (``--branch NAME``, else the
active one) in the session JSON format, as conversation entries or as OpenAI
chat messages, the formats ``turnfsm import`` reads (what each cannot hold is
left out: see docs/README.md).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio

from .. import records
from ..adapters.outbound import EXPORT_FORMATS, export_context
from ..engine import ContextTree, context_tree, delete_tree
from ..errors import ContextNotFound
from ._errors import CLIError, guarded
from ._store import add_store_option, open_cli_store

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "contexts", help="list, show, export or delete stored conversations", description=__doc__
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    ls = verbs.add_parser("list", help="one line per context: id, state, version, updated")
    add_store_option(ls)
    ls.add_argument("--json", action="store_true", help="one JSON object per context")
    show = verbs.add_parser("show", help="the context as JSON, with its audit steps")
    show.add_argument("context_id", metavar="ID")
    add_store_option(show)
    show.add_argument(
        "--tree",
        action="store_true",
        help="draw the context's sub-context tree (its parent, it, its descendants) "
        "instead of the JSON",
    )
    ex = verbs.add_parser(
        "export",
        help="the context as JSON (what turnfsm import reads back), or one branch "
        "in another format",
    )
    ex.add_argument("context_id", metavar="ID")
    ex.add_argument(
        "--format",
        choices=("context", *EXPORT_FORMATS),
        default="context",
        help="context (default: the whole context, every branch), or one branch in the "
        "session JSON format (session), as conversation entries (entries) or as OpenAI "
        "chat messages (openai)",
    )
    ex.add_argument(
        "--branch",
        metavar="NAME",
        help="the branch to write (default: the active one); not with --format context",
    )
    ex.add_argument("-o", "--out", metavar="FILE", help="write to FILE instead of stdout")
    add_store_option(ex)
    rm = verbs.add_parser(
        "delete",
        help="delete a context and everything stored of it, with its finished sub-contexts "
        "(refused while one is not finished)",
    )
    rm.add_argument("context_id", metavar="ID")
    add_store_option(rm)
    p.set_defaults(run=guarded("turnfsm contexts", _run))


def _run(args: argparse.Namespace) -> int:
    return anyio.run(_main, args)


async def _main(args: argparse.Namespace) -> int:
    if args.verb == "export" and args.format == "context" and args.branch is not None:
        raise CLIError(
            "--branch needs --format session, entries or openai: "
            "--format context writes every branch"
        )
    # every verb works on a store that exists: none of them makes one
    store, _ = open_cli_store(args.store, create=False)
    try:
        if args.verb == "list":
            for s in await store.list_contexts():
                if args.json:
                    print(
                        json.dumps(
                            {
                                "id": s.id,
                                "state": s.state,
                                "version": s.version,
                                "updated_at": s.updated_at.isoformat(),
                                "parent_id": s.parent_id,
                                "title": s.title,
                            }
                        )
                    )
                else:
                    title = f"  {s.title}" if s.title else ""
                    print(
                        f"{s.id}  {s.state:<22} v{s.version:<5} {s.updated_at.isoformat()}{title}"
                    )
            return 0
        if args.verb == "delete":
            for cid in await delete_tree(store, args.context_id):
                print(f"deleted {cid}")
            return 0
        ctx = await store.load(args.context_id)
        data: Any = records.to_python(ctx)
        if args.verb == "export" and args.format != "context":
            data = export_context(ctx, args.format, branch=args.branch)
        if args.verb == "show":
            tree = await context_tree(store, args.context_id)
            if args.tree:
                print(await _draw(store, ctx.parent_id, tree), end="")
                return 0
            data["tree"] = tree.to_json()
            data["steps"] = [
                {
                    "version": st.version,
                    "from": st.from_state,
                    "trigger": st.trigger,
                    "to": st.to_state,
                    "at": st.at.isoformat(),
                    **({} if st.detail is None else {"detail": st.detail}),
                }
                for st in await store.steps(args.context_id)
            ]
        text = json.dumps(data, indent=2, ensure_ascii=False)
        if getattr(args, "out", None):
            await anyio.Path(args.out).write_text(text + "\n")
            print(f"wrote {args.out}")
        else:
            print(text)
        return 0
    finally:
        await store.aclose()


async def _draw(store: Any, parent_id: str | None, tree: ContextTree) -> str:
    """The tree as text: the parent (when there is one), the context marked
    ``*``, and its descendants below it."""
    lines: list[str] = []
    indent = ""
    if parent_id is not None:
        try:
            parent = await store.load(parent_id)
        except ContextNotFound:  # the parent is gone: the child is drawn alone
            lines.append(f"{parent_id}  (missing parent)")
        else:
            lines.append(f"{parent_id}  {parent.current_state}{_title(parent.config.title)}")
        indent = "    "
        lines.append("└── " + _line(tree, mark=True))
    else:
        lines.append(_line(tree, mark=True))

    def walk(node: ContextTree, prefix: str) -> None:
        for i, child in enumerate(node.children):
            last = i == len(node.children) - 1
            lines.append(prefix + ("└── " if last else "├── ") + _line(child))
            walk(child, prefix + ("    " if last else "│   "))

    walk(tree, indent)
    return "".join(line + "\n" for line in lines)


def _line(node: ContextTree, *, mark: bool = False) -> str:
    i = node.info
    done = "  (finished)" if i.finished else ""
    return f"{i.context_id}{' *' if mark else ''}  {i.state}{_title(i.title)}{done}"


def _title(title: str | None) -> str:
    return f"  {json.dumps(title, ensure_ascii=False)}" if title else ""
