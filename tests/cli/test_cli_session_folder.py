"""``turnfsm import --format sessions DIR`` and ``turnfsm export --format sessions
DIR``: a sessions folder moved into a store and back, on real SQLite files and
files stores; the folder read and never changed, a second import adding
nothing, a bad file reported while the others go in, what an export leaves out
listed, and a SIGKILL in the middle of an export leaving no half-written file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import kit
import pytest
from canonical import get_weather_approved
from kit import first_by_default  # tests/ is on sys.path (no tests/__init__.py)

from turnfsm.adapters.inbound.importers import read_session_folder
from turnfsm.storage import open_store

from .conftest import Cli

SESSIONS = Path(__file__).parent.parent / "fixtures" / "sessions"
IDS = sorted(p.stem for p in SESSIONS.glob("*.json"))


def tree_hash(folder: Path) -> dict[str, str]:
    """Every entry of ``folder`` (names, kinds, contents, modes, mtimes), hashed."""
    out: dict[str, str] = {}
    for p in sorted(folder.rglob("*")):
        st = p.stat()
        body = p.read_bytes() if p.is_file() else b"<dir>"
        out[str(p.relative_to(folder))] = hashlib.sha256(
            body + f"{st.st_mode}:{st.st_mtime_ns}".encode()
        ).hexdigest()
    return out


def stored_ids(url: str) -> list[str]:
    async def ids() -> list[str]:
        store = open_store(url, create=False)
        try:
            return sorted(await store.list_ids())
        finally:
            await store.aclose()

    return anyio.run(ids)


@pytest.fixture(params=["sqlite", "files"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    kind = str(request.param)
    return (
        f"sqlite:///{tmp_path / 'db.sqlite'}"
        if kind == "sqlite"
        else f"files:///{tmp_path / 'files'}"
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The application's sessions folder: the fixtures, and one bad file."""
    out = tmp_path / "sessions"
    shutil.copytree(SESSIONS, out)
    (out / "0-broken.json").write_text(
        json.dumps({"id": "broken", "records": [{"type": "message", "role": "robot"}]})
    )
    (out / "README.txt").write_text("not a session")
    return out


# --- import -------------------------------------------------------------------------------


def test_a_folder_is_imported_file_by_file_and_left_as_it_was(
    cli: Cli, folder: Path, store_url: str
) -> None:
    before = tree_hash(folder)
    ran = cli("import", "--format", "sessions", str(folder), "--store", store_url)
    assert ran.code == 2  # one file could not be imported
    lines = ran.out.splitlines()
    assert lines[:-1] == [
        f"{i}.json: imported {i}: {s}" for i, s in zip(IDS, _summaries(), strict=True)
    ]
    assert lines[-1].startswith(f"3 imported, 0 skipped, 1 failed: {folder} into ")
    assert ran.one_line() == (
        f"turnfsm import: {folder / '0-broken.json'}: $.records[0].role: must be 'system', "
        "'user' or 'assistant', not 'robot' (tool results are 'tool_call' records)"
    )
    assert stored_ids(store_url) == IDS
    assert tree_hash(folder) == before


def _summaries() -> list[str]:
    counts = {IDS[0]: (5, 1), IDS[1]: (4, 1), IDS[2]: (10, 3)}
    return [
        f"session: {m} messages, {c} tool call{'s' * (c != 1)}, 1 branch"
        for m, c in counts.values()
    ]


def test_a_second_import_of_the_folder_adds_nothing(cli: Cli, folder: Path, store_url: str) -> None:
    (folder / "0-broken.json").unlink()
    assert cli("import", str(folder), "--store", store_url).code == 0  # a folder: sessions
    first = stored_ids(store_url)
    shutil.copy(SESSIONS / f"{IDS[0]}.json", folder / "new-one.json")
    before = tree_hash(folder)
    ran = cli("import", "--format", "sessions", str(folder), "--store", store_url)
    assert ran.code == 0, ran.err
    assert ran.out.splitlines()[:-1] == [
        f"{IDS[0]}.json: skipped: context {IDS[0]} is already stored",
        f"{IDS[1]}.json: skipped: context {IDS[1]} is already stored",
        f"{IDS[2]}.json: skipped: context {IDS[2]} is already stored",
        "new-one.json: imported new-one: session: 5 messages, 1 tool call, 1 branch",
    ]
    assert ran.out.splitlines()[-1].startswith("1 imported, 3 skipped, 0 failed: ")
    assert stored_ids(store_url) == sorted([*first, "new-one"])
    assert tree_hash(folder) == before


