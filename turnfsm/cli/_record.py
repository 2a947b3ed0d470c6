"""``turnfsm record --out FILE``: record a conversation as a replay script.

Talks to the demo model (no key, no network) with the demo weather tool,
unless a model is named as ``turnfsm chat`` names one: ``--provider``
(``openai``, ``openai-responses``, ``anthropic``, ``google``; ``--responses``
is ``--provider openai-responses``), ``--base-url`` or ``--model`` (the
provider's API with its key: ``OPENAI_API_KEY`` unless ``--provider`` says
otherwise; the model ``--model``, else ``OPENAI_MODEL`` for OpenAI, else the
provider's default), whose tools are chat's built-in ones, or ``--llm
module:attribute``, the application's own adapter. ``--tools module:attribute`` adds tools. Type
messages at the prompt (an empty line or end of input stops), or give
``--message TEXT`` for one turn. The script written replays to the same trace
and messages with ``turnfsm replay FILE``, without the model.

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
from ..tools import Tool
from ._chat import add_request_options, check_message
from ._chat_model import open_model
from ._demo import get_weather
from ._errors import CLIError, command_parser, read_line
from ._imports import add_app_options, load_tools
from ._providers import add_provider_options, provider_named
from ._store import HOW_TO_APPROVE, approval_mode, denial_reason

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p = command_parser(sub, "record", "record a conversation as a replay script", __doc__, _run)
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
    p.add_argument(
        "--demo",
        action="store_true",
        help="the built-in demo model (the default when no other model is named)",
    )
    add_provider_options(p, model_help="the model")
    add_request_options(p)
    add_app_options(p)


def _model(args: argparse.Namespace) -> tuple[Any, list[Tool], str]:
    """The model to record, its tools and its name."""
    if args.demo and args.llm is not None:
        raise CLIError("--demo and --llm name two models: give one")
    provider = provider_named(args)
    if args.demo and provider is not None:
        raise CLIError(f"--demo and --provider {provider} name two models: give one")
    named = args.llm is not None or args.base_url or args.model or provider is not None
    if args.demo or not named:  # the demo model, with its weather tool
        return DemoLLM(), [get_weather, *load_tools(args.tools)], "demo"
    setup = open_model(args)
    return setup.llm, setup.tools, args.model or setup.model


def _run(args: argparse.Namespace) -> int:
    for text in args.message or ():
        check_message(text, "--message")
    llm, tools, model = _model(args)
    approve = approval_mode(args.approve)

    async def record_then_close() -> int:
        # closed on the event loop its connections were opened on (a kept-alive
        # connection cannot be closed from another one)
        try:
            return await _record(args, approve, llm, tools, model)
        finally:
            close = getattr(llm, "aclose", None)
            if close is not None:
                await close()

    return anyio.run(record_then_close)


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


async def _decide(recorder: Recorder, turn: Turn, approve: str, given: str | None) -> Turn:
    while turn.state is State.AWAITING_TOOL_APPROVAL:
        call = turn.pending_tool_calls[0]
        shown = f"{call.tool_name}({json.dumps(call.arguments)})"
        yes = approve == "all"
        if approve == "ask":
            print(f"approve {shown}? [y/N] ", end="", flush=True)
            yes = (await read_line()).strip().lower() in ("y", "yes")
        if yes:
            turn = await recorder.approve(call.id)
        elif approve == "ask":
            turn = await recorder.deny(call.id, reason="the user said no")
        else:
            reason = denial_reason(given)
            way_out = "" if given else f" ({HOW_TO_APPROVE})"
            print(f"denied {shown}: {reason}{way_out}")
            turn = await recorder.deny(call.id, reason=reason)
    return turn


async def _record(
    args: argparse.Namespace, approve: str, llm: Any, tools: list[Tool], model: str
) -> int:
    recorder = Recorder(llm, tools=tools, name=args.name, model=model)
    async with Engine(llm=recorder.llm, tools=recorder.tools) as engine:
        await recorder.start(engine, system_prompt=args.system_prompt)
        async for text in _messages(args):
            turn = await _decide(recorder, await recorder.send(text), approve, args.approve)
            print(f"assistant> {turn.text}")
            print(f"  states: {' -> '.join(turn.states)}")
        data = await recorder.save(args.out)
    print(
        f"wrote {args.out}: {len(data['steps'])} steps, trace of "
        f"{len(data['expect']['trace'])} states"
    )
    return 0
