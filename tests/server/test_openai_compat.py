"""The OpenAI-compatible endpoints with the official ``openai`` SDK as the client."""

from __future__ import annotations

import openai
import pytest

from .conftest import Running

WEATHER = "What's the weather in Paris?"


def client(server: Running, token: str = "token-alice") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=token, max_retries=0)


def test_models_lists_the_agent(server: Running) -> None:
    ids = [m.id for m in client(server).models.list()]
    assert ids == ["turnfsm"]


def test_wrong_token_is_refused(server: Running) -> None:
    with pytest.raises(openai.AuthenticationError):
        client(server, "nope").models.list()


def test_completion_imports_history_and_answers(server: Running) -> None:
    raw = client(server).chat.completions.with_raw_response.create(
        model="turnfsm",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "Thanks, bye"},
        ],
    )
    cid = raw.headers["x-turnfsm-context-id"]
    done = raw.parse()
    assert done.object == "chat.completion"
    assert done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.content
    with server.client() as c:
        page = c.get(f"/api/contexts/{cid}/messages", params={"limit": 100}).json()
        texts = [m["message"]["content"] for m in page["messages"]]
        roles = [m["message"]["role"] for m in page["messages"]]
        assert roles[:3] == ["user", "assistant", "user"]
        assert "Hello" in str(texts[0]) and "Thanks, bye" in str(texts[2])
        # another tenant does not see it
    with server.client("token-bob") as c:
        assert c.get(f"/api/contexts/{cid}").status_code == 404


def test_pending_approval_ends_with_a_note_and_resumes_through_api(server: Running) -> None:
    raw = client(server).chat.completions.with_raw_response.create(
        model="turnfsm", messages=[{"role": "user", "content": WEATHER}]
    )
    cid = raw.headers["x-turnfsm-context-id"]
    done = raw.parse()
    content = done.choices[0].message.content or ""
    assert "waiting for a human on get_weather" in content
    extra = done.model_extra or {}
    assert extra["turnfsm"]["state"] == "AwaitingToolApproval"
    call_id = extra["turnfsm"]["pending_tool_calls"][0]["id"]
    assert call_id in content
    with server.client() as c:
        r = c.post(f"/api/contexts/{cid}/tools/approve?wait=true", json={"approve": [call_id]})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "Idle" and "Paris" in r.json()["text"]

    # the same context goes on through the header; bob cannot use it
    more = client(server).chat.completions.create(
        model="turnfsm",
        messages=[{"role": "user", "content": "Thanks!"}],
        extra_headers={"x-turnfsm-context-id": cid},
    )
    assert (more.model_extra or {})["turnfsm"]["context_id"] == cid
    with pytest.raises(openai.NotFoundError):
        client(server, "token-bob").chat.completions.create(
            model="turnfsm",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-turnfsm-context-id": cid},
        )


def test_streamed_completion(server: Running) -> None:
    stream = client(server).chat.completions.create(
        model="turnfsm", messages=[{"role": "user", "content": "Tell me something"}], stream=True
    )
    chunks = list(stream)
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    pieces = [ch.choices[0].delta.content for ch in chunks if ch.choices]
    assert len([p for p in pieces if p]) > 1  # the text came in pieces, as the model streamed it
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text.strip()
    assert chunks[-1].choices[0].finish_reason == "stop"
    cid = (chunks[-1].model_extra or {})["turnfsm"]["context_id"]
    with server.client() as c:
        page = c.get(f"/api/contexts/{cid}/messages", params={"limit": 100}).json()
        stored = page["messages"][-1]["message"]
        assert stored["role"] == "assistant"
        assert text.strip() in str(stored["content"])


def test_streamed_completion_waiting_for_approval(server: Running) -> None:
    stream = client(server).chat.completions.create(
        model="turnfsm", messages=[{"role": "user", "content": WEATHER}], stream=True
    )
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert "waiting for a human on get_weather" in text
    extra = chunks[-1].model_extra or {}
    assert extra["turnfsm"]["state"] == "AwaitingToolApproval"


def test_last_message_must_be_a_user_message(server: Running) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as info:
        client(server).chat.completions.create(
            model="turnfsm", messages=[{"role": "assistant", "content": "hi"}]
        )
    assert "messages[0].role" in str(info.value)
