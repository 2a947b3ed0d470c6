"""Take the README's screenshots of the web view with headless Chromium.

    python scripts/screenshots.py           # take them again if stale
    python scripts/screenshots.py --force   # take them again anyway
    python scripts/screenshots.py --check   # take nothing; exit 1 if stale

Starts the server (``create_app``, the demo model, no tokens) on 127.0.0.1
over a SQLite file in a temporary folder, drives a conversation through the
API (a weather question, its tool call approved, a second question waiting
for approval), and saves ``docs/images/web-context.png`` (the conversation)
and ``docs/images/web-audit.png`` (its audit page), 1280 px wide.

Screenshots are not byte-for-byte reproducible (ids and times change), so
staleness is judged on their inputs: the digest of the web view's templates,
stylesheet and script and of this file is written to
``docs/images/web-screenshots.sha256``; ``tests/web/test_screenshots_fresh.py``
fails when it no longer matches (see ``docs/web.md``).

Needs Playwright (the ``test`` extra) and Debian's Chromium at
``/usr/bin/chromium`` (``$TURNFSM_CHROMIUM`` names another); no browser is
downloaded.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
DIGEST_FILE = IMAGES / "web-screenshots.sha256"
WEB = ROOT / "turnfsm" / "server" / "web"
WIDTH = 1280
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def inputs() -> list[Path]:
    """The files the screenshots depend on: the web view's assets and this script."""
    return [*sorted(p for p in WEB.iterdir() if p.is_file()), Path(__file__).resolve()]


def inputs_digest() -> str:
    h = hashlib.sha256()
    for path in inputs():
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
        h.update(path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return h.hexdigest()


def recorded_digest() -> str | None:
    if not DIGEST_FILE.exists():
        return None
    for line in DIGEST_FILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("inputs sha256:"):
            return line.split(":", 1)[1].strip()
    return None


def chromium() -> str:
    return os.environ.get("TURNFSM_CHROMIUM", "/usr/bin/chromium")


@contextmanager
def demo_server(folder: Path) -> Iterator[str]:
    import uvicorn

    from turnfsm import Engine
    from turnfsm.adapters.llm.demo import DemoLLM
    from turnfsm.cli._demo import get_weather
    from turnfsm.server import ServerConfig, create_app

    db = folder / "screens.db"
    app = create_app(
        lambda: Engine(llm=DemoLLM(), tools=[get_weather], store=f"sqlite:///{db}"),
        ServerConfig(heartbeat=1.0),
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", ws="none"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise SystemExit("screenshots: the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()


def drive(url: str) -> str:
    """A conversation to show: returns its context id."""
    import httpx

    with httpx.Client(base_url=url, timeout=30) as api:
        cid = str(
            api.post(
                "/api/contexts",
                json={"title": "Weather desk", "system_prompt": "You answer weather questions."},
            ).json()["id"]
        )

        def send(text: str) -> dict[str, object]:
            r = api.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": text})
            r.raise_for_status()
            return dict(r.json())

        first = send("What's the weather in Lisbon?")
        calls = [c["id"] for c in first["pending_tool_calls"]]  # type: ignore[attr-defined]
        api.post(
            f"/api/contexts/{cid}/tools/approve?wait=true", json={"approve": calls}
        ).raise_for_status()
        send("Thanks! Who are you?")
        send("And what's the weather in Oslo?")  # left waiting for approval
    return cid


def take(url: str, cid: str) -> None:
    from playwright.sync_api import sync_playwright

    IMAGES.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            page.goto(f"{url}/contexts/{cid}")
            page.wait_for_selector("#approvals-h")
            page.screenshot(path=str(IMAGES / "web-context.png"), full_page=True)
            page.set_viewport_size({"width": WIDTH, "height": 1500})
            page.goto(f"{url}/contexts/{cid}/audit?turn=1")
            page.wait_for_selector("#run-path svg")
            page.screenshot(path=str(IMAGES / "web-audit.png"))
        finally:
            browser.close()


def main(argv: list[str]) -> int:
    unknown = [a for a in argv if a not in ("--check", "--force")]
    if unknown:
        print(__doc__, file=sys.stderr)
        return 2
    fresh = recorded_digest() == inputs_digest() and all(
        (IMAGES / n).exists() for n in ("web-context.png", "web-audit.png")
    )
    if "--check" in argv:
        if not fresh:
            print("screenshots: stale; run python scripts/screenshots.py", file=sys.stderr)
            return 1
        print("screenshots: up to date")
        return 0
    if fresh and "--force" not in argv:
        print("screenshots: up to date (--force takes them again)")
        return 0
    with tempfile.TemporaryDirectory() as tmp, demo_server(Path(tmp)) as url:
        take(url, drive(url))
    DIGEST_FILE.write_text(
        "# The digest of the files docs/images/web-*.png were taken from\n"
        "# (scripts/screenshots.py; checked by tests/web/test_screenshots_fresh.py).\n"
        + "".join(f"# {p.relative_to(ROOT).as_posix()}\n" for p in inputs())
        + f"inputs sha256:{inputs_digest()}\n",
        encoding="utf-8",
    )
    print(f"screenshots: wrote {IMAGES / 'web-context.png'} and {IMAGES / 'web-audit.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
