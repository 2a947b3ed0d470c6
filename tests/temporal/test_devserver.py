"""The dev server harness itself: it starts, answers, survives SIGKILL on its file."""

from __future__ import annotations

import uuid

import anyio
import pytest

# tests/ is on sys.path (no tests/__init__.py)
from temporal.devserver import DevServer

temporalio = pytest.importorskip("temporalio", reason="the temporal extra is not installed")


async def _start(server: DevServer, workflow_id: str) -> None:
    from temporalio.client import Client

    client = await Client.connect(server.address, namespace=server.namespace)
    # no worker polls this queue: the workflow is accepted and stays running
    await client.start_workflow("NoWorkerRunsThis", id=workflow_id, task_queue="nobody-polls")


async def _status(server: DevServer, workflow_id: str) -> str:
    from temporalio.client import Client
    from temporalio.service import RPCError

    client = await Client.connect(server.address, namespace=server.namespace)
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as error:
        return f"RPCError: {error.status.name}"
    assert description.status is not None
    return description.status.name


def test_a_killed_server_keeps_its_workflows_on_restart(temporal_server: DevServer) -> None:
    workflow_id = f"kept-{uuid.uuid4()}"
    anyio.run(_start, temporal_server, workflow_id)
    assert anyio.run(_status, temporal_server, workflow_id) == "RUNNING"
    assert anyio.run(_status, temporal_server, f"missing-{uuid.uuid4()}") == "RPCError: NOT_FOUND"
    first_pid = temporal_server.pid
    temporal_server.kill()
    assert temporal_server.pid is None
    temporal_server.start()
    assert temporal_server.pid not in (None, first_pid)
    assert anyio.run(_status, temporal_server, workflow_id) == "RUNNING"
