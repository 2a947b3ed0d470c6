"""``turnfsm serve --turns temporal``, ``turnfsm temporal-worker`` and ``turnfsm
temporal-prune``: the usage errors, each one line and exit 2, before anything
starts. (The commands on a real Temporal server:
tests/temporal/test_cli_temporal.py.)"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from kit import refusing_port
from storage.pg import pg_cluster, pg_url  # the password case's PostgreSQL

from .conftest import Cli

__all__ = ["pg_cluster", "pg_url"]

WORKER = ["temporal-worker", "--temporal", "127.0.0.1:7233"]
PRUNE = ["temporal-prune", "--temporal", "127.0.0.1:7233"]


def test_turns_temporal_needs_a_temporal_server(cli: Cli) -> None:
    ran = cli("serve", "--turns", "temporal")
    assert ran.code == 2
    assert "--turns temporal needs --temporal HOST:PORT" in ran.one_line()


def test_a_temporal_server_without_turns_temporal_is_refused(cli: Cli) -> None:
    ran = cli("serve", "--temporal", "127.0.0.1:7233")
    assert ran.code == 2
    assert "--temporal 127.0.0.1:7233: only with --turns temporal" in ran.one_line()


@pytest.mark.parametrize("given", ["nope", "host:", ":7233", "host:0", "host:70000", "a b:1"])
def test_an_address_that_is_not_host_and_port_is_refused(cli: Cli, given: str) -> None:
    for argv in (
        ["serve", "--turns", "temporal", "--temporal", given],
        [*WORKER[:2], given],
        [*PRUNE[:2], given, "--store", "sqlite:///x.db"],
    ):
        ran = cli(*argv)
        assert ran.code == 2, argv
        assert f"{given!r} is not HOST:PORT" in ran.one_line()


def test_the_worker_needs_its_temporal_server(cli: Cli) -> None:
    for command in ("temporal-worker", "temporal-prune"):
        ran = cli(command, "--store", "sqlite:///x.db")
        assert ran.code == 2
        assert "the following arguments are required: --temporal" in ran.one_line()


def test_prune_needs_its_store_and_creates_none(cli: Cli, tmp_path: Path) -> None:
    ran = cli(*PRUNE)
    assert ran.code == 2
    assert "the following arguments are required: --store" in ran.one_line()
    pytest.importorskip("temporalio")
    missing = tmp_path / "none.db"
    ran = cli(*PRUNE, "--store", f"sqlite:///{missing}")
    assert ran.code == 2
    assert f"no SQLite store at {missing} (it is not created here)" in ran.one_line()
    assert not missing.exists()


@pytest.mark.parametrize(
    "given", ["1", "h", "1.5h", "1w", "1H", "-1h", "1h30m", " 1h", "1 h", "²h", "99999999d"]
)
def test_a_bad_older_than_is_a_usage_error_naming_the_option(cli: Cli, given: str) -> None:
    ran = cli(*PRUNE, "--store", "sqlite:///x.db", f"--older-than={given}")
    assert ran.code == 2
    line = ran.one_line()
    assert line.startswith("turnfsm temporal-prune: argument --older-than: "), line
    if given == "99999999d":
        assert "'99999999d' is more than 36500 days" in line, line
    else:
        assert f"{given!r} is not a duration: a whole number and a unit, s, m, h or d" in line
    assert ran.out == ""


def test_a_negative_older_than_cannot_be_written(cli: Cli) -> None:
    ran = cli(*PRUNE, "--store", "sqlite:///x.db", "--older-than", "-1h")
    assert ran.code == 2
    assert "argument --older-than: expected one argument" in ran.one_line()


def test_older_than_reads_each_unit() -> None:
    from datetime import timedelta

    from turnfsm.cli._temporal_prune import duration

    assert duration("0s") == timedelta(0)
    assert duration("90s") == timedelta(seconds=90)
    assert duration("30m") == timedelta(minutes=30)
    assert duration("1h") == timedelta(hours=1)
    assert duration("2d") == timedelta(days=2)
    assert duration("36500d") == timedelta(days=36500)


def _without_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the temporal extra were not installed: importing temporalio fails."""
    for name in list(sys.modules):
        if name == "temporalio" or name.startswith(("temporalio.", "turnfsm.temporal")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "temporalio", None)