def test_without_a_store_the_folder_is_only_checked(cli: Cli, folder: Path) -> None:
    ran = cli("import", "--format", "sessions", str(folder))
    assert ran.code == 2
    assert ran.out.splitlines()[-1] == (
        f"3 files can be imported, 1 failed: {folder} (not stored: give --store URL)"
    )
    assert "broken.json: $.records[0].role" in ran.one_line()


def test_folder_usage_errors(cli: Cli, folder: Path, tmp_path: Path) -> None:
    one = folder / f"{IDS[0]}.json"
    ran = cli("import", "--format", "sessions", str(one))
    assert ran.code == 2
    assert "not a folder (--format sessions reads a folder of *.json files)" in ran.one_line()
    ran = cli("import", "--format", "openai", str(folder))
    assert ran.code == 2
    assert "a folder; --format sessions reads a folder of session files" in ran.one_line()
    ran = cli("import", "--format", "sessions", "--json", str(folder))
    assert ran.code == 2
    assert "--json prints one context" in ran.one_line()
    (tmp_path / "empty").mkdir()
    ran = cli("import", "--format", "sessions", str(tmp_path / "empty"))
    assert ran.code == 2
    assert "no *.json file to import" in ran.one_line()
    # the single-file import is as it was
    ran = cli("import", str(one))
    assert ran.code == 0, ran.err
    assert (
        ran.out.splitlines()[1]
        == "session: 5 messages, 1 tool call, 1 branch (not stored: give --store URL)"
    )


# --- export -------------------------------------------------------------------------------


def test_export_writes_every_context_back_and_import_reads_the_same(
    cli: Cli, folder: Path, store_url: str, tmp_path: Path
) -> None:
    (folder / "0-broken.json").unlink()
    assert cli("import", "--format", "sessions", str(folder), "--store", store_url).code == 0
    out = tmp_path / "out" / "sessions"
    ran = cli("export", "--format", "sessions", "--store", store_url, str(out))
    assert ran.code == 0, ran.err
    assert ran.out.splitlines() == [
        f"{IDS[0]}.json: 4 records; nothing left out",
        f"{IDS[1]}.json: 3 records; nothing left out",
        f"{IDS[2]}.json: 7 records; nothing left out",
        f"3 written, 0 failed: {out}",
    ]
    assert sorted(p.name for p in out.iterdir()) == [f"{i}.json" for i in IDS]
    for i in IDS:
        original = json.loads((SESSIONS / f"{i}.json").read_text())
        written = json.loads((out / f"{i}.json").read_text())
        assert (written["id"], written["title"]) == (original["id"], original["title"])
        assert [r["type"] for r in written["records"]] == [r["type"] for r in original["records"]]
    # exported, then imported into a new store: the same messages
    again = f"sqlite:///{tmp_path / 'again.sqlite'}"
    assert cli("import", "--format", "sessions", str(out), "--store", again).code == 0
    assert _conversations(again) == _conversations(store_url)


def _conversations(url: str) -> dict[str, list[Any]]:
    async def read() -> dict[str, list[Any]]:
        store = open_store(url, create=False)
        try:
            out: dict[str, list[Any]] = {}
            for cid in await store.list_ids():
                ctx = await store.load(cid)
                out[cid] = [
                    (
                        n.message.role,
                        n.message.text,
                        [(c.id, c.tool_name, c.arguments) for c in n.message.tool_calls or []],
                        n.message.tool_result,
                        n.message.metadata.created_at,
                    )
                    for n in ctx.history()
                ]
            return out
        finally:
            await store.aclose()

    return anyio.run(read)


