"""The replay runner as a Python API (docs/script-format.md, "From Python").

Scripts built in code, failure reports, the parser's list of problems, and
what the observed trace (``ReplayResult.trace_out()``, the content of
``--trace-out``) must satisfy for every golden script: only declared edges,
gap-free event ``seq``, one result per tool call, and the spec's rules that a
script cannot express by itself (denial reasons, retry delays, partial text).
"""

from __future__ import annotations

import copy
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from canonical import ALR, ATA, EXT, IDLE, PF, PLR, PUM, SLR

from turnfsm.replay import (
    FORMAT,
    Failure,
    ReplayResult,
    Script,
    ScriptError,
    load_script,
    parse_script,
    replay,
    run_script,
)
from turnfsm.states import TRANSITIONS

SCRIPTS = Path(__file__).parent / "scripts"
EXPECTED: dict[str, dict[str, Any]] = json.loads(
    (SCRIPTS.parent / "scripts_expected.json").read_text()
)
GOLDEN = sorted(name for name, e in EXPECTED.items() if e["exit"] == 0)

EDGES = {(src.value, t.trigger.value, t.dest.value) for t in TRANSITIONS for src in t.sources}
PAIRS = {(a, b) for a, _, b in EDGES}


APPROVAL_SCRIPT: dict[str, Any] = {
    "format": FORMAT,
    "name": "built in code",
    "config": {"system_prompt": "You are helpful.", "max_iterations": 5},
    "tools": [
        {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
            "approval": "required",
        }
    ],
    "steps": [
        {"user": "Weather in London?"},
        {
            "llm": {
                "tool_calls": [
                    {"id": "call_1", "name": "get_weather", "arguments": {"city": "London"}}
                ]
            }
        },
        {"expect": {"state": ATA, "pending": ["call_1"]}},
        {"approve": "call_1"},
        {"tool": {"id": "call_1", "result": {"temp_c": 15}}},
        {
            "llm": {
                "chunks": ["It is ", "15 C."],
                "expect_request": {"roles": ["system", "user", "assistant", "tool"]},
            }
        },
        {"expect": {"state": IDLE, "last_message": {"role": "assistant", "text": "It is 15 C."}}},
    ],
    "expect": {
        "trace": [IDLE, PUM, ALR, PLR, ATA, EXT, ALR, SLR, PLR, IDLE],
        "final_state": IDLE,
        "message_count": 4,
    },
}


