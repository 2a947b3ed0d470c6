"""Run paths drawn over the declared machine, sequence diagrams of a turn, diffs of runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from turnfsm import records as record_io
from turnfsm.audit import audit_records
from turnfsm.model import MessageNode
from turnfsm.render import (
    PARTICIPANTS,
    PathStep,
    RenderError,
    RunPath,
    diff_paths,
    dot_source,
    mermaid_state_diagram,
    path_from_audit_lines,
    path_from_trace_out,
    render_svg,
    sequence_diagram,
    sequence_rows,
)
from turnfsm.states import State

from ._parse import parse_dot, parse_mermaid_state, parse_sequence, parse_svg
from ._runs import GOLDEN, Run, require_dot
from .test_declared import ALL_STATES, table_edges

# ---------------------------------------------------------------------- paths


@pytest.mark.parametrize("script", [p.name for p in GOLDEN])
def test_store_steps_trace_out_and_audit_log_give_one_path(
    golden_runs: dict[str, Run], script: str
) -> None:
    run = golden_runs[script]
    from_store = run.path
    from_trace = path_from_trace_out(run.result.trace_out())
    from_log = path_from_audit_lines(run.log.split("\n"))
    assert from_store.states == run.result.trace == from_trace.states == from_log.states
    keys = [s.key for s in from_store.steps]
    assert [s.key for s in from_trace.steps] == [s.key for s in from_log.steps] == keys
    assert from_store.current == run.ctx.current_state
    assert not from_store.undeclared()


def test_a_trace_without_events_is_named_from_the_table() -> None:
    trace = ["Idle", "ProcessingUserMessage", "AwaitingLLMResponse", "TransientFailure"]
    path = path_from_trace_out({"trace": trace, "events": [], "messages": []})
    assert [s.trigger for s in path.steps] == [
        "user_message",
        "prompt_ready",
        "llm_failed_transient",
    ]
    ambiguous = ["Idle", "ProcessingUserMessage", "AwaitingLLMResponse", "ProcessingLLMResponse"]
    with pytest.raises(RenderError, match="2 triggers fit"):
        path_from_trace_out({"trace": [*ambiguous, "Idle"], "events": []})
    with pytest.raises(RenderError, match="no 'trace'"):
        path_from_trace_out({"events": []})


def test_time_in_states_counts_finished_visits() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    at = [t0 + timedelta(seconds=s) for s in (1, 3, 4, 6, 10)]
    path = RunPath(
        (
            PathStep("Idle", "user_message", "ProcessingUserMessage", at[0]),
            PathStep("ProcessingUserMessage", "prompt_ready", "AwaitingLLMResponse", at[1]),
            PathStep("AwaitingLLMResponse", "llm_failed_transient", "TransientFailure", at[2]),
            PathStep("TransientFailure", "retry", "AwaitingLLMResponse", at[3]),
            PathStep("AwaitingLLMResponse", "llm_failed_transient", "TransientFailure", at[4]),
        ),
        start=t0,
    )
    assert path.time_in_states() == {
        "Idle": 1.0,
        "ProcessingUserMessage": 2.0,
        "AwaitingLLMResponse": 1.0 + 4.0,
        "TransientFailure": 2.0,  # the visit still running is not counted
    }
    assert path.current == "TransientFailure"


# ---------------------------------------------------------------------- overlays


def test_mermaid_overlay_counts_edges_and_marks_states(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["retries_exhausted.json"]
    d = parse_mermaid_state(mermaid_state_diagram(run.path, times=True, title="retries"))
    assert d.states == ALL_STATES
    assert d.edges == table_edges()  # the declared diagram, all of it, nothing else
    labels = d.edge_labels
    assert labels[("AwaitingLLMResponse", "llm_failed_transient")] == "✖ llm_failed_transient x3"
    assert labels[("TransientFailure", "retry")] == "⟲ retry x2"
    assert labels[("TransientFailure", "give_up")] == "✖ give_up x1"
    assert labels[("Idle", "user_message")] == "✔ user_message x1"
    assert labels[("AwaitingLLMResponse", "response_received")] == "response_received"
    assert d.classes["current"] == {"PermanentFailure"}
    assert d.classes["failed"] == {"TransientFailure"}
    assert "StreamingLLMResponse" in d.classes["notVisited"]
    assert "visited 3x, 1.5 s" in d.labels["TransientFailure"]  # 0.5 s + 1.0 s of backoff
    assert "◉ current" in d.labels["PermanentFailure"]


def test_dot_and_svg_overlay(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["weather_with_approval.json"]
    dot = dot_source(run.path, times=True, title="weather")
    d = parse_dot(dot)
    assert d.states == ALL_STATES and d.edges == table_edges()
    assert d.edge_labels[("AwaitingLLMResponse", "stream_started")] == "stream_started x1"
    assert d.edge_labels[("AwaitingLLMResponse", "response_received")] == "response_received x1"
    assert 'color="#1565c0"' in d.attrs["AwaitingLLMResponse/stream_started"]  # taken
    assert 'color="#cfd8dc"' in d.attrs["PermanentFailure/user_message"]
    assert 'fillcolor="#fff59d"' in d.attrs["Idle"]  # the current state
    assert "not visited" in d.attrs["TransientFailure"]
    assert "visited 2x" in d.attrs["AwaitingLLMResponse"]
    require_dot()
    s = parse_svg(render_svg(dot))
    assert s.states == ALL_STATES and s.edges == table_edges()
    assert s.edge_labels[("ExecutingTools", "tools_done")] == "tools_done x1"
    assert "current state" in s.labels["Idle"]


def test_an_undeclared_step_is_drawn_apart() -> None:
    path = RunPath(
        (
            PathStep("Idle", "user_message", "ProcessingUserMessage"),
            PathStep("ProcessingUserMessage", "teleport", "ExecutingTools"),
        )
    )
    assert [s.trigger for s in path.undeclared()] == ["teleport"]
    d = parse_dot(dot_source(path))
    assert d.edges - table_edges() == {("ProcessingUserMessage", "teleport", "ExecutingTools"): 1}
    assert "undeclared" in d.attrs["ProcessingUserMessage/teleport"]
    m = parse_mermaid_state(mermaid_state_diagram(path))
    assert m.edge_labels[("ProcessingUserMessage", "teleport")] == "‼ teleport x1 (not declared)"


def test_overlays_are_deterministic(golden_runs: dict[str, Run]) -> None:
    path = golden_runs["parallel_mixed_approval.json"].path
    assert dot_source(path, times=True) == dot_source(path, times=True)
    assert mermaid_state_diagram(path, times=True) == mermaid_state_diagram(path, times=True)


# ---------------------------------------------------------------------- sequence diagrams


@pytest.mark.parametrize("script", [p.name for p in GOLDEN])
def test_every_turn_of_every_run_has_a_well_formed_sequence_diagram(
    golden_runs: dict[str, Run], script: str
) -> None:
    run = golden_runs[script]
    records = run.records
    turns = sum(1 for r in records if r.trigger == "user_message")
    seqs = []
    for n in range(1, turns + 1):
        text = sequence_diagram(records, run.ctx.message_pool, turn=n)
        lines = parse_sequence(text)
        assert lines[:5] == [f"participant {p}" for p in PARTICIPANTS]
        notes = [ln for ln in lines if ln.startswith("Note over engine: ") and " → " in ln]
        seqs += [int(ln.split(": ", 1)[1].split(" ")[0]) for ln in notes]
    assert seqs == [r.seq for r in records], "every step appears once, in order"
    assert sequence_diagram(records, run.ctx.message_pool) == sequence_diagram(
        records, run.ctx.message_pool, turn=turns
    )


def test_sequence_of_a_turn_with_approval_and_tools(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["parallel_mixed_approval.json"]
    lines = parse_sequence(sequence_diagram(run.records, run.ctx.message_pool))
    assert "user->>engine: Find Ann, email her, then clean my inbox" in lines
    assert "engine->>LLM: request (LLM call 1, attempt 1)" in lines
    assert 'engine->>approver: approve send_email(to="ann@example.com") [call_b]?' in lines
    assert "approver->>engine: approve call_b" in lines
    assert 'engine->>tools: lookup(who="Ann") [call_a]' in lines
    assert 'tools-->>engine: ok: {"email": "ann@example.com"}' in lines
    assert any(ln.startswith("Note over engine: call_c denied") for ln in lines)
    assert "engine->>LLM: request (LLM call 2, attempt 1)" in lines
    assert lines[-1] == "Note over engine: 8 · turn_complete → Idle"
    # a ';' of the answer is written as Mermaid's entity code
    assert any("her#59; I may not" in ln for ln in lines)


def test_sequence_of_retries_and_failures(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["retries_exhausted.json"]
    lines = parse_sequence(sequence_diagram(run.records, run.ctx.message_pool))
    assert lines.count("LLM--xengine: transient error") == 3
    assert "engine->>LLM: request (LLM call 1, attempt 3)" in lines
    assert "engine-->>user: failed: attempts exhausted" in lines


def test_sequence_of_typed_answers(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["typed_answer_retry.json"]
    lines = parse_sequence(sequence_diagram(run.records, run.ctx.message_pool))
    sent_back = "engine->>LLM: the answer does not match the output type: errors sent back"
    assert lines.count(sent_back) == 1
    assert "Note over engine: 4 · output_invalid → AwaitingLLMResponse" in lines
    run = golden_runs["typed_answer_retries_spent.json"]
    lines = parse_sequence(sequence_diagram(run.records, run.ctx.message_pool))
    assert "engine-->>user: failed: the answer does not match the output type" in lines
    assert "user->>engine: retry" in lines


def test_sequence_of_a_superseded_approval(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["supersede.json"]
    lines = parse_sequence(sequence_diagram(run.records, run.ctx.message_pool, turn=2))
    assert any("closed: superseded" in ln for ln in lines)


def test_sequence_turn_out_of_range(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["text_answer.json"]
    with pytest.raises(RenderError, match="no turn 2"):
        sequence_diagram(run.records, run.ctx.message_pool, turn=2)
    with pytest.raises(RenderError, match="no turn yet"):
        sequence_diagram([], {})


def test_sequence_from_a_trace_out_file(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["weather_with_approval.json"]
    data = json.loads(json.dumps(run.result.trace_out()))
    path = path_from_trace_out(data)
    messages = [record_io.from_python(MessageNode, m) for m in data["messages"]]
    records = audit_records(run.context_id, path.steps, messages)
    from_trace = sequence_diagram(records, {m.id: m for m in messages})
    assert from_trace == sequence_diagram(run.records, run.ctx.message_pool)


# ---------------------------------------------------------------------- diff


def test_two_runs_of_one_script_are_the_same(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["weather_with_approval.json"]
    result = diff_paths(run.path, path_from_trace_out(run.result.trace_out()))
    assert result.same and result.common_prefix == len(run.result.trace)
    assert "same" in result.report()


def test_where_two_runs_part(golden_runs: dict[str, Run]) -> None:
    text = golden_runs["text_answer.json"].path
    streamed = golden_runs["streamed_answer.json"].path
    result = diff_paths(text, streamed)
    assert not result.same
    assert (result.index, result.common_prefix) == (3, 3)
    assert (result.a, result.b) == ("ProcessingLLMResponse", "StreamingLLMResponse")
    assert (result.a_trigger, result.b_trigger) == ("response_received", "stream_started")
    report = result.report("text", "streamed")
    assert "differ at index 3" in report and "common prefix: 3 states" in report


def test_a_trace_that_stops_early_differs_where_it_ends(golden_runs: dict[str, Run]) -> None:
    full = golden_runs["weather_with_approval.json"].path
    cut = RunPath(full.steps[:4])
    result = diff_paths(full, cut)
    assert (result.index, result.common_prefix) == (5, 5)
    assert result.a == "ExecutingTools" and result.b is None
    assert "(ended)" in result.report()


def test_same_states_through_another_trigger_differ() -> None:
    a = RunPath((PathStep("ProcessingLLMResponse", "turn_complete", "Idle"),))
    b = RunPath((PathStep("ProcessingLLMResponse", "cancel", "Idle"),))
    result = diff_paths(a, b)
    assert result.index == 1 and result.a == result.b == str(State.IDLE)
    assert "via turn_complete" in result.report() and "via cancel" in result.report()


def test_sequence_rows_are_the_diagram_as_data(golden_runs: dict[str, Run]) -> None:
    run = golden_runs["parallel_mixed_approval.json"]
    drawn = sequence_rows(run.records, run.ctx.message_pool)
    text = sequence_diagram(run.records, run.ctx.message_pool)
    assert drawn.mermaid() == text
    assert parse_sequence(text)[5:] == [row.mermaid() for row in drawn.rows]
    assert drawn.participants == PARTICIPANTS and drawn.heading in text
    asked = [r for r in drawn.rows if r.source == "engine" and r.target == "approver"]
    assert asked and all(r.kind == "arrow" and r.style == "call" for r in asked)
    steps = [r for r in drawn.rows if r.kind == "note" and " → " in r.text]
    assert [int(r.text.split(" ")[0]) for r in steps] == list(
        range(drawn.first_seq, drawn.last_seq + 1)
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0 ms"), (0.2504, "250 ms"), (1.0, "1.0 s"), (119.94, "119.9 s"), (120.0, "2.0 min")],
)
def test_time_spent_is_labelled_in_ms_s_or_min(seconds: float, text: str) -> None:
    from turnfsm.render._path import spent_text

    assert spent_text(seconds) == text
