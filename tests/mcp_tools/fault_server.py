"""A small MCP server for the fault cases (FastMCP from the ``mcp`` package).

    python tests/mcp_tools/fault_server.py                # stdio
    python tests/mcp_tools/fault_server.py --http PORT    # Streamable HTTP on 127.0.0.1:PORT/mcp

Its tools: ``echo`` (text), ``pid`` (the server's process id), ``calls`` (how
many calls this process answered), ``die`` (exits in the middle of the call),
``hang`` (sleeps past any timeout), ``fail`` (an ``isError`` result),
``image`` (a PNG), ``resource`` (an embedded resource), ``weather``
(``structuredContent``), ``grow`` (adds a tool and sends
``notifications/tools/list_changed`` before it answers), ``garbage`` (writes a
line that is not JSON-RPC to stdout), ``whoami`` (the ``Authorization``
header of an HTTP request), ``write_note`` (appends to the file
``$FAULT_SERVER_LOG``: a call with an effect, for the crash cases).
"""

from __future__ import annotations

import base64
import os
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import EmbeddedResource, TextResourceContents, ToolAnnotations
from pydantic import BaseModel

# a 1x1 transparent PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

server = MCPServer("fault-server")
_calls = 0


def _count() -> None:
    global _calls
    _calls += 1


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def echo(text: str) -> str:
    """Say the text back."""
    _count()
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """The server's process id."""
    _count()
    return os.getpid()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def calls() -> int:
    """How many calls this process answered before this one."""
    n = _calls
    _count()
    return n


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def die() -> str:
    """Exit in the middle of the call."""
    os._exit(3)


@server.tool()
async def hang(seconds: float = 3600.0) -> str:
    """Sleep (past any timeout)."""
    _count()
    await anyio.sleep(seconds)
    return "woke up"


@server.tool()
def fail(why: str = "it went wrong") -> str:
    """Fail: an isError result."""
    _count()
    raise ToolError(why)


@server.tool()
def image() -> Image:
    """A tiny PNG."""
    _count()
    return Image(data=PNG, format="png")


@server.tool()
def resource() -> EmbeddedResource:
    """An embedded text resource."""
    _count()
    return EmbeddedResource(
        type="resource",
        resource=TextResourceContents(uri="memo://one", mime_type="text/plain", text="the memo"),
    )


class Weather(BaseModel):
    city: str
    celsius: float


@server.tool()
def weather(city: str) -> Weather:
    """Structured weather."""
    _count()
    return Weather(city=city, celsius=21.5)


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called ``name`` and say the list changed."""
    _count()

    def added(text: str) -> str:
        return f"{name}: {text}"

    server.add_tool(added, name=name, description=f"the tool {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
async def garbage() -> str:
    """Write a line that is not JSON-RPC where the answer should be."""
    _count()
    os.write(1, b"this is not json\n")  # fd 1 itself: the SDK keeps print() off it
    await anyio.sleep(3600)
    return "unreachable"


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header of the request ('' on stdio)."""
    _count()
    headers = ctx.headers or {}
    return str(headers.get("authorization", ""))


@server.tool()
def write_note(text: str) -> str:
    """Append ``text`` to the file $FAULT_SERVER_LOG (an effect a crash test can count)."""
    _count()
    with open(os.environ["FAULT_SERVER_LOG"], "a", encoding="utf-8") as f:
        f.write(text + "\n")
    return f"noted {text}"


@server.tool()
def slow_note(text: str, seconds: float = 0.5) -> str:
    """Append ``text`` to $FAULT_SERVER_LOG after ``seconds`` (a call a kill can cut)."""
    _count()
    time.sleep(seconds)
    with open(os.environ["FAULT_SERVER_LOG"], "a", encoding="utf-8") as f:
        f.write(text + "\n")
    return f"noted {text}"


def serve_http(port: int) -> None:
    """Streamable HTTP on 127.0.0.1:``port`` (0: a free one, which the first
    line of standard output names). The socket is bound here with
    ``SO_REUSEPORT``, as a test that holds the port the same way (bound, not
    listening) between two servers keeps every other process off it."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    app = server.streamable_http_app(host="127.0.0.1")
    print(f"fault server: bound to http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        serve_http(int(sys.argv[2]))
    else:
        server.run()
