"""The generated files of the repository: ``diagrams/fsm.*`` and ``docs/states.md``.

Regenerate them with ``turnfsm diagram --regenerate`` (or
``python scripts/regen_diagrams.py``) from the repository's root.
"""

from __future__ import annotations

from ._docs import states_markdown
from ._dot import dot_digest, dot_source
from ._graphviz import render_png, render_svg
from ._mermaid import mermaid_state_diagram

__all__ = ["GENERATED", "PNG_DIGEST_KEY", "generated_files", "generated_texts"]

GENERATED = (
    "diagrams/fsm.mmd",
    "diagrams/fsm.dot",
    "diagrams/fsm.svg",
    "diagrams/fsm.png",
    "docs/states.md",
)
"""Every generated file, relative to the repository root."""

PNG_DIGEST_KEY = "turnfsm-dot"
"""The PNG ``tEXt`` key holding ``sha256:<digest>`` of the DOT it was drawn from."""


def generated_texts() -> dict[str, str]:
    """The text files (no Graphviz needed): Mermaid, DOT, the docs page."""
    return {
        "diagrams/fsm.mmd": mermaid_state_diagram(),
        "diagrams/fsm.dot": dot_source(),
        "docs/states.md": states_markdown(),
    }


def generated_files() -> dict[str, bytes]:
    """Every generated file's bytes, in :data:`GENERATED` order (runs ``dot``)."""
    texts = generated_texts()
    dot = texts["diagrams/fsm.dot"]
    files = {name: text.encode("utf-8") for name, text in texts.items()}
    files["diagrams/fsm.svg"] = render_svg(dot)
    files["diagrams/fsm.png"] = render_png(dot, text={PNG_DIGEST_KEY: f"sha256:{dot_digest(dot)}"})
    return {name: files[name] for name in GENERATED}
