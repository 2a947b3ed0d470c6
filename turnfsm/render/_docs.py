"""``docs/states.md``: the states and transitions page, generated from the table.

Every sentence about a state or a transition comes from the table's own
descriptions (``STATE_DESCRIPTIONS``, ``Transition.meaning``); the diagram is
:func:`~turnfsm.render.mermaid_state_diagram`. The page cannot drift: a test
regenerates it and compares.
"""

from __future__ import annotations

from ..audit import TOOL_CYCLE, actor_of
from ..states import TRANSITIONS, State
from ._graph import declared_edges, declared_nodes
from ._mermaid import mermaid_state_diagram

__all__ = ["states_markdown"]

REGENERATE = "turnfsm diagram --regenerate"
"""The command that rewrites ``diagrams/`` and this page (also
``python scripts/regen_diagrams.py``)."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(names: object) -> str:
    return f"`{names}`"


def states_markdown() -> str:
    nodes = declared_nodes()
    edges = declared_edges()
    out: list[str] = [
        "# States and transitions",
        "",
        "<!-- Generated from turnfsm/states/_table.py by `turnfsm diagram --regenerate`",
        "     (or `python scripts/regen_diagrams.py`). Do not edit: a test fails when",
        "     this page differs from what the table produces. -->",
        "",
        "turnfsm drives every conversation with one declared state machine. Its",
        "transition table (`turnfsm.states.TRANSITIONS`) is the only place transitions",
        "live; this page, the diagrams in [`diagrams/`](../diagrams/) and the runtime",
        "machine are all built from it.",
        "",
        f"The machine has {len(nodes)} states and {len(TRANSITIONS)} table rows, which",
        f"make {len(edges)} edges (a row with several source states is one edge per source).",
        "",
        "```mermaid",
        mermaid_state_diagram().rstrip("\n"),
        "```",
        "",
        "The same diagram as [SVG](../diagrams/fsm.svg), [PNG](../diagrams/fsm.png),",
        "[Graphviz DOT](../diagrams/fsm.dot) and [Mermaid](../diagrams/fsm.mmd).",
        "",
        "How to read it: edges are labelled with their trigger. Resting states (where a",
        "call into the engine returns and the engine waits for the outside) have a",
        "thick blue border in Mermaid and a double border in the Graphviz drawings.",
        "Failure states are orange (`TransientFailure`) and red (`PermanentFailure`);",
        "in the Graphviz drawings the edges into them are red, `retry` edges orange and",
        "`cancel` edges dashed grey.",
        "",
        "## States",
        "",
        "| state | kind | work on entering | description |",
        "|---|---|---|---|",
    ]
    for node in nodes:
        kind = ", ".join(node.tags) or "working"
        effect = _code(node.effect) if node.effect else "—"
        out.append(f"| {_code(node.state)} | {kind} | {effect} | {_cell(node.description)} |")
    out += [
        "",
        "## Transitions",
        "",
        "One row per row of the table. *Actor* is who causes the step, as the audit",
        "log records it (see below).",
        "",
        "| from | trigger | to | actor | meaning |",
        "|---|---|---|---|---|",
    ]
    for row in TRANSITIONS:
        actors = sorted({str(actor_of(s, row.trigger)) for s in row.sources})
        sources = ", ".join(_code(s) for s in row.sources)
        out.append(
            f"| {sources} | {_code(row.trigger)} | {_code(row.dest)} | {', '.join(actors)} "
            f"| {_cell(row.meaning)} |"
        )
    out += [
        "",
        "## Triggers",
        "",
        "| trigger | edges |",
        "|---|---|",
    ]
    by_trigger: dict[str, list[str]] = {}
    for edge in edges:
        by_trigger.setdefault(str(edge.trigger), []).append(f"{edge.source} → {edge.dest}")
    for trigger, pairs in by_trigger.items():
        out.append(f"| {_code(trigger)} | {'; '.join(pairs)} |")
    cycle = ", ".join(_code(s) for s in State if s in TOOL_CYCLE)
    out += [
        "",
        "## Run paths, sequence diagrams and audit logs",
        "",
        "```sh",
        "turnfsm diagram [--format mermaid|dot|svg|png] [--out FILE]   # this machine",
        "turnfsm diagram --context ID --store URL [--format mermaid|dot|svg|png] [--times]",
        "turnfsm diagram --context ID --store URL --sequence [--turn N]",
        "turnfsm diagram --trace TRACE.json                           # replay --trace-out",
        "turnfsm diagram --diff A B                # where two traces or audit logs diverge",
        "turnfsm audit export ID --store URL [--out FILE]             # JSON Lines",
        "turnfsm audit verify FILE",
        f"{REGENERATE}         # rewrite diagrams/ and this page",
        "```",
        "",
        "A **run path** is this diagram with one conversation's path drawn over it: the",
        "transitions taken, bold with their counts (failures red, retries orange), the",
        "states not visited greyed, the current state filled yellow, and with `--times`",
        "the time spent in each state (from the commit times of the steps).",
        "",
        "An **audit log** has one JSON line per committed step:",
        "",
        "| field | meaning |",
        "|---|---|",
        "| `seq` | 1, 2, 3, …: the step's number, without gaps |",
        "| `context_id` | the conversation |",
        "| `version` | the store commit holding the step (a commit can hold several) |",
        "| `timestamp` | the commit's time, ISO 8601 |",
        "| `from`, `trigger`, `to` | the transition |",
        "| `actor` | `user`, `llm`, `tool`, `approver` (the human approver) or `system`: "
        "by trigger, see the table above |",
        "| `attempt` | the LLM attempt after the step: 1 after `user_message`, `tools_done` "
        "and a user's `retry`; +1 after `retry` from `TransientFailure`; 0 after `reset` "
        "and `cancel`; else unchanged |",
        "| `message_ids` | the messages the step added or changed |",
        "| `tool_calls` | the calls the step's LLM answer asked for |",
        "| `tool_results` | the calls the step gave their result |",
        "",
        "The store does not link messages to steps, so the export derives it: messages",
        "are taken in creation order and each trigger takes what the engine appends for",
        "it — `user_message` the user's message (and, from `AwaitingToolApproval`, the",
        "results superseding the open calls), `response_received`/`stream_ended` the",
        "answer, the decision triggers (`needs_approval`, `tools_decided`,",
        "`approvals_resolved`, `outcome_unknown`) the batch they decide, `tools_done` one",
        "result per open call, `subtask_waits` the batch and the results of the calls that",
        "did not wait for a sub-task, `turn_complete` (at the iteration limit) and `cancel` the",
        "results closing open calls, `cancel` the cancelled partial answer, and the change",
        "record `child_finished` the summary of a finished sub-context.",
        "Messages older than the first step (an imported history) are skipped. Creation",
        "order is the store's append order (SQLite, memory) made stable by",
        "`created_at`; the file store lists messages branch by branch, so with equal",
        "timestamps (a virtual clock) a conversation that went back to an older branch",
        "and went on there can be attributed out of order.",
        "",
        "`turnfsm audit verify FILE` exits 0 when the log holds, 1 with the first",
        "offending line and why, 2 when the file cannot be read. It checks: every line",
        "is a complete record; `seq` starts at 1 and has no gaps; one context; each step",
        "starts where the previous ended (the first in `Idle`); every edge is declared",
        "in the table; time and version never go back; `actor` and `attempt` are what",
        "the triggers imply; every tool call is requested once, by an LLM answer, gets",
        f"exactly one result, and no step leaves the tool cycle ({cycle}) while a call",
        "has none. It cannot tell a log whose last lines were cut from a shorter",
        "conversation, and the log is not signed: a forger who rewrites every later",
        "line consistently is not caught.",
        "",
    ]
    return "\n".join(out)
