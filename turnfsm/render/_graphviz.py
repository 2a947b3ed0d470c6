"""SVG and PNG through Graphviz's ``dot`` program, run locally (never a network service).

``dot`` comes with the Graphviz package (Debian/Ubuntu: ``apt-get install
graphviz``; macOS: ``brew install graphviz``). ``$TURNFSM_DOT`` names another
binary. Without it, :class:`RenderError` says how to install it; the text
formats (Mermaid, DOT) never need it.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib

from ..errors import RenderError

__all__ = ["dot_version", "find_dot", "png_text", "render_png", "render_svg"]

_TIMEOUT = 60.0
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_DPI = 110
"""Resolution of the PNG (Graphviz's default is 72, small on today's screens)."""


def find_dot() -> str:
    """The ``dot`` binary to run: ``$TURNFSM_DOT``, else ``dot`` on the PATH."""
    wanted = os.environ.get("TURNFSM_DOT") or "dot"
    found = shutil.which(wanted)
    if found is None:
        raise RenderError(
            f"Graphviz's {wanted!r} program was not found, so SVG and PNG cannot be made. "
            "Install Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install "
            "graphviz; or set $TURNFSM_DOT to the dot binary), or ask for --format mermaid "
            "or --format dot, which need nothing."
        )
    return found


def _run(dot_text: str, *args: str) -> bytes:
    binary = find_dot()
    try:
        done = subprocess.run(
            [binary, *args],
            input=dot_text.encode("utf-8"),
            capture_output=True,
            timeout=_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise RenderError(f"running {binary} failed: {exc}") from exc
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip()
        raise RenderError(f"{binary} {' '.join(args)} failed (exit {done.returncode}): {err}")
    return done.stdout


def dot_version() -> str:
    """What ``dot -V`` says, e.g. ``dot - graphviz version 2.43.0 (0)``."""
    binary = find_dot()
    try:
        done = subprocess.run([binary, "-V"], capture_output=True, timeout=_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RenderError(f"running {binary} -V failed: {exc}") from exc
    return (done.stderr or done.stdout).decode("utf-8", "replace").strip()


def render_svg(dot_text: str) -> bytes:
    """The SVG of a DOT text."""
    return _run(dot_text, "-Tsvg")


def render_png(dot_text: str, *, text: dict[str, str] | None = None) -> bytes:
    """The PNG of a DOT text, with optional ``tEXt`` chunks (key -> value, Latin-1)."""
    png = _run(dot_text, "-Tpng", f"-Gdpi={PNG_DPI}")
    if not png.startswith(_PNG_SIGNATURE):
        raise RenderError("dot -Tpng did not produce a PNG")
    return _add_text(png, text) if text else png


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _add_text(png: bytes, text: dict[str, str]) -> bytes:
    """Insert ``tEXt`` chunks right after IHDR (always the first chunk)."""
    (length,) = struct.unpack(">I", png[8:12])
    end = 8 + 12 + length
    extra = b"".join(
        _chunk(b"tEXt", key.encode("latin-1") + b"\x00" + value.encode("latin-1"))
        for key, value in sorted(text.items())
    )
    return png[:end] + extra + png[end:]


def png_text(png: bytes) -> dict[str, str]:
    """The ``tEXt`` chunks of a PNG (key -> value)."""
    if not png.startswith(_PNG_SIGNATURE):
        raise ValueError("not a PNG")
    out: dict[str, str] = {}
    pos = 8
    while pos + 8 <= len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        data = png[pos + 8 : pos + 8 + length]
        if kind == b"tEXt":
            key, _, value = data.partition(b"\x00")
            out[key.decode("latin-1")] = value.decode("latin-1")
        if kind == b"IEND":
            break
        pos += 12 + length
    return out
