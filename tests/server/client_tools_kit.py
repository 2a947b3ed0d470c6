"""A real server whose scripted model calls the client's tools, for the tests of
client tools over ``/v1/chat/completions`` (tests/server/test_openai_tools.py,
tests/server/test_client_frameworks.py).

The model answers by what the request offers and says:

- after a tool result: the output tool (``final_result``) when offered, with
  the result in it, else a streamed sentence quoting the result;
- ``both`` in the user's message: the server's ``add`` and the client's
  ``get_weather`` in one answer;
- ``twin``: ``get_weather`` with the fixed id ``call_twin``;
- ``get_weather`` offered: a call of it for Paris;
- ``final_result`` offered: that call (the client's output tool);
- otherwise a short text.

Every other call id is new (``call_<n>``). ``SEEN`` keeps each request's
tools and parameters.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from turnfsm import Engine, tool
from turnfsm.adapters.llm import LLMRequest
from turnfsm.testing import ScriptedLLM

from .conftest import loopback_tls, serve_in_thread

SEEN: list[LLMRequest] = []
_IDS = itertools.count(1)


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def _call(name: str, arguments: dict[str, Any], cid: str | None = None) -> dict[str, Any]:
    return {"id": cid or f"call_{next(_IDS)}", "name": name, "arguments": arguments}


async def answer(request: LLMRequest) -> dict[str, Any]:
    SEEN.append(request)
    names = [t["function"]["name"] for t in request.tools]
    last = request.messages[-1]
    if last["role"] == "tool":
        if last["content"].isdigit():  # the server's add: nothing more to ask
            return {"text": f"The sum is {last['content']}."}
        if "final_result" in names:
            return {
                "tool_calls": [_call("final_result", {"city": "Paris", "sky": last["content"]})]
            }
        return {"chunks": ["It is ", f"{last['content']} ", "in Paris."]}
    asked = _text(last)
    if "both" in asked:
        calls = [_call("add", {"a": 2, "b": 3}), _call("get_weather", {"city": "Paris"})]
        return {"tool_calls": calls}
    if "twin" in asked:
        return {"tool_calls": [_call("get_weather", {"city": "Paris"}, "call_twin")]}
    if "get_weather" in names:
        return {"text": "Let me look.", "tool_calls": [_call("get_weather", {"city": "Paris"})]}
    if "final_result" in names:
        return {"tool_calls": [_call("final_result", {"city": "Paris", "sky": "clear"})]}
    return {"text": "Hello."}


@dataclass
class Served:
    url: str
    db: Path
    token: str = "token-alice"
    seen: list[LLMRequest] = field(default_factory=lambda: SEEN)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(verify=loopback_tls(), base_url=self.url, headers=headers, timeout=30)

    def contexts(self) -> list[str]:
        with self.client() as c:
            r = c.get("/api/contexts")
            r.raise_for_status()
            return [x["id"] for x in r.json()["contexts"]]

    def messages(self, cid: str) -> list[dict[str, Any]]:
        with self.client() as c:
            r = c.get(f"/api/contexts/{cid}/messages", params={"limit": 100})
            r.raise_for_status()
            return [m["message"] for m in r.json()["messages"]]

    def state(self, cid: str) -> str:
        with self.client() as c:
            return str(c.get(f"/api/contexts/{cid}").json()["state"])


TENANTS = 64
"""The tenants of a shared server: a test takes one of its own, so what it
lists and reads is only what it made."""


def serve_shared(
    tmp: Path,
    engine: Callable[[Path], Engine] | None = None,
    seen: list[LLMRequest] = SEEN,
) -> Iterator[Iterator[Served]]:
    """A server for a test module (``engine`` makes its engine on a database
    file; by default the model of this module): each ``next()`` gives a test a
    tenant of its own (a token no other test uses), with ``seen`` emptied for it."""
    from turnfsm.server import ServerConfig, create_app

    db = tmp / "tools.db"
    make = engine or _engine_on
    tokens = {f"token-tenant-{i}": f"tenant-{i}" for i in range(TENANTS)}
    app = create_app(lambda: make(db), ServerConfig(tokens=tokens, heartbeat=0.5))
    for url in serve_in_thread(app):
        yield _tenants(url, db, list(tokens), seen)


def _tenants(url: str, db: Path, tokens: list[str], seen: list[LLMRequest]) -> Iterator[Served]:
    for token in tokens:
        seen.clear()
        yield Served(url, db, token, seen)
    raise AssertionError(f"more tests than the {TENANTS} tenants of the shared server")


def _engine_on(db: Path) -> Engine:
    return Engine(llm=ScriptedLLM(answer), tools=[add], store=f"sqlite:///{db}")


def _key(m: dict[str, Any]) -> str:
    return json.dumps(
        {k: m.get(k) for k in ("role", "content", "tool_calls", "tool_result")}, sort_keys=True
    )


def assert_stored_once(messages: list[dict[str, Any]], *, waiting: int = 0) -> None:
    """No message is stored twice, and every tool call has one result, but for
    ``waiting`` calls at the end that still wait for the client."""
    twice = [k for k, n in Counter(_key(m) for m in messages).items() if n > 1]
    assert twice == [], twice
    calls = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    results = [m["tool_result"]["request_id"] for m in messages if m.get("tool_result")]
    assert len(results) == len(set(results))
    assert set(results) <= set(calls)
    assert len(calls) - len(results) == waiting
    if waiting:
        assert calls[-waiting:] == [c for c in calls if c not in results]
