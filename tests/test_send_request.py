"""engine.send_request: a request body answered once; the current message marked
in the view; the user's language and time zone shown to the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kit import make_engine

from turnfsm import State
from turnfsm.adapters.inbound import InboundMessage, import_request_body
from turnfsm.errors import HistoryConflict, InvalidInput
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
    engine, llm, _ = make_engine([{"text": "ok"}, {"text": "ok"}])
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "frontend_operator", "content": "please check the order"},
        ]
    }
    async with engine:
        turn = await engine.send_request(body)  # a new context: the formats' mapping
        existing = await engine.create_context()  # one made otherwise: a named user
        await engine.send_request(body, existing)
    marked = "[CURRENT MESSAGE FROM FRONTEND_OPERATOR]: please check the order"
    assert llm.requests[0].messages[-1] == {"role": "assistant", "content": marked}
    assert llm.requests[1].messages[-1] == {
        "role": "user",
        "name": "frontend_operator",
        "content": marked,
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


# --- a client that resends its whole history --------------------------------------------

SEED = [
    {"role": "user", "content": "Hello", "messageId": "msg-122"},
    {"role": "assistant", "content": "Hi! How can I help you?", "messageId": "msg-122-response"},
]


def durable(tmp_path: Path, answers: list[dict[str, Any]]) -> Any:
    return make_engine(answers, store=f"sqlite:///{tmp_path / 'db.sqlite'}")


async def said(engine: Any, cid: str) -> list[tuple[Role, str]]:
    return [(n.message.role, n.message.text) for n in (await engine.get_context(cid)).history()]


async def test_the_whole_history_resent_with_ids_appends_only_the_new(tmp_path: Path) -> None:
    """The format's own example, sent again and again with the turns before it:
    each request adds its current message and the answer, nothing twice; the
    client's ids stay on the messages it sent, and each answer has the id of
    its request's message followed by ``-response``."""
    engine, llm, _ = durable(tmp_path, [{"text": "Added."}, {"text": "Done."}])
    async with engine:
        first = await engine.send_request(
            cm_body("Add a task to buy milk", SEED, messageId="msg-123")
        )
        cid = first.context_id
        answer = (await engine.get_context(cid)).history()[-1]
        resent = [
            *SEED,
            {"role": "user", "content": "Add a task to buy milk", "messageId": "msg-123"},
            # the answer's id, as turnfsm stored it: matched by id
            {"role": "assistant", "content": "Added.", "messageId": "msg-123-response"},
        ]
        await engine.send_request(cm_body("And eggs", resent, messageId="msg-124"), cid)
        # turnfsm's own id finds its answer too
        by_own_id = [
            *resent[:3],
            {"role": "assistant", "content": "Added.", "messageId": answer.id},
        ]
        with pytest.raises(InvalidInput, match="answered once"):
            await engine.send_request(cm_body("And eggs", by_own_id, messageId="msg-124"), cid)
        ctx = await engine.get_context(cid)
    assert [(r.value, t) for r, t in [(n.message.role, n.message.text) for n in ctx.history()]] == [
        ("user", "Hello"),
        ("assistant", "Hi! How can I help you?"),
        ("user", "Add a task to buy milk"),
        ("assistant", "Added."),
        ("user", "And eggs"),
        ("assistant", "Done."),
    ]
    ids = [n.message.metadata.extra.get("message_id") for n in ctx.history()]
    assert ids == [
        "msg-122",
        "msg-122-response",
        "msg-123",
        "msg-123-response",
        "msg-124",
        "msg-124-response",
    ]
    assert len(llm.requests) == 2


