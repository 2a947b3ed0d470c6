"""The example chat page on the AI SDK against ``turnfsm serve``, with one command.

    python examples/ui-chat/run.py

It bundles ``chat.js`` with the AI SDK (esbuild and the ``ai`` package from
``.cache/ui-stream``: install them first with ``npm ci --prefix .cache/ui-stream``
after copying ``tests/js/package.json`` and its lock there, as ``.ci/run``
does), starts ``turnfsm serve`` on 127.0.0.1:8000 (the demo model, whose
weather tool needs approval; the page's origin allowed by CORS) and serves the
page on http://127.0.0.1:8001 until Ctrl-C. Nothing is fetched at run time.
"""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODULES = ROOT / ".cache" / "ui-stream" / "node_modules"
API = "http://127.0.0.1:8000"
PAGE_PORT = 8001


def main() -> int:
    esbuild = MODULES / ".bin" / "esbuild"
    if not esbuild.exists():
        print(
            f"no esbuild in {MODULES}: install tests/js/package.json there first", file=sys.stderr
        )
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
    page = (HERE / "index.html").read_text(encoding="utf-8").replace("SERVER", API)
    (out / "index.html").write_text(page, encoding="utf-8")
    turnfsm = Path(sys.executable).parent / "turnfsm"
    server = subprocess.Popen(
        [str(turnfsm), "serve", "--port", "8000", "--cors-origin", f"http://127.0.0.1:{PAGE_PORT}"]
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    print(f"the page: http://127.0.0.1:{PAGE_PORT}/ (Ctrl-C stops)", flush=True)
    try:
        with http.server.ThreadingHTTPServer(("127.0.0.1", PAGE_PORT), handler) as httpd:
            httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
