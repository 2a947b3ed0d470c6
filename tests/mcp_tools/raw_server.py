"""A hand-written stdio MCP server that answers tool calls with garbage.

It speaks just enough JSON-RPC to be listed (``initialize``, ``tools/list``);
its tools answer ``tools/call`` with what is not MCP: ``garbled`` with a line
that is not JSON, ``bad_result`` with a response whose result has the wrong
shape (``content`` is not a list).
"""

from __future__ import annotations

import json
import sys

TOOLS = [
    {"name": name, "description": what, "inputSchema": {"type": "object", "properties": {}}}
    for name, what in (
        ("garbled", "answers with a line that is not JSON"),
        ("bad_result", "answers with a result of the wrong shape"),
    )
]


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        method, rid = request.get("method"), request.get("id")
        if rid is None:
            continue  # a notification
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {
                        "protocolVersion": request["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "raw-server", "version": "1"},
                    },
                }
            )
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
        elif method == "tools/call" and request["params"]["name"] == "garbled":
            sys.stdout.write("this is not json\n")
            sys.stdout.flush()
        elif method == "tools/call":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": "not a list"}})
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}})


if __name__ == "__main__":
    main()
