"""``turnfsm serve --frontend-operator-as``: the request an OpenAI-compatible
model gets for a frontend operator's current message, read off the wire of a
loopback server, in both modes; contexts made another way keep ``user``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from kit import loopback_tls, serve_in_process, skip_without

skip_without("fastapi")

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS / "openai") not in sys.path:  # its loopback server and bodies, by name
    sys.path.append(str(TESTS / "openai"))

from openai_loopback import LoopbackServer, Reply  # noqa: E402
from openai_samples import text_stream  # noqa: E402

from .test_cli_providers import run  # noqa: E402

PROVIDER_VARIABLES = ("TURNFSM_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_")
BODY = json.loads((TESTS / "fixtures" / "import" / "request_frontend_operator.json").read_text())
"""The formats' example of a frontend operator's current message."""
MARKED = (
    "[CURRENT MESSAGE FROM FRONTEND_OPERATOR]: "
    "The user switched to the task list view; summarise open tasks."
)


@contextmanager
def serving(tmp: Path, model: LoopbackServer, *flags: str) -> Iterator[httpx.Client]:
    """``turnfsm serve`` on the loopback model, in this process (its stop
    closes the model's client on the server's loop, and the command exits 0),
    with no variable of ours or of a provider in the environment."""
    mine = [k for k in os.environ if k.startswith(PROVIDER_VARIABLES)]
    kept = {k: os.environ.pop(k) for k in mine}
    try:
        with (
            serve_in_process(
                "--port", "0", "--base-url", model.url, "--model", "gpt-op",
                "--store", f"sqlite:///{tmp / 'serve.db'}", *flags,
            ) as served,
            httpx.Client(verify=loopback_tls(), base_url=served.url, timeout=60) as client,
        ):  # fmt: skip
            yield client
    finally:
        os.environ.update(kept)


def chat(client: httpx.Client, context_id: str | None = None) -> dict[str, Any]:
    params = {"wait": "true", **({"context_id": context_id} if context_id else {})}
    r = client.post("/api/chat", params=params, json=BODY)
    assert r.status_code == 200, r.text
    turn: dict[str, Any] = r.json()
    return turn


def stored_roles(client: httpx.Client, context_id: str) -> list[str]:
    page = client.get(f"/api/contexts/{context_id}/messages").json()
    return [m["message"]["role"] for m in page["messages"]]


def test_a_context_made_by_the_request_formats_sends_the_operator_as_assistant(
    tmp_path: Path,
) -> None:
    with LoopbackServer() as model:
        for text in ("Two tasks are open.", "Still two."):
            model.script(Reply(events=text_stream([text])))
        with serving(tmp_path, model) as client:
            made = chat(client)["context_id"]
            other = client.post("/api/contexts", json={}).json()["id"]  # the REST API's
            chat(client, other)
            roles = stored_roles(client, made)
        first, second = (r.body["messages"] for r in model.requests)
    # as the formats send it: an assistant message with the marker, and the last one
    assert first[-1] == {"role": "assistant", "content": MARKED}
    assert [m["role"] for m in first[-3:]] == ["user", "assistant", "assistant"]
    # a context made by POST /api/contexts keeps the named user message
    assert second[-1] == {"role": "user", "name": "frontend_operator", "content": MARKED}
    # stored history keeps who said it, whatever the model was shown
    assert roles[2] == "frontend_operator"


def test_frontend_operator_as_user_sends_a_named_user_message(tmp_path: Path) -> None:
    with LoopbackServer() as model:
        model.script(Reply(events=text_stream(["Two tasks are open."])))
        with serving(tmp_path, model, "--frontend-operator-as", "user") as client:
            turn = chat(client)
        (request,) = model.requests
    assert turn["text"] == "Two tasks are open."
    assert request.body["messages"][-1] == {
        "role": "user",
        "name": "frontend_operator",
        "content": MARKED,
    }


def test_an_unknown_mode_is_refused_by_the_parser(tmp_path: Path) -> None:
    ran = run(tmp_path, "serve", "--frontend-operator-as", "system", "--store", "memory://")
    assert ran.code == 2
    assert "--frontend-operator-as: invalid choice: 'system'" in ran.err
