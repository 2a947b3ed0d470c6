"""``--max-loaded-contexts`` and ``--max-loaded-messages`` of ``serve`` and
``worker``: a bad value is a one-line usage error naming the flag (exit 2);
a good one reaches the engine (``tests/server/test_cache_bound.py`` runs the
processes)."""

from __future__ import annotations

import pytest

from turnfsm.cli import build_parser
from turnfsm.cli._cache_options import cache_settings

from .conftest import Cli


@pytest.mark.parametrize("command", ["serve", "worker"])
@pytest.mark.parametrize("flag", ["--max-loaded-contexts", "--max-loaded-messages"])
@pytest.mark.parametrize("value", ["0", "-3", "1.5", "lots", "99999999999"])
def test_a_bad_bound_is_a_usage_error(cli: Cli, command: str, flag: str, value: str) -> None:
    ran = cli(command, flag, value)
    assert ran.code == 2
    line = ran.one_line()
    assert flag in line and "whole number" in line and value in line, line


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_the_bounds_given_are_the_engines(command: str) -> None:
    args = build_parser().parse_args(
        [command, "--max-loaded-contexts", "12", "--max-loaded-messages", "345"]
    )
    assert cache_settings(args) == {"max_loaded": 12, "max_loaded_messages": 345}