def test_without_the_extra_each_command_says_which_to_install(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _without_the_sdk(monkeypatch)
    store = f"sqlite:///{tmp_path / 'x.db'}"
    for argv in (
        [*WORKER, "--store", store],
        [*PRUNE, "--store", store],
        ["serve", "--turns", "temporal", "--temporal", "127.0.0.1:7233", "--store", store],
    ):
        ran = cli(*argv)
        assert ran.code == 2, argv
        line = ran.one_line()
        assert "needs the temporal extra (temporalio is missing)" in line, line
        assert "pip install 'turnfsm[temporal]'" in line


def test_a_store_of_this_process_only_is_refused(cli: Cli) -> None:
    pytest.importorskip("temporalio")
    for argv in (
        [*WORKER, "--store", "memory://"],
        [*PRUNE, "--store", "memory://"],
        ["serve", "--turns", "temporal", "--temporal", "127.0.0.1:7233", "--store", "memory://"],
    ):
        ran = cli(*argv)
        assert ran.code == 2, argv
        line = ran.one_line()
        assert "memory:// is this process's only" in line, line
        assert "use a PostgreSQL URL" in line


def test_a_temporal_server_that_does_not_answer_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    pytest.importorskip("temporalio")
    store = f"sqlite:///{tmp_path / 'x.db'}"
    with refusing_port() as port:  # bound, never listened on: nobody listens there
        where = f"127.0.0.1:{port}"
        refused_everywhere(cli, where, store)


def refused_everywhere(cli: Cli, where: str, store: str) -> None:
    for argv in (
        ["temporal-worker", "--temporal", where, "--store", store],
        ["serve", "--turns", "temporal", "--temporal", where, "--store", store],
        ["temporal-prune", "--temporal", where, "--store", store],
    ):
        ran = cli(*argv)
        assert ran.code == 2, argv
        line = ran.one_line()
        assert f"--temporal {where}: cannot reach the Temporal server (namespace default)" in line
        assert ran.out == ""


def test_a_temporal_server_that_does_not_answer_never_shows_the_stores_password(
    cli: Cli, pg_url: str
) -> None:
    """A PostgreSQL store given with a password (its server ignores it: the
    throwaway cluster trusts local connections): the store opens, Temporal
    does not answer, and nothing printed holds the password."""
    pytest.importorskip("temporalio")
    secret = "pw-" + uuid.uuid4().hex
    store = pg_url.replace("postgresql://turnfsm@", f"postgresql://turnfsm:{secret}@", 1)
    assert secret in store
    with refusing_port() as port:  # bound, never listened on: nobody listens there
        where = f"127.0.0.1:{port}"
        never_shows(cli, where, store, secret)


def never_shows(cli: Cli, where: str, store: str, secret: str) -> None:
    for argv in (
        ["temporal-worker", "--temporal", where, "--store", store],
        ["serve", "--turns", "temporal", "--temporal", where, "--store", store],
        ["temporal-prune", "--temporal", where, "--store", store],
        ["temporal-prune", "--temporal", where, "--store", store, "--temporal-namespace", "b"],
    ):
        ran = cli(*argv)
        assert ran.code == 2, argv
        line = ran.one_line()
        assert f"--temporal {where}: cannot reach the Temporal server (namespace " in line
        assert secret not in ran.out + ran.err, argv


def test_the_default_task_queue_is_the_packages() -> None:
    pytest.importorskip("temporalio")
    from turnfsm.cli._temporal_options import DEFAULT_TASK_QUEUE
    from turnfsm.temporal import DEFAULT_TASK_QUEUE as PACKAGES

    assert DEFAULT_TASK_QUEUE == PACKAGES


def test_help_does_not_import_the_sdk(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _without_the_sdk(monkeypatch)
    for command in ("serve", "temporal-worker"):
        ran = cli(command, "--help")
        assert ran.code == 0
        assert "--temporal-task-queue QUEUE" in ran.out
    ran = cli("temporal-prune", "--help")
    assert ran.code == 0
    assert "--older-than DURATION" in ran.out
    assert "once for each namespace whose workers use this store" in " ".join(ran.out.split())
