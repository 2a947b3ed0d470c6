"""The example chat page on the AI SDK against ``turnfsm serve``, with one command.

    python examples/ui-chat/run.py [API_PORT [PAGE_PORT]]

It bundles ``chat.js`` with the AI SDK (esbuild and the ``ai`` package in
``.cache/ui-stream``, installed there from ``tests/js/package.json`` and its
lock with ``npm ci`` the first time, as ``.ci/run`` does), starts
``turnfsm serve`` on 127.0.0.1:8000 (the demo model, whose
weather tool needs approval; the page's origin allowed by CORS) and serves the
page on http://127.0.0.1:8001 until Ctrl-C (other ports as arguments; 0 takes
a free port, and the page's address is said on standard output). Nothing is
fetched at run time.
"""

from __future__ import annotations

import functools
import http.server
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TextIO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODULES = ROOT / ".cache" / "ui-stream" / "node_modules"
LISTENING = re.compile(r"listening on (http://\S+?)(?:,|\s|$)")
"""The line ``turnfsm serve`` says its address in, on its standard error."""


def _install() -> bool:
    """The pinned AI SDK and esbuild into ``.cache/ui-stream`` (``npm ci`` from
    the lock file, as ``.ci/run`` does); False, with a message, if npm fails."""
    cache = MODULES.parent
    cache.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        (cache / name).write_bytes((ROOT / "tests" / "js" / name).read_bytes())
    print(f"installing the AI SDK into {cache} (npm ci) ...", file=sys.stderr)
    try:
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(cache)], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"npm ci failed ({exc}): install Node.js 20 and npm", file=sys.stderr)
        return False
    return True


def _serve_api(api_port: int, page_origin: str) -> tuple[subprocess.Popen[str], str]:
    """``turnfsm serve`` on ``api_port`` (0: a free one) and the URL it says it
    listens on. Its standard error is read up to that line, then copied on to
    ours by a thread, so that its request log never fills the pipe."""
    turnfsm = Path(sys.executable).parent / "turnfsm"
    server = subprocess.Popen(
        [str(turnfsm), "serve", "--port", str(api_port), "--cors-origin", page_origin],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stderr is not None
    for line in server.stderr:
        sys.stderr.write(line)
        found = LISTENING.search(line)
        if found:
            break
    else:
        server.wait()
        raise SystemExit(f"turnfsm serve exited ({server.returncode}) before it listened")
    threading.Thread(target=_copy_lines, args=(server.stderr,), daemon=True).start()
    return server, found.group(1)


def _copy_lines(stream: TextIO) -> None:
    for line in stream:
        sys.stderr.write(line)
        sys.stderr.flush()


def main(api_port: int = 8000, page_port: int = 8001) -> int:
    """Either port may be 0: a free one is taken, and said."""
    esbuild = MODULES / ".bin" / "esbuild"
    if not esbuild.exists() and not _install():
        return 1
    out = Path(tempfile.mkdtemp(prefix="ui-chat-"))
    subprocess.run(
        [
            str(esbuild),
            str(HERE / "chat.js"),
            "--bundle",
            "--format=iife",
            f"--outfile={out / 'chat.bundle.js'}",
            "--log-level=warning",
        ],
        check=True,
        cwd=MODULES.parent,  # "ai" resolves from its node_modules
        env={"NODE_PATH": str(MODULES)},
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    # the page's port is bound first: the server allows its origin by CORS,
    # and the page names the server's URL, which it knows once it listens
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", page_port), handler)
    origin = f"http://127.0.0.1:{httpd.server_address[1]}"
    server, api = _serve_api(api_port, origin)
    page = (HERE / "index.html").read_text(encoding="utf-8").replace("SERVER", api)
    (out / "index.html").write_text(page, encoding="utf-8")
    # SIGTERM stops the page and the server as Ctrl-C does
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"the page: {origin}/ (Ctrl-C stops)", flush=True)
    try:
        with httpd:
            httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main(*(int(a) for a in sys.argv[1:3])))
