"""The scripted LLM (turnfsm.adapters.llm.scripted): AnswerSpec and ScriptedLLM."""

from __future__ import annotations

from typing import Any

import pytest

from turnfsm.adapters.llm import (
    LLM,
    AnswerSpec,
    LLMChunk,
    LLMRequest,
    LLMResponse,
    ScriptedLLM,
    TextDelta,
    ThinkingDelta,
    ToolCallData,
)
from turnfsm.errors import InvalidInput, LLMError, PermanentLLMError, TransientLLMError

pytestmark = pytest.mark.anyio


def request(model: str = "gpt-test", **kw: Any) -> LLMRequest:
    return LLMRequest(
        context_id="ctx", model=model, messages=[{"role": "user", "content": "hi"}], **kw
    )


async def collect(llm: ScriptedLLM, req: LLMRequest | None = None) -> list[LLMChunk]:
    return [chunk async for chunk in llm.stream(req or request())]


async def collect_until_error(
    llm: ScriptedLLM, req: LLMRequest | None = None
) -> tuple[list[LLMChunk], LLMError]:
    got: list[LLMChunk] = []
    with pytest.raises(LLMError) as info:
        async for chunk in llm.stream(req or request()):
            got.append(chunk)
    return got, info.value


# --- AnswerSpec.parse: every form of docs/script-format.md ----------------------------------

TOOL_CALL = {"id": "call_1", "name": "get_weather", "arguments": {"city": "London"}}

