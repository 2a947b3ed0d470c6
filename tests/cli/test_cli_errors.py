"""Bad input to any command: one line on stderr, the documented exit code, and
nothing created or changed that should not be."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from turnfsm.cli import build_parser

from .conftest import WEATHER, Cli, contexts


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


# ---------------------------------------------------------------------- store URLs


def _bad_stores(tmp: Path) -> list[tuple[str, str]]:
    """(URL, what its error line must name)."""
    not_sqlite = tmp / "notes.db"
    not_sqlite.write_text("these are my notes, not a database\n")
    blocker = tmp / "blocker"
    blocker.write_text("a file where a folder would go\n")
    return [
        ("redis://localhost/0", "unknown store scheme 'redis'"),
        ("chats.db", "sqlite:///chats.db"),
        ("sqlite://host/chats.db", "has no host"),
        ("sqlite:///", "names no path"),
        ("sqlite:///x.db?cache=big", "unknown sqlite option"),
        ("postgresql://user@127.0.0.1:1/chats", "cannot connect"),
        (f"sqlite:///{not_sqlite}", "not a SQLite database"),
        (f"sqlite:///{blocker}/sub/chats.db", "cannot create its directory|not created here"),
        (f"files:///{blocker}/sub", "cannot open the folder|not created here"),
    ]


WRITING = [
    ["demo", "--delay", "0"],
    ["chat", "--demo", "-m", "hi"],
    ["replay", str(WEATHER)],
]
READING = [
    ["contexts", "list"],
    ["contexts", "show", "id-2"],
    ["audit", "export", "id-2"],
    ["diagram", "--context", "id-2"],
    ["resume", "id-2", "--demo"],
    ["recover", "--demo"],
]


TEMPORAL = [
    ["temporal-worker", "--temporal", "127.0.0.1:7233"],
    ["temporal-prune", "--temporal", "127.0.0.1:7233"],
]


@pytest.mark.parametrize("argv", WRITING + READING + TEMPORAL, ids=lambda a: " ".join(a[:2]))
def test_a_bad_store_url_is_one_line_and_exit_2(cli: Cli, tmp_path: Path, argv: list[str]) -> None:
    if argv in TEMPORAL:
        pytest.importorskip("temporalio")
    for url, named in _bad_stores(tmp_path):
        before = _files(tmp_path)
        ran = cli(*argv, "--store", url)
        assert ran.code == 2, (url, ran.err)
        line = ran.one_line()
        assert line.startswith(f"turnfsm {argv[0]}: --store: "), line
        assert any(part in line for part in named.split("|")), (url, line)
        assert _files(tmp_path) == before, url  # nothing created, nothing left behind
    assert (tmp_path / "notes.db").read_text() == "these are my notes, not a database\n"


@pytest.mark.parametrize("argv", READING, ids=lambda a: " ".join(a[:2]))
def test_read_only_commands_never_create_a_store(cli: Cli, tmp_path: Path, argv: list[str]) -> None:
    for url in (f"sqlite:///{tmp_path}/new/chats.db", f"files:///{tmp_path}/new"):
        ran = cli(*argv, "--store", url)
        assert ran.code == 2
        assert "it is not created here" in ran.one_line()
        assert not (tmp_path / "new").exists()
    ran = cli(*argv)  # the default store, in $XDG_DATA_HOME
    assert ran.code == 2
    assert "turnfsm.db" in ran.one_line()
    assert not (tmp_path / "xdg").exists()


def test_an_existing_store_is_read_unchanged(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/kept.db"
    assert cli("replay", str(WEATHER), "--store", url).code == 0
    db = tmp_path / "kept.db"
    with sqlite3.connect(db) as conn:
        before = conn.execute("select count(*) from contexts").fetchone()
    for argv in READING[:4]:
        assert cli(*argv, "--store", url).code == 0, argv
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from contexts").fetchone() == before


# ---------------------------------------------------------------------- unknown context


@pytest.mark.parametrize(
    "argv",
    [
        ["contexts", "show", "nope"],
        ["contexts", "export", "nope"],
        ["contexts", "delete", "nope"],
        ["audit", "export", "nope"],
        ["diagram", "--context", "nope"],
        ["chat", "--demo", "--context", "nope", "-m", "hi"],
        ["resume", "nope", "--demo"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_an_unknown_context_is_exit_2_everywhere(cli: Cli, tmp_path: Path, argv: list[str]) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    assert cli("replay", str(WEATHER), "--store", url).code == 0
    ran = cli(*argv, "--store", url)
    assert ran.code == 2
    line = ran.one_line()
    assert line.startswith(f"turnfsm {argv[0]}: ") and "no context with id 'nope'" in line
    assert [c["id"] for c in contexts(cli, url)] == ["id-2"]


# ---------------------------------------------------------------------- messages


@pytest.mark.parametrize("text", ["", "   ", "\t\n"])
def test_an_empty_message_is_refused_before_anything_is_created(
    cli: Cli, tmp_path: Path, text: str
) -> None:
    new = tmp_path / "new.db"
    ran = cli("chat", "--demo", "-m", text, "--store", f"sqlite:///{new}")
    assert ran.code == 2
    assert ran.one_line() == "turnfsm chat: --message: the message is empty"
    assert not new.exists()
    url = f"sqlite:///{tmp_path}/s.db"
    assert cli("replay", str(WEATHER), "--store", url).code == 0
    assert cli("chat", "--demo", "-m", text, "--store", url).code == 2
    assert [c["id"] for c in contexts(cli, url)] == ["id-2"]  # no empty context left
    script = tmp_path / "rec.json"
    ran = cli("record", "--out", str(script), "-m", "hello", "-m", text)
    assert ran.code == 2 and "the message is empty" in ran.one_line()
    assert not script.exists()


# ---------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["demo", "--delay", "-1"], "--delay"),
        (["demo", "--delay", "nan"], "--delay"),
        (["demo", "--delay", "inf"], "--delay"),
        (["demo", "--delay", "1e9"], "--delay"),
        (["demo", "--delay", "soon"], "--delay"),
        (["chat", "--demo", "--timeout", "-1", "-m", "hi"], "--timeout"),
        (["chat", "--demo", "--timeout", "NaN", "-m", "hi"], "--timeout"),
        (["chat", "--demo", "--max-attempts", "0", "-m", "hi"], "--max-attempts"),
        (["chat", "--demo", "--max-attempts", "99999999999", "-m", "hi"], "--max-attempts"),
        (["resume", "x", "--demo", "--max-attempts", "-3"], "--max-attempts"),
        (["diagram", "--context", "x", "--sequence", "--turn", "0"], "--turn"),
    ],
)
def test_absurd_numbers_are_usage_errors(
    cli: Cli, tmp_path: Path, argv: list[str], option: str
) -> None:
    ran = cli(*argv, "--store", f"sqlite:///{tmp_path}/s.db")
    assert ran.code == 2
    line = ran.one_line()
    assert line.startswith(f"turnfsm {argv[0]}: argument {option}")
    assert not (tmp_path / "s.db").exists()


# ---------------------------------------------------------------------- replay inputs


def test_replay_of_a_missing_path_or_an_empty_folder_is_exit_2(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no scripts here")
    for path, named in (
        ("tests/scrpits", "no such file or folder"),
        ("empty", "the folder holds no script"),
        ("notes", "the folder holds no script"),
        ("notes/readme.txt", "not a script file"),
    ):
        ran = cli("replay", path)
        assert ran.code == 2, path
        line = ran.one_line()
        assert line.startswith(f"turnfsm replay: {path}: {named}"), line
        assert ran.out == ""  # nothing ran: no "0 passed"


def test_replay_folders_and_files_take_the_same_extensions(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "upper.JSON").write_text(WEATHER.read_text())
    ran = cli("replay", str(folder))
    assert ran.code == 0 and ran.out.endswith("1 passed, 0 failed, 0 invalid\n")
    ran = cli("replay", str(folder / "upper.JSON"))
    assert ran.code == 0 and ran.out.endswith("1 passed, 0 failed, 0 invalid\n")


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"\xff\xfe{\x00}", "not UTF-8 text"),
        (b'{"name": "x\x00"}', "NUL bytes"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"a": ' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
        (b"{not json", "not valid JSON"),
    ],
    ids=["latin", "binary", "deep-list", "deep-object", "junk"],
)
def test_an_unreadable_script_is_exit_2_in_one_line(
    cli: Cli, tmp_path: Path, content: bytes, named: str
) -> None:
    script = tmp_path / "s.json"
    script.write_bytes(content)
    ran = cli("replay", str(script))
    assert ran.code == 2
    line = ran.one_line()
    assert line.startswith(f"INVALID {script}: $: ") and named in line
    assert ran.out == "0 passed, 0 failed, 1 invalid\n"
    ran = cli("replay", "--json", str(script))
    assert ran.code == 2
    (doc,) = [json.loads(x) for x in ran.out.splitlines()]
    assert doc["invalid"] is True and named in doc["problems"][0]["reason"]


def test_replays_into_one_durable_store_each_keep_their_context(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/r.db"
    other = SCRIPTS_DIR / "text_answer.json"
    ran = cli("replay", str(WEATHER), str(other), "--store", url)
    assert ran.code == 0, ran.out + ran.err
    ran = cli("replay", "--json", str(WEATHER), "--store", url)
    assert ran.code == 0, ran.out + ran.err
    again = json.loads(ran.out)
    assert again["trace"] == json.loads(WEATHER.read_text())["expect"]["trace"]
    stored = contexts(cli, url)
    assert sorted(c["id"] for c in stored) == ["id-2", "r2-id-2", "r3-id-2"]
    assert {c["state"] for c in stored} == {"Idle"}


SCRIPTS_DIR = WEATHER.parent


# ---------------------------------------------------------------------- the guard


def test_an_unexpected_error_names_itself_and_the_debug_switch(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnfsm.cli import _contexts

    async def broken(args: object) -> int:
        raise RuntimeError("the disk ate it")

    monkeypatch.setattr(_contexts, "_main", broken)
    ran = cli("contexts", "list")
    assert ran.code == 1
    assert ran.one_line() == (
        "turnfsm contexts: unexpected error: RuntimeError: the disk ate it "
        "(run with TURNFSM_DEBUG=1 for the traceback)"
    )
    monkeypatch.setenv("TURNFSM_DEBUG", "1")
    ran = cli("contexts", "list")
    assert ran.code == 1
    assert "Traceback" in ran.err and "the disk ate it" in ran.err.splitlines()[-1]


def test_bad_arguments_are_one_line(cli: Cli) -> None:
    ran = cli("replay")
    assert ran.code == 2
    assert ran.one_line().startswith("turnfsm replay: the following arguments are required")
    ran = cli("nosuch")
    assert ran.code == 2 and "invalid choice: 'nosuch'" in ran.one_line()


# ---------------------------------------------------------------------- help, flags


def _all_parsers() -> list[tuple[str, object]]:
    import argparse

    found: list[tuple[str, object]] = []

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    walk(f"{name} {sub}", child)

    walk("turnfsm", build_parser())
    return found


def test_help_is_plain_text_and_documents_the_exit_codes(cli: Cli) -> None:
    for name, parser in _all_parsers():
        text = parser.format_help()  # type: ignore[attr-defined]
        assert "``" not in text, name
        assert ":class:" not in text and ":func:" not in text and ":meth:" not in text, name
    top = cli("--help")
    assert top.code == 0
    for line in ("0    success", "1    a check that ran and failed", "2    bad usage or input"):
        assert line in top.out
    assert "130  interrupted" in top.out and "TURNFSM_DEBUG=1" in top.out
    assert "denied unless --approve all" in top.out
    version = cli("--version")
    assert version.code == 0 and version.out.startswith("turnfsm 0.")


def test_system_prompt_has_one_name_and_the_old_one_still_works(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    for flag in ("--system-prompt", "--system"):
        ran = cli("chat", "--demo", flag, f"said with {flag}", "-m", "hi", "--json", "--store", url)
        assert ran.code == 0, ran.err
        cid = json.loads(ran.out)["context_id"]
        shown = cli("contexts", "show", cid, "--store", url).out
        assert shown.count(f"said with {flag}") == 1
    for command in ("chat", "record"):
        text = build_parser()._subparsers._group_actions[0].choices[command].format_help()  # type: ignore[union-attr]
        assert "--system-prompt" in text and "--system " not in text


def test_without_a_terminal_tool_calls_are_denied_everywhere(cli: Cli, tmp_path: Path) -> None:
    ran = cli("demo", "--delay", "0", "--json", "--store", "memory://")
    assert ran.code == 0
    assert "denied: no one was there to approve it" in ran.out
    script = tmp_path / "rec.json"
    assert cli("record", "--out", str(script), "-m", "weather in Rome?").code == 0
    assert '"approve"' not in script.read_text() and '"deny"' in script.read_text()
    ran = cli("demo", "--delay", "0", "--json", "--yes", "--store", "memory://")
    assert "The weather in London is 15 C and cloudy." in ran.out


# ---------------------------------------------------------------------- other inputs


@pytest.mark.parametrize(
    ("content", "named"),
    [(b"\xff\xfe", "not UTF-8"), (b"[" * 100_000 + b"]" * 100_000, "nested too deeply")],
    ids=["latin", "deep"],
)
def test_unreadable_files_elsewhere_are_one_line_too(
    cli: Cli, tmp_path: Path, content: bytes, named: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    for argv in (
        ["import", str(bad)],
        ["diagram", "--trace", str(bad)],
        ["audit", "verify", str(bad)],
    ):
        ran = cli(*argv)
        assert ran.code == 2, (argv, ran.out, ran.err)
        line = ran.one_line()
        assert line.startswith(f"turnfsm {argv[0]}: ") and named in line, line


def test_chat_on_an_interrupted_context_points_to_resume(cli: Cli, tmp_path: Path) -> None:
    import anyio

    from turnfsm.adapters.llm.demo import DemoLLM
    from turnfsm.engine import Engine
    from turnfsm.events import ContentDelta
    from turnfsm.storage import open_store

    url = f"sqlite:///{tmp_path}/s.db"

    async def interrupt() -> str:
        async with Engine(llm=DemoLLM(delay=0.3), store=open_store(url)) as engine:
            cid = await engine.create_context(model="demo")
            async with engine.subscribe(cid) as events, anyio.create_task_group() as tg:
                tg.start_soon(engine.send, cid, "Who are you?")
                async for ev in events:
                    if isinstance(ev, ContentDelta):
                        tg.cancel_scope.cancel()
                        break
        return cid

    cid = anyio.run(interrupt)
    ran = cli("chat", "--demo", "--context", cid, "-m", "hello?", "--store", url)
    assert ran.code == 2
    assert ran.one_line() == (
        f"turnfsm chat: context {cid} was interrupted in StreamingLLMResponse; "
        f"continue it with: turnfsm resume {cid} --store {url}"
    )
    assert cli("resume", cid, "--demo", "--store", url).code == 0
    assert cli("chat", "--demo", "--context", cid, "-m", "hello?", "--store", url).code == 0


@pytest.mark.parametrize(
    ("url", "meant"),
    [
        ("sqlite:/srv/x.db", ["sqlite:////srv/x.db"]),
        ("sqlite:x.db", ["sqlite:///x.db"]),
        ("files:/srv/chats", ["files:////srv/chats"]),
        ("/srv/x.db", ["sqlite:////srv/x.db"]),
        ("sqlite://srv/x.db", ["sqlite:///srv/x.db", "sqlite:////srv/x.db"]),
    ],
)
def test_a_store_url_short_of_slashes_is_told_the_url_meant(
    cli: Cli, url: str, meant: list[str]
) -> None:
    ran = cli("chat", "--demo", "-m", "hi", "--store", url)
    assert ran.code == 2
    line = ran.one_line()
    for suggestion in meant:
        assert f"{suggestion} " in f"{line} " or f"{suggestion})" in line, line
    assert "sqlite:///sqlite:" not in line and "sqlite:///files:" not in line, line
