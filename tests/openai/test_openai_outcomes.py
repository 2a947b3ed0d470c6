"""Answers that are not a plain text answer, from the corpus in ``openai_corpus``.

For every body, served byte for byte by the loopback server:

- the adapter reads what the SDK's own accumulation of the same bytes reads
  (``chat.completions.stream(...).get_final_completion()``, which raises on
  ``length`` / ``content_filter`` and carries the completion;
  ``chat.completions.create``; ``responses.stream`` and ``responses.create``);
- the engine stores it (refusal apart from text, finish and incomplete
  reasons, reasoning items, phase, logprobs) and ends the turn with the
  outcome the provider gave, never a plain ``completed`` for an abnormal end;
- the next request sends it back the way each API expects.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import kit
import pytest
from canonical import WEATHER_CALLS, get_weather
from openai_corpus import CASES, Case
from openai_loopback import LoopbackServer, Reply
from openai_samples import ResponsesStream, completion, text_stream

from turnfsm import ChatContext, InternalMessage, Role
from turnfsm.adapters.llm._openai_responses import ENCRYPTED_REASONING
from turnfsm.audit import audit_records, verify_audit_log
from turnfsm.model import LLMRequest, LLMResponse

if TYPE_CHECKING:
    import openai

    from turnfsm.adapters.llm.openai import OpenAIChatAdapter, OpenAIResponsesAdapter


pytestmark = pytest.mark.anyio

IDS = [c.name for c in CASES]


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    WEATHER_CALLS.clear()


def _adapter(case: Case, loopback: LoopbackServer) -> OpenAIChatAdapter | OpenAIResponsesAdapter:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter, OpenAIResponsesAdapter

    options: dict[str, Any] = {
        "base_url": loopback.url,
        "api_key": "sk-loop",
        "timeout": 10,
        "stream": case.streamed,
    }
    if case.api == "chat":
        return OpenAIChatAdapter(**options)
    return OpenAIResponsesAdapter(store=False, **options)


def _text_reply(case: Case) -> Reply:
    if case.api == "chat":
        return (
            Reply(events=text_stream(["Fine."]))
            if case.streamed
            else Reply(json=completion("Fine."))
        )
    events = ResponsesStream().text(["Fine."]).completed()
    return Reply(events=events) if case.streamed else Reply(json=events[-1]["response"])


def _first_answer(ctx: ChatContext) -> InternalMessage:
    return next(n.message for n in ctx.history() if n.message.role is Role.ASSISTANT)


# ---------------------------------------------------------------------- adapter vs SDK


async def _ours(case: Case, loopback: LoopbackServer) -> LLMResponse:
    loopback.script(case.reply())
    async with _adapter(case, loopback) as llm:
        request = LLMRequest(
            "c1", "gpt-4o", [{"role": "user", "content": "Hi"}], parameters=case.parameters
        )
        chunks = [c async for c in llm.stream(request)]
    final = chunks[-1]
    assert isinstance(final, LLMResponse)
    return final


async def _sdk_chat(case: Case, client: openai.AsyncOpenAI) -> Any:
    import openai

    messages: Any = [{"role": "user", "content": "Hi"}]
    if not case.streamed:
        return (await client.chat.completions.create(model="gpt-4o", messages=messages)).choices[0]
    async with client.chat.completions.stream(model="gpt-4o", messages=messages) as stream:
        try:
            final = await stream.get_final_completion()
        except (openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError) as exc:
            assert case.expect.stop_reason in ("length", "content_filter")
            final = exc.completion  # the SDK marks the end abnormal, and keeps the answer
    return final.choices[0]


async def _sdk_responses(case: Case, client: openai.AsyncOpenAI) -> Any:
    if not case.streamed:
        return await client.responses.create(model="o4-mini", input="Hi")
    last: Any = None
    async with client.responses.stream(model="o4-mini", input="Hi") as stream:
        async for event in stream:
            if event.type in ("response.completed", "response.incomplete"):
                last = event.response
        if last is not None and last.status == "completed":
            last = await stream.get_final_response()
    return last


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_the_adapter_reads_what_the_sdk_reads(loopback: LoopbackServer, case: Case) -> None:
    import openai

    ours = await _ours(case, loopback)
    loopback.script(case.reply())
    async with openai.AsyncOpenAI(base_url=loopback.url, api_key="sk", max_retries=0) as client:
        if case.api == "chat":
            choice = await _sdk_chat(case, client)
            msg = choice.message
            assert ours.text == (msg.content or "")
            assert ours.refusal == msg.refusal
            assert ours.finish_reason == choice.finish_reason
            calls = [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or ()]
            if choice.logprobs is not None and choice.logprobs.content is not None:
                assert ours.logprobs is not None
                assert [t["token"] for t in ours.logprobs] == [
                    t.token for t in choice.logprobs.content
                ]
        else:
            resp = await _sdk_responses(case, client)
            assert ours.text == resp.output_text
            refusals = [
                p.refusal
                for item in resp.output
                if item.type == "message"
                for p in item.content
                if p.type == "refusal"
            ]
            assert ours.refusal == ("".join(refusals) if refusals else None)
            reasoning = [i for i in resp.output if i.type == "reasoning"]
            assert [(r.id, r.encrypted_content) for r in reasoning] == [
                (r.id, r.encrypted_content) for r in ours.reasoning
            ]
            summary = [s.text for r in reasoning for s in r.summary]
            assert ours.thinking == ("\n\n".join(summary) or None)
            phases = [i.phase for i in resp.output if i.type == "message" and i.phase]
            assert ours.phase == (phases[-1] if phases else None)
            reason = resp.incomplete_details.reason if resp.incomplete_details else None
            assert ours.incomplete_reason == reason
            assert (resp.status == "incomplete") == (ours.incomplete_reason is not None)
            calls = [
                (i.call_id, i.name, i.arguments) for i in resp.output if i.type == "function_call"
            ]
            tokens = [
                t.token
                for item in resp.output
                if item.type == "message"
                for p in item.content
                if p.type == "output_text"
                for t in p.logprobs or ()
            ]
            if tokens:
                assert ours.logprobs is not None
                assert [t["token"] for t in ours.logprobs] == tokens
    assert [(c.id, c.name) for c in ours.tool_calls] == [(c[0], c[1]) for c in calls]
    assert list(case.expect.calls) == calls


# ---------------------------------------------------------------------- engine: kept, sent back


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_the_engine_keeps_the_outcome_and_sends_it_back(
    loopback: LoopbackServer, case: Case
) -> None:
    expect = case.expect
    loopback.script(case.reply(), _text_reply(case), _text_reply(case))
    llm = _adapter(case, loopback)
    async with llm, kit.make_engine(llm=llm, tools=[get_weather]).engine as engine:
        cid = await engine.create_context(model="gpt-4o", parameters=case.parameters)
        turn = await engine.send(cid, "Hi")
        assert str(turn.stop_reason) == expect.stop_reason
        if len(loopback.requests) == 1:
            await engine.send(cid, "Go on")
        ctx = await engine.get_context(cid)
        steps = await engine.steps(cid)
    answer = _first_answer(ctx)
    meta = answer.metadata
    assert answer.text == expect.text
    assert answer.refusal == expect.refusal
    assert meta.finish_reason == expect.finish_reason
    assert meta.incomplete_reason == expect.incomplete_reason
    assert answer.thinking == expect.thinking
    assert answer.phase == expect.phase
    assert [r.id for r in answer.reasoning or ()] == list(expect.reasoning_ids)
    assert [r.encrypted_content for r in answer.reasoning or ()] == list(expect.encrypted)
    assert [c.id for c in answer.tool_calls or ()] == [c[0] for c in expect.calls]
    if expect.logprob_tokens is None:
        assert meta.logprobs is None
    else:
        assert meta.logprobs is not None
        assert tuple(t["token"] for t in meta.logprobs) == expect.logprob_tokens
    assert answer.outcome == (None if expect.stop_reason == "completed" else expect.stop_reason)
    abnormal = expect.stop_reason != "completed"
    if expect.calls and abnormal:  # never run: each call got an error result
        assert WEATHER_CALLS == []
        results = [n.message.tool_result for n in ctx.history() if n.message.tool_result]
        assert [(r.request_id, r.success) for r in results] == [(c[0], False) for c in expect.calls]
        assert results[0].result["status"] == expect.stop_reason
    elif expect.calls:
        assert len(WEATHER_CALLS) == len(expect.calls)

    # the audit says how the turn ended, and still verifies
    records = audit_records(cid, steps, ctx.message_pool.values())
    ends = [r for r in records if r.trigger == "turn_complete"]
    assert ends[0].outcome == expect.stop_reason
    assert verify_audit_log([json.dumps(r.to_json()) for r in records]).ok

    nxt = loopback.bodies[1]
    if case.api == "chat":
        _check_chat_next(case, nxt)
    else:
        _check_responses_next(case, loopback.bodies[0], nxt)


def _check_chat_next(case: Case, body: dict[str, Any]) -> None:
    expect = case.expect
    sent = body["messages"][1]
    assert sent["role"] == "assistant"
    assert "responses_items" not in sent
    if expect.refusal is not None:
        assert sent == {"role": "assistant", "content": None, "refusal": expect.refusal}
        return
    assert "refusal" not in sent
    assert sent["content"] == (expect.text or (None if expect.calls else ""))
    assert [
        (c["id"], c["function"]["name"], _as_json(c["function"]["arguments"]))
        for c in sent.get("tool_calls", ())
    ] == [(i, n, _as_json(a)) for i, n, a in expect.calls]


def _as_json(raw: str) -> Any:
    """Argument text as the value it encodes (the engine re-encodes an object it
    decoded); text that is not JSON as it is."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _check_responses_next(case: Case, first: dict[str, Any], body: dict[str, Any]) -> None:
    expect = case.expect
    assert first["store"] is False
    assert ENCRYPTED_REASONING in first["include"]
    if case.parameters.get("logprobs"):
        assert "message.output_text.logprobs" in first["include"]
        assert "logprobs" not in first
    items = body["input"][1:]
    reasoning = [i for i in items if i["type"] == "reasoning"]
    assert [(r["id"], r.get("encrypted_content")) for r in reasoning] == list(
        zip(expect.reasoning_ids, expect.encrypted, strict=True)
    )
    if reasoning:
        summary = [p["text"] for r in reasoning for p in r["summary"]]
        assert "\n\n".join(summary) == expect.thinking
        assert items[0]["type"] == "reasoning"  # reasoning first, as it was produced
    messages = [i for i in items if i["type"] == "message" and i["role"] == "assistant"]
    if expect.refusal is not None:
        assert messages[0]["content"] == [{"type": "refusal", "refusal": expect.refusal}]
    elif expect.text:
        assert messages[0]["content"] == expect.text
        assert messages[0].get("phase") == expect.phase
    calls = [
        (i["call_id"], i["name"], _as_json(i["arguments"]))
        for i in items
        if i["type"] == "function_call"
    ]
    assert calls == [(i, n, _as_json(a)) for i, n, a in expect.calls]


