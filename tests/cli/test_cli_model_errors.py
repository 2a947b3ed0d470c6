"""A model endpoint that answers with a web page (a web server or proxy in
front of the wrong URL): the command shows the status and one short line of
the page, not the page."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .conftest import Cli

PAGE = (
    b"""<!DOCTYPE HTML>
<html lang="en">
    <head>
        <meta charset="utf-8">
        <title>Error response</title>
        <style>body { color: red; }</style>
    </head>
    <body>
        <h1>Not Implemented</h1>
        <p>Error code: 501</p>
        <p>Message: Unsupported method (&#x27;POST&#x27;).</p>
        <script>console.log("never shown")</script>
        <p>"""
    + b"padding " * 100
    + b"""</p>
    </body>
</html>
"""
)


class _Pages(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(501)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def web_page_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_an_html_error_page_is_its_status_and_one_short_line(
    cli: Cli, web_page_server: str
) -> None:
    ran = cli(
        "chat", "--base-url", web_page_server, "--max-attempts", "1", "-m", "hi",
        "--store", "memory://",
    )  # fmt: skip
    assert ran.code == 1
    line = ran.one_line()
    assert line.startswith("turnfsm chat: the model call failed: HTTP 501: Not Implemented"), line
    assert "Message: Unsupported method ('POST')." in line
    assert "<" not in line and "never shown" not in line and "color" not in line
    said = line.split("HTTP 501: ", 1)[1]
    assert len(said) <= 200 and said.endswith("...")
