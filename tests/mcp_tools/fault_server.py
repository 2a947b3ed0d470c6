"""A small MCP server for the fault cases, written by hand on the standard library.

    python tests/mcp_tools/fault_server.py                # stdio
    python tests/mcp_tools/fault_server.py --http PORT    # Streamable HTTP on 127.0.0.1:PORT/mcp

It misbehaves on purpose, so it does not need an SDK's server: it says on the
wire what a FastMCP server with the same tools says (their schemas, a
``str`` or ``int`` result as text plus ``structuredContent`` ``{"result": ...}``,
a raised tool error as an ``isError`` text), and it starts in a tenth of the
time, as it imports neither ``mcp`` nor pydantic. The reference servers from
npm (test_mcp_servers.py) are where the client meets a real SDK's server.

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

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

# a 1x1 transparent PNG
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"
    "AAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

Send = Callable[[dict[str, Any]], None]


class ToolError(Exception):
    """A tool's failure: an ``isError`` result."""


class Call:
    """One ``tools/call``: its arguments, how to notify the client, the request's headers."""

    def __init__(self, arguments: dict[str, Any], send: Send, headers: dict[str, str]) -> None:
        self.arguments = arguments
        self.send = send
        self.headers = headers


def _schema(title: str, props: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    """A JSON Schema object as pydantic writes a function's arguments or result."""
    schema: dict[str, Any] = {"properties": props}
    if required:
        schema["required"] = required
    return {**schema, "type": "object", "title": title}


def _prop(name: str, kind: str, *default: object) -> dict[str, Any]:
    return {**({"default": default[0]} if default else {}), "title": name.title(), "type": kind}


class Tool:
    """A tool as listed, and what a call of it does (``run`` returns the result)."""

    def __init__(
        self,
        name: str,
        description: str,
        run: Callable[[Call], Any],
        params: tuple[tuple[str, str, tuple[object, ...]], ...] = (),
        returns: str | dict[str, Any] | None = "string",
        annotations: dict[str, bool] | None = None,
        title: str | None = None,
    ) -> None:
        self.run = run
        self.returns = returns
        base = title or name
        props = {p: _prop(p, kind, *default) for p, kind, default in params}
        listed: dict[str, Any] = {} if annotations is None else {"annotations": annotations}
        listed["description"] = description
        required = [p for p, _, default in params if not default]
        listed["inputSchema"] = _schema(f"{base}Arguments", props, required)
        listed["name"] = name
        if isinstance(returns, dict):
            listed["outputSchema"] = returns
        elif returns is not None:
            result = {"result": _prop("result", returns)}
            listed["outputSchema"] = _schema(f"{base}Output", result, ["result"])
        self.listed = listed

    def answer(self, value: Any) -> dict[str, Any]:
        if self.returns is None:
            return {"content": value, "isError": False}
        if isinstance(self.returns, dict):
            text = json.dumps(value, indent=2)
            return {
                "content": [{"text": text, "type": "text"}],
                "isError": False,
                "structuredContent": value,
            }
        return {
            "content": [{"text": str(value), "type": "text"}],
            "isError": False,
            "structuredContent": {"result": value},
        }


class FaultServer:
    """The tools and the JSON-RPC of one process (stdio or HTTP)."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()
        self.tools: dict[str, Tool] = {}
        rw, ro = {"idempotentHint": True, "readOnlyHint": True}, {"readOnlyHint": True}
        text, secs = ("text", "string", ()), ("seconds", "number", (0.5,))
        weather = _schema(
            "Weather",
            {"city": _prop("city", "string"), "celsius": _prop("celsius", "number")},
            ["city", "celsius"],
        )
        for tool in (
            Tool("echo", "Say the text back.", self.echo, (text,), annotations=rw),
            Tool("pid", "The server's process id.", self.pid, (), "integer", ro),
            Tool(
                "calls",
                "How many calls this process answered before this one.",
                self.count,
                (),
                "integer",
                ro,
            ),
            Tool(
                "die",
                "Exit in the middle of the call.",
                self.die,
                annotations={"destructiveHint": True},
            ),
            Tool(
                "hang", "Sleep (past any timeout).", self.hang, (("seconds", "number", (3600.0,)),)
            ),
            Tool(
                "fail",
                "Fail: an isError result.",
                self.fail,
                (("why", "string", ("it went wrong",)),),
            ),
            Tool("image", "A tiny PNG.", self.image, returns=None),
            Tool("resource", "An embedded text resource.", self.resource, returns=None),
            Tool(
                "weather", "Structured weather.", self.weather, (("city", "string", ()),), weather
            ),
            Tool(
                "grow",
                "Add a tool called ``name`` and say the list changed.",
                self.grow,
                (("name", "string", ()),),
            ),
            Tool(
                "garbage",
                "Write a line that is not JSON-RPC where the answer should be.",
                self.garbage,
            ),
            Tool("whoami", "The Authorization header of the request ('' on stdio).", self.whoami),
            Tool(
                "write_note",
                "Append ``text`` to the file $FAULT_SERVER_LOG (an effect a crash test can count).",
                self.write_note,
                (text,),
            ),
            Tool(
                "slow_note",
                "Append ``text`` to $FAULT_SERVER_LOG after ``seconds`` (a call a kill can cut).",
                self.slow_note,
                (text, secs),
            ),
        ):
            self.tools[tool.listed["name"]] = tool

    def _count(self) -> int:
        with self.lock:
            self.calls += 1
            return self.calls - 1

    # ------------------------------------------------------------------ the tools

    def echo(self, call: Call) -> str:
        self._count()
        return str(call.arguments["text"])

    def pid(self, call: Call) -> int:
        self._count()
        return os.getpid()

    def count(self, call: Call) -> int:
        return self._count()

    def die(self, call: Call) -> str:
        os._exit(3)

    def hang(self, call: Call) -> str:
        self._count()
        time.sleep(float(call.arguments.get("seconds", 3600.0)))
        return "woke up"

    def fail(self, call: Call) -> str:
        self._count()
        raise ToolError(str(call.arguments.get("why", "it went wrong")))

    def image(self, call: Call) -> list[dict[str, Any]]:
        self._count()
        return [{"data": PNG, "mimeType": "image/png", "type": "image"}]

    def resource(self, call: Call) -> list[dict[str, Any]]:
        self._count()
        memo = {"mimeType": "text/plain", "text": "the memo", "uri": "memo://one"}
        return [{"resource": memo, "type": "resource"}]

    def weather(self, call: Call) -> dict[str, Any]:
        self._count()
        return {"city": call.arguments["city"], "celsius": 21.5}

    def grow(self, call: Call) -> str:
        self._count()
        name = str(call.arguments["name"])

        def added(inner: Call) -> str:
            return f"{name}: {inner.arguments['text']}"

        text = ("text", "string", ())
        self.tools[name] = Tool(name, f"the tool {name}", added, (text,), title="added")
        call.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return f"added {name}"

    def garbage(self, call: Call) -> str:
        self._count()
        os.write(1, b"this is not json\n")
        time.sleep(3600)
        return "unreachable"

    def whoami(self, call: Call) -> str:
        self._count()
        return call.headers.get("authorization", "")

    def write_note(self, call: Call) -> str:
        self._count()
        return self._note(str(call.arguments["text"]))

    def slow_note(self, call: Call) -> str:
        self._count()
        time.sleep(float(call.arguments.get("seconds", 0.5)))
        return self._note(str(call.arguments["text"]))

    def _note(self, text: str) -> str:
        with open(os.environ["FAULT_SERVER_LOG"], "a", encoding="utf-8") as f:
            f.write(text + "\n")
        return f"noted {text}"

    # ------------------------------------------------------------------ JSON-RPC

    def result(self, message: dict[str, Any], send: Send, headers: dict[str, str]) -> Any:
        """The result of a request (a ``KeyError`` for a method it does not know)."""
        method, params = message["method"], message.get("params") or {}
        if method == "initialize":
            return {
                "capabilities": {
                    "prompts": {"listChanged": False},
                    "resources": {"listChanged": False, "subscribe": False},
                    "tools": {"listChanged": False},
                },
                "protocolVersion": params["protocolVersion"],
                "serverInfo": {"name": "fault-server", "version": ""},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [tool.listed for tool in list(self.tools.values())]}
        if method != "tools/call":
            raise KeyError(method)
        name = params["name"]
        tool = self.tools.get(name)
        if tool is None:
            return {"content": [{"text": f"Unknown tool: {name}", "type": "text"}], "isError": True}
        try:
            value = tool.run(Call(params.get("arguments") or {}, send, headers))
        except (ToolError, KeyError) as e:
            text = f"Error executing tool {name}: {e}"
            return {"content": [{"text": text, "type": "text"}], "isError": True}
        return tool.answer(value)

    def respond(self, message: dict[str, Any], send: Send, headers: dict[str, str]) -> None:
        """Answers a request through ``send`` (a notification needs no answer)."""
        if "id" not in message or "method" not in message:
            return
        try:
            reply = {"result": self.result(message, send, headers)}
        except KeyError:
            reply = {"error": {"code": -32601, "message": "Method not found"}}
        send({"jsonrpc": "2.0", "id": message["id"], **reply})


def serve_stdio(server: FaultServer) -> None:
    """Reads requests from stdin until it ends; a call runs in a thread of its
    own (``hang`` must not hold up what comes after it)."""
    out = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":")) + "\n"
        with out:
            sys.stdout.write(line)
            sys.stdout.flush()

    for line in sys.stdin:
        if line.strip():
            message = json.loads(line)
            threading.Thread(target=server.respond, args=(message, send, {}), daemon=True).start()


def serve_http(server: FaultServer, port: int) -> None:
    """Streamable HTTP on 127.0.0.1:``port`` (0: a free one, which the first
    line of standard output names): a request's answer, and what the call
    notified before it, is a ``text/event-stream`` of its own. The socket is
    bound here with ``SO_REUSEPORT``, as a test that holds the port the same
    way (bound, not listening) between two servers keeps every other process
    off it."""
    import socket
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # no stream the server starts on its own
            self.send_response(405)
            self.send_header("Allow", "POST, DELETE")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_DELETE(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            message = json.loads(body)
            sent: list[dict[str, Any]] = []
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.respond(message, sent.append, headers)
            if not sent:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            events = "".join(f"event: message\ndata: {json.dumps(m)}\n\n" for m in sent)
            data = events.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            if message.get("method") == "initialize":
                self.send_header("mcp-session-id", os.urandom(16).hex())
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler, bind_and_activate=False)
    httpd.daemon_threads = True
    httpd.socket.close()
    httpd.socket = sock
    httpd.server_address = sock.getsockname()
    sock.listen()
    print(f"fault server: bound to http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        serve_http(FaultServer(), int(sys.argv[2]))
    else:
        serve_stdio(FaultServer())
