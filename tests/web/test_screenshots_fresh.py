"""The README's screenshots of the web view were taken from the current pages.

Screenshots change with every run (ids, times), so what is checked is the
digest of what they were taken from (the templates, stylesheet and script of
``turnfsm/server/web/`` and ``scripts/screenshots.py``), recorded beside them
in ``docs/images/web-screenshots.sha256`` (docs/web.md, "Screenshots").
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script() -> object:
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "scripts/screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("screenshots", module)
    spec.loader.exec_module(module)
    return module


def test_screenshots_match_the_pages() -> None:
    shots = _script()
    recorded = shots.recorded_digest()  # type: ignore[attr-defined]
    assert recorded is not None, "docs/images/web-screenshots.sha256 is missing"
    assert recorded == shots.inputs_digest(), (  # type: ignore[attr-defined]
        "the web view changed since docs/images/web-*.png were taken: "
        "run python scripts/screenshots.py"
    )
    for name in ("web-context.png", "web-audit.png"):
        png = (ROOT / "docs" / "images" / name).read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n"), name


def test_the_digest_covers_every_asset() -> None:
    shots = _script()
    covered = {p.name for p in shots.inputs()}  # type: ignore[attr-defined]
    assets = {p.name for p in (ROOT / "turnfsm/server/web").iterdir() if p.is_file()}
    assert assets <= covered
    assert "screenshots.py" in covered
