"""``turnfsm serve --turns temporal`` and ``turnfsm temporal-worker``: the usage
errors, each one line and exit 2, before anything starts. (The commands on a
real Temporal server: tests/temporal/test_cli_temporal.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import Cli

WORKER = ["temporal-worker", "--temporal", "127.0.0.1:7233"]


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
    for argv in (["serve", "--turns", "temporal", "--temporal", given], [*WORKER[:2], given]):
        ran = cli(*argv)
        assert ran.code == 2, argv
        assert f"{given!r} is not HOST:PORT" in ran.one_line()


def test_the_worker_needs_its_temporal_server(cli: Cli) -> None:
    ran = cli("temporal-worker", "--store", "sqlite:///x.db")
    assert ran.code == 2
    assert "the following arguments are required: --temporal" in ran.one_line()


def _without_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the temporal extra were not installed: importing temporalio fails."""
    for name in list(sys.modules):
        if name == "temporalio" or name.startswith(("temporalio.", "turnfsm.temporal")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "temporalio", None)


def test_without_the_extra_both_commands_say_which_to_install(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _without_the_sdk(monkeypatch)
    store = f"sqlite:///{tmp_path / 'x.db'}"
    for argv in (
        [*WORKER, "--store", store],
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
        ["serve", "--turns", "temporal", "--temporal", "127.0.0.1:7233", "--store", "memory://"],
    ):
        ran = cli(*argv)
        assert ran.code == 2, argv
        line = ran.one_line()
        assert "memory:// is this process's only" in line, line
        assert "use a PostgreSQL URL" in line


def test_a_temporal_server_that_does_not_answer_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    pytest.importorskip("temporalio")
    from temporal.devserver import _free_port  # tests/ is on sys.path

    where = f"127.0.0.1:{_free_port()}"  # nobody listens there
    store = f"sqlite:///{tmp_path / 'x.db'}"
    for argv in (
        ["temporal-worker", "--temporal", where, "--store", store],
        ["serve", "--turns", "temporal", "--temporal", where, "--store", store],
    ):
        ran = cli(*argv)
        assert ran.code == 2, argv
        line = ran.one_line()
        assert f"--temporal {where}: cannot reach the Temporal server (namespace default)" in line


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