def test_streamed_and_whole_reasoning_give_the_same_thinking() -> None:
    """The deltas a subscriber sees, the streamed answer's ``thinking`` and the
    whole answer's are one text: the summary parts joined by a blank line."""
    from openai_corpus import RESPONSES_CASES, THINKING

    from turnfsm.adapters.llm._openai_responses import (
        ResponsesStreamAssembler,
        responses_response,
    )
    from turnfsm.model import ThinkingDelta

    by_name = {c.name: c for c in RESPONSES_CASES}
    assembler = ResponsesStreamAssembler()
    deltas = []
    for event in by_name["resp_reasoning_stream"].body:
        deltas += [d.text for d in assembler.feed(event) if isinstance(d, ThinkingDelta)]
    streamed = assembler.finish()
    whole = responses_response(by_name["resp_reasoning_whole"].body)
    assert "".join(deltas) == streamed.thinking == whole.thinking == THINKING
    assert THINKING.count("\n\n**") == 1  # two parts, their boundary kept
    assert streamed.reasoning == whole.reasoning
    assert [r.summary for r in whole.reasoning] == [
        (
            "**Checking the forecast**\n\nThe user wants the weather in Oslo.",
            "**Choosing the tool**\n\nI will call get_weather.",
        )
    ]


@pytest.mark.parametrize(
    "name", ["chat_refusal_stream", "chat_length_stream", "chat_content_filter_whole"]
)
async def test_the_recorder_writes_the_outcome_and_the_script_replays(
    loopback: LoopbackServer, name: str
) -> None:
    from turnfsm import Engine
    from turnfsm.replay import Recorder, replay

    case = next(c for c in CASES if c.name == name)
    loopback.script(case.reply())
    llm = _adapter(case, loopback)
    recorder = Recorder(llm)
    async with llm, Engine(llm=recorder.llm, tools=recorder.tools) as engine:
        await recorder.start(engine)
        turn = await recorder.send("Hi")
        script = await recorder.script()
    step = next(s["llm"] for s in script["steps"] if "llm" in s)
    if case.expect.refusal is not None:
        assert step["refusal"] == case.expect.refusal
        assert step.get("text", "") == "" and "".join(step.get("chunks", [])) == ""
    else:
        assert step["finish_reason"] == case.expect.finish_reason
    result = await replay(script)
    assert result.ok, result.report()
    assert result.trace == ["Idle", *turn.states]
    stops = [e["stop_reason"] for e in result.events if e.get("kind") == "TurnCompleted"]
    assert stops == [case.expect.stop_reason]


