"""Lines of standard input that Ctrl-C interrupts at once.

A prompt's line used to be read with ``readline`` in a worker thread. Ctrl-C
cancelled the wait, but the thread stayed blocked in ``read()`` on the
terminal, and the interpreter's exit waits for its threads: the command said
"interrupted" and then waited for Enter. Here a terminal, a pipe or a socket
is read without a thread: the event loop waits until the descriptor is
readable (a wait any cancellation ends) and only then reads what is there.
Anything else (a regular file, ``/dev/null``, a stream with no descriptor) is
read with ``readline`` in a thread, where it never blocks for long.
"""

from __future__ import annotations

import codecs
import os
import stat
from typing import TextIO

import anyio
import anyio.to_thread

__all__ = ["read_line_from"]

_CHUNK = 65536


class _Lines:
    """The lines of one descriptor, read as they become available."""

    def __init__(self, fd: int, encoding: str, errors: str) -> None:
        self.fd = fd
        self.decoder = codecs.getincrementaldecoder(encoding)(errors)
        self.buffer = bytearray()
        self.ended = False

    async def readline(self) -> str:
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[: end + 1])
                del self.buffer[: end + 1]
                return _text(self.decoder.decode(line))
            if self.ended:
                rest = bytes(self.buffer)
                self.buffer.clear()
                return self.decoder.decode(rest, final=True)
            await anyio.wait_readable(self.fd)  # where Ctrl-C (a cancellation) lands
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:  # another reader was first: wait again
                continue
            if not chunk:
                self.ended = True
            self.buffer += chunk


def _text(line: str) -> str:
    """A line as a text stream gives it: ``\\r\\n`` read as ``\\n``."""
    return line[:-2] + "\n" if line.endswith("\r\n") else line


_readers: dict[int, _Lines] = {}
"""One reader per descriptor, so that what one call read ahead the next gets."""


def _pollable(stream: TextIO) -> int | None:
    """The descriptor of ``stream`` when it is one the event loop can wait on
    (a terminal, a pipe, a socket); None otherwise."""
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):
        return None
    if os.isatty(fd) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return fd
    return None


async def read_line_from(stream: TextIO) -> str:
    """One line of ``stream`` with its ``\\n`` ("" at its end); a cancellation
    (Ctrl-C) ends the wait at once and leaves nothing running."""
    fd = _pollable(stream)
    if fd is None:
        return await anyio.to_thread.run_sync(stream.readline, abandon_on_cancel=True)
    reader = _readers.get(fd)
    if reader is None:
        encoding = getattr(stream, "encoding", None) or "utf-8"
        errors = getattr(stream, "errors", None) or "strict"
        reader = _readers[fd] = _Lines(fd, encoding, errors)
    return await reader.readline()
