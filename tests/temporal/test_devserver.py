"""The dev server harness itself: it starts, answers, survives SIGKILL on its file."""

from __future__ import annotations

import socket
import sys
import uuid
from pathlib import Path

import anyio
import pytest

# tests/ is on sys.path (no tests/__init__.py)
from ports import listening_ports

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


def test_a_killed_server_keeps_its_workflows_on_restart(own_temporal_server: DevServer) -> None:
    workflow_id = f"kept-{uuid.uuid4()}"
    anyio.run(_start, own_temporal_server, workflow_id)
    assert anyio.run(_status, own_temporal_server, workflow_id) == "RUNNING"
    assert (
        anyio.run(_status, own_temporal_server, f"missing-{uuid.uuid4()}") == "RPCError: NOT_FOUND"
    )
    first_pid = own_temporal_server.pid
    own_temporal_server.kill()
    assert own_temporal_server.pid is None
    own_temporal_server.start()
    assert own_temporal_server.pid not in (None, first_pid)
    assert anyio.run(_status, own_temporal_server, workflow_id) == "RUNNING"


FAKE_CLI = """\
import socket, sys, time
from pathlib import Path
args = sys.argv[1:]
if args[:2] == ["server", "start-dev"]:
    starts = Path("starts")
    starts.write_text(starts.read_text() + "x" if starts.exists() else "x")
    if len(starts.read_text()) == 1:
        print("panic: listen tcp: address already in use")
        sys.exit(2)
    s = socket.socket()
    s.bind(("127.0.0.1", int(args[args.index("--port") + 1])))
    s.listen()
    time.sleep(60)
sys.exit(0)  # operator namespace describe: the namespace is there
"""


def test_a_first_start_that_exits_early_is_tried_again_on_new_ports(tmp_path: Path) -> None:
    """A free port is free only until another process binds it: a first start
    that dies before it answers gets new ports, and says why it died if it
    keeps dying."""
    cli = tmp_path / "temporal"
    cli.write_text(f"#!{sys.executable}\n{FAKE_CLI}")
    cli.chmod(0o755)
    server = DevServer(cli)
    first_port = server.port
    try:
        server.start(timeout=20)
        assert (server.folder / "starts").read_text() == "xx"
        assert server.port != first_port
        assert server.answered
    finally:
        server.stop()
    again = DevServer(cli)
    try:
        with pytest.raises(RuntimeError, match="exited with 2: panic: listen tcp"):
            again.start(timeout=20, attempts=1)
    finally:
        again.stop()


SQUATTED_CLI = """\
import socket, sys, time
from pathlib import Path
args = sys.argv[1:]
if args[:2] == ["server", "start-dev"]:
    starts = Path("starts")
    starts.write_text(starts.read_text() + "x" if starts.exists() else "x")
    if len(starts.read_text()) == 1:  # the frontend's port was taken: said, not exited
        print("listen tcp: bind: address already in use", flush=True)
        time.sleep(60)
    s = socket.socket()
    s.bind(("127.0.0.1", int(args[args.index("--port") + 1])))
    s.listen()
    time.sleep(60)
sys.exit(0)  # operator namespace describe: whoever listens answers
"""


def test_a_start_whose_port_another_process_took_is_tried_again(tmp_path: Path) -> None:
    """Another process listens on the frontend's port (it took it after the
    port was found free) and answers: the start does not take it for its own
    server, which says its address is in use, but starts again on new ports."""
    cli = tmp_path / "temporal"
    cli.write_text(f"#!{sys.executable}\n{SQUATTED_CLI}")
    cli.chmod(0o755)
    server = DevServer(cli)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        server.port = squatter.getsockname()[1]
        try:
            server.start(timeout=20)
            assert (server.folder / "starts").read_text() == "xx"
            assert server.port != squatter.getsockname()[1]
            assert server.process is not None
            assert server.port in listening_ports(server.process.pid)
        finally:
            server.stop()
    assert not server.folder.exists()
