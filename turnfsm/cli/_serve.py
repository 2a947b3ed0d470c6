"""``turnfsm serve``: the engine over HTTP (``docs/server.md``).

The store is the one ``turnfsm chat`` uses (``--store``, ``$TURNFSM_STORE``, else a
SQLite file in the user's data folder). The model is the demo model (no key,
no network) unless ``--provider``, ``--base-url``, ``--model`` or
``OPENAI_API_KEY`` names one (``--provider anthropic`` or ``google`` for Claude
or Gemini, with their keys and extras: see ``--provider``); new contexts get
``--model``, else ``OPENAI_MODEL`` (OpenAI), else the provider's default;
``--tools module:attribute`` adds tools (a tool or a list of them), ``--llm
module:attribute`` names a model adapter of the application's. ``--turns
workers`` hands each posted message's turn to ``turnfsm worker`` processes on
the same store instead of running it here (``docs/workers.md``). Bearer
tokens (``--tokens FILE``, lines ``token tenant``, else
``$TURNFSM_SERVER_TOKENS``) make each token a tenant; a ``--host`` that is not
the loopback is refused without tokens unless ``--insecure``. Needs the
``server`` extra: ``pip install 'turnfsm[server]'``.
"""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from ..engine import Engine, RetryPolicy
from ..engine._leases import DEFAULT_LEASE_TTL
from ..errors import InvalidInput
from ..storage import WorkQueue
from ..tools import Tool
from ._cache_options import add_cache_options, cache_settings
from ._errors import CLIError, command_parser, count, seconds
from ._history_options import SERVER_TOOL_HISTORY, add_history_options, history_settings
from ._imports import add_app_options, llm_label, load_llm, load_tools
from ._mcp import add_mcp_options, mcp_toolsets
from ._providers import add_provider_options, open_provider, provider_named, provider_of
from ._store import add_store_option, open_cli_store, store_location
from ._telemetry import start_tracing
from ._temporal_options import (
    add_temporal_options,
    connect,
    exit_at_once,
    shared_store,
    temporal_package,
)
from ._turn_options import add_turn_options, turn_settings

__all__ = [
    "add_model_options",
    "add_parser",
    "load_tools",
    "model_name",
    "model_of",
    "model_shown",
]


def add_parser(sub: Any) -> None:
    p = command_parser(
        sub, "serve", "serve the engine over HTTP (REST and server-sent events)", __doc__, _run
    )
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1)")
    p.add_argument(
        "--port",
        type=count(0, 65535),
        default=8000,
        help="the port (8000; 0 takes a free one: the line 'turnfsm serve: listening on "
        "http://HOST:PORT' on standard error names it once the server listens)",
    )
    p.add_argument("--tokens", metavar="FILE", help="bearer tokens: lines 'token tenant'")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback --host without tokens (one tenant, no authentication)",
    )
    add_model_options(p)
    p.add_argument(
        "--turns",
        choices=("here", "workers", "temporal"),
        default="here",
        help="where a posted message's turn runs: in this process (here, the default), "
        "on a `turnfsm worker` of the same store (workers: the message is committed and "
        "202 returned; see docs/workers.md), or on Temporal (temporal: every turn call is "
        "a Temporal Update run by `turnfsm temporal-worker`s; needs --temporal; see "
        "docs/temporal.md)",
    )
    add_temporal_options(p, required=False)
    add_turn_options(p)
    p.add_argument(
        "--max-body",
        type=count(1, 1 << 30),
        default=1_000_000,
        metavar="BYTES",
        help="the largest request body (1000000; 413 beyond)",
    )
    p.add_argument(
        "--max-turns-per-tenant",
        type=count(1, 1_000_000),
        default=8,  # server._limits.DEFAULT_MAX_TURNS_PER_TENANT (no fastapi import here)
        metavar="N",
        help="turns a tenant may have running at once (8; 429 beyond)",
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow this origin (CORS is off unless given)",
    )
    p.add_argument(
        "--heartbeat",
        type=seconds(3600.0),
        default=15.0,
        metavar="S",
        help="seconds between Heartbeat events on an idle stream (15)",
    )
    p.add_argument(
        "--frontend-operator-as",
        choices=("assistant", "user"),
        default="assistant",
        help="the role the model sees a frontend operator's message in, for a context "
        "made by POST /api/chat: assistant (the default, as the request formats send it) "
        "or user (a user message named frontend_operator, as for every other context; "
        "see docs/server.md)",
    )
    add_cache_options(p)
    add_store_option(p)


