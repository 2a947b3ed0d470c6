"""No password of a store URL in any message, and every bad ``--tools`` value
a usage error: sweeps over every command that takes a store and over the
shapes a store URL's secret can take."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kit import first_by_default, serve_in_process  # tests/ is on sys.path (no tests/__init__.py)
from storage.pg import Cluster, pg_cluster

from turnfsm.storage import open_store
from turnfsm.storage._secrets import redact, scrub

from .conftest import Cli

__all__ = ["pg_cluster"]

SECRET = "S3cret"
URLS = [
    f"postgresql://u:{SECRET}@127.0.0.1:1/db",
    f"postgresql://u:{SECRET}@127.0.0.1:1/db?sslmode=require",
    f"postgresql://u@127.0.0.1:1/db?password={SECRET}",
    f"postgresql://u@127.0.0.1:1/db?sslpassword={SECRET}&password={SECRET}x",
    f"postgres://u:{SECRET}@127.0.0.1:notaport/db",
    f"postgresql://u:{SECRET}/with/slashes@127.0.0.1:1/db",  # a password with '/'
    f"postgresql://u:{SECRET}@and@127.0.0.1:1/db",  # and with '@'
    f"postgresql://u:{SECRET}%40x@127.0.0.1:1/db",  # percent-escaped
    f"postgresq1://u:{SECRET}@127.0.0.1:1/db",  # a scheme mistyped
    f"sqlite://u:{SECRET}@host/chats.db",  # a host where none is allowed
    f"files://u:{SECRET}@host/dir",
    f"memory://u:{SECRET}@host",
    f"sqlite:///x.db?password={SECRET}",  # an option the SQLite store does not know
]
COMMANDS = [
    ["demo", "--delay", "0"],
    ["chat", "--demo", "-m", "hi"],
    ["replay", str(Path(__file__).parent.parent / "scripts" / "weather_with_approval.json")],
    ["contexts", "list"],
    ["contexts", "show", "id-2"],
    ["contexts", "export", "id-2"],
    ["contexts", "delete", "id-2"],
    ["audit", "export", "id-2"],
    ["diagram", "--context", "id-2"],
    ["resume", "id-2", "--demo"],
    ["recover", "--demo"],
    ["db", "upgrade"],
    ["serve"],
    ["worker"],
    ["temporal-worker", "--temporal", "127.0.0.1:7233"],
    ["temporal-prune", "--temporal", "127.0.0.1:7233"],
]


def test_redact_leaves_no_piece_of_a_password() -> None:
    for url in URLS:
        shown = redact(url)
        assert SECRET not in shown, (url, shown)
        assert shown.split("://")[0] == url.split("://")[0]
    assert redact("postgresql://u@h:5432/db") == "postgresql://u@h:5432/db"
    assert redact("sqlite:///a.db") == "sqlite:///a.db"
    assert scrub(f"a driver said {SECRET}x, {SECRET}") == "a driver said ***, ***"


def test_open_store_errors_never_carry_the_password() -> None:
    for url in URLS:
        try:
            store = open_store(url)
            check_now = getattr(store, "check_now", None)
            if check_now is not None:
                check_now()
        except Exception as exc:
            text = f"{exc!s} {exc!r} {exc.__cause__!s}"
            assert SECRET not in scrub(str(exc)), (url, str(exc))
            assert SECRET not in str(exc) or "%40" in url, (url, text)


# every command reads the store's URL through the same path, and each case runs
# the command once per URL both ways: the first command by default, the others
# with -m sweep
@pytest.mark.parametrize("argv", first_by_default(COMMANDS, [" ".join(a[:2]) for a in COMMANDS]))
def test_no_command_prints_a_store_password(
    cli: Cli, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if argv[0] == "import":
        pytest.skip("covered below")
    for url in URLS:
        ran = cli(*argv, "--store", url)
        assert ran.code == 2, (url, ran.code, ran.err)
        assert SECRET not in ran.out + ran.err, (url, ran.err)
        if argv[0] != "db":  # db upgrade takes --store only
            monkeypatch.setenv("TURNFSM_STORE", url)
            ran = cli(*argv)
            monkeypatch.delenv("TURNFSM_STORE")
            if argv[0] != "replay":  # replay runs in memory without --store
                assert ran.code == 2, (url, ran.err)
            assert SECRET not in ran.out + ran.err, (url, ran.err)


def test_import_never_prints_a_store_password(cli: Cli, tmp_path: Path) -> None:
    source = tmp_path / "conv.json"
    source.write_text('[{"role": "user", "content": "hi"}]')
    for url in URLS:
        ran = cli("import", str(source), "--store", url)
        assert ran.code != 0, url
        assert SECRET not in ran.out + ran.err, (url, ran.err)


def test_a_working_store_is_named_without_its_password(
    cli: Cli, pg_cluster: Cluster, tmp_path: Path
) -> None:
    """Against a real PostgreSQL (which trusts the test user, so any password
    works): what the commands print on success names the store, never the
    password, and so does ``turnfsm serve``'s first line."""
    url = pg_cluster.new_schema().replace("://turnfsm@", f"://turnfsm:{SECRET}@")
    for argv in (["db", "upgrade"], ["contexts", "list"], ["demo", "--delay", "0"]):
        ran = cli(*argv, "--store", url)
        assert ran.code == 0, (argv, ran.err)
        assert SECRET not in ran.out + ran.err, (argv, ran.out)
    with serve_in_process("--port", "0", "--store", url) as served:
        first = served.said().splitlines()[0]
        assert first.startswith("turnfsm serve: http://"), first
        assert "turnfsm:***@" in first and SECRET not in first, first
    assert SECRET not in served.said()


BAD_TOOLS = [
    "../x:y",
    "./x:y",
    ".x:y",
    "x",
    ":y",
    "x:",
    "x..y:z",
    "x/y:z",
    "x:y-z",
    "x:y..z",
    "os:",
    "os:path.no_such_name",
    "no_such_module_zz:y",
    "json:dumps",  # a function, not a tool
    "tests_bad_tool_module:x",  # a module that raises as it is imported
]


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_every_bad_tools_value_is_a_usage_error(
    cli: Cli, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tests_bad_tool_module.py").write_text("raise RuntimeError('broken on import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec in BAD_TOOLS:
        ran = cli(command, "--tools", spec, "--store", f"sqlite:///{tmp_path}/s.db")
        assert ran.code == 2, (spec, ran.err)
        line = ran.one_line()
        assert line.startswith(f"turnfsm {command}: --tools "), (spec, line)
        assert "unexpected error" not in line, (spec, line)
    assert os.environ.get("TURNFSM_DEBUG") is None
