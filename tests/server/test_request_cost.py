"""What a request on a context reads: its tenant once, not per request.

A context's tenant is set once, when it is made; the hub remembers the
tenants of the contexts it has seen, so the tenant table is not read again
for each request on one (with a SQLite store that read was a hand-off to one
reader thread, shared by every request; with PostgreSQL a round trip).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from .conftest import TOKENS, demo_engine, loopback_tls, serve_in_thread


def test_a_contexts_tenant_is_read_once_not_per_request(tmp_path: Path) -> None:
    from turnfsm.server import ServerConfig, create_app

    app = create_app(
        lambda: demo_engine(tmp_path / "s.db"), ServerConfig(tokens=dict(TOKENS), heartbeat=0.5)
    )
    hub = app.state.hub
    for url in serve_in_thread(app):
        alice = httpx.Client(
            verify=loopback_tls(),
            base_url=url,
            headers={"Authorization": "Bearer token-alice"},
            timeout=60,
        )
        bob = httpx.Client(
            verify=loopback_tls(),
            base_url=url,
            headers={"Authorization": "Bearer token-bob"},
            timeout=60,
        )
        with alice, bob:
            cid = alice.post("/api/contexts", json={"system_prompt": "x"}).json()["id"]
            log = hub.tenants.log
            real = log.tenant
            reads: list[str] = []

            async def counted(
                context_id: str, _real: Any = real, _reads: list[str] = reads
            ) -> str | None:
                _reads.append(context_id)
                return await _real(context_id)  # type: ignore[no-any-return]

            log.tenant = counted
            try:
                for _ in range(3):
                    r = alice.post(
                        f"/api/contexts/{cid}/messages?wait=true", json={"content": "hi"}
                    )
                    assert r.status_code == 200, r.text
                    assert alice.get(f"/api/contexts/{cid}/state").status_code == 200
                    # another tenant's request on it is still refused, as a 404
                    assert bob.get(f"/api/contexts/{cid}/state").status_code == 404
                assert reads == []  # made here: its tenant was known from the start
                hub.owners.clear()  # as a server that never saw it (or forgot it)
                for _ in range(3):
                    assert alice.get(f"/api/contexts/{cid}/state").status_code == 200
                    assert bob.get(f"/api/contexts/{cid}/state").status_code == 404
                assert reads == [cid]  # read once, then known
                assert alice.delete(f"/api/contexts/{cid}").status_code == 200
                assert alice.get(f"/api/contexts/{cid}/state").status_code == 404
            finally:
                del log.tenant
