"""``turnfsm chat``: a chat on the terminal with a model of OpenAI, Anthropic,
Google or any OpenAI-compatible server.

The OpenAI API by default (``OPENAI_API_KEY``), or any OpenAI-compatible server
(vLLM, Ollama, LM Studio, OpenRouter, ...) with ``--base-url`` (or
``OPENAI_BASE_URL``), the model ``--model``, else ``OPENAI_MODEL``, else
``gpt-4o-mini``. ``--provider`` picks another: ``openai-responses`` (the
Responses API; ``--responses`` says the same), ``anthropic`` (Claude;
``ANTHROPIC_API_KEY``, the ``anthropic`` extra) or ``google`` (Gemini;
``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``, the ``google`` extra). The text
streams as it arrives; tool calls are shown and, for tools that need it,
approved or denied (``--approve``). Built-in demo
tools: ``clock`` (the time in a timezone), ``calculator`` (arithmetic only,
parsed, never ``eval``'d) and ``read_file`` (a text file under the working
directory; each call needs approval; no path escapes it). ``--ask-user`` also
offers ``ask_user``: the model may ask you a question, which is printed (with
its choices) and answered on the terminal; an empty line declines it. When
stdin is not a terminal (and ``--approve ask`` was not given) a question is
denied, as tool calls are by default there.

For scripts: ``--message TEXT`` runs one turn and exits, ``--json`` prints
the turn as JSON, ``--store URL`` keeps the conversation and ``--context ID``
resumes it. ``--demo`` uses the built-in demo model (no key, no network).

Modes: ``chat`` (the default) and ``plan`` (the model is told to answer with a
plan and not carry it out; its answer is stored as a Plan). ``--mode NAME``
starts a conversation in a mode, or switches a resumed one; ``/mode NAME``
switches during the chat. ``/tools`` lists the tools the model is offered
(with their approval); ``/exit`` ends the chat. A conversation in another mode than ``chat`` says
so when it starts.

Exit codes: 0 done; 1 the turn failed (the model call failed for good, the
reason on stderr); 2 a usage or setup problem, said in one line: no API key,
a server that cannot be reached or refuses the key, a bad store URL, an
unknown context; 130 Ctrl-C; 143 SIGTERM (the MCP servers it started are
stopped first). With ``--base-url`` and no key a placeholder key is sent
(local servers need none). ``--llm module:attribute`` uses the
application's own model adapter instead, ``--tools module:attribute`` adds
its tools (the module is looked for in the working directory first).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any, TextIO

import anyio
import anyio.abc

from ..errors import TurnFSMError
from ._chat_model import DEFAULT_MODEL, MODE_NAMES, PLACEHOLDER_KEY, check_message
from ._errors import EXIT_TERMINATED, CLIError, command_parser, count, seconds
from ._history_options import add_history_options
from ._imports import add_app_options
from ._mcp import add_mcp_options
from ._providers import add_provider_options
from ._store import add_store_option
from ._telemetry import start_tracing
from ._turn_options import add_turn_options

__all__ = [
    "DEFAULT_MODEL",
    "PLACEHOLDER_KEY",
    "add_model_options",
    "add_parser",
    "check_message",
    "run_chat",
]

MAX_TIMEOUT = 3600.0
MAX_ATTEMPTS = 100


# ---------------------------------------------------------------------- the command


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub,
        "chat",
        "chat with a model (OpenAI, Anthropic, Google, or OpenAI-compatible) on the terminal",
        __doc__,
        _run,
    )
    p.add_argument("--message", "-m", metavar="TEXT", help="send one message, print, exit")
    p.add_argument("--context", metavar="ID", help="resume this stored conversation")
    p.add_argument(
        "--system-prompt", metavar="TEXT", help="the system prompt of a new conversation"
    )
    p.add_argument("--system", dest="system_prompt", help=argparse.SUPPRESS)  # the old name
    p.add_argument(
        "--mode",
        choices=MODE_NAMES,
        help="the mode of a new conversation, or the one a resumed one switches to "
        "(default: chat, or the context's)",
    )
    add_model_options(p)


def add_request_options(p: argparse.ArgumentParser) -> None:
    """How ``chat`` and ``record`` call the model: ``--no-stream``, ``--timeout``."""
    p.add_argument("--no-stream", action="store_true", help="ask for whole answers")
    p.add_argument(
        "--timeout",
        type=seconds(MAX_TIMEOUT),
        default=60.0,
        metavar="S",
        help=f"seconds per request (60; at most {MAX_TIMEOUT:g})",
    )


def add_model_options(p: argparse.ArgumentParser) -> None:
    """The options that choose and drive the model (chat, resume, recover)."""
    add_provider_options(
        p, model_help="the model", model_note="; a resumed conversation keeps its own"
    )
    p.add_argument(
        "--approve",
        choices=["all", "none", "ask"],
        help="tool calls that need approval: approve all, deny all, or ask "
        "(default: ask on a terminal, none otherwise)",
    )
    p.add_argument(
        "--ask-user",
        action="store_true",
        help="offer the model the ask_user tool: its questions are answered on the "
        "terminal (give it again when you resume such a conversation)",
    )
    p.add_argument("--json", action="store_true", help="print each turn as one JSON object")
    add_store_option(p)
    p.add_argument(
        "--demo", action="store_true", help="use the built-in demo model (no key, no network)"
    )
    add_app_options(p)
    add_request_options(p)
    p.add_argument(
        "--max-attempts",
        type=count(1, MAX_ATTEMPTS),
        default=3,
        metavar="N",
        help=f"attempts per model call, retries included (3; 1 to {MAX_ATTEMPTS})",
    )
    add_mcp_options(p)
    add_history_options(p, tool_history=None)  # a terminal chat shows every call in full
    add_turn_options(p)


def _run(args: argparse.Namespace) -> int:
    stop_tracing = start_tracing("turnfsm-chat")
    try:
        return anyio.run(_until_sigterm, args)
    finally:
        stop_tracing()


async def _until_sigterm(args: argparse.Namespace) -> int:
    """The chat, stopped by SIGTERM as ``serve`` and ``worker`` are: the turn
    is cancelled (its last commit stands), the MCP servers the chat started
    are stopped (their processes gone), one line says so, exit 143."""
    done: list[int] = []
    async with anyio.create_task_group() as tg:

        async def on_sigterm(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                task_status.started()
                async for _ in signals:
                    tg.cancel_scope.cancel()
                    return

        await tg.start(on_sigterm)
        done.append(await run_chat(args))
        tg.cancel_scope.cancel()
    if done:
        return done[0]
    servers = len(getattr(args, "mcp_servers", None) or ())
    stopped = ""
    if servers:
        stopped = (
            "; the MCP server it started is stopped"
            if servers == 1
            else (f"; the {servers} MCP servers it started are stopped")
        )
    print(f"turnfsm chat: stopped by SIGTERM{stopped}", file=sys.stderr, flush=True)
    return EXIT_TERMINATED


async def run_chat(
    args: argparse.Namespace,
    *,
    stdin: TextIO | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """The command, with its streams injectable (tests)."""
    stdin = stdin or sys.stdin
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        from ._chat_session import Chat  # the engine and the terminal: for a chat, not its --help

        return await Chat(args, stdin, out, err).main()
    except CLIError as exc:
        print(f"turnfsm chat: {exc}", file=err)
        return exc.code
    except TurnFSMError as exc:  # the store failed, a bad input: one line, no traceback
        print(f"turnfsm chat: {exc}", file=err)
        return 2
