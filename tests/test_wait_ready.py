"""``kit.wait_ready``, the one way a test waits for a server it started: it
waits through a server that is not ready yet, gives a slow answer all the time
it needs instead of a short fixed timeout, and says why when the server dies."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kit import wait_ready


class Stub:
    """A server on 127.0.0.1 whose ``/readyz`` answers ``codes`` in turn (then
    200); each answer waits for ``gate``."""

    def __init__(self, codes: list[int]) -> None:
        self.codes = codes
        self.asked = 0
        self.gate = threading.Event()
        self.gate.set()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stub.asked += 1
                stub.gate.wait(60)
                code = stub.codes.pop(0) if stub.codes else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def stub() -> Iterator[Stub]:
    made = Stub([])
    thread = threading.Thread(target=made.server.serve_forever, daemon=True)
    thread.start()
    yield made
    made.gate.set()
    made.server.shutdown()
    made.server.server_close()


def test_it_waits_until_the_server_is_ready(stub: Stub) -> None:
    stub.codes[:] = [503, 503]
    wait_ready(stub.url)
    assert stub.asked == 3


def test_a_slow_first_answer_is_waited_for_not_timed_out(stub: Stub) -> None:
    """The first answer comes only after longer than a short per-try timeout
    (the 1 s some tests used): one request, answered, not one timed out and
    sent again."""
    stub.gate.clear()
    timer = threading.Timer(1.5, stub.gate.set)
    timer.start()
    try:
        wait_ready(stub.url)
    finally:
        timer.cancel()
        stub.gate.set()
    assert stub.asked == 1


def test_a_server_that_died_is_reported_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("Traceback: the port is taken\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait(60)
    with pytest.raises(AssertionError, match=r"exited \(3\)[\s\S]*the port is taken"):
        wait_ready("http://127.0.0.1:9", process=proc, log=log)


def test_a_server_that_never_gets_ready_fails_at_the_bound(stub: Stub) -> None:
    """It fails at its bound with the last answer it got. The bound is seconds,
    not a fraction of one: on a loaded machine the stub's first answer alone
    can take longer than that, and the failure then names the timeout."""
    stub.codes[:] = [503] * 1000
    with pytest.raises(AssertionError, match=r"/readyz not ready in 3 s \(503"):
        wait_ready(stub.url, within=3)
    assert stub.asked > 1
