"""docs/states.md is generated from the table's own descriptions, and is up to date."""

from __future__ import annotations

import re

from turnfsm.audit import ACTORS, Actor, actor_of
from turnfsm.render import mermaid_state_diagram, states_markdown
from turnfsm.states import STATE_DESCRIPTIONS, TRANSITIONS, State, Trigger

from ._parse import parse_mermaid_state
from ._runs import ROOT

PAGE = ROOT / "docs" / "states.md"


def test_the_page_is_what_the_table_produces_now() -> None:
    assert PAGE.read_text("utf-8") == states_markdown(), (
        "docs/states.md is stale: run `turnfsm diagram --regenerate` "
        "(or python scripts/regen_diagrams.py)"
    )


def test_the_page_embeds_the_generated_mermaid_diagram() -> None:
    blocks = re.findall(r"```mermaid\n(.*?)```", states_markdown(), re.S)
    assert blocks == [mermaid_state_diagram()]
    parse_mermaid_state(blocks[0])


def test_every_state_and_row_is_explained_in_the_tables_own_words() -> None:
    page = states_markdown()
    for s in State:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{s}` |"))
        assert STATE_DESCRIPTIONS[s] in row
    for t in TRANSITIONS:
        sources = ", ".join(f"`{s}`" for s in t.sources)
        row = f"| {sources} | `{t.trigger}` | `{t.dest}` |"
        line = next(line for line in page.splitlines() if line.startswith(row))
        assert line.rstrip().endswith(f"| {t.meaning} |")
    for trig in Trigger:
        assert f"| `{trig}` |" in page


def test_every_edge_has_one_actor() -> None:
    for t in TRANSITIONS:
        actors = {actor_of(s, t.trigger) for s in t.sources}
        assert len(actors) == 1, t
    assert {trig for (_, trig) in ACTORS} == set(Trigger)
    assert set(ACTORS.values()) == set(Actor)
    assert actor_of(State.TRANSIENT_FAILURE, Trigger.RETRY) is Actor.SYSTEM
    assert actor_of(State.PERMANENT_FAILURE, Trigger.RETRY) is Actor.USER
    assert actor_of(State.AWAITING_TOOL_APPROVAL, Trigger.APPROVALS_RESOLVED) is Actor.APPROVER