async def test_an_answer_is_known_by_its_response_id(tmp_path: Path) -> None:
    """The answer's ``X-response`` id finds it: a body may start its tail there,
    and a body that gives it other content, or gives the answer another id,
    is refused naming it, with nothing stored."""
    engine, llm, _ = durable(tmp_path, [{"text": "Added."}, {"text": "Done."}])
    async with engine:
        cid = (await engine.send_request(cm_body("Buy milk", [], messageId="q1"))).context_id
        before = await said(engine, cid)
        for answer, where_id, reason in [
            ({"content": "Changed.", "messageId": "q1-response"}, "q1-response", "differs"),
            ({"content": "Added.", "messageId": "mine-7"}, "mine-7", "'q1-response'"),
        ]:
            body = [
                {"role": "user", "content": "Buy milk", "messageId": "q1"},
                {"role": "assistant", **answer},
            ]
            with pytest.raises(HistoryConflict) as err:
                await engine.send_request(cm_body("And eggs", body, messageId="q2"), cid)
            assert err.value.message_id == where_id
            assert reason in str(err.value)
            assert await said(engine, cid) == before
        # the tail from the answer alone: matched by its id, nothing doubled
        tail = [{"role": "assistant", "content": "Added.", "messageId": "q1-response"}]
        await engine.send_request(cm_body("And eggs", tail, messageId="q2"), cid)
        ctx = await engine.get_context(cid)
    assert [n.message.text for n in ctx.history()] == ["Buy milk", "Added.", "And eggs", "Done."]
    assert len(llm.requests) == 2


async def test_each_answer_of_a_tool_loop_that_a_body_carries_has_its_id(
    tmp_path: Path,
) -> None:
    """A turn with tools: the answers with text are ``X-response``,
    ``X-response-2``, ... in order; a call with no text (which no body
    carries) and the tool results have none. A turn without a request id, or
    a plain ``send``, gives none."""
    from turnfsm import tool

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return "found"

    answers = [
        {"text": "Let me look.", "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {}}]},
        {"tool_calls": [{"id": "c2", "name": "lookup", "arguments": {"key": "k"}}]},
        {"text": "It is found."},
        {"text": "Plain."},
        {"text": "No id."},
    ]
    engine, _, _ = make_engine(answers, tools=[lookup])
    async with engine:
        cid = (await engine.send_request(cm_body("Look it up", [], messageId="q9"))).context_id
        await engine.send(cid, "plain send")
        await engine.send_request(cm_body("no id", []), cid)
        ctx = await engine.get_context(cid)
    got = [
        (n.message.role.value, n.message.metadata.extra.get("message_id")) for n in ctx.history()
    ]
    assert got == [
        ("user", "q9"),
        ("assistant", "q9-response"),
        ("tool", None),
        ("assistant", None),
        ("tool", None),
        ("assistant", "q9-response-2"),
        ("user", None),
        ("assistant", None),
        ("user", None),
        ("assistant", None),
    ]


async def test_a_known_id_with_other_content_is_refused_and_nothing_stored(
    tmp_path: Path,
) -> None:
    engine, llm, _ = durable(tmp_path, [{"text": "Added."}])
    async with engine:
        first = await engine.send_request(cm_body("Buy milk", SEED, messageId="msg-123"))
        cid = first.context_id
        before = (await said(engine, cid), len(await engine.steps(cid)))
        changed = [SEED[0], {**SEED[1], "content": "Hi! What now?"}]
        with pytest.raises(HistoryConflict) as err:
            await engine.send_request(cm_body("And eggs", changed, messageId="msg-124"), cid)
        assert err.value.message_id == "msg-122-response"
        assert err.value.where == "contextManagement.conversationContext[1]"
        assert "'msg-122-response'" in str(err.value) and "content differs" in str(err.value)
        # the current message of an answered request, with other content
        with pytest.raises(HistoryConflict) as current:
            await engine.send_request(cm_body("Buy bread", SEED, messageId="msg-123"), cid)
        assert current.value.where == "contextManagement.currentMessage"
        # a known id at another place than it stands
        with pytest.raises(HistoryConflict, match="message 0 of the branch, not message 2") as err:
            await engine.send_request(cm_body("And eggs", SEED[::-1], messageId="msg-124"), cid)
        assert err.value.where == "contextManagement.conversationContext[1]"
        # another id for a stored message that has one
        renamed = [{**SEED[0], "messageId": "other"}, SEED[1]]
        with pytest.raises(HistoryConflict, match="is 'msg-122'"):
            await engine.send_request(cm_body("And eggs", renamed, messageId="msg-124"), cid)
    async with durable(tmp_path, [])[0] as reopened:  # what the store holds, read back
        assert (await said(reopened, cid), len(await reopened.steps(cid))) == before
    assert len(llm.requests) == 1


async def test_legacy_bodies_resent_whole_are_matched_by_content_and_position(
    tmp_path: Path,
) -> None:
    engine, llm, _ = durable(tmp_path, [{"text": "hello"}, {"text": "sure"}])
    async with engine:
        first = await engine.send_request({"messages": [{"role": "user", "content": "hi"}]})
        cid = first.context_id
        whole = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "more"},
        ]
        await engine.send_request({"messages": whole}, cid)
        assert [t for _, t in await said(engine, cid)] == ["hi", "hello", "more", "sure"]
        # a body whose earlier messages are not what the context holds, in its order
        reordered = [whole[1], whole[0], {"role": "user", "content": "again"}]
        before = len(await engine.steps(cid))
        with pytest.raises(HistoryConflict) as err:
            await engine.send_request({"messages": reordered}, cid)
        assert err.value.where == "messages[0]" and err.value.message_id is None
        assert len(await engine.steps(cid)) == before
        ctx = await engine.get_context(cid)
    assert [n.message.text for n in ctx.history()] == ["hi", "hello", "more", "sure"]
    formats = [n.message.metadata.extra.get("request_format") for n in ctx.history()]
    assert formats == ["legacy", None, "legacy", None]
    assert len(llm.requests) == 2