VALID_FORMS: list[dict[str, Any]] = [
    {"text": "Hello"},
    {"text": ""},
    {"chunks": ["Hel", "lo"]},
    {"chunks": []},
    {"tool_calls": [TOOL_CALL]},
    {"tool_calls": [TOOL_CALL], "text": "checking"},
    {"tool_calls": [TOOL_CALL], "chunks": ["check", "ing"]},
    {"tool_calls": [TOOL_CALL, {"id": "call_2", "name": "now"}]},
    {"tool_calls": [{"id": "c", "name": "f", "arguments": '{"a": 1}'}]},
    {"text": "x", "thinking": "hmm", "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
    {"chunks": ["a", "b"], "thinking": "hmm", "usage": {"total_tokens": 4}},
    {"chunks": ["a", "b", "c"], "cancel_after": 1},
    {"chunks": ["a", "b"], "cancel_after": 0},
    {"chunks": ["a", "b", "c"], "fail_after": 1, "error": {"status": 503}},
    {"chunks": ["a"], "fail_after": 0, "error": {"kind": "timeout"}},
    {"text": "x", "expect_request": {"message_count": 2, "roles": ["system", "user"]}},
    {
        "chunks": ["x"],
        "expect_request": {
            "system_contains": "helpful",
            "tools": ["get_weather"],
            "last_user_contains": "London",
        },
    },
    {"text": "x", "finish_reason": "length"},
    {"llm_error": {"status": 429, "retry_after": 0.5, "message": "slow down"}},
    {"llm_error": {"status": 500}},
    {"llm_error": {"kind": "timeout"}},
    {"llm_error": {"kind": "connection"}},
    {"error": {"status": 400}},
]


@pytest.mark.parametrize("form", VALID_FORMS, ids=lambda f: "-".join(sorted(f)))
def test_parse_accepts_every_script_form(form: dict[str, Any]) -> None:
    spec = AnswerSpec.parse(form)
    assert isinstance(spec, AnswerSpec)


def test_parse_llm_error_is_an_error_answer() -> None:
    spec = AnswerSpec.parse({"llm_error": {"status": 429, "retry_after": 0.5, "message": "m"}})
    assert spec.error is not None
    assert spec.error.status == 429
    assert spec.error.retry_after == 0.5
    assert spec.error.message == "m"
    assert spec.text is None and spec.chunks is None and spec.tool_calls is None


def test_parse_does_not_change_its_input() -> None:
    form = {"llm_error": {"status": 429}}
    AnswerSpec.parse(form)
    assert form == {"llm_error": {"status": 429}}


def test_answer_spec_is_frozen() -> None:
    spec = AnswerSpec.parse({"text": "x"})
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error
        spec.text = "y"  # type: ignore[misc]


INVALID_FORMS: list[tuple[dict[str, Any], str]] = [
    ({}, "answer"),
    ({"txt": "hi"}, "answer.txt"),
    ({"text": 1}, "answer.text"),
    ({"chunks": "ab"}, "answer.chunks"),
    ({"chunks": ["a", 2]}, "answer.chunks.1"),
    ({"text": "a", "chunks": ["a"]}, "answer"),
    ({"tool_calls": [{"id": "", "name": "f"}]}, "answer.tool_calls.0.id"),
    ({"tool_calls": [{"id": "c", "name": ""}]}, "answer.tool_calls.0.name"),
    ({"tool_calls": [{"name": "f"}]}, "answer.tool_calls.0.id"),
    ({"tool_calls": [{"id": "c", "name": "f", "args": {}}]}, "answer.tool_calls.0.args"),
    ({"tool_calls": "call_1"}, "answer.tool_calls"),
    ({"chunks": ["a"], "cancel_after": -1}, "answer.cancel_after"),
    ({"text": "a", "cancel_after": 1}, "answer"),
    ({"chunks": ["a"], "fail_after": 1}, "answer"),
    ({"text": "a", "fail_after": 0, "error": {"status": 500}}, "answer"),
    ({"error": {"status": 500}, "text": "x"}, "answer"),
    ({"usage": "lots", "text": "x"}, "answer.usage"),
    ({"llm_error": {"status": 429}, "text": "x"}, "answer"),
]


@pytest.mark.parametrize(("form", "where"), INVALID_FORMS, ids=lambda v: repr(v))
def test_parse_refuses_malformed_answers_naming_the_field(form: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidInput) as info:
        AnswerSpec.parse(form)
    assert info.value.where == where
    assert info.value.reason
    assert str(info.value).startswith(f"{where}: ")


@pytest.mark.parametrize(
    "error",
    [
        {},
        {"status": 429, "kind": "timeout"},
        {"status": 42},
        {"status": 600},
        {"kind": "dns"},
        {"status": 500, "retry_after": -1},
        {"status": 500, "extra": True},
    ],
    ids=repr,
)
def test_parse_refuses_malformed_llm_errors(error: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput) as info:
        AnswerSpec.parse({"llm_error": error})
    assert info.value.where.startswith("answer.")
    assert "error" in info.value.where


def test_malformed_llm_error_names_the_llm_error_field() -> None:
    with pytest.raises(InvalidInput) as info:
        AnswerSpec.parse({"llm_error": {"status": 42}})
    assert info.value.where == "answer.llm_error.status"


def test_invalid_input_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        AnswerSpec.parse({"text": 1})


# --- the response ---------------------------------------------------------------------------


def test_response_of_a_text_answer() -> None:
    spec = AnswerSpec.parse({"text": "Hi", "thinking": "t", "usage": {"total_tokens": 2}})
    assert spec.response("m") == LLMResponse(
        text="Hi", thinking="t", usage={"total_tokens": 2}, finish_reason="stop", model="m"
    )


def test_response_decodes_tool_call_arguments() -> None:
    spec = AnswerSpec.parse(
        {
            "tool_calls": [
                {"id": "a", "name": "f", "arguments": {"x": 1}},
                {"id": "b", "name": "f", "arguments": '{"y": 2}'},
                {"id": "c", "name": "f", "arguments": "[1, 2]"},
                {"id": "d", "name": "f", "arguments": "{not json"},
                {"id": "e", "name": "f"},
            ]
        }
    )
    resp = spec.response()
    assert resp.tool_calls == (
        ToolCallData("a", "f", {"x": 1}),
        ToolCallData("b", "f", {"y": 2}),
        ToolCallData("c", "f", "[1, 2]"),
        ToolCallData("d", "f", "{not json"),
        ToolCallData("e", "f", {}),
    )
    assert resp.finish_reason == "tool_calls"
    assert resp.text == ""


# --- ScriptedLLM.stream ---------------------------------------------------------------------


def test_scripted_llm_is_an_llm() -> None:
    assert isinstance(ScriptedLLM([]), LLM)


async def test_whole_answer_is_one_response() -> None:
    llm = ScriptedLLM([{"text": "Hello"}])
    assert await collect(llm, request("m1")) == [
        LLMResponse(text="Hello", finish_reason="stop", model="m1")
    ]


async def test_streamed_answer_yields_deltas_then_the_response() -> None:
    llm = ScriptedLLM([{"chunks": ["Hel", "lo"], "usage": {"total_tokens": 3}}])
    assert await collect(llm) == [
        TextDelta("Hel"),
        TextDelta("lo"),
        LLMResponse(
            text="Hello", usage={"total_tokens": 3}, finish_reason="stop", model="gpt-test"
        ),
    ]


async def test_streamed_thinking_comes_first() -> None:
    llm = ScriptedLLM([{"chunks": ["a"], "thinking": "hmm"}])
    got = await collect(llm)
    assert got[0] == ThinkingDelta("hmm")
    assert got[1] == TextDelta("a")
    assert isinstance(got[2], LLMResponse) and got[2].thinking == "hmm"


async def test_streamed_tool_calls_arrive_in_the_response() -> None:
    llm = ScriptedLLM([{"chunks": ["checking"], "tool_calls": [TOOL_CALL]}])
    got = await collect(llm)
    assert got[:-1] == [TextDelta("checking")]
    resp = got[-1]
    assert isinstance(resp, LLMResponse)
    assert resp.text == "checking"
    assert resp.tool_calls == (ToolCallData("call_1", "get_weather", {"city": "London"}),)


async def test_answers_are_played_in_order_and_requests_recorded() -> None:
    llm = ScriptedLLM([{"text": "one"}, {"chunks": ["two"]}])
    assert llm.remaining == 2
    r1, r2 = request("a"), request("b")
    first = await collect(llm, r1)
    second = await collect(llm, r2)
    assert first[-1].text == "one"  # type: ignore[union-attr]
    assert second[-1].text == "two"  # type: ignore[union-attr]
    assert llm.remaining == 0
    assert llm.requests == [r1, r2]
    assert llm.requests[0] is r1


async def test_record_false_keeps_no_requests() -> None:
    llm = ScriptedLLM([{"text": "x"}], record=False)
    await collect(llm)
    assert llm.requests == []


async def test_accepts_answer_specs_and_responses() -> None:
    resp = LLMResponse(text="raw", finish_reason="stop")
    llm = ScriptedLLM([AnswerSpec.parse({"text": "spec"}), resp])
    assert (await collect(llm))[-1].text == "spec"  # type: ignore[union-attr]
    assert await collect(llm) == [resp]


def test_malformed_answer_in_the_list_is_refused_at_construction() -> None:
    with pytest.raises(InvalidInput) as info:
        ScriptedLLM([{"text": "ok"}, {"text": 1}])
    assert info.value.where == "answers[1]"
    assert "answer.text" in info.value.reason


async def test_exhausted_script_fails_permanently() -> None:
    llm = ScriptedLLM([{"text": "only"}])
    await collect(llm)
    got, err = await collect_until_error(llm)
    assert got == []
    assert type(err) is PermanentLLMError
    assert err.retryable is False
    assert "no answer left" in str(err)
    assert "2" in str(err)  # names the call


async def test_empty_script_fails_permanently() -> None:
    _, err = await collect_until_error(ScriptedLLM([]))
    assert isinstance(err, PermanentLLMError)


# --- errors ---------------------------------------------------------------------------------

TRANSIENT_STATUSES = [408, 409, 429, 500, 502, 503, 504]
PERMANENT_STATUSES = [400, 401, 403, 404, 422]


@pytest.mark.parametrize("status", TRANSIENT_STATUSES)
async def test_transient_statuses(status: int) -> None:
    llm = ScriptedLLM([{"llm_error": {"status": status, "retry_after": 1.5}}])
    got, err = await collect_until_error(llm)
    assert got == []
    assert type(err) is TransientLLMError
    assert err.retryable is True
    assert err.status == status
    assert err.retry_after == 1.5
    assert err.partial_text == ""
    assert str(status) in err.describe()


@pytest.mark.parametrize("status", PERMANENT_STATUSES)
async def test_permanent_statuses(status: int) -> None:
    llm = ScriptedLLM([{"llm_error": {"status": status, "message": "nope"}}])
    _, err = await collect_until_error(llm)
    assert type(err) is PermanentLLMError
    assert err.retryable is False
    assert err.status == status
    assert err.message == "nope"
    assert err.describe() == f"HTTP {status}: nope"


@pytest.mark.parametrize("kind", ["timeout", "connection"])
async def test_errors_without_status_are_transient(kind: str) -> None:
    _, err = await collect_until_error(ScriptedLLM([{"llm_error": {"kind": kind}}]))
    assert type(err) is TransientLLMError
    assert err.status is None
    assert err.kind == kind
    assert err.describe().startswith(f"{kind}: ")


@pytest.mark.parametrize(
    ("status", "transient"),
    [(s, True) for s in TRANSIENT_STATUSES] + [(s, False) for s in PERMANENT_STATUSES],
)
def test_from_status_maps_as_design_says(status: int, transient: bool) -> None:
    err = LLMError.from_status(status)
    assert isinstance(err, TransientLLMError if transient else PermanentLLMError)
    assert err.message == f"HTTP {status}"
    assert err.describe() == f"HTTP {status}"


async def test_default_error_message_names_the_status() -> None:
    _, err = await collect_until_error(ScriptedLLM([{"llm_error": {"status": 503}}]))
    assert err.message == "HTTP 503"


async def test_fail_after_yields_the_chunks_then_raises_with_partial_text() -> None:
    llm = ScriptedLLM(
        [{"chunks": ["Hel", "lo", " world"], "fail_after": 2, "error": {"status": 502}}]
    )
    got, err = await collect_until_error(llm)
    assert got == [TextDelta("Hel"), TextDelta("lo")]
    assert type(err) is TransientLLMError
    assert err.status == 502
    assert err.partial_text == "Hello"


async def test_fail_after_zero_raises_before_any_chunk() -> None:
    llm = ScriptedLLM([{"chunks": ["a"], "fail_after": 0, "error": {"status": 401}}])
    got, err = await collect_until_error(llm)
    assert got == []
    assert type(err) is PermanentLLMError
    assert err.partial_text == ""


async def test_fail_after_all_chunks_raises_instead_of_the_response() -> None:
    llm = ScriptedLLM([{"chunks": ["a", "b"], "fail_after": 2, "error": {"kind": "connection"}}])
    got, err = await collect_until_error(llm)
    assert got == [TextDelta("a"), TextDelta("b")]
    assert type(err) is TransientLLMError
    assert err.kind == "connection"
    assert err.partial_text == "ab"


async def test_fail_after_with_thinking() -> None:
    llm = ScriptedLLM(
        [{"chunks": ["a", "b"], "thinking": "t", "fail_after": 1, "error": {"status": 500}}]
    )
    got, err = await collect_until_error(llm)
    assert got == [ThinkingDelta("t"), TextDelta("a")]
    assert err.partial_text == "a"


# --- cancel_after ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 2, 3])
async def test_cancel_after_requests_a_cancel_after_n_chunks(n: int) -> None:
    chunks = ["a", "b", "c"]
    seen: list[int] = []
    delivered: list[LLMChunk] = []

    def cancel() -> None:
        seen.append(len(delivered))

    llm = ScriptedLLM([{"chunks": chunks, "cancel_after": n}])
    async for chunk in llm.stream(request(request_cancel=cancel)):
        delivered.append(chunk)
    assert seen == [n]
    # the stream itself goes on: stopping it is the engine's job
    assert delivered[:-1] == [TextDelta(c) for c in chunks]
    assert isinstance(delivered[-1], LLMResponse)


async def test_no_cancel_without_cancel_after() -> None:
    calls: list[str] = []
    llm = ScriptedLLM([{"chunks": ["a", "b"]}])
    async for _ in llm.stream(request(request_cancel=lambda: calls.append("x"))):
        pass
    assert calls == []


# --- handlers -------------------------------------------------------------------------------


async def test_sync_handler() -> None:
    seen: list[LLMRequest] = []

    def handler(req: LLMRequest) -> dict[str, Any]:
        seen.append(req)
        return {"text": f"you said {req.messages[-1]['content']}"}

    llm = ScriptedLLM(handler)
    req = request()
    got = await collect(llm, req)
    assert got[-1].text == "you said hi"  # type: ignore[union-attr]
    assert seen == [req]
    assert llm.requests == [req]
    assert llm.remaining == 0


async def test_async_handler() -> None:
    async def handler(req: LLMRequest) -> dict[str, Any]:
        return {"chunks": ["x", "y"], "tool_calls": [TOOL_CALL]}

    got = await collect(ScriptedLLM(handler))
    assert got[:2] == [TextDelta("x"), TextDelta("y")]
    assert isinstance(got[2], LLMResponse)
    assert got[2].tool_calls[0].id == "call_1"


async def test_handler_is_called_for_every_request() -> None:
    count = 0

    def handler(req: LLMRequest) -> dict[str, Any]:
        nonlocal count
        count += 1
        return {"text": str(count)}

    llm = ScriptedLLM(handler)
    for expected in ["1", "2", "3"]:
        assert (await collect(llm))[-1].text == expected  # type: ignore[union-attr]


@pytest.mark.parametrize("is_async", [False, True])
async def test_handler_may_return_a_response_or_a_spec(is_async: bool) -> None:
    resp = LLMResponse(text="direct")
    answers: list[Any] = [resp, AnswerSpec.parse({"text": "spec"})]

    def sync_handler(req: LLMRequest) -> Any:
        return answers.pop(0)

    async def async_handler(req: LLMRequest) -> Any:
        return answers.pop(0)

    llm = ScriptedLLM(async_handler if is_async else sync_handler)
    assert await collect(llm) == [resp]
    assert (await collect(llm))[-1].text == "spec"  # type: ignore[union-attr]


@pytest.mark.parametrize("is_async", [False, True])
async def test_handler_errors(is_async: bool) -> None:
    def sync_handler(req: LLMRequest) -> Any:
        return {"llm_error": {"status": 429, "retry_after": 2}}

    async def async_handler(req: LLMRequest) -> Any:
        return sync_handler(req)

    _, err = await collect_until_error(ScriptedLLM(async_handler if is_async else sync_handler))
    assert type(err) is TransientLLMError
    assert err.retry_after == 2


async def test_handler_returning_a_malformed_answer_is_invalid_input() -> None:
    llm = ScriptedLLM(lambda req: {"text": 1})
    with pytest.raises(InvalidInput, match=r"answer\.text"):
        await collect(llm)