# ---------------------------------------------------------------------- turnfsm chat


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("chat_refusal_stream", f"refused> {CASES[0].expect.refusal}"),
        ("chat_length_stream", "[the answer was cut off at the token limit]"),
        ("chat_content_filter_stream", "[the provider's content filter stopped the answer"),
        ("resp_incomplete_whole", "[the answer was cut off at the token limit]"),
    ],
)
async def test_turnfsm_chat_shows_the_outcome_in_one_line(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch, name: str, line: str
) -> None:
    import argparse
    import io

    from turnfsm.cli import _chat

    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TURNFSM_STORE"):
        monkeypatch.delenv(var, raising=False)
    case = next(c for c in CASES if c.name == name)

    async def run(*more: str) -> tuple[int, str]:
        loopback.script(case.reply())
        parser = argparse.ArgumentParser(prog="turnfsm")
        _chat.add_parser(parser.add_subparsers(dest="command"))
        argv = ["chat", "--base-url", loopback.url, "--store", "memory://", "-m", "Hi"]
        if case.api == "responses":
            argv.append("--responses")
        if not case.streamed:
            argv.append("--no-stream")
        out, err = io.StringIO(), io.StringIO()
        code = await _chat.run_chat(
            parser.parse_args([*argv, *more]), stdin=io.StringIO(""), out=out, err=err
        )
        return code, out.getvalue()

    code, out = await run()
    assert code == 0
    shown = [text for text in out.splitlines() if text.startswith(line)]
    assert len(shown) == 1, out
    code, out = await run("--json")
    doc = json.loads(out)
    assert doc["stop_reason"] == case.expect.stop_reason
    answer = doc["messages"][1]
    assert answer["outcome"] == case.expect.stop_reason
    assert answer.get("refusal") == case.expect.refusal