def add_model_options(p: argparse.ArgumentParser) -> None:
    """The model and tool flags ``serve`` and ``worker`` share, the history
    settings, and ``--lease-ttl``."""
    add_app_options(p)
    add_provider_options(p, model_help="the model of new contexts")
    p.add_argument(
        "--timeout", type=seconds(3600.0), default=60.0, metavar="S", help="seconds per request"
    )
    p.add_argument(
        "--demo-delay",
        type=seconds(60.0),
        default=0.0,
        metavar="S",
        help="seconds between the demo model's streamed chunks (0)",
    )
    add_mcp_options(p)
    add_history_options(p, tool_history=SERVER_TOOL_HISTORY)
    p.add_argument(
        "--lease-ttl",
        type=seconds(3600.0),
        default=DEFAULT_LEASE_TTL,
        metavar="S",
        help="seconds a running turn's lease lasts without a heartbeat: how soon a "
        f"killed process's turns are taken over ({DEFAULT_LEASE_TTL:g})",
    )


def model_of(args: argparse.Namespace) -> tuple[Any, list[Tool]]:
    """The model adapter the flags name, and the tools that come with it: the
    demo model's weather tool, offered only when the application gives no
    tools of its own (``--tools``, ``--mcp``, ``--mcp-url``), which replace it.
    The demo model answers when nothing names a model: no ``--llm``,
    ``--provider``, ``--responses``, ``--base-url`` or ``--model``, and no
    ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL``."""
    named = provider_named(args)
    if args.llm is not None:
        if named is not None:
            raise CLIError(f"--llm and --provider {named} name two models: give one")
        return load_llm(args.llm), []
    provider = provider_of(args)
    nothing = named is None and args.base_url is None and args.model is None
    if nothing and provider.key() is None and provider.env_base_url() is None:
        from ..adapters.llm.demo import DemoLLM
        from ._demo import get_weather

        own = bool(args.tools or getattr(args, "mcp_servers", None))
        return DemoLLM(delay=args.demo_delay), [] if own else [get_weather]
    # no model of its own: each context's model is the name sent upstream
    # (new contexts get model_name(), the one --model names)
    llm, _ = open_provider(provider, base_url=args.base_url, model=None, timeout=args.timeout)
    return llm, []


def model_name(args: argparse.Namespace, llm: Any) -> str:
    """The model of a context made without one (and the metrics' model label):
    ``--model``; else, for ``--llm``, the adapter's own ``model`` if it names
    one, else the ``module:attribute`` it was given as; else ``demo`` for the
    demo model and the provider's default model."""
    if args.model:
        return str(args.model)
    if args.llm is not None:
        return llm_label(args.llm, llm)
    from ..adapters.llm.demo import DemoLLM

    if isinstance(llm, DemoLLM):
        return "demo"
    return provider_of(args).model()


def model_shown(args: argparse.Namespace, llm: Any) -> str:
    """The model a start line names: :func:`model_name`, with the provider
    and the endpoint it calls when a provider's adapter answers."""
    from ..adapters.llm.demo import DemoLLM

    name = model_name(args, llm)
    if args.llm is not None or isinstance(llm, DemoLLM):
        return name
    provider = provider_of(args)
    where = getattr(llm, "base_url", None) or args.base_url or provider.env_base_url()
    at = f" at {where}" if where else ""
    return f"{name} ({provider.name}{at})"


