"""The engine's decisions as pure functions of data: no engine, no event loop,
no store. Each test hands plain records in and checks the edge and the edits
that come out (docs/architecture.md, "The sans-IO core")."""

from __future__ import annotations

import ast
import inspect
from datetime import UTC, datetime
from pathlib import Path

import pytest

from turnfsm.engine import _answer, _approval, _backoff, _decide
from turnfsm.errors import LLMError, PermanentLLMError, TransientLLMError
from turnfsm.model import (
    ApprovalStatus,
    LLMRequest,
    LLMResponse,
    MessageType,
    TextDelta,
    ThinkingDelta,
    ToolCallData,
    ToolCallDelta,
    ToolCallRequest,
)
from turnfsm.states import Trigger
from turnfsm.tools import Approval, ToolRegistry, question_tool, subtask, tool

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@tool
def weather(city: str) -> str:
    """The weather."""
    return city


@tool(approval=Approval.REQUIRED)
def delete_file(path: str) -> str:
    """Delete a file."""
    return path


@tool(approval=Approval.DENY)
def format_disk() -> str:
    """Never."""
    return "no"


TOOLS = ToolRegistry([weather, delete_file, format_disk, question_tool()])


def call(cid: str, name: str, **arguments: object) -> ToolCallRequest:
    return ToolCallRequest(id=cid, tool_name=name, arguments=dict(arguments))


# ---------------------------------------------------------------------- decide


def test_a_text_answer_completes_the_turn() -> None:
    d = _decide.decide_answer([], None, 1, 20, TOOLS)
    assert d.trigger is Trigger.TURN_COMPLETE
    assert d.stop_reason == "completed"
    assert d.decisions == {} and d.results == ()


def test_a_refused_text_answer_completes_with_its_outcome() -> None:
    d = _decide.decide_answer([], "refusal", 1, 20, TOOLS)
    assert (d.trigger, d.stop_reason) == (Trigger.TURN_COMPLETE, "refusal")


def test_calls_the_policy_allows_go_to_the_tools() -> None:
    d = _decide.decide_answer([call("a", "weather", city="Oslo")], None, 1, 20, TOOLS)
    assert d.trigger is Trigger.TOOLS_DECIDED and d.stop_reason is None
    assert d.decisions == {"a": (ApprovalStatus.APPROVED, "policy", None)}
    assert d.results == ()


def test_a_call_needing_approval_waits_for_the_human() -> None:
    calls = [call("a", "weather", city="Oslo"), call("b", "delete_file", path="/x")]
    d = _decide.decide_answer(calls, None, 1, 20, TOOLS)
    assert d.trigger is Trigger.NEEDS_APPROVAL
    assert d.stop_reason == "awaiting_approval"
    assert d.decisions == {"a": (ApprovalStatus.APPROVED, "policy", None)}  # b: the human's


def test_a_denied_call_is_decided_by_policy() -> None:
    d = _decide.decide_answer([call("a", "format_disk")], None, 1, 20, TOOLS)
    assert d.trigger is Trigger.TOOLS_DECIDED
    assert d.decisions == {"a": (ApprovalStatus.DENIED, "policy", "denied by policy")}


def test_a_question_always_waits_whatever_the_policy() -> None:
    d = _decide.decide_answer([call("q", "ask_user", question="Which?")], None, 1, 20, TOOLS)
    assert d.trigger is Trigger.NEEDS_APPROVAL and d.decisions == {}


def test_the_last_allowed_call_runs_no_tools() -> None:
    calls = [call("a", "weather", city="Oslo"), call("b", "weather", city="Rome")]
    d = _decide.decide_answer(calls, None, 3, 3, TOOLS)
    assert (d.trigger, d.stop_reason) == (Trigger.TURN_COMPLETE, "max_iterations")
    assert set(d.decisions) == {"a", "b"}
    assert all(
        v == (ApprovalStatus.DENIED, "system", "max_iterations") for v in d.decisions.values()
    )
    assert [o.success for o in d.results] == [False, False]
    assert all(o.result["status"] == "max_iterations" for o in d.results)  # type: ignore[index]
    assert "limit of 3 LLM calls" in d.results[0].result["error"]  # type: ignore[index]