def test_export_of_named_contexts_lists_what_it_left_out(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"

    async def waiting_for_approval() -> str:
        engine, _, _ = kit.make_engine(
            [
                {
                    "tool_calls": [
                        {"id": "call_1", "name": "get_weather", "arguments": {"city": "Rome"}}
                    ]
                }
            ],
            tools=[get_weather_approved],
            store=open_store(url),
        )
        async with engine:
            cid = await engine.create_context()
            await engine.send(cid, "Weather in Rome?")
            return cid

    cid = anyio.run(waiting_for_approval)
    out = tmp_path / "out"
    ran = cli(
        "export", "--store", url, "--context", cid, "--context", "nope", "--context", cid, str(out)
    )
    assert ran.code == 2
    assert ran.out.splitlines() == [
        f"{cid}.json: 2 records; left out: 1 call with no result yet, written with the missing "
        "result: call_1; the state AwaitingToolApproval",
        f"1 written, 1 failed: {out}",
    ]
    assert ran.one_line() == "turnfsm export: no context with id 'nope'"
    [record] = [
        r
        for r in json.loads((out / f"{cid}.json").read_text())["records"]
        if r["type"] == "tool_call"
    ]
    assert (record["tool_call_id"], record["success"]) == ("call_1", False)


def test_export_needs_an_existing_store_and_a_folder(cli: Cli, tmp_path: Path) -> None:
    ran = cli("export", "--store", f"sqlite:///{tmp_path / 'none.sqlite'}", str(tmp_path / "o"))
    assert ran.code == 2
    assert "--store" in ran.one_line()
    assert not (tmp_path / "o").exists()
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert cli("import", str(SESSIONS / f"{IDS[0]}.json"), "--store", url).code == 0
    (tmp_path / "file").write_text("x")
    ran = cli("export", "--store", url, str(tmp_path / "file"))
    assert ran.code == 2
    assert ran.one_line() == f"turnfsm export: {tmp_path / 'file'}: not a folder"


# --- a kill in the middle of an export ------------------------------------------------------

# The hook: the export runs in a real subprocess whose ``os.write`` is wrapped so
# that the N-th large write writes half its bytes, says so on stderr and sleeps;
# the test then sends SIGKILL. Without it a kill would land inside a write only
# by chance (a write of a few megabytes takes milliseconds); with it, the kill
# always finds a file half-written, which must never be one of DIR's *.json.
_PAUSING_EXPORT = textwrap.dedent(
    """
    import os, sys, time
    from turnfsm.cli import main

    pause_at = int(sys.argv[1])
    real_write = os.write
    seen = 0

    def write(fd, data):
        global seen
        if len(data) > 100_000:
            seen += 1
            if seen == pause_at:
                done = real_write(fd, bytes(data[: len(data) // 2]))
                print(f"paused after {done} bytes", file=sys.stderr, flush=True)
                time.sleep(120)
        return real_write(fd, data)

    os.write = write
    sys.exit(main(sys.argv[2:]))
    """
)


def _big_sessions(folder: Path, n: int) -> None:
    folder.mkdir()
    for i in range(n):
        doc = json.loads((SESSIONS / f"{IDS[0]}.json").read_text())
        doc["id"] = f"big-{i}"
        doc["records"][2]["result"] = {"report": f"{i}" * 2_000_000}
        (folder / f"big-{i}.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("pause_at", first_by_default([2, 1, 4], ["2", "1", "4"]))
def test_a_sigkill_mid_export_leaves_each_file_absent_old_or_complete(
    cli: Cli, tmp_path: Path, pause_at: int
) -> None:
    """The killed export is a process of its own; the import before it and
    the export after it run here."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    src = tmp_path / "src"
    _big_sessions(src, 4)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    imported = cli("import", "--format", "sessions", str(src), "--store", url)
    assert imported.code == 0, imported.err
    out = tmp_path / "out"
    out.mkdir()
    old = {"id": "big-1", "title": "the old copy", "records": []}
    (out / "big-1.json").write_text(json.dumps(old))  # an earlier copy, to be replaced
    with subprocess.Popen(
        [sys.executable, "-c", _PAUSING_EXPORT, str(pause_at), "export", "--store", url, str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()  # blocks until the hook has paused mid-write
            assert line.startswith("paused after "), line + proc.stderr.read()
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=60) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    expected = {
        g.file.name: json.loads((src / g.file.name).read_text()) for g in read_session_folder(src)
    }
    written = sorted(p.name for p in out.glob("*.json"))
    for name in written:
        doc = json.loads((out / name).read_text())  # complete, or this fails
        if doc == old:
            assert name == "big-1.json"
            continue
        assert doc["records"][2]["result"] == expected[name]["records"][2]["result"]
    # the files before the paused one are done; the paused one is as it was
    finished = [f"big-{i}.json" for i in range(pause_at - 1)]
    assert set(finished) <= set(written)
    paused = f"big-{pause_at - 1}.json"
    if paused == "big-1.json":
        assert json.loads((out / paused).read_text()) == old
    else:
        assert paused not in written
    # the half-written bytes are in a temporary file, which is no session file
    assert [p for p in out.iterdir() if p.name.endswith(".tmp")]
    # a later export finishes the job, over the leftovers
    again = cli("export", "--store", url, str(out))
    assert again.code == 0, again.err
    for name, doc in expected.items():
        assert (
            json.loads((out / name).read_text())["records"][2]["result"]
            == doc["records"][2]["result"]
        )