def _host(host: str) -> str:
    """``host`` as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def check_port(host: str, port: int) -> None:
    """Refuse, before anything is started or opened, to serve on an address
    that cannot be listened on (a port in use, an address not this
    machine's): the one line the server's start would end with. Bound with
    ``SO_REUSEADDR`` as uvicorn binds, so a port left in TIME_WAIT passes."""
    if port == 0:
        return  # any free port
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CLIError(f"the server did not start: --host {host}: {exc.strerror}") from None
    family, kind, proto, _, address = found[0]
    try:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        where = f"{_host(host)}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise CLIError(
                f"the server did not start: {where} is in use; stop what listens there, "
                "or give another --port"
            ) from None
        raise CLIError(
            f"the server did not start: cannot listen on {where}: {exc.strerror or exc}"
        ) from None


def _run(args: argparse.Namespace) -> int:
    try:
        from ..server import ServerConfig, load_tokens
        from ..server._run import is_loopback
    except ImportError as exc:
        raise CLIError(
            f"turnfsm serve needs the server extra ({exc.name} is missing): "
            "pip install 'turnfsm[server]'"
        ) from None
    try:
        tokens = load_tokens(args.tokens)
    except InvalidInput as exc:
        raise CLIError(str(exc)) from None
    if not tokens and not is_loopback(args.host) and not args.insecure:
        raise CLIError(
            f"--host {args.host} is not the loopback and no tokens are given (--tokens FILE "
            "or $TURNFSM_SERVER_TOKENS): anyone who reaches it could use every context; "
            "give tokens, or --insecure to serve without them"
        )
    temporal = None
    if args.turns == "temporal":
        if args.temporal is None:
            raise CLIError(
                "--turns temporal needs --temporal HOST:PORT (the Temporal server's frontend)"
            )
        temporal = temporal_package("turnfsm serve --turns temporal")
    elif args.temporal is not None:
        raise CLIError(f"--temporal {args.temporal}: only with --turns temporal")
    if args.max_iterations is not None and args.turns != "here":
        runner = "turnfsm worker" if args.turns == "workers" else "turnfsm temporal-worker"
        raise CLIError(
            f"--max-iterations {args.max_iterations}: with --turns {args.turns} the turns "
            f"run on the workers; give it to `{runner}`"
        )
    check_port(args.host, args.port)  # before the store is opened (and recovered)
    llm, tools = model_of(args)
    tools += load_tools(args.tools)
    store, url = open_cli_store(args.store)
    config = ServerConfig(
        tokens=tokens,
        max_body=args.max_body,
        cors_origins=list(args.cors_origin),
        heartbeat=args.heartbeat,
        max_turns_per_tenant=args.max_turns_per_tenant,
        turns=args.turns,
        model=model_name(args, llm),
        frontend_operator_as=args.frontend_operator_as,
    )
    shown = model_shown(args, llm)
    if args.turns == "workers" and not isinstance(store, WorkQueue):
        raise CLIError(
            f"--turns workers: the store {url} cannot hand turns to workers; "
            "use a SQLite or PostgreSQL store"
        )

    mcp_toolsets(args)  # the options are checked before the server starts
    if temporal is not None:
        return _run_on_temporal(args, temporal, config, store, url, tools, shown)

    def factory() -> Engine:
        return Engine(
            llm=llm,
            tools=tools,
            store=store,
            retry=RetryPolicy(),
            lease_ttl=args.lease_ttl,
            toolsets=mcp_toolsets(args),
            **history_settings(args),
            **cache_settings(args),
            **turn_settings(args),
        )

    return _serve(args, factory, config, url, shown, on_close=_closer(llm))


def _closer(llm: Any) -> Callable[[], Awaitable[None]] | None:
    """What closes the model adapter the command made, on the server's loop
    (its HTTP client's connections belong there), as ``chat`` closes its own."""
    close = getattr(llm, "aclose", None)
    return close if callable(close) else None


def _run_on_temporal(
    args: argparse.Namespace,
    temporal: Any,
    config: Any,
    store: Any,
    url: str,
    tools: list[Tool],
    shown: str,
) -> int:
    """``--turns temporal``: the engine is a ``TemporalEngine`` on the same
    store, whose turn calls are Updates of the contexts' workflows; the
    model, the tools and MCP servers are the workers' (this server runs no
    turn), its own tools only describe the contexts."""
    shared_store(store, url, "--turns temporal: --store")
    client = connect(args, temporal, store)

    def factory() -> Engine:
        engine: Engine = temporal.TemporalEngine(
            client,
            store=store,
            task_queue=args.temporal_task_queue,
            tools=tools,
            lease_ttl=args.lease_ttl,
            ids=args.ids,
            **history_settings(args),
            **cache_settings(args),
        )
        return engine

    where = f"temporal {args.temporal} (namespace {args.temporal_namespace}, task queue "
    where += f"{args.temporal_task_queue})"
    exit_at_once(_serve(args, factory, config, url, shown, turns=where))  # see exit_at_once


def _serve(
    args: argparse.Namespace,
    factory: Any,
    config: Any,
    url: str,
    shown: str,
    *,
    turns: str | None = None,
    on_close: Callable[[], Awaitable[None]] | None = None,
) -> int:
    from ..server._run import StartupFailed, run_server

    stop_tracing = start_tracing("turnfsm-serve")
    # a log line, to standard error as the server's others (standard output is
    # a command's output only)
    print(
        f"turnfsm serve: http://{_host(args.host)}:{args.port}, model {shown}, "
        f"store {store_location(url)}" + (f", turns on {turns}" if turns else ""),
        file=sys.stderr,
        flush=True,
    )

    def listening(urls: list[str]) -> None:
        # the address the server got (the port --port 0 took), once it accepts
        # connections: what a script that started it reads to reach it
        print(f"turnfsm serve: listening on {', '.join(urls)}", file=sys.stderr, flush=True)

    try:
        run_server(
            factory,
            config,
            host=args.host,
            port=args.port,
            on_listening=listening,
            on_close=on_close,
        )
    except StartupFailed as exc:  # one line, exit 2, as other usage errors
        raise CLIError(f"the server did not start: {exc}") from None
    finally:
        stop_tracing()
    return 0
