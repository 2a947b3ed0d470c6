"""Ports for the servers the tests start.

A server of ours (``turnfsm serve``, a worker's metrics, the load server, a
fault server) starts on port 0 and says the port it got (``kit.listening_url``):
a port found free and let go of can be taken by another process (another
xdist worker's server) before the server binds it. A server that must be
given a number (PostgreSQL, Temporal's dev server, Phoenix) gets one from
:func:`free_port`, and whoever starts it checks that the start did not lose
it (:func:`lost_the_port` in its log, or :func:`listening_ports` of its
process without it) and tries again on another, up to :data:`PORT_TRIES`.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

__all__ = ["PORT_TRIES", "free_port", "listening_ports", "lost_the_port"]

PORT_TRIES = 5
"""Ports a server that needs a number is tried on before its start is given up."""


def free_port() -> int:
    """A port of 127.0.0.1 free a moment ago (see the module: only for a
    server that must be given a number)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lost_the_port(log: str) -> bool:
    """Whether a server's log says it could not bind its port: another
    process took it between :func:`free_port` and the server's start."""
    return "address already in use" in log.lower()


def _family(pid: int) -> set[int]:
    """``pid`` and its descendants (a server may listen in a child)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    family, grown = {pid}, True
    while grown:
        more = {child for child, parent in parents.items() if parent in family} - family
        family |= more
        grown = bool(more)
    return family


def listening_ports(pid: int, *, children: bool = False) -> set[int]:
    """The TCP ports process ``pid`` (and, with ``children``, its
    descendants: a server that may listen in a child) listens on (Linux:
    their sockets among the listening ones of ``/proc/PID/net/tcp``): whether
    what answers on a port is that server, not a process that took it."""
    inodes = set()
    for member in _family(pid) if children else {pid}:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{member}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
