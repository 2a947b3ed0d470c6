"""The example chat page on the AI SDK against ``turnfsm serve``, with one command.

    python examples/ui-chat/run.py [API_PORT [PAGE_PORT]]

It bundles ``chat.js`` with the AI SDK (esbuild and the ``ai`` package in
``.cache/ui-stream``, installed there from ``tests/js/package.json`` and its
lock with ``npm ci`` the first time, as ``.ci/run`` does), starts
``turnfsm serve`` on 127.0.0.1:8000 (the demo model, whose
weather tool needs approval; the page's origin allowed by CORS) and serves the
page on http://127.0.0.1:8001 until Ctrl-C (other ports as arguments). Nothing
is fetched at run time.
"""

from __future__ import annotations

import functools
import http.server
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODULES = ROOT / ".cache" / "ui-stream" / "node_modules"


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


def main(api_port: int = 8000, page_port: int = 8001) -> int:
    api = f"http://127.0.0.1:{api_port}"
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
    page = (HERE / "index.html").read_text(encoding="utf-8").replace("SERVER", api)
    (out / "index.html").write_text(page, encoding="utf-8")
    turnfsm = Path(sys.executable).parent / "turnfsm"
    server = subprocess.Popen(
        [
            str(turnfsm),
            "serve",
            "--port",
            str(api_port),
            "--cors-origin",
            f"http://127.0.0.1:{page_port}",
        ]
    )
    # SIGTERM stops the page and the server as Ctrl-C does
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    print(f"the page: http://127.0.0.1:{page_port}/ (Ctrl-C stops)", flush=True)
    try:
        with http.server.ThreadingHTTPServer(("127.0.0.1", page_port), handler) as httpd:
            httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main(*(int(a) for a in sys.argv[1:3])))