def test_calls_of_a_cut_answer_never_run() -> None:
    d = _decide.decide_answer([call("a", "weather", city="Oslo")], "length", 1, 20, TOOLS)
    assert (d.trigger, d.stop_reason) == (Trigger.TURN_COMPLETE, "length")
    assert d.decisions == {"a": (ApprovalStatus.DENIED, "system", "length")}
    assert d.results[0].result["status"] == "length"  # type: ignore[index]


def test_decided_calls_are_skipped_by_the_policy() -> None:
    decided = ToolCallRequest(
        id="a", tool_name="delete_file", arguments={}, approval_status=ApprovalStatus.APPROVED
    )
    decisions, needs_human = _approval.policy_decisions([decided], TOOLS)
    assert decisions == {} and needs_human is False


# ---------------------------------------------------------------------- back off


@pytest.mark.parametrize(
    ("transient", "attempt", "expected"),
    [
        (False, 1, (Trigger.LLM_FAILED_PERMANENT, False)),
        (True, 1, (Trigger.LLM_FAILED_TRANSIENT, True)),
        (True, 2, (Trigger.LLM_FAILED_TRANSIENT, True)),
        (True, 3, (Trigger.LLM_FAILED_TRANSIENT, False)),
    ],
)
def test_the_failure_edge(transient: bool, attempt: int, expected: tuple[Trigger, bool]) -> None:
    assert _backoff.failure_edge(transient, attempt, 3) == expected


def test_after_backoff_retries_after_the_time_left() -> None:
    assert _backoff.after_backoff(1, 3, retry_at=105.0, now=100.0) == (Trigger.RETRY, 5.0)
    assert _backoff.after_backoff(2, 3, retry_at=90.0, now=100.0) == (Trigger.RETRY, 0.0)


def test_after_backoff_gives_up_when_exhausted_or_unplanned() -> None:
    assert _backoff.after_backoff(3, 3, retry_at=105.0, now=100.0) == (Trigger.GIVE_UP, 0.0)
    assert _backoff.after_backoff(1, 3, retry_at=None, now=100.0) == (Trigger.GIVE_UP, 0.0)


def test_the_three_failures_trace_comes_out_of_the_pure_functions() -> None:
    """DESIGN's retry rule, max_attempts=3, three transient failures, walked
    through the two functions alone."""
    trace, attempt, now = ["AwaitingLLMResponse"], 1, 0.0
    while True:
        trigger, will_retry = _backoff.failure_edge(True, attempt, 3)
        assert trigger is Trigger.LLM_FAILED_TRANSIENT
        trace.append("TransientFailure")
        after, wait = _backoff.after_backoff(attempt, 3, now + 1.0 if will_retry else None, now)
        if after is Trigger.GIVE_UP:
            trace.append("PermanentFailure")
            break
        now += wait
        attempt += 1
        trace.append("AwaitingLLMResponse")
    assert trace == [
        "AwaitingLLMResponse",
        "TransientFailure",
        "AwaitingLLMResponse",
        "TransientFailure",
        "AwaitingLLMResponse",
        "TransientFailure",
        "PermanentFailure",
    ]


# ---------------------------------------------------------------------- the answer


def _request(**metadata: object) -> LLMRequest:
    request = LLMRequest(context_id="c", model="m", messages=[])
    request.metadata.update(metadata)
    return request


def _conclude(
    response: object,
    failure: LLMError | None = None,
    partial: list[str] | None = None,
    taken: set[str] | None = None,
    **kw: object,
) -> object:
    return _answer.conclude(
        response,
        failure,
        partial or [],
        taken_ids=lambda: taken or set(),
        streamed_thinking=None,
        thinking_fixed=0,
        created_at=T0,
        request=kw.pop("request", _request()),  # type: ignore[arg-type]
        attempt=2,
        iteration=4,
        answer_type=MessageType.TEXT,
        offered=lambda: TOOLS,
    )


def test_chunk_kinds() -> None:
    assert _answer.CHUNK_KINDS[TextDelta] == "text"
    assert _answer.CHUNK_KINDS[ThinkingDelta] == "thinking"
    assert _answer.CHUNK_KINDS[ToolCallDelta] == "call"
    assert _answer.CHUNK_KINDS[LLMResponse] == "response"
    assert _answer.chunk_kind("not a chunk") == "invalid"

    class Sub(TextDelta):
        pass

    assert type(Sub("x")) not in _answer.CHUNK_KINDS
    assert _answer.chunk_kind(Sub("x")) == "text"


