"""Sticky context files: files of the workspace shown to the model on every request."""

from __future__ import annotations

import glob
import hashlib
import os
import stat
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import anyio.to_thread

from ..errors import InvalidInput
from ..model import ChatContext, LLMRequest, Role

__all__ = ["StickyFiles"]

HISTORY_SCAN = 64
"""How far back (in messages) the versions shown last time are looked for."""
READY_KEPT = 256
"""Contexts whose files :meth:`StickyFiles.prefetch` read and no request used
yet (a turn that failed before its request was built): the oldest go."""
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_Found = tuple[str | None, dict[str, Any], list[str] | None]
"""What :meth:`StickyFiles.prefetch` read: the workspace, the report, the blocks."""
_BINARY = getattr(os, "O_BINARY", 0)


def _attr(value: str) -> str:
    return (
        value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")
    )


class StickyFiles:
    """Files of the context's workspace (``config.workspace_path``), read again
    for every request and shown as one ``system`` message after the system
    messages at the head of the view::

        <context-files>
        <file path="notes/plan.md" sha256="1f2e...">
        ...the file's text...
        </file>
        <file path="todo.md" status="missing"/>
        </context-files>

    ``paths`` are paths or glob patterns (``**`` included), relative to the
    workspace; each pattern's matches are taken in sorted order, and a file is
    shown once. A pattern that is absolute or has a ``..`` part is refused
    (:class:`InvalidInput`); a match that resolves outside the workspace (a
    symbolic link) is not read and is reported. At most ``max_bytes`` of file
    content are shown in all; a file cut short says so (``truncated="true"``).

    Only regular files are read (a FIFO, a device or a socket that a pattern
    names is reported as ``not a regular file``, never opened for a blocking
    read), and never more of one than is shown: a 400 MB file under
    ``max_bytes=1000`` costs a 1000-byte read. Its size comes from the file
    system, and the SHA-256 is that of what is shown (the whole file when it
    is not cut). The engine reads the files in a worker thread before it
    builds each request (:meth:`prefetch`), never on the event loop's thread;
    :meth:`enhance` called on its own reads them itself.

    Nothing here fails the turn: a pattern that matches nothing, a file that
    cannot be read or is not UTF-8 text, and a context with no workspace are
    reported in ``request.metadata["sticky_files"]``: for each file shown its
    path, the SHA-256 of its content and its size, the paths whose content
    changed since the previous answer's request (by hash), and the problems.
    The engine stores that metadata with the answer, so an audit knows which
    version the model saw.
    """

    def __init__(self, paths: str | Iterable[str], *, max_bytes: int = 32_768) -> None:
        patterns = [paths] if isinstance(paths, str) else list(paths)
        if not patterns:
            raise InvalidInput("paths", "give at least one path or pattern")
        for i, p in enumerate(patterns):
            where = f"paths[{i}]"
            if not isinstance(p, str) or not p.strip() or "\x00" in p:
                raise InvalidInput(where, f"must be a non-empty path, not {p!r}")
            if os.path.isabs(p) or p.startswith("~"):
                raise InvalidInput(where, f"must be relative to the workspace, not {p!r}")
            if ".." in p.replace("\\", "/").split("/"):
                raise InvalidInput(where, f"may not leave the workspace: {p!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise InvalidInput("max_bytes", f"must be an integer >= 1, not {max_bytes!r}")
        self.patterns = patterns
        self.max_bytes = max_bytes
        self._ready: OrderedDict[str, _Found] = OrderedDict()

    async def prefetch(self, context: ChatContext) -> None:
        """Read the context's files in a worker thread, for the next
        :meth:`enhance` of the same context (the engine awaits this before it
        builds each request)."""
        workspace = context.config.workspace_path
        found = await anyio.to_thread.run_sync(self._gather, workspace)
        self._ready[context.id] = (workspace, *found)
        self._ready.move_to_end(context.id)
        while len(self._ready) > READY_KEPT:
            self._ready.popitem(last=False)

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        workspace = context.config.workspace_path
        ready = self._ready.pop(context.id, None)
        if ready is not None and ready[0] == workspace:
            report, blocks = ready[1], ready[2]
        else:
            report, blocks = self._gather(workspace)
        request.metadata["sticky_files"] = report
        if blocks is None:
            return request
        previous = _previous_versions(context)
        report["changed"] = [
            f["path"]
            for f in report["files"]
            if previous.get(f["path"], f["sha256"]) != f["sha256"]
        ]
        content = "<context-files>\n" + "\n".join(blocks) + "\n</context-files>"
        messages = request.messages
        head = 0
        while head < len(messages) and messages[head].get("role") == "system":
            head += 1
        request.messages = [
            *messages[:head],
            {"role": "system", "content": content},
            *messages[head:],
        ]
        return request

    def _gather(self, workspace: str | None) -> tuple[dict[str, Any], list[str] | None]:
        """The report and the ``<file>`` blocks of the workspace's files (no
        blocks when there is no workspace to read)."""
        report: dict[str, Any] = {"files": [], "changed": [], "problems": []}
        if not workspace:
            report["problems"].append({"path": "", "problem": "the context has no workspace"})
            return report, None
        root = os.path.realpath(workspace)
        if not os.path.isdir(root):
            report["problems"].append({"path": "", "problem": "the workspace is no directory"})
            return report, None
        blocks: list[str] = []
        left = self.max_bytes
        seen: set[str] = set()
        for pattern in self.patterns:
            matches = sorted(glob.glob(pattern, root_dir=root, recursive=True))
            if not matches:
                blocks.append(f'<file path="{_attr(pattern)}" status="missing"/>')
                report["problems"].append({"path": pattern, "problem": "missing"})
                continue
            for rel in matches:
                rel = rel.replace(os.sep, "/")
                if rel in seen:
                    continue
                seen.add(rel)
                full = os.path.realpath(os.path.join(root, rel))
                if os.path.commonpath([root, full]) != root:
                    report["problems"].append({"path": rel, "problem": "outside the workspace"})
                    blocks.append(f'<file path="{_attr(rel)}" status="outside the workspace"/>')
                    continue
                if os.path.isdir(full):
                    continue
                try:
                    text, size, digest = _read(full, left)
                except UnicodeDecodeError:
                    report["problems"].append({"path": rel, "problem": "not UTF-8 text"})
                    blocks.append(f'<file path="{_attr(rel)}" status="not UTF-8 text"/>')
                    continue
                except _NotRegular:
                    report["problems"].append({"path": rel, "problem": "not a regular file"})
                    blocks.append(f'<file path="{_attr(rel)}" status="not a regular file"/>')
                    continue
                except OSError as exc:
                    problem = exc.strerror or type(exc).__name__
                    report["problems"].append({"path": rel, "problem": problem})
                    blocks.append(f'<file path="{_attr(rel)}" status="unreadable"/>')
                    continue
                shown = len(text.encode("utf-8"))
                left -= shown
                cut = shown < size
                entry = {"path": rel, "sha256": digest, "bytes": size}
                if cut:
                    entry["shown_bytes"] = shown
                report["files"].append(entry)
                attrs = f'path="{_attr(rel)}" sha256="{digest}"'
                if cut:
                    attrs += ' truncated="true"'
                blocks.append(f"<file {attrs}>\n{text}\n</file>")
        return report, blocks


class _NotRegular(Exception):
    """A FIFO, a device, a socket: never read."""


def _read(path: str, limit: int) -> tuple[str, int, str]:
    """The text of the file's first ``limit`` bytes (a character cut at the
    end left out), its size and the SHA-256 of the text shown. Only a regular
    file is read (:class:`_NotRegular` otherwise), and no more than ``limit``
    bytes of it. UnicodeDecodeError when what is read is not UTF-8 text."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # a socket cannot even be opened
        raise _NotRegular
    # O_NONBLOCK: should it have become a FIFO since, opening it does not
    # wait for a writer; the check below refuses it then
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | _BINARY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _NotRegular
        chunks: list[bytes] = []
        want = min(limit, info.st_size)
        while want > 0:
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            want -= len(chunk)
    finally:
        os.close(fd)
    shown = b"".join(chunks)
    size = max(info.st_size, len(shown))
    try:
        text = shown.decode("utf-8")
    except UnicodeDecodeError:
        if len(shown) == size:
            raise
        for cut in range(1, 4):  # a character cut in two by the limit
            try:
                text = shown[:-cut].decode("utf-8")
                break
            except UnicodeDecodeError:
                continue
        else:
            raise
    data = shown if len(shown) == size else text.encode("utf-8")
    return text, size, hashlib.sha256(data).hexdigest()


def _previous_versions(context: ChatContext) -> dict[str, str]:
    """The files (path -> sha256) shown with the newest answer that had them."""
    pool = context.message_pool
    for mid in reversed(context.active_branch.message_ids[-HISTORY_SCAN:]):
        msg = pool[mid].message
        if msg.role is not Role.ASSISTANT:
            continue
        view = msg.metadata.extra.get("view")
        sticky = view.get("sticky_files") if isinstance(view, dict) else None
        if isinstance(sticky, dict):
            files = sticky.get("files")
            if isinstance(files, list):
                return {
                    f["path"]: f["sha256"]
                    for f in files
                    if isinstance(f, dict) and isinstance(f.get("path"), str)
                }
    return {}
