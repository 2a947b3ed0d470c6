"""``turnfsm record --out FILE``: record a conversation as a replay script.

Talks to the demo model (no key, no network) with the demo weather tool. Type
messages at the prompt (an empty line or end of input stops), or give
``--message TEXT`` for one turn. The script written replays to the same trace
and messages with ``turnfsm replay FILE``.

A tool call that needs approval is put to you on a terminal; without one it
is denied unless --approve all is given. An empty --message is refused before
anything runs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio

from ..adapters.llm.demo import DemoLLM
from ..engine import Engine, Turn
from ..replay import Recorder
from ..states import State
from ._chat import check_message
from ._demo import get_weather
from ._errors import guarded, read_line
from ._store import approval_mode

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "record",
        help="record a conversation as a replay script",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the script")
    p.add_argument(
        "--message",
        "-m",
        action="append",
        metavar="TEXT",
        help="a user message to send (repeatable); without it, read from the terminal",
    )
    p.add_argument(
        "--approve",
        choices=("all", "none", "ask"),
        default=None,
        help="tool calls that need approval: approve all, deny all, or ask "
        "(default: ask on a terminal, none otherwise)",
    )
    p.add_argument(
        "--system-prompt",
        metavar="TEXT",
        default="You are a helpful weather assistant.",
        help="the system prompt of the conversation",
    )
    p.add_argument("--system", dest="system_prompt", help=argparse.SUPPRESS)  # chat's old name
    p.add_argument("--name", default="recorded conversation", help="the script's name")
    p.set_defaults(run=guarded("turnfsm record", _run))


def _run(args: argparse.Namespace) -> int:
    for text in args.message or ():
        check_message(text, "--message")
    return anyio.run(_record, args, approval_mode(args.approve))


async def _messages(args: argparse.Namespace) -> AsyncIterator[str]:
    if args.message:
        for text in args.message:
            yield text
        return
    while True:
        print("user> ", end="", flush=True)
        line = await read_line()
        if not line.strip():
            return
        yield line.strip()


async def _decide(recorder: Recorder, turn: Turn, approve: str) -> Turn:
    while turn.state is State.AWAITING_TOOL_APPROVAL:
        call = turn.pending_tool_calls[0]
        shown = f"{call.tool_name}({json.dumps(call.arguments)})"
        yes = approve == "all"
        if approve == "ask":
            print(f"approve {shown}? [y/N] ", end="", flush=True)
            yes = (await read_line()).strip().lower() in ("y", "yes")
        if yes:
            turn = await recorder.approve(call.id)
        else:
            turn = await recorder.deny(call.id, reason="the user said no")
    return turn


async def _record(args: argparse.Namespace, approve: str) -> int:
    recorder = Recorder(DemoLLM(), tools=[get_weather], name=args.name, model="demo")
    async with Engine(llm=recorder.llm, tools=recorder.tools) as engine:
        await recorder.start(engine, system_prompt=args.system_prompt)
        async for text in _messages(args):
            turn = await _decide(recorder, await recorder.send(text), approve)
            print(f"assistant> {turn.text}")
            print(f"  states: {' -> '.join(turn.states)}")
        data = await recorder.save(args.out)
    print(
        f"wrote {args.out}: {len(data['steps'])} steps, trace of "
        f"{len(data['expect']['trace'])} states"
    )
    return 0
