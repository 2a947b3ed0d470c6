"""The test processes keep bytecode (tests/conftest.py), whatever the
environment says: the test modules as pytest rewrote them, and the package as
the commands the tests start compile it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _pytest.assertion.rewrite import PYC_TAIL, get_cache_dir


def test_a_rewritten_test_module_is_kept() -> None:
    assert sys.dont_write_bytecode is False
    here = Path(__file__)
    assert (get_cache_dir(here) / (here.stem + PYC_TAIL)).is_file()


def test_a_started_process_writes_bytecode() -> None:
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    out = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"
