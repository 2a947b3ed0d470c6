"""Gemini answers, replayed byte for byte on loopback, through a real engine
on a real SQLite store: what turnfsm stores must agree with the official
SDK's own reading of the same bytes (``generate_content_stream``'s parsed
``GenerateContentResponse`` chunks), and the second request (after a
function call) must carry back what the API requires (the ``functionCall``
parts with their ``thoughtSignature``, then the ``functionResponse`` parts),
as the loopback server received it."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kit
import pytest
from gemini_corpus import Case, corpus
from gemini_loopback import LoopbackServer
from provider_cases import stored_turn

from turnfsm import State, tool
from turnfsm.model import InternalMessage, Role
from turnfsm.storage import SQLiteStore

if TYPE_CHECKING:
    from google.genai import types

    from turnfsm.adapters.llm import GeminiLLM


pytestmark = pytest.mark.anyio

CASES = corpus()
RAN: list[dict[str, Any]] = []
MODEL = "gemini-2.5-flash"


@tool
def get_weather(location: str) -> dict[str, Any]:
    """Current weather for a location."""
    RAN.append({"location": location})
    return {"location": location, "temp_c": 15}


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


@pytest.fixture
async def llm(loopback: LoopbackServer) -> AsyncIterator[GeminiLLM]:
    from turnfsm.adapters.llm import GeminiLLM

    async with GeminiLLM(MODEL, base_url=loopback.url, api_key="gemini-loopback-key") as adapter:
        yield adapter


@dataclass
class Oracle:
    """What the SDK read from the bytes."""

    parts: list[types.Part] = field(default_factory=list)
    finish: str | None = None
    block: str | None = None
    usage: types.GenerateContentResponseUsageMetadata | None = None
    model: str | None = None
    response_id: str | None = None


async def sdk_read(loopback: LoopbackServer, case: Case) -> Oracle:
    from google import genai
    from google.genai import types

    loopback.script(case.reply())
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=loopback.url))
    out = Oracle()
    async for chunk in await client.aio.models.generate_content_stream(model=MODEL, contents="Hi"):
        out.model = chunk.model_version or out.model
        out.response_id = out.response_id or chunk.response_id
        out.usage = chunk.usage_metadata or out.usage
        if chunk.prompt_feedback is not None and chunk.prompt_feedback.block_reason:
            out.block = chunk.prompt_feedback.block_reason.value
        for candidate in chunk.candidates or ():
            if candidate.content is not None:
                out.parts += candidate.content.parts or []
            if candidate.finish_reason is not None:
                out.finish = candidate.finish_reason.value
    await client.aio.aclose()
    loopback.requests.clear()
    return out


def signature(part: types.Part) -> str:
    assert part.thought_signature is not None
    return base64.b64encode(part.thought_signature).decode()


def assert_agrees(stored: InternalMessage, sdk: Oracle) -> None:
    texts = [p for p in sdk.parts if p.text is not None and not p.thought]
    thoughts = [p for p in sdk.parts if p.thought]
    calls = [p.function_call for p in sdk.parts if p.function_call is not None]
    assert stored.text == "".join(p.text or "" for p in texts)
    assert stored.thinking == ("".join(p.text or "" for p in thoughts) or None)
    assert [(c.tool_name, c.arguments) for c in stored.tool_calls or ()] == [
        (c.name, c.args) for c in calls
    ]
    ids = [c.id for c in stored.tool_calls or ()]
    assert ids == [f"call_{sdk.response_id}_{n}" for n in range(len(calls))]
    # every signature the SDK read is stored, on the part it came with
    signed: list[tuple[dict[str, Any], int]] = []
    n = 0
    text_before = 0
    for p in sdk.parts:
        if p.function_call is not None:
            if p.thought_signature is not None:
                signed.append(({"part": "functionCall", "thoughtSignature": signature(p)}, n))
            n += 1
        elif not p.thought:
            if p.thought_signature is not None:
                data = {"part": "text", "thoughtSignature": signature(p), "at": text_before}
                signed.append((data, 0))
            text_before += len(p.text or "")
    stored_signed = [
        (r.data, r.position)
        for r in stored.reasoning or ()
        if r.data is not None and r.data.get("part") != "thought"
    ]
    assert stored_signed == signed
    assert {r.provider for r in stored.reasoning or ()} <= {"google"}
    summaries = [
        r.summary for r in stored.reasoning or () if (r.data or {}).get("part") == "thought"
    ]
    assert ["".join(s) for s in summaries] == (
        ["".join(p.text or "" for p in thoughts)] if thoughts else []
    )
    meta = stored.metadata
    assert meta.provider_reason == (sdk.finish or sdk.block)
    assert meta.model == sdk.model
    usage = sdk.usage
    assert usage is not None and meta.usage is not None
    assert meta.usage.prompt_tokens == usage.prompt_token_count
    assert meta.usage.completion_tokens == (usage.candidates_token_count or 0) + (
        usage.thoughts_token_count or 0
    )
    assert meta.usage.extras["promptTokenCount"] == usage.prompt_token_count
    if usage.thoughts_token_count is not None:
        assert meta.usage.extras["completion_tokens_details"] == {
            "reasoning_tokens": usage.thoughts_token_count
        }
    expected_outcome = {
        "MAX_TOKENS": "length",
        "SAFETY": "content_filter",
        "PROHIBITED_CONTENT": "content_filter",
        "MALFORMED_FUNCTION_CALL": "incomplete",
    }.get(sdk.finish or sdk.block or "")
    assert stored.outcome == expected_outcome


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_the_stored_answer_agrees_with_the_sdk(
    case: Case, loopback: LoopbackServer, llm: GeminiLLM, tmp_path: Path
) -> None:
    sdk = await sdk_read(loopback, case)
    follow = corpus()[0]  # a text answer after the function responses
    loopback.script(case.reply(), follow.reply())
    turn, cid, history = await stored_turn(llm, [get_weather], tmp_path / "t.db")
    assert turn.state == State.IDLE
    answer = history[1].message
    assert answer.role is Role.ASSISTANT
    assert_agrees(answer, sdk)

    first = loopback.requests[0]
    assert first.path == f"/v1/models/{MODEL}:streamGenerateContent?alt=sse"
    assert first.headers["x-goog-api-key"] == "gemini-loopback-key"
    assert first.body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert first.body["contents"] == [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}]
    [declared] = first.body["tools"][0]["functionDeclarations"]
    assert declared["name"] == "get_weather"
    if not case.tools:
        assert len(loopback.requests) == 1
        loopback.script(follow.reply())
        async with kit.make_engine(llm=llm, store=SQLiteStore(tmp_path / "t.db")).engine as engine:
            await engine.send(cid, "Thanks")
        contents = loopback.bodies[1]["contents"]
        if sdk.parts and any(p.text or p.thought_signature for p in sdk.parts):
            assert contents[1] == {"role": "model", "parts": sent_back(sdk.parts)}
        else:  # nothing to send back: the two user messages are one content
            assert [c["role"] for c in contents] == ["user"]
        return
    calls = [p for p in sdk.parts if p.function_call is not None]
    assert [dict(p.function_call.args or {}) for p in calls if p.function_call] == RAN
    second = loopback.bodies[1]
    model_turn, responses = second["contents"][-2:]
    assert model_turn == {"role": "model", "parts": sent_back(sdk.parts)}
    assert responses == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "name": "get_weather",
                    "response": {"location": c["location"], "temp_c": 15},
                }
            }
            for c in RAN
        ],
    }
    assert history[-1].message.text == "The capital of France is Paris."


def sent_back(parts: list[types.Part]) -> list[dict[str, Any]]:
    """The parts the SDK read, as the API requires them back: in order, each
    signature on the part it came with (the URL-safe base64 the SDK writes);
    an unsigned text or thought part joins the part of its kind before it (the
    stream cuts one text into many parts), a signed one is never joined to an
    unsigned one before it."""
    out: list[dict[str, Any]] = []
    last_kind = None
    for p in parts:
        sig = p.thought_signature
        if p.function_call is not None:
            call = {"name": p.function_call.name, "args": p.function_call.args}
            out.append({"functionCall": call})
            last_kind = "call"
        elif p.text is not None:
            kind = "thought" if p.thought else "text"
            if kind == last_kind and sig is None:
                out[-1]["text"] += p.text
                continue
            out.append({"text": p.text, "thought": True} if p.thought else {"text": p.text})
            last_kind = kind
        else:
            continue
        if sig is not None:
            out[-1]["thoughtSignature"] = base64.urlsafe_b64encode(sig).decode()
    return out
