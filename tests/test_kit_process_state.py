"""The test kit's guard around a server or CLI run in the test process
(``kit._process_state_kept``): the modules it drops on leaving."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import kit
import pytest


def test_only_the_working_folders_own_modules_are_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module of the user's from the working folder is dropped; one of an
    environment that sits in that folder (a ``.venv`` in the checkout) stays,
    as a second import of it would make new classes where others keep the
    first ones."""
    venv = tmp_path / ".venv"
    site = venv / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "kit_probe_installed.py").write_text("class Error(Exception): ...\n")
    (tmp_path / "kit_probe_app.py").write_text("VALUE = 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("kit_probe_installed", "kit_probe_app"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with kit._process_state_kept():
        import kit_probe_app  # noqa: F401
        import kit_probe_installed

        first = kit_probe_installed.Error
    try:
        assert "kit_probe_app" not in sys.modules
        assert sys.modules["kit_probe_installed"].Error is first
    finally:
        sys.modules.pop("kit_probe_installed", None)


def test_turnfsm_modules_stay(tmp_path: Path) -> None:
    here = os.fspath(tmp_path)
    inside = os.path.join(here, "turnfsm", "server", "_x.py")
    assert not kit._from_working_folder("turnfsm.server._x", inside, here)
    assert kit._from_working_folder("app", os.path.join(here, "app.py"), here)
    assert not kit._from_working_folder("app", "/elsewhere/app.py", here)
