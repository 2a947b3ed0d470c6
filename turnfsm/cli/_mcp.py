"""The MCP options of ``turnfsm chat``, ``serve`` and ``worker`` (docs/mcp.md).

``--mcp "COMMAND ARGS"`` runs a server over stdio, ``--mcp-url URL`` connects to
one over Streamable HTTP; each is repeatable, and a leading ``NAME=`` gives
the server a prefix (its tools are ``NAME__tool``). ``--mcp-header
"NAME: VALUE"`` adds a header to the ``--mcp-url`` before it (so a token goes
to the one server it is for). ``--mcp-approval`` says what the servers' calls
need: ``required`` (the default), ``auto``, or ``read-only`` (calls of tools
the server marks ``readOnlyHint`` run without asking, the others are asked
for); ``--mcp-timeout`` bounds each call.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Sequence
from typing import Any

from ..tools import Toolset
from ._errors import CLIError, seconds

__all__ = ["add_mcp_options", "mcp_toolsets"]

_PREFIXED = re.compile(r"^\s*([A-Za-z0-9_-]{1,40})=(.+)$", re.DOTALL)
_HEADER = re.compile(r"^([!#$%&'*+.^_`|~0-9A-Za-z-]+)\s*:\s*(.*)$")


class _ServerOption(argparse.Action):
    """``--mcp`` and ``--mcp-url`` append ``{"kind": ..., "spec": ...,
    "headers": {}}`` to ``mcp_servers``, in order; ``--mcp-header`` adds to
    the headers of the last one, which must be a ``--mcp-url``."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        servers = list(getattr(namespace, "mcp_servers", None) or [])
        if option_string != "--mcp-header":
            kind = "url" if option_string == "--mcp-url" else "command"
            servers.append({"kind": kind, "spec": str(values), "headers": {}})
            namespace.mcp_servers = servers
            return
        if not servers or servers[-1]["kind"] != "url":
            parser.error(f"--mcp-header {values!r}: give it after the --mcp-url it is for")
        match = _HEADER.match(str(values))
        if match is None:
            parser.error(f"--mcp-header {values!r}: expected 'NAME: VALUE'")
        servers[-1]["headers"][match.group(1)] = match.group(2)


def add_mcp_options(p: argparse.ArgumentParser) -> None:
    """``--mcp``, ``--mcp-url``, ``--mcp-header``, ``--mcp-approval``, ``--mcp-timeout``."""
    p.set_defaults(mcp_servers=[])
    p.add_argument(
        "--mcp",
        action=_ServerOption,
        metavar='"[NAME=]COMMAND ARGS"',
        help="tools of an MCP server run as a process over stdio (repeatable; NAME= "
        "prefixes its tools NAME__)",
    )
    p.add_argument(
        "--mcp-url",
        action=_ServerOption,
        metavar="[NAME=]URL",
        help="tools of an MCP server over Streamable HTTP (repeatable)",
    )
    p.add_argument(
        "--mcp-header",
        action=_ServerOption,
        metavar='"NAME: VALUE"',
        help="a header for the --mcp-url before it, e.g. 'Authorization: Bearer ...'",
    )
    p.add_argument(
        "--mcp-approval",
        choices=["required", "auto", "read-only"],
        default="required",
        help="what MCP tool calls need: a human's approval (required, the default), "
        "nothing (auto), or approval unless the server marks the tool read-only",
    )
    p.add_argument(
        "--mcp-timeout",
        type=seconds(3600.0),
        default=60.0,
        metavar="S",
        help="seconds an MCP tool call may take (60)",
    )


def _quiet_sdk() -> None:
    """The MCP SDK's own log off: it logs a traceback for each line a server
    writes that is not MCP (35 lines for a command that is not a server),
    where turnfsm says what went wrong in one line of its own (the error a
    server that cannot start raises, the warning when a running one
    misbehaves)."""
    sdk = logging.getLogger("mcp")
    if not any(isinstance(h, logging.NullHandler) for h in sdk.handlers):
        sdk.addHandler(logging.NullHandler())
    sdk.propagate = False


def mcp_toolsets(args: argparse.Namespace) -> list[Toolset]:
    """The MCP servers the options name (new objects on every call)."""
    servers = getattr(args, "mcp_servers", None) or []
    if not servers:
        return []
    _quiet_sdk()
    try:
        from ..tools.mcp import MCPServer
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    from ..errors import ToolDefinitionError

    approval = args.mcp_approval
    if not args.mcp_timeout > 0:
        raise CLIError("--mcp-timeout must be more than 0 seconds")
    options: dict[str, Any] = {
        "approval": "auto" if approval == "auto" else "required",
        "read_only_approval": "auto" if approval == "read-only" else None,
        "timeout": args.mcp_timeout,
    }
    out: list[Toolset] = []
    for server in servers:
        spec = server["spec"]
        prefix = None
        match = _PREFIXED.match(spec)
        if match is not None:
            prefix, spec = match.group(1), match.group(2)
        try:
            if server["kind"] == "url":
                out.append(
                    MCPServer.http(
                        spec.strip(), headers=server["headers"], prefix=prefix, **options
                    )
                )
            else:
                out.append(MCPServer.stdio(spec, prefix=prefix, **options))
        except (ToolDefinitionError, ValueError) as exc:
            flag = "--mcp-url" if server["kind"] == "url" else "--mcp"
            raise CLIError(f"{flag} {server['spec']!r}: {exc}") from None
    return out
