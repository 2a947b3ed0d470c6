"""``fleet.to_servers``: a kill test's client reaches a server by its name,
wherever the running start of that server listens (each start takes a free
port and says it), and gets a refused connection while it is down."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import httpx
import pytest
from fleet import Proc, to_servers
from kit import loopback_tls

SERVER = """\
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = str(self.server.server_address[1]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
with http.server.HTTPServer(("127.0.0.1", 0), Handler) as httpd:
    print(f"demo: listening on http://127.0.0.1:{httpd.server_address[1]}", flush=True)
    httpd.serve_forever()
"""


def test_a_server_is_reached_by_name_on_the_port_each_start_took(tmp_path: Path) -> None:
    proc = Proc("server0", [sys.executable, "-c", SERVER], "server")
    hooks = to_servers([proc], wait=5.0)

    async def answered() -> int:
        async with httpx.AsyncClient(
            verify=loopback_tls(), base_url="http://server0", event_hooks=hooks
        ) as http:
            return int((await http.get("/")).text)

    try:
        proc.start({}, tmp_path)
        first = anyio.run(answered)
        assert first == proc.port
        assert proc.popen is not None
        proc.popen.kill()
        proc.popen.wait()
        with pytest.raises(httpx.ConnectError, match="server0 is not listening"):
            anyio.run(answered)  # down: refused, never sent to the old port
        proc.start({}, tmp_path)
        second = anyio.run(answered)
        assert second == proc.port  # the new start's port, said after the old one's
        assert proc.log is not None
        assert proc.log.read_text().count("listening on") == 2
    finally:
        if proc.popen is not None and proc.popen.poll() is None:
            proc.popen.kill()
            proc.popen.wait()
