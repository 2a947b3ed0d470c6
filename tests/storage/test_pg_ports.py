"""The throwaway PostgreSQL cluster (``pg.py``) must be given a port: a start
that lost it to another process is tried again on another one."""

from __future__ import annotations

import socket

import pytest

from .pg import Cluster, find_bin_dir


def test_a_cluster_whose_port_was_taken_starts_on_another() -> None:
    pytest.importorskip("psycopg")
    import psycopg

    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl)")
    cluster = Cluster(bin_dir)
    with socket.socket() as taken:  # another process took the port it was given
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cluster.port = taken.getsockname()[1]
        try:
            cluster.start()
            assert cluster.port != taken.getsockname()[1]
            first = (cluster.folder / "server-1.log").read_text()
            assert "address already in use" in first.lower(), first
            with psycopg.connect(cluster.url) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        finally:
            cluster.stop()
    assert not cluster.folder.exists()
