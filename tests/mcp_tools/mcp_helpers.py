"""Helpers for the MCP tests: the fault server of tests/mcp_tools, the reference
servers from npm, and the child processes of this process (the fixtures are in
conftest.py).

The reference servers (``@modelcontextprotocol/server-everything`` and
``@modelcontextprotocol/server-filesystem``) live in ``.cache/mcp-servers`` of
the repository (git-ignored). ``.ci/run`` installs them; when they are missing
the ``npm_servers`` fixture installs them with npm, and fails (never skips)
with what to do when it cannot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FAULT_SERVER = [sys.executable, str(HERE / "fault_server.py")]
RAW_SERVER = [sys.executable, str(HERE / "raw_server.py")]
CACHE = ROOT / ".cache" / "mcp-servers"
NPM_PACKAGES = (
    "@modelcontextprotocol/server-everything",
    "@modelcontextprotocol/server-filesystem",
)
BINARIES = {"everything": "mcp-server-everything", "filesystem": "mcp-server-filesystem"}


def children() -> set[int]:
    """The live (not zombie) processes whose parent is this process."""
    me = os.getpid()
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after ')'
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[1]) == me:
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def gone(pid: int, within: float = 10.0) -> bool:
    """Whether the process ``pid`` ends within ``within`` seconds."""
    import anyio

    with anyio.move_on_after(within):
        while alive(pid):  # noqa: ASYNC110 - nothing to wait on but /proc
            await anyio.sleep(0.05)
    return not alive(pid)


def npm_install() -> dict[str, Path]:
    """The reference servers' executables, installed into the cache when missing."""
    paths = {key: CACHE / "node_modules" / ".bin" / name for key, name in BINARIES.items()}
    if all(p.exists() for p in paths.values()):
        return paths
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(
            "the MCP reference servers are not installed and npm is not on PATH: install "
            f"Node.js 20+ and run npm install --prefix {CACHE} {' '.join(NPM_PACKAGES)}"
        )
    CACHE.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), *NPM_PACKAGES],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 or not all(p.exists() for p in paths.values()):
        pytest.fail(
            f"npm could not install the MCP reference servers into {CACHE} (is the npm "
            f"registry reachable?):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return paths
