"""The MCP SDK as :mod:`turnfsm.tools.mcp` uses it, imported here alone (with
the error that names the ``mcp`` extra when it is missing), and what one
connection to a server is made of: the transport for its target (a stdio
process whose stderr goes where it was asked, or a Streamable HTTP session
with its own HTTP client) and the state a connection's task holds."""

from __future__ import annotations

import functools
import subprocess
import sys
from typing import IO, Any, TextIO, cast

import anyio

try:
    import mcp_types as mt
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # pragma: no cover - the extra is installed in tests
    raise ImportError(
        f"turnfsm.tools.mcp needs the mcp extra ({exc.name} is missing): "
        "pip install 'turnfsm[mcp]'",
        name=exc.name,
    ) from exc

__all__ = [
    "Client",
    "Connection",
    "MCPError",
    "StdioServerParameters",
    "client_info",
    "create_mcp_http_client",
    "maybe",
    "mt",
    "streamable_http_client",
    "transport_of",
]


class Connection:
    """One connection to the server (stdio: one process), held open by one task."""

    __slots__ = ("client", "done", "stop", "why")

    def __init__(self) -> None:
        self.client: Client | None = None
        self.why: str | None = None
        self.stop = anyio.Event()
        self.done = anyio.Event()

    @property
    def alive(self) -> bool:
        return self.client is not None and not self.stop.is_set()


def transport_of(target: Any, stderr: IO[str] | None) -> Any:
    """The SDK's client target; a stdio server's stderr goes where it was asked."""
    if isinstance(target, StdioServerParameters):
        from mcp.client.stdio import stdio_client

        return stdio_client(target, errlog=cast(TextIO, _errlog(stderr)))
    return target


def _errlog(stderr: IO[str] | None) -> Any:
    """Where a stdio server's stderr goes: ``stderr``, else this process's stderr
    when it is a file (it is not under a notebook or pytest's capsys), else nowhere."""
    if stderr is not None:
        return stderr
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return subprocess.DEVNULL
    return sys.stderr


class maybe:
    """``async with`` an optional async resource."""

    def __init__(self, resource: Any) -> None:
        self._resource = resource

    async def __aenter__(self) -> Any:
        if self._resource is not None:
            await self._resource.__aenter__()
        return self._resource

    async def __aexit__(self, *exc: Any) -> None:
        if self._resource is not None:
            await self._resource.__aexit__(*exc)


def client_info() -> Any:
    """Who this client is, as the server is told."""
    return mt.Implementation(name="turnfsm", version=_version())


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("turnfsm")
    except PackageNotFoundError:  # pragma: no cover - a source tree
        return "0"
