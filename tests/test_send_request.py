"""engine.send_request: a request body answered once; the current message marked
in the view; the user's language and time zone shown to the model."""

from __future__ import annotations

from typing import Any

import pytest
from kit import make_engine

from turnfsm import State
from turnfsm.adapters.inbound import import_request_body
from turnfsm.errors import InvalidInput
from turnfsm.model import Role

pytestmark = pytest.mark.anyio


def cm_body(current: str, context: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return {
        "contextManagement": {
            "currentMessage": {"role": "user", "content": current, **kw},
            "conversationContext": context,
        },
        "userLanguage": "de",
        "userTimezone": "Europe/Berlin",
    }


CONTEXT = [
    {"role": "user", "content": "Hallo", "messageId": "m1"},
    {"role": "assistant", "content": "Hallo! Wie kann ich helfen?", "messageId": "m2"},
]


async def test_a_new_context_gets_the_history_and_one_answer() -> None:
    engine, llm, _ = make_engine([{"text": "Es ist sonnig."}])
    async with engine:
        turn = await engine.send_request(cm_body("Wie ist das Wetter?", CONTEXT, messageId="m3"))
        assert turn.state is State.IDLE
        ctx = await engine.get_context(turn.context_id)
    history = [(n.message.role, n.message.text) for n in ctx.history()]
    assert history == [
        (Role.USER, "Hallo"),
        (Role.ASSISTANT, "Hallo! Wie kann ich helfen?"),
        (Role.USER, "Wie ist das Wetter?"),
        (Role.ASSISTANT, "Es ist sonnig."),
    ]
    assert len(llm.requests) == 1  # answered exactly once
    request = llm.requests[0]
    assert request.messages == [
        {
            "role": "system",
            "content": "The user's language is de (answer in it unless asked otherwise). "
            "The user's time zone is Europe/Berlin.",
        },
        {"role": "user", "content": "Hallo"},
        {"role": "assistant", "content": "Hallo! Wie kann ich helfen?"},
        {"role": "user", "content": "[CURRENT MESSAGE FROM USER]: Wie ist das Wetter?"},
    ]
    assert request.metadata["current_message"] == {"from": "user"}
    assert request.metadata["user_locale"] == {"language": "de", "timezone": "Europe/Berlin"}
    # stored history keeps what was said
    current = ctx.history()[2].message
    assert current.text == "Wie ist das Wetter?"
    assert current.metadata.extra["current"] is True


async def test_a_second_body_appends_only_what_is_new() -> None:
    engine, llm, _ = make_engine([{"text": "Es ist sonnig."}, {"text": "Morgen Regen."}])
    async with engine:
        first = await engine.send_request(cm_body("Wetter?", CONTEXT, messageId="m3"))
        cid = first.context_id
        # the frontend sends the whole conversation again, with the new message
        again = [
            *CONTEXT,
            {"role": "user", "content": "Wetter?", "messageId": "m3"},
            {"role": "assistant", "content": "Es ist sonnig."},
        ]
        await engine.send_request(cm_body("Und morgen?", again, messageId="m5"), cid)
        ctx = await engine.get_context(cid)
        # the same current message again is refused, nothing is stored
        with pytest.raises(InvalidInput, match="answered once"):
            await engine.send_request(cm_body("Und morgen?", again, messageId="m5"), cid)
        assert len((await engine.get_context(cid)).history()) == 6
    texts = [n.message.text for n in ctx.history()]
    assert texts == [
        "Hallo",
        "Hallo! Wie kann ich helfen?",
        "Wetter?",
        "Es ist sonnig.",
        "Und morgen?",
        "Morgen Regen.",
    ]
    second = llm.requests[1].messages
    assert second[-1] == {"role": "user", "content": "[CURRENT MESSAGE FROM USER]: Und morgen?"}
    assert second[-3] == {"role": "user", "content": "Wetter?"}  # no longer current


async def test_legacy_body_and_frontend_operator() -> None:
    engine, llm, _ = make_engine([{"text": "ok"}])
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "frontend_operator", "content": "please check the order"},
        ]
    }
    async with engine:
        turn = await engine.send_request(body)
    last = llm.requests[0].messages[-1]
    assert last == {
        "role": "user",
        "name": "frontend_operator",
        "content": "[CURRENT MESSAGE FROM FRONTEND_OPERATOR]: please check the order",
    }
    assert llm.requests[0].messages[0]["content"].startswith("The user's language is en")
    assert turn.state is State.IDLE


async def test_a_plain_send_after_it_is_not_marked() -> None:
    engine, llm, _ = make_engine([{"text": "a"}, {"text": "b"}])
    async with engine:
        turn = await engine.send_request(cm_body("first", []))
        await engine.send(turn.context_id, "second")
    assert llm.requests[1].messages[-1] == {"role": "user", "content": "second"}
    assert "user_locale" not in llm.requests[1].metadata


async def test_a_bad_body_is_refused_before_anything_is_stored() -> None:
    engine, _, _ = make_engine([])
    async with engine:
        with pytest.raises(InvalidInput):
            await engine.send_request({"messages": []})
        assert await engine.store.list_contexts() == []


async def test_an_imported_body_then_send_request_is_not_duplicated() -> None:
    """An imported request body leaves its current message unanswered; sending
    the same body to that context answers it once, without a second copy."""
    body = cm_body("Wetter?", CONTEXT, messageId="m3")
    engine, llm, _ = make_engine([{"text": "sonnig"}])
    async with engine:
        ctx = import_request_body(body)
        await engine.store.create(ctx)
        await engine.send_request(body, ctx.id)
        after = await engine.get_context(ctx.id)
        with pytest.raises(InvalidInput, match="answered once"):
            await engine.send_request(body, ctx.id)
    assert [n.message.text for n in after.history()] == [
        "Hallo",
        "Hallo! Wie kann ich helfen?",
        "Wetter?",
        "sonnig",
    ]
    assert len(llm.requests) == 1
    assert llm.requests[0].messages[-1]["content"] == "[CURRENT MESSAGE FROM USER]: Wetter?"


async def test_the_audit_accounts_for_every_message() -> None:
    from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log
    from turnfsm.render import path_from_steps

    engine, _, _ = make_engine([{"text": "a"}, {"text": "b"}])
    async with engine:
        turn = await engine.send_request(cm_body("first", CONTEXT))
        cid = turn.context_id
        again = [
            *CONTEXT,
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "a"},
        ]
        await engine.send_request(
            cm_body("second", [*again, {"role": "user", "content": "x"}]), cid
        )
        ctx = await engine.get_context(cid)
        steps = await engine.steps(cid)
    records = audit_records(cid, path_from_steps(steps).steps, ctx.message_pool.values())
    touched = {m for r in records for m in r.message_ids}
    assert touched == set(ctx.message_pool)
    first = records[0]
    assert first.trigger == "user_message" and len(first.message_ids) == 3
    assert verify_audit_log(audit_jsonl(records).splitlines()).ok
