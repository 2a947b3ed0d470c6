"""``turnfsm demo``: a scripted conversation on the embedded defaults.

A weather question, a tool that needs approval, a streamed answer; the text is
printed as it arrives and the states the context passed through after each
turn. No API key and no network: the model is the scripted demo model.

On a terminal the tool call is put to you; without one it is denied unless
--yes (or --approve all) is given. Ctrl-C stops it (exit 130) with the
conversation kept: continue it with turnfsm resume ID --store URL.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from ..adapters.llm.demo import DemoLLM
from ..engine import Engine, Turn
from ..events import ContentDelta, StateChanged, ToolResult
from ..states import RESTING, State
from ..storage import Store
from ..tools import tool
from ._errors import command_parser, read_line, seconds
from ._store import add_store_option, approval_mode, open_cli_store

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["add_parser", "run_demo"]

MAX_DELAY = 10.0
QUESTIONS = ("What's the weather in London?", "Thanks! Who are you?")


@tool(approval="required")
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: The city name, e.g. "London".
    """
    return {"city": city, "temp_c": 15, "conditions": "cloudy"}


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub, "demo", "play a scripted conversation (no API key, no network)", __doc__, _run
    )
    p.add_argument(
        "--approve",
        choices=("all", "none", "ask"),
        help="tool calls that need approval: approve all, deny all, or ask "
        "(default: ask on a terminal, none otherwise)",
    )
    p.add_argument(
        "--yes",
        "-y",
        dest="approve",
        action="store_const",
        const="all",
        help="approve tool calls without asking (same as --approve all)",
    )
    p.add_argument(
        "--delay",
        type=seconds(MAX_DELAY),
        default=0.02,
        metavar="S",
        help=f"seconds between streamed chunks (default 0.02; 0 for none; at most {MAX_DELAY:g})",
    )
    p.add_argument("--json", action="store_true", help="print the turns as JSON lines")
    add_store_option(p)


def _run(args: argparse.Namespace) -> int:
    approve = approval_mode(args.approve)
    store, url = open_cli_store(args.store)
    return anyio.run(
        functools.partial(
            run_demo,
            approve == "ask",
            args.delay,
            args.json,
            sys.stdout,
            store,
            url=url,
            deny=approve == "none",
        )
    )


async def _ask(console: Console, question: str) -> bool:
    console.print(question, end=" ", markup=False)
    console.file.flush()
    answer = (await read_line()).strip().lower()
    return answer in ("y", "yes")


async def run_demo(
    interactive: bool,
    delay: float,
    as_json: bool,
    out: TextIO,
    store: str | Store = "memory://",
    *,
    url: str | None = None,
    deny: bool = False,
) -> int:
    """Play the demo; ``interactive`` asks about each tool call, else ``deny``
    decides (approve by default)."""
    from rich.console import Console  # for the demo, not for its --help

    console = Console(file=out, highlight=False, soft_wrap=True)
    url = url or (store if isinstance(store, str) else repr(store))
    trace: list[State] = [State.IDLE]
    async with Engine(llm=DemoLLM(delay=delay), tools=[get_weather], store=store) as engine:
        cid = await engine.create_context(
            system_prompt="You are a helpful weather assistant.", model="demo"
        )
        async with engine.subscribe(cid) as events, anyio.create_task_group() as tg:
            printer = _Printer(console, as_json)
            tg.start_soon(printer.run, events)
            for question in QUESTIONS:
                if not as_json:
                    console.print(f"\n[bold]user>[/bold] {question}")
                turn = await engine.send(cid, question)
                await printer.caught_up(turn)
                trace.extend(turn.states)
                _report(console, turn, as_json)
                while turn.state is State.AWAITING_TOOL_APPROVAL:
                    call = turn.pending_tool_calls[0]
                    shown = f"{call.tool_name}({json.dumps(call.arguments)})"
                    if interactive and not await _ask(console, f"approve {shown}? [y/N]"):
                        turn = await engine.deny(cid, call.id, reason="the user said no")
                    elif not interactive and deny:
                        if not as_json:
                            console.print(
                                f"[dim]denied {shown}: no terminal to ask "
                                "(turnfsm demo --yes approves)[/dim]"
                            )
                        turn = await engine.deny(
                            cid, call.id, reason="no one was there to approve it"
                        )
                    else:
                        if not as_json:
                            console.print(f"[dim]approved {shown}[/dim]")
                        turn = await engine.approve(cid, call.id)
                    await printer.caught_up(turn)
                    trace.extend(turn.states)
                    _report(console, turn, as_json)
            events.end()
    if not as_json:
        console.print("\n[bold]trace:[/bold] " + " -> ".join(trace))
        if url.lower().startswith("memory://"):
            console.print(f"[dim]context {cid} was in memory only: nothing is kept[/dim]")
        else:
            console.print(f"[dim]context {cid} kept in {url}[/dim]")
    else:
        console.out(json.dumps({"trace": list(trace)}), highlight=False)
    return 0 if trace[-1] is State.IDLE else 1


class _Printer:
    """Prints the streamed text and tool results as their events arrive."""

    def __init__(self, console: Console, as_json: bool) -> None:
        self.console = console
        self.as_json = as_json
        self.seen_rest = 0
        self.returned = 0
        self._changed = anyio.Event()

    async def caught_up(self, turn: Turn) -> None:
        """Wait until the events of ``turn`` (which ended at a rest) were printed."""
        # counted from the calls returned, not from what was printed so far: the
        # events of a turn may be printed before its call returns
        self.returned += 1
        while self.seen_rest < self.returned:
            await self._changed.wait()
            self._changed = anyio.Event()

    async def run(self, events: Any) -> None:
        console = self.console
        streaming = False
        async for ev in events:
            if isinstance(ev, ContentDelta) and ev.channel == "text" and not self.as_json:
                if not streaming:
                    console.print("[bold]assistant>[/bold] ", end="")
                    streaming = True
                console.print(ev.delta, end="", markup=False)
                console.file.flush()
            elif isinstance(ev, StateChanged):
                if streaming and ev.to_state != State.STREAMING_LLM_RESPONSE:
                    console.print()
                    streaming = False
                if ev.to_state in RESTING:
                    self.seen_rest += 1
                    self._changed.set()
            elif isinstance(ev, ToolResult) and not self.as_json:
                console.print(f"[dim]tool {ev.tool_name} -> {json.dumps(ev.result)}[/dim]")


def _report(console: Console, turn: Turn, as_json: bool) -> None:
    if as_json:
        console.out(
            json.dumps(
                {
                    "state": turn.state,
                    "stop_reason": turn.stop_reason,
                    "states": list(turn.states),
                    "text": turn.text,
                }
            ),
            highlight=False,
        )
        return
    console.print(f"[dim]states: {' -> '.join(turn.states)} ({turn.stop_reason})[/dim]")