# ---------------------------------------------------------------------- n, store, include


async def test_n_above_one_fails_before_anything_is_sent(loopback: LoopbackServer) -> None:
    from turnfsm.adapters.llm.openai import OpenAIChatAdapter

    llm = OpenAIChatAdapter(base_url=loopback.url, api_key="sk", timeout=10)
    async with llm, kit.make_engine(llm=llm).engine as engine:
        cid = await engine.create_context(parameters={"n": 3})
        turn = await engine.send(cid, "Hi")
    assert str(turn.stop_reason) == "failed"
    assert turn.error is not None and "parameters.n" in turn.error and "n=1" in turn.error
    assert loopback.requests == []


def test_store_false_asks_for_encrypted_reasoning_once() -> None:
    from turnfsm.adapters.llm._openai_responses import responses_request_body

    request = LLMRequest("c", "o4-mini", [{"role": "user", "content": "Hi"}])
    assert "include" not in responses_request_body(request, stream=False)
    assert "store" not in responses_request_body(request, stream=False)
    body = responses_request_body(request, stream=False, store=False)
    assert (body["store"], body["include"]) == (False, [ENCRYPTED_REASONING])
    request.parameters = {"store": False, "include": [ENCRYPTED_REASONING, "x"], "logprobs": True}
    body = responses_request_body(request, stream=False, store=True)  # the parameter wins
    assert body["store"] is False
    assert body["include"] == [ENCRYPTED_REASONING, "x", "message.output_text.logprobs"]
    assert "logprobs" not in body


def test_store_false_leaves_out_reasoning_it_cannot_send_back() -> None:
    from turnfsm.adapters.llm._openai_responses import responses_request_body
    from turnfsm.model import RESPONSES_KEY

    assistant = {
        "role": "assistant",
        "content": "Done.",
        RESPONSES_KEY: {
            "reasoning": [
                {"id": "rs_kept_by_the_api", "summary": ["a"]},
                {"id": "rs_encrypted", "summary": ["b"], "encrypted_content": "gAAA"},
            ]
        },
    }
    request = LLMRequest("c", "o4-mini", [{"role": "user", "content": "Hi"}, assistant])
    ids = [i.get("id") for i in responses_request_body(request, stream=False)["input"]]
    assert ids[1:3] == ["rs_kept_by_the_api", "rs_encrypted"]
    body = responses_request_body(request, stream=False, store=False)
    reasoning = [i for i in body["input"] if i["type"] == "reasoning"]
    assert reasoning == [
        {
            "type": "reasoning",
            "id": "rs_encrypted",
            "summary": [{"type": "summary_text", "text": "b"}],
            "encrypted_content": "gAAA",
        }
    ]


def test_the_input_items_sent_back_have_the_sdk_types() -> None:
    """Reasoning, calls, results and an assistant message with its phase are
    what ``ResponseInputParam`` declares. A refusal part exists only in the
    output-message form, which also wants the message's ``id`` and ``status``;
    they are not kept, so that one item is sent without them (see
    docs/architecture.md)."""
    import openai
    from pydantic import TypeAdapter

    from turnfsm.adapters.llm._openai_responses import responses_input
    from turnfsm.model import RESPONSES_KEY

    checker: Any = TypeAdapter(openai.types.responses.ResponseInputParam)
    messages = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
            RESPONSES_KEY: {
                "reasoning": [{"id": "rs_1", "summary": ["a", "b"], "encrypted_content": "gAAA"}],
                "phase": "commentary",
            },
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": None, "refusal": "No."},
    ]
    items = responses_input(messages)
    assert [i["type"] for i in items] == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    checker.validate_python(items[:-1])
    assert items[-1] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "No."}],
    }