def _script(steps: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {"format": FORMAT, "steps": steps, **top}


_GOLDEN_RESULTS: dict[str, ReplayResult] = {}


def golden(name: str) -> ReplayResult:
    """The result of a golden script (replayed once per test session)."""
    if name not in _GOLDEN_RESULTS:
        _GOLDEN_RESULTS[name] = run_script(SCRIPTS / name)
    return _GOLDEN_RESULTS[name]


def events_of(result: ReplayResult, kind: str) -> list[dict[str, Any]]:
    return [e for e in result.trace_out()["events"] if e["kind"] == kind]


def tool_results(result: ReplayResult) -> dict[str, dict[str, Any]]:
    return {
        m["message"]["tool_result"]["request_id"]: m["message"]["tool_result"]
        for m in result.trace_out()["messages"]
        if m["message"]["role"] == "tool"
    }


# ---------------------------------------------------------------- scripts built in code


@pytest.mark.anyio
async def test_a_script_built_in_code_replays() -> None:
    result = await replay(APPROVAL_SCRIPT)
    assert result.ok, result.report()
    assert result.report() == "PASS built in code"
    assert result.trace == APPROVAL_SCRIPT["expect"]["trace"]
    out = result.trace_out()
    assert [m["message"]["role"] for m in out["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [e["delta"] for e in events_of(result, "ContentDelta")] == ["It is ", "15 C."]
    assert result.to_json() == {
        "name": "built in code",
        "ok": True,
        "failures": [],
        "trace": result.trace,
    }


@pytest.mark.anyio
async def test_replay_takes_a_parsed_script_or_a_path() -> None:
    parsed = parse_script(APPROVAL_SCRIPT)
    assert isinstance(parsed, Script)
    assert [s.kind for s in parsed.steps][:4] == ["user", "llm", "expect", "approve"]
    from_parsed = await replay(parsed)
    from_path = await replay(SCRIPTS / "weather_with_approval.json")
    from_str = await replay(str(SCRIPTS / "weather_with_approval.json"))
    assert from_parsed.ok and from_path.ok and from_str.ok
    assert from_path.trace_out() == from_str.trace_out()


def test_the_same_script_twice_gives_the_same_observation() -> None:
    first = run_script(APPROVAL_SCRIPT).trace_out()
    second = run_script(copy.deepcopy(APPROVAL_SCRIPT)).trace_out()
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def test_a_script_without_a_name_is_named_by_its_source() -> None:
    result = run_script(_script([{"user": "hi"}, {"llm": {"text": "hello"}}]))
    assert result.ok
    assert result.name == "script"


# ---------------------------------------------------------------- failure reports


def test_a_failed_check_renders_the_step_expected_and_observed() -> None:
    script = copy.deepcopy(APPROVAL_SCRIPT)
    script["steps"][2] = {"expect": {"state": EXT, "pending": ["call_1"]}}
    result = run_script(script)
    assert not result.ok
    assert len(result.failures) == 1
    failure = result.failures[0]
    assert isinstance(failure, Failure)
    assert (failure.kind, failure.step) == ("check", 2)
    assert (failure.expected, failure.observed) == (EXT, ATA)
    rendered = failure.render()
    assert rendered.splitlines() == [
        "step 2: expect state",
        '  expected: "ExecutingTools"',
        '  observed: "AwaitingToolApproval"',
    ]
    assert result.report() == f"FAIL built in code\n{rendered}"
    assert result.to_json()["failures"] == [
        {
            "kind": "check",
            "step": 2,
            "message": "expect state",
            "expected": EXT,
            "observed": ATA,
        }
    ]


def test_a_tape_failure_renders_the_step_and_what_the_engine_did() -> None:
    script = copy.deepcopy(APPROVAL_SCRIPT)
    # a tool step where the engine calls the LLM
    script["steps"].insert(1, {"tool": {"id": "call_1", "result": {}}})
    result = run_script(script)
    assert not result.ok
    failure = result.failures[-1]
    assert (failure.kind, failure.step) == ("tape", 1)
    rendered = failure.render()
    assert rendered.startswith("step 1: the engine called the LLM (call 1, attempt 1)")
    assert "the next step is step 1 (tool)" in rendered
    assert '  expected: "an llm or llm_error step"' in rendered
    assert '  observed: "an LLM call"' in rendered


def test_an_input_the_engine_refuses_is_a_tape_failure() -> None:
    result = run_script(_script([{"user": "hi"}, {"llm": {"text": "hello"}}, {"cancel": True}]))
    assert not result.ok
    (failure,) = result.failures
    assert (failure.kind, failure.step) == ("tape", 2)
    assert "step 2 (cancel): the engine refused it" in failure.render()


def test_final_expect_failures_are_all_reported() -> None:
    result = run_script(
        _script(
            [{"user": "hi"}, {"llm": {"text": "hello"}}],
            expect={"trace": [IDLE, PUM, ALR, PF], "final_state": PF, "message_count": 7},
        )
    )
    messages = [f.message for f in result.failures]
    assert messages == [
        "trace differs from entry 3: expected PermanentFailure, observed ProcessingLLMResponse",
        "final_state",
        "message_count",
    ]
    assert all(f.step is None for f in result.failures)
    assert result.report().count("final expect:") == 3


# ---------------------------------------------------------------- ScriptError.problems


def test_script_error_lists_every_problem_at_once() -> None:
    bad = {
        "format": FORMAT,
        "name": 7,
        "colour": "blue",
        "config": {"max_iterations": 0},
        "tools": [{"name": "get weather", "approval": "sometimes"}],
        "steps": [
            {"user": 5},
            {"llm": {"text": "a", "chunks": ["b"]}},
            {"user": "x", "llm": {"text": "y"}},
            {"shout": "hi"},
            {"cancel": False},
            {"approve": "call_404"},
            {"expect": {"state": "Sleeping"}},
        ],
        "expect": {"final_state": "Nowhere"},
    }
    with pytest.raises(ScriptError) as info:
        parse_script(bad, "bad.json")
    problems = info.value.problems
    paths = [p for p, _ in problems]
    for expected in [
        "$.colour",
        "$.name",
        "$.config.max_iterations",
        "$.tools[0].name",
        "$.tools[0].approval",
        "$.steps[0].user",
        "$.steps[1].llm",
        "$.steps[2]",
        "$.steps[3]",
        "$.steps[4].cancel",
        "$.steps[5].approve",
        "$.steps[6].expect.state",
        "$.expect.final_state",
    ]:
        assert expected in paths, (expected, problems)
    assert len(problems) >= 13
    message = str(info.value)
    assert message.startswith(f"bad.json is not a valid {FORMAT} script:")
    for path, reason in problems:
        assert f"  {path}: {reason}" in message


def test_a_missing_step_list_and_a_wrong_top_level_type() -> None:
    with pytest.raises(ScriptError) as info:
        parse_script({"format": FORMAT})
    assert info.value.problems == [("$.steps", "is required: a list of steps")]
    with pytest.raises(ScriptError) as info:
        parse_script([1, 2])
    assert info.value.problems[0][0] == "$"


def test_load_script_reports_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ScriptError) as info:
        load_script(tmp_path / "nope.json")
    assert info.value.problems[0][0] == "$"
    assert "cannot read the file" in info.value.problems[0][1]


# ---------------------------------------------------------------- observed traces, every golden


@pytest.mark.parametrize("name", GOLDEN)
def test_trace_out_uses_only_declared_edges(name: str) -> None:
    out = golden(name).trace_out()
    trace = out["trace"]
    assert trace[0] == IDLE
    for a, b in itertools.pairwise(trace):
        assert (a, b) in PAIRS, f"{a} -> {b} is not an edge of TRANSITIONS"
    changes = [e for e in out["events"] if e["kind"] == "StateChanged"]
    for e in changes:
        assert (e["from_state"], e["trigger"], e["to_state"]) in EDGES, e
    # the events tell the same path as the trace, chained
    assert [e["to_state"] for e in changes] == trace[1:]
    assert [e["from_state"] for e in changes] == trace[:-1]


@pytest.mark.parametrize("name", GOLDEN)
def test_event_seq_is_gap_free_from_1(name: str) -> None:
    events = golden(name).trace_out()["events"]
    assert events, "a golden script emits events"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert len({e["context_id"] for e in events}) == 1
    stamps = [e["timestamp"] for e in events]
    assert stamps == sorted(stamps)  # the virtual clock only moves forward


@pytest.mark.parametrize("name", GOLDEN)
def test_every_tool_call_has_exactly_one_result(name: str) -> None:
    messages = [m["message"] for m in golden(name).trace_out()["messages"]]
    asked = [c["id"] for m in messages for c in m["tool_calls"] or ()]
    answered = Counter(m["tool_result"]["request_id"] for m in messages if m["tool_result"])
    assert set(answered) == set(asked)
    assert all(n == 1 for n in answered.values()), answered


# ---------------------------------------------------------------- spec rules scripts cannot state


def test_denial_results_carry_the_reason() -> None:
    human = tool_results(golden("deny_with_reason.json"))["call_1"]
    assert human["success"] is False
    assert "not now" in human["result"]["error"]
    assert human["result"]["status"] == "denied"
    policy = tool_results(golden("policy_deny.json"))["call_1"]
    assert policy["success"] is False and policy["result"]["status"] == "denied"
    # a denied call never reaches the tool: its ToolResult is the engine's, no tool step
    assert not any(s.kind == "tool" for s in load_script(SCRIPTS / "policy_deny.json").steps)


def test_superseded_cancelled_and_limited_calls_get_results_saying_so() -> None:
    assert tool_results(golden("supersede.json"))["call_1"]["result"]["status"] == "superseded"
    assert tool_results(golden("cancel_at_approval.json"))["call_1"]["result"]["status"] == (
        "cancelled"
    )
    limited = tool_results(golden("max_iterations.json"))
    assert limited["call_1"]["success"] is True
    assert limited["call_2"]["success"] is False
    assert limited["call_2"]["result"]["status"] == "max_iterations"
    (done,) = events_of(golden("max_iterations.json"), "TurnCompleted")
    assert done["stop_reason"] == "max_iterations"


def test_a_tool_error_is_a_failed_result() -> None:
    result = tool_results(golden("tool_error.json"))["call_1"]
    assert result["success"] is False
    assert "city not found" in json.dumps(result["result"])


def test_parallel_results_are_in_the_order_asked() -> None:
    results = golden("parallel_mixed_approval.json")
    tools = [m["message"] for m in results.trace_out()["messages"] if m["message"]["tool_result"]]
    assert [t["tool_result"]["request_id"] for t in tools] == ["call_a", "call_b", "call_c"]
    assert [t["tool_result"]["success"] for t in tools] == [True, True, False]
    asked = results.trace_out()["messages"][1]["message"]["tool_calls"]
    assert [(c["approval_status"], c["decided_by"]) for c in asked] == [
        ("Approved", "policy"),
        ("Approved", "human"),
        ("Denied", "policy"),
    ]
    (requested,) = events_of(results, "ToolApprovalRequested")
    assert [c["id"] for c in requested["calls"]] == ["call_b"]


def test_cancel_mid_stream_keeps_the_partial_text_marked_cancelled() -> None:
    result = golden("cancel_mid_stream.json")
    partial = result.trace_out()["messages"][1]["message"]
    assert partial["content"] == [{"type": "text", "text": "Once upon a time "}]
    assert partial["metadata"]["cancelled"] is True
    assert [e["delta"] for e in events_of(result, "ContentDelta")][:2] == ["Once upon ", "a time "]
    stops = [e["stop_reason"] for e in events_of(result, "TurnCompleted")]
    assert stops == ["cancelled", "completed"]


def test_backoff_is_computed_on_the_virtual_clock() -> None:
    exhausted = golden("retries_exhausted.json")
    retrying = events_of(exhausted, "Retrying")
    # three attempts: two retries announced, then give_up (no third Retrying)
    assert [(e["attempt"], e["delay"]) for e in retrying] == [(1, 0.5), (2, 1.0)]
    (failed,) = events_of(exhausted, "Failed")
    assert failed["state"] == PF
    # retry_after from the provider wins over the configured backoff (max_delay 1)
    (after,) = events_of(golden("retry_after.json"), "Retrying")
    assert after["delay"] == 7.5
    done = events_of(golden("retry_after.json"), "TurnCompleted")[-1]
    assert done["timestamp"] - after["timestamp"] == pytest.approx(7.5)


def test_a_failed_stream_leaves_no_message_and_reports_its_partial_text() -> None:
    result = golden("mid_stream_failure.json")
    (retrying,) = events_of(result, "Retrying")
    assert retrying["partial_text"] == "A state machine is a model"
    assistants = [
        m["message"] for m in result.trace_out()["messages"] if m["message"]["role"] == "assistant"
    ]
    assert len(assistants) == 1
    assert assistants[0]["metadata"]["attempt"] == 2
    assert [e["attempt"] for e in events_of(result, "ContentDelta")] == [1, 1, 2, 2]


def test_thinking_and_usage_are_recorded() -> None:
    result = golden("thinking.json")
    answers = [m["message"] for m in result.trace_out()["messages"][1::2]]
    assert [a["thinking"] for a in answers] == ["6 * 7 = 42.", "6 * 8 = 48."]
    assert answers[0]["metadata"]["usage"]["total_tokens"] == 17
    channels = [e["channel"] for e in events_of(result, "ContentDelta")]
    assert channels == ["thinking", "text", "text"]


def test_a_frontend_operator_message_is_recorded_as_such() -> None:
    first = golden("frontend_operator.json").trace_out()["messages"][0]["message"]
    assert first["role"] == "frontend_operator"


def test_branch_messages_are_those_of_the_active_branch() -> None:
    result = golden("branch_and_switch.json")
    texts = [m["message"]["content"][0]["text"] for m in result.trace_out()["messages"]]
    assert texts == ["Hi", "Hello!", "Tell me a joke", "Why did the FSM cross the road?"]


# ---------------------------------------------------------------- script checks and tape ends


def test_an_unknown_expect_request_key_makes_the_script_invalid() -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(
            _script(
                [{"user": "hi"}, {"llm": {"text": "hello", "expect_request": {"msg_count": 2}}}]
            )
        )
    assert any(p.startswith("$.steps[1].llm.expect_request") for p, _ in info.value.problems)


def test_a_wrongly_typed_expect_request_makes_the_script_invalid() -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(
            _script(
                [
                    {"user": "hi"},
                    {"llm": {"text": "hello", "expect_request": {"message_count": "2"}}},
                ]
            )
        )
    assert any(p.startswith("$.steps[1].llm.expect_request") for p, _ in info.value.problems)


def test_every_failing_expect_request_check_of_a_step_is_reported() -> None:
    result = run_script(
        _script(
            [
                {"user": "hi"},
                {
                    "llm": {
                        "text": "hello",
                        "expect_request": {"message_count": 9, "roles": ["system"]},
                    }
                },
            ]
        )
    )
    assert not result.ok
    messages = {f.message for f in result.failures}
    assert "the request sent to the LLM: message_count" in messages
    assert "the request sent to the LLM: roles" in messages


def test_a_tape_that_ends_too_early_is_not_reported_as_the_final_expect() -> None:
    result = run_script(_script([{"user": "hi"}], expect={"final_state": IDLE}))
    assert not result.ok
    (failure,) = result.failures
    assert failure.kind == "tape"
    assert "the end of the tape" in failure.message
    assert not failure.render().startswith("final expect")