def test_a_text_response_becomes_one_assistant_message() -> None:
    out = _conclude(LLMResponse(text="hi", finish_reason="stop"))
    assert isinstance(out, tuple)
    message, calls = out
    assert calls == [] and message.text == "hi"
    assert message.message_type is MessageType.TEXT
    assert (message.metadata.attempt, message.metadata.iteration) == (2, 4)
    assert message.metadata.created_at == T0 and message.metadata.model == "m"


def test_the_view_metadata_is_kept_with_the_answer() -> None:
    out = _conclude(LLMResponse(text="hi"), request=_request(token_budget={"tokens": 9}))
    assert isinstance(out, tuple)
    assert out[0].metadata.extra["view"] == {"token_budget": {"tokens": 9}}


def test_call_ids_are_made_unique_in_the_context() -> None:
    response = LLMResponse(tool_calls=(ToolCallData(id="x", name="weather", arguments={}),))
    out = _conclude(response, taken={"x"})
    assert isinstance(out, tuple)
    (c,) = out[1]
    assert c.id == "x-2" and c.provider_id == "x"


def test_an_answer_that_only_asks_is_a_question() -> None:
    response = LLMResponse(
        tool_calls=(ToolCallData(id="q", name="ask_user", arguments={"question": "Which?"}),)
    )
    out = _conclude(response)
    assert isinstance(out, tuple)
    assert out[0].message_type is MessageType.QUESTION


def test_a_registry_without_a_question_tool_asks_nothing() -> None:
    plain = ToolRegistry([weather, delete_file])
    assert TOOLS.asks and not plain.asks and not ToolRegistry().asks
    calls = [call("q", "ask_user", question="Which?"), call("d", "delete_file", path="x")]
    assert [q.call_id for q in _approval.questions_of(TOOLS, calls)] == ["q"]
    # the same call to an unregistered tool is no question
    assert _approval.questions_of(plain, calls) == ()
    pending = {c.id: c for c in calls}
    denied = {"q": (ApprovalStatus.DENIED, None)}
    assert _approval.checked_decisions("c", TOOLS, pending, denied) == {
        "q": (ApprovalStatus.DENIED, _approval.DECLINED)
    }
    assert _approval.checked_decisions("c", plain, pending, denied) == denied


def test_only_a_registry_with_a_subtask_tool_hosts_children() -> None:
    helper = subtask("helper", "Does a part of the task.", system_prompt="Help.")
    assert ToolRegistry([weather, helper]).hosts
    assert not ToolRegistry([weather, delete_file]).hosts and not ToolRegistry().hosts
    assert not TOOLS.hosts


def test_a_stream_without_a_response_is_an_invalid_answer_with_its_partial_text() -> None:
    out = _conclude(None, partial=["Hel", "lo"])
    assert isinstance(out, PermanentLLMError)
    assert out.kind == "invalid_answer" and out.partial_text == "Hello"


def test_a_failure_keeps_the_text_that_arrived() -> None:
    out = _conclude(None, failure=TransientLLMError("boom", status=503), partial=["ab"])
    assert isinstance(out, LLMError) and out.partial_text == "ab" and out.retryable


def test_a_response_of_the_wrong_shape_is_an_invalid_answer() -> None:
    out = _conclude(LLMResponse(text=3))  # type: ignore[arg-type]
    assert isinstance(out, PermanentLLMError) and out.kind == "invalid_answer"


# ---------------------------------------------------------------------- sans-IO


PURE = ("_decide", "_backoff", "_answer", "_approval")
EFFECTS = ("_prepare", "_call_llm", "_decide", "_run_tools", "_backoff", "_calls", "_requests")


def test_the_pure_decisions_do_not_await() -> None:
    for fn in (
        _decide.decide_answer,
        _backoff.failure_edge,
        _backoff.after_backoff,
        _answer.conclude,
        _answer.build_answer,
        _answer.chunk_kind,
        _approval.policy_decisions,
    ):
        assert not inspect.iscoroutinefunction(fn), fn


def test_effects_and_decisions_do_not_import_the_drive_loop() -> None:
    """Effects reach the engine through the declared Host, never its class."""
    here = Path(_decide.__file__).parent
    for name in {*PURE, *EFFECTS}:
        tree = ast.parse((here / f"{name}.py").read_text())
        imported = {
            (node.module or "")
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1
        } | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1 and not node.module
            for alias in node.names
        }
        assert not imported & {"_drive", "_engine", "_api"}, (name, imported)
