"""The OpenAPI document is built off the event loop: the first ``/openapi.json``
(which ``/docs`` and ``/redoc`` load) does not stop the server answering
others while it is made (docs/server.md, "API docs")."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from .conftest import demo_engine, loopback_tls, serve_in_thread


def test_other_requests_are_answered_while_the_first_document_is_built(tmp_path: Path) -> None:
    from turnfsm.server import create_app

    app = create_app(lambda: demo_engine(tmp_path / "docs.db"))
    building, answered = threading.Event(), threading.Event()
    waits: list[bool] = []
    build = app.openapi

    def slow_build() -> dict[str, Any]:
        # the first build waits until another request has been answered: on
        # the event loop it would wait for ever, as nothing else runs there
        if not building.is_set():
            building.set()
            waits.append(answered.wait(10))
        return build()

    app.openapi = slow_build  # type: ignore[method-assign]
    for url in serve_in_thread(app):
        with (
            httpx.Client(verify=loopback_tls(), base_url=url, timeout=30) as http,
            ThreadPoolExecutor(1) as pool,
        ):
            document = pool.submit(http.get, "/openapi.json")
            assert building.wait(10), "the document's build did not start"
            assert http.get("/favicon.ico").status_code == 200
            answered.set()
            first = document.result()
            assert waits == [True], "no other request was answered during the build"
            assert first.status_code == 200
            assert first.json() == json.loads(json.dumps(build()))
            again = http.get("/openapi.json")
            assert again.content == first.content
            assert waits == [True], "the document was built once"
