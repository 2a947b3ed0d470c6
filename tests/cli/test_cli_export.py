"""``turnfsm contexts export ID --format session|entries|openai``, end to end on a
SQLite store file: what it writes imports back (``turnfsm import``) as the same
conversation; its errors are one line and exit 2."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnfsm import Engine, records
from turnfsm.adapters.inbound import import_context
from turnfsm.storage import open_store
from turnfsm.testing import ScriptedLLM

from .conftest import WEATHER, Cli, contexts

FIXTURES = Path(__file__).parent.parent / "fixtures" / "import"
FORMATS = ("session", "entries", "openai")


def _store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/chats.db"


def _imported(cli: Cli, url: str, name: str) -> str:
    ran = cli("import", str(FIXTURES / name), "--store", url)
    assert ran.code == 0, ran.err
    return ran.out.splitlines()[0]


def _conversation(ctx: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Roles, texts, calls and results of a context's active branch, from its JSON."""
    pool = ctx["message_pool"]
    out: list[tuple[Any, ...]] = []
    for mid in ctx["branches"][ctx["active_branch_name"]]["message_ids"]:
        m = pool[mid]["message"]
        text = "".join(p["text"] for p in m["content"] if p["type"] == "text")
        calls = [(c["id"], c["tool_name"], c["arguments"]) for c in m["tool_calls"] or []]
        result = m["tool_result"]
        done = (result["request_id"], result["result"], result["success"]) if result else None
        out.append((m["role"], text, calls, done))
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_imported_file_exported_imports_back_the_same(
    cli: Cli, tmp_path: Path, fmt: str
) -> None:
    url = _store(tmp_path)
    name = {"session": "session.json", "entries": "entries.json", "openai": "openai.json"}[fmt]
    cid = _imported(cli, url, name)
    out = tmp_path / f"out.{fmt}.json"
    ran = cli("contexts", "export", cid, "--format", fmt, "-o", str(out), "--store", url)
    assert (ran.code, ran.out, ran.err) == (0, f"wrote {out}\n", "")
    back = cli("import", str(out), "--format", fmt, "--json")
    assert back.code == 0, back.err
    original = import_context(json.loads((FIXTURES / name).read_text()), fmt)  # type: ignore[arg-type]
    expected = _conversation(records.to_python(original))
    assert _conversation(json.loads(back.out)) == expected
    # the format is detected from the file's shape too
    detected = cli("import", str(out))
    assert detected.code == 0 and detected.out.splitlines()[1].startswith(f"{fmt}: ")


def test_a_replayed_conversation_in_every_format_to_stdout(cli: Cli, tmp_path: Path) -> None:
    url = _store(tmp_path)
    assert cli("replay", str(WEATHER), "--store", url).code == 0
    [row] = contexts(cli, url)
    whole = json.loads(cli("contexts", "show", row["id"], "--store", url).out)
    for fmt in FORMATS:
        ran = cli("contexts", "export", row["id"], "--format", fmt, "--store", url)
        assert ran.code == 0 and ran.err == "", ran.err
        path = tmp_path / f"{fmt}.json"
        path.write_text(ran.out)
        back = cli("import", str(path), "--json", "--store", url)
        assert back.code == 0, back.err
        got = _conversation(json.loads(back.out))
        want = _conversation(whole)
        if fmt == "openai":  # tool content is text there
            want = [
                (r, t, c, (d[0], json.dumps(d[1], separators=(",", ":")), True) if d else None)
                for r, t, c, d in want
            ]
        if fmt == "session":  # the system prompt is the first record there
            assert got[0] == ("system", "You are a helpful assistant.", [], None)
            got = got[1:]
        assert got == want, fmt
    assert len(contexts(cli, url)) == 4  # the replayed one and the three imported back


def test_the_default_is_the_whole_context_unchanged(cli: Cli, tmp_path: Path) -> None:
    url = _store(tmp_path)
    assert cli("replay", str(WEATHER), "--store", url).code == 0
    [row] = contexts(cli, url)
    default = cli("contexts", "export", row["id"], "--store", url)
    explicit = cli("contexts", "export", row["id"], "--format", "context", "--store", url)
    assert default.code == explicit.code == 0
    assert default.out == explicit.out
    data = json.loads(default.out)
    assert {"message_pool", "branches", "schema_version"} <= set(data)
    out = tmp_path / "ctx.json"
    assert cli("contexts", "export", row["id"], "--out", str(out), "--store", url).code == 0
    assert json.loads(out.read_text()) == data


def test_a_named_branch(cli: Cli, tmp_path: Path) -> None:
    url = _store(tmp_path)

    async def fork() -> str:
        llm = ScriptedLLM([{"text": "Paris."}, {"text": "Rome."}])
        async with Engine(llm=llm, store=open_store(url)) as engine:
            cid = await engine.create_context()
            await engine.send(cid, "Capital of France?")
            await engine.fork(cid, "italy", -1)
            await engine.send(cid, "Capital of Italy?")
            await engine.switch_branch(cid, "main")
            return cid

    cid = anyio.run(fork)
    for fmt in FORMATS:
        texts = []
        for branch in ((), ("--branch", "italy")):
            ran = cli("contexts", "export", cid, "--format", fmt, *branch, "--store", url)
            assert ran.code == 0, ran.err
            texts.append([m.text for m in _messages(json.loads(ran.out), fmt)])
        assert texts == [["Capital of France?", "Paris."], ["Capital of Italy?", "Rome."]]


def _messages(data: Any, fmt: str) -> list[Any]:
    ctx = import_context(data, fmt)  # type: ignore[arg-type]
    return [n.message for n in ctx.history()]


# ---------------------------------------------------------------------- errors


def test_errors_are_one_line_and_exit_2(cli: Cli, tmp_path: Path) -> None:
    url = _store(tmp_path)
    assert cli("replay", str(WEATHER), "--store", url).code == 0
    [row] = contexts(cli, url)
    cid = row["id"]
    cases = [
        (["nope", "--format", "session"], "turnfsm contexts: no context with id 'nope'"),
        (
            [cid, "--format", "entries", "--branch", "spain"],
            f"turnfsm contexts: context '{cid}' has no branch named 'spain' (branches: main)",
        ),
        ([cid, "--format", "yaml"], "turnfsm contexts export: argument --format: invalid choice"),
        ([cid, "--branch", "main"], "turnfsm contexts: --branch needs --format session"),
    ]
    db = tmp_path / "chats.db"
    with sqlite3.connect(db) as conn:
        before = conn.execute("select count(*), max(version) from contexts").fetchone()
    for argv, line in cases:
        out = tmp_path / "never.json"
        ran = cli("contexts", "export", *argv, "-o", str(out), "--store", url)
        assert ran.code == 2, argv
        assert ran.one_line().startswith(line), (argv, ran.err)
        assert ran.out == "" and not out.exists()
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*), max(version) from contexts").fetchone() == before


def test_a_missing_store_is_not_created(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/missing.db"
    ran = cli("contexts", "export", "id-2", "--format", "openai", "--store", url)
    assert ran.code == 2
    assert "it is not created here" in ran.one_line()
    assert not (tmp_path / "missing.db").exists()
