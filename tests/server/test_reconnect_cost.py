"""A reconnect that replays a long context's history costs its length, not
its square: the context's outline (its state, version and last seq) is read
once for the replay's Resyncs (one per answer's deltas), however many turns it
holds, and the whole context not at all."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from .conftest import TOKENS, demo_engine, loopback_tls, serve_in_thread


def test_a_replay_reads_the_outline_once_whatever_its_length(tmp_path: Path) -> None:
    from turnfsm.server import ServerConfig, create_app

    app = create_app(
        lambda: demo_engine(tmp_path / "s.db"), ServerConfig(tokens=dict(TOKENS), heartbeat=0.5)
    )
    hub = app.state.hub
    for url in serve_in_thread(app):
        with httpx.Client(
            verify=loopback_tls(),
            base_url=url,
            headers={"Authorization": "Bearer token-alice"},
            timeout=60,
        ) as c:
            cid = c.post("/api/contexts", json={"system_prompt": "x"}).json()["id"]
            store = hub.engine.store
            reads: list[tuple[str, str]] = []

            def counting(name: str, store: Any = store, reads: Any = reads) -> Any:
                real = getattr(store, name)

                async def counted(context_id: str, *args: Any, **kwargs: Any) -> Any:
                    reads.append((name, context_id))
                    return await real(context_id, *args, **kwargs)

                return counted

            done = 0
            for turns in (3, 12):
                while done < turns:
                    r = c.post(f"/api/contexts/{cid}/messages?wait=true", json={"content": "hi"})
                    assert r.status_code == 200, r.text
                    done += 1
                time.sleep(1.0)  # the relay has written the turns' events to the log
                hub.idle.pop(cid, None)  # forgotten, as by a server of many contexts
                reads.clear()
                store.load, store.outline = counting("load"), counting("outline")
                try:
                    resyncs = 0
                    with c.stream(
                        "GET", f"/api/contexts/{cid}/events", headers={"Last-Event-ID": "0"}
                    ) as r:
                        for line in r.iter_lines():
                            if line == "event: Heartbeat":
                                break
                            resyncs += line == "event: Resync"
                finally:
                    del store.load, store.outline
                # each answer's deltas: a Resync (those the relay had not
                # written yet, one for all of them)
                assert resyncs >= 2, resyncs
                assert reads.count(("outline", cid)) == 1, (turns, reads)
                assert ("load", cid) not in reads, (turns, reads)
