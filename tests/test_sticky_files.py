"""StickyFiles: workspace files shown on every request, versions recorded."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kit import make_engine

from turnfsm.enhancers import StickyFiles
from turnfsm.errors import InvalidInput
from turnfsm.model import Branch, ChatConfig, ChatContext, LLMRequest

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ctx(workspace: Path | None) -> ChatContext:
    c = ChatContext(
        id="ctx",
        config=ChatConfig(workspace_path=str(workspace) if workspace else None),
        created_at=T0,
        updated_at=T0,
    )
    c.branches["main"] = Branch(name="main")
    return c


def run(sticky: StickyFiles, workspace: Path | None) -> LLMRequest:
    req = LLMRequest(
        context_id="ctx",
        model="m",
        messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
    )
    return sticky.enhance(req, ctx(workspace))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_patterns_are_checked() -> None:
    for bad, where in [
        ([], "paths"),
        (["/etc/passwd"], "paths[0]"),
        (["a", "../secret"], "paths[1]"),
        (["notes/../../x"], "paths[0]"),
        ([""], "paths[0]"),
        (["~/x"], "paths[0]"),
    ]:
        with pytest.raises(InvalidInput) as info:
            StickyFiles(bad)
        assert info.value.where == where
    with pytest.raises(InvalidInput):
        StickyFiles("a", max_bytes=0)


def test_files_are_injected_after_the_system_messages(tmp_path: Path) -> None:
    plan = b"step 1\nstep 2\n"
    (tmp_path / "plan.md").write_bytes(plan)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "b.txt").write_text("bee")
    (tmp_path / "notes" / "a.txt").write_text("ay")
    req = run(StickyFiles(["plan.md", "notes/*.txt", "plan.md"]), tmp_path)
    assert [m["role"] for m in req.messages] == ["system", "system", "user"]
    block = req.messages[1]["content"]
    assert block == (
        "<context-files>\n"
        f'<file path="plan.md" sha256="{sha(plan)}">\nstep 1\nstep 2\n\n</file>\n'
        f'<file path="notes/a.txt" sha256="{sha(b"ay")}">\nay\n</file>\n'
        f'<file path="notes/b.txt" sha256="{sha(b"bee")}">\nbee\n</file>\n'
        "</context-files>"
    )
    meta = req.metadata["sticky_files"]
    assert [f["path"] for f in meta["files"]] == ["plan.md", "notes/a.txt", "notes/b.txt"]
    assert meta["files"][1] == {"path": "notes/a.txt", "sha256": sha(b"ay"), "bytes": 2}
    assert meta["problems"] == []


def test_problems_are_reported_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "bin.dat").write_bytes(b"\xff\xfe\x00")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("secret")
    os.symlink(outside, tmp_path / "link.txt")
    (tmp_path / "locked.txt").write_text("x")
    os.chmod(tmp_path / "locked.txt", 0)
    try:
        req = run(StickyFiles(["missing.md", "bin.dat", "link.txt", "locked.txt"]), tmp_path)
    finally:
        os.chmod(tmp_path / "locked.txt", 0o644)
    problems = {p["path"]: p["problem"] for p in req.metadata["sticky_files"]["problems"]}
    assert problems["missing.md"] == "missing"
    assert problems["bin.dat"] == "not UTF-8 text"
    assert problems["link.txt"] == "outside the workspace"
    block = req.messages[1]["content"]
    assert "secret" not in block
    assert '<file path="missing.md" status="missing"/>' in block
    if os.geteuid() != 0:  # root reads any file
        assert problems["locked.txt"] == "Permission denied"


def test_no_workspace_is_reported(tmp_path: Path) -> None:
    req = run(StickyFiles("a.md"), None)
    assert req.metadata["sticky_files"]["problems"] == [
        {"path": "", "problem": "the context has no workspace"}
    ]
    assert len(req.messages) == 2


def test_max_bytes_cuts_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("é" * 10)  # 20 bytes
    (tmp_path / "b.txt").write_text("b" * 10)
    req = run(StickyFiles(["a.txt", "b.txt"], max_bytes=7), tmp_path)
    files = req.metadata["sticky_files"]["files"]
    assert files[0] == {  # the hash of what was shown: the rest is never read
        "path": "a.txt",
        "sha256": sha("é".encode() * 3),
        "bytes": 20,
        "shown_bytes": 6,
    }
    assert files[1]["shown_bytes"] == 1
    block = req.messages[1]["content"]
    assert 'truncated="true">\nééé\n</file>' in block
    assert 'truncated="true">\nb\n</file>' in block


@pytest.mark.anyio
async def test_reread_every_turn_and_changes_detected(tmp_path: Path) -> None:
    plan = tmp_path / "plan.md"
    plan.write_text("version 1")
    engine, llm, _ = make_engine(
        [{"text": "a"}, {"text": "b"}, {"text": "c"}], enhancers=[StickyFiles("plan.md")]
    )
    async with engine:
        cid = await engine.create_context(workspace_path=str(tmp_path))
        await engine.send(cid, "one")
        plan.write_text("version 2")
        await engine.send(cid, "two")
        await engine.send(cid, "three")
        ctx = await engine.get_context(cid)
    blocks = [r.messages[0]["content"] for r in llm.requests]
    assert "version 1" in blocks[0] and "version 2" in blocks[1]
    changed = [r.metadata["sticky_files"]["changed"] for r in llm.requests]
    assert changed == [[], ["plan.md"], []]
    # the version each answer was made from is stored with it
    answers = [n.message for n in ctx.history() if n.message.role.value == "assistant"]
    shown = [a.metadata.extra["view"]["sticky_files"]["files"][0]["sha256"] for a in answers]
    assert shown == [sha(b"version 1"), sha(b"version 2"), sha(b"version 2")]


def _special_files(root: Path) -> list[str]:
    """A FIFO and a socket in the workspace (what a regular-files check must skip)."""
    made = []
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "pipe.md")
        made.append("pipe.md")
    if hasattr(socket, "AF_UNIX"):
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(str(root / "sock.md"))
            made.append("sock.md")
        except OSError:  # a path too long for a socket
            pass
        finally:
            sock.close()
    return made


@pytest.mark.parametrize("by", ["name", "glob"])
def test_only_regular_files_are_read(tmp_path: Path, by: str) -> None:
    special = _special_files(tmp_path)
    if not special:
        pytest.skip("no FIFO or socket on this system")
    (tmp_path / "plan.md").write_text("the plan")
    patterns = [*special, "plan.md"] if by == "name" else ["*.md"]
    got: list[LLMRequest] = []
    worker = threading.Thread(target=lambda: got.append(run(StickyFiles(patterns), tmp_path)))
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "StickyFiles blocked on a FIFO"
    report = got[0].metadata["sticky_files"]
    problems = {p["path"]: p["problem"] for p in report["problems"]}
    assert problems == {name: "not a regular file" for name in special}
    assert [f["path"] for f in report["files"]] == ["plan.md"]
    block = got[0].messages[1]["content"]
    for name in special:
        assert f'<file path="{name}" status="not a regular file"/>' in block


def test_a_huge_file_costs_max_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.log"
    with open(big, "wb") as f:  # 600 MB, sparse: nothing is written but the end
        f.truncate(600 * 1024 * 1024)
    asked: list[int] = []
    real_read = os.read

    def counted(fd: int, n: int) -> bytes:
        asked.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", counted)
    start = time.perf_counter()
    req = run(StickyFiles("big.log", max_bytes=1000), tmp_path)
    assert time.perf_counter() - start < 2.0
    assert sum(asked) <= 1000
    entry = req.metadata["sticky_files"]["files"][0]
    assert entry["bytes"] == 600 * 1024 * 1024 and entry["shown_bytes"] == 1000
    assert entry["sha256"] == sha(b"\0" * 1000)
    assert 'truncated="true"' in req.messages[1]["content"]


@pytest.mark.anyio
async def test_the_engine_reads_the_files_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnfsm.enhancers import _sticky

    (tmp_path / "plan.md").write_text("version 1")
    threads: list[int] = []
    real = _sticky._read

    def watched(path: str, limit: int) -> tuple[str, int, str]:
        threads.append(threading.get_ident())
        return real(path, limit)

    monkeypatch.setattr(_sticky, "_read", watched)
    sticky = StickyFiles("plan.md")
    engine, llm, _ = make_engine([{"text": "a"}], enhancers=[sticky])
    async with engine:
        cid = await engine.create_context(workspace_path=str(tmp_path))
        await engine.send(cid, "one")
    assert threads and threading.get_ident() not in threads
    assert "version 1" in llm.requests[0].messages[0]["content"]
    assert not sticky._ready  # what was read was used, not kept
