"""``turnfsm serve`` with its history settings, on a real server: the last 10 tool
calls in full by default, ``--tool-history N`` and ``--token-budget`` reach the
engine that answers. The command runs in this process (``serve_in_process``):
the subject is what it serves, not the process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from turnfsm.storage import open_store

from .test_serve import serve_here as serve


def _views(tmp: Path, cid: str) -> list[dict[str, Any]]:
    """What the model was sent for each answer, as the store keeps it."""

    async def load() -> list[dict[str, Any]]:
        store = open_store(f"sqlite:///{tmp / 'serve.db'}")
        try:
            ctx = await store.load(cid)
        finally:
            await store.aclose()
        return [n.message.metadata.extra.get("view", {}) for n in ctx.history()]

    return [v for v in anyio.run(load) if v]


def _weather_turns(client: httpx.Client, cities: list[str]) -> str:
    """One weather question per city, each call approved; the context's id."""
    cid = client.post("/api/contexts", json={}).json()["id"]
    for city in cities:
        r = client.post(
            f"/api/contexts/{cid}/messages?wait=true",
            json={"content": f"What's the weather in {city}?"},
        )
        assert r.status_code == 200, r.text
        calls = [c["id"] for c in r.json()["pending_tool_calls"]]
        assert calls, r.text
        r = client.post(f"/api/contexts/{cid}/tools/approve?wait=true", json={"approve": calls})
        assert r.status_code == 200 and r.json()["state"] == "Idle", r.text
    return str(cid)


@pytest.fixture(scope="module")
def default_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, httpx.Client]]:
    """``turnfsm serve`` with the default history settings, and its folder (each
    test makes contexts of its own)."""
    folder = tmp_path_factory.mktemp("serve-history")
    with serve(folder) as (client, _):
        yield folder, client


def test_serve_shows_ten_calls_by_default(default_serve: tuple[Path, httpx.Client]) -> None:
    folder, client = default_serve
    cities = [f"City {i}" for i in range(11)]
    cid = _weather_turns(client, cities)
    views = _views(folder, cid)
    # the view names only what it shortened: once there are 11 calls, the oldest
    assert views == [{"tool_history": {"calls": 11, "full": 10, "name_only": 1}}]


def test_serve_takes_the_history_options(tmp_path: Path) -> None:
    args = ("--tool-history", "1", "--token-budget", "100000")
    with serve(tmp_path, *args) as (client, _):
        cid = _weather_turns(client, ["London", "Paris"])
    views = _views(tmp_path, cid)
    assert views[-1]["tool_history"] == {"calls": 2, "full": 1, "name_only": 1}
    assert all("token_budget" in v for v in views)


def test_a_context_s_own_settings_override_the_server_s(
    default_serve: tuple[Path, httpx.Client],
) -> None:
    """``PUT /api/contexts/{id}`` with ``tool_history``: kept with the context
    (in the store: another process reads it), audited, and used on its next
    turns instead of the server's 10; a bad value is the 422 naming the field."""
    folder, client = default_serve
    cid = client.post("/api/contexts", json={}).json()["id"]
    for body, where in [
        ({"tool_history": -1}, "tool_history"),
        ({"token_budget": "none"}, "token_budget"),
        ({"compaction": 1}, "compaction"),
    ]:
        r = client.put(f"/api/contexts/{cid}", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["where"] == where, r.text
    r = client.put(f"/api/contexts/{cid}", json={"tool_history": 0, "compaction": "off"})
    assert r.status_code == 200, r.text
    assert (r.json()["tool_history"], r.json()["compaction"]) == (0, "off")
    assert r.json()["token_budget"] is None
    audit = client.get(f"/api/contexts/{cid}/audit").text.splitlines()
    assert '"detail":{"tool_history":0,"compaction":"off"}' in audit[-1].replace(" ", "")
    # a second server on the same store
    with serve(folder) as (client, _):
        got = client.get(f"/api/contexts/{cid}").json()
        assert (got["tool_history"], got["compaction"]) == (0, "off")
        for city in ["London", "Paris"]:
            r = client.post(
                f"/api/contexts/{cid}/messages?wait=true",
                json={"content": f"What's the weather in {city}?"},
            )
            calls = [c["id"] for c in r.json()["pending_tool_calls"]]
            r = client.post(f"/api/contexts/{cid}/tools/approve?wait=true", json={"approve": calls})
            assert r.status_code == 200 and r.json()["state"] == "Idle", r.text
        # back to the server's setting
        r = client.put(f"/api/contexts/{cid}", json={"tool_history": None})
        assert r.status_code == 200 and r.json()["tool_history"] is None
    views = _views(folder, cid)
    assert views[-1]["tool_history"] == {"calls": 2, "full": 0, "name_only": 2}