async def test_a_tail_with_ids_is_placed_where_its_first_id_stands() -> None:
    engine, _, _ = make_engine([{"text": "a1"}, {"text": "a2"}])
    async with engine:
        first = await engine.send_request(cm_body("one", SEED, messageId="u1"))
        cid = first.context_id
        tail = [
            {"role": "user", "content": "one", "messageId": "u1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "said elsewhere", "messageId": "u1b"},
        ]
        await engine.send_request(cm_body("two", tail, messageId="u2"), cid)
        ctx = await engine.get_context(cid)
    assert [n.message.text for n in ctx.history()] == [
        "Hello",
        "Hi! How can I help you?",
        "one",
        "a1",
        "said elsewhere",
        "two",
        "a2",
    ]
    extra = ctx.history()[4].message.metadata.extra
    assert extra["request_context"] is True and extra["message_id"] == "u1b"
    assert extra["request_format"] == "context_management"
    assert ctx.history()[5].message.metadata.extra["request_format"] == "context_management"


async def test_one_id_twice_in_a_body_is_refused_before_anything_is_stored() -> None:
    engine, _, _ = make_engine([])
    body = cm_body("x", [SEED[0], {**SEED[1], "messageId": "msg-122"}], messageId="m9")
    async with engine:
        with pytest.raises(InvalidInput, match="earlier message too") as err:
            await engine.send_request(body)
        assert err.value.where == "contextManagement.conversationContext[1].messageId"
        assert await engine.store.list_contexts() == []


async def test_send_with_the_clients_context() -> None:
    engine, llm, _ = make_engine([{"text": "a"}, {"text": "b"}])
    async with engine:
        cid = await engine.create_context()
        await engine.send(cid, "q1")
        mine = [
            InboundMessage(role=Role.USER, content="q1"),
            InboundMessage(role=Role.ASSISTANT, content="a, as the client shows it"),
            InboundMessage(role=Role.USER, content="noted on the side"),
        ]
        await engine.send(cid, "q2", context=mine)
        assert [t for _, t in await said(engine, cid)] == [
            "q1",
            "a",
            "noted on the side",
            "q2",
            "b",
        ]
        with pytest.raises(HistoryConflict) as err:
            await engine.send(cid, "q3", context=[InboundMessage(role=Role.USER, content="q0")])
        assert err.value.where == "context[0]"
        assert len(await said(engine, cid)) == 5
    assert len(llm.requests) == 2
