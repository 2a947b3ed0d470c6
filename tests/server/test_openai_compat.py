"""The OpenAI-compatible endpoints with the official ``openai`` SDK as the client."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from .conftest import Running
from .scripted import scripted_server

WEATHER = "What's the weather in Paris?"

if TYPE_CHECKING:
    import openai

    Client = Callable[..., openai.OpenAI]


@pytest.fixture
def client() -> Iterator[Client]:
    """``client(server, token)``: an SDK client of the server, closed when the
    test ends. An SDK client left to the garbage collector closes its
    connections only when the collector runs its ``__del__``, in whatever
    test that happens."""
    made: list[openai.OpenAI] = []

    def make(server: Running, token: str = "token-alice") -> openai.OpenAI:
        import openai

        sdk = openai.OpenAI(base_url=f"{server.url}/v1", api_key=token, max_retries=0)
        made.append(sdk)
        return sdk

    try:
        yield make
    finally:
        for sdk in made:
            sdk.close()


def test_models_lists_the_agent(server: Running, client: Client) -> None:
    ids = [m.id for m in client(server).models.list()]
    assert ids == ["turnfsm"]


def test_wrong_token_is_refused(server: Running, client: Client) -> None:
    import openai

    with pytest.raises(openai.AuthenticationError):
        client(server, "nope").models.list()


def test_completion_imports_history_and_answers(server: Running, client: Client) -> None:
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


def test_pending_approval_ends_with_a_note_and_resumes_through_api(
    server: Running, client: Client
) -> None:
    import openai

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


def test_streamed_completion(server: Running, client: Client) -> None:
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


def test_streamed_completion_waiting_for_approval(server: Running, client: Client) -> None:
    stream = client(server).chat.completions.create(
        model="turnfsm", messages=[{"role": "user", "content": WEATHER}], stream=True
    )
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert "waiting for a human on get_weather" in text
    extra = chunks[-1].model_extra or {}
    assert extra["turnfsm"]["state"] == "AwaitingToolApproval"


def test_last_message_must_be_a_user_message(server: Running, client: Client) -> None:
    import openai

    with pytest.raises(openai.UnprocessableEntityError) as info:
        client(server).chat.completions.create(
            model="turnfsm", messages=[{"role": "assistant", "content": "hi"}]
        )
    assert "messages[0].role" in str(info.value)


# ---------------------------------------------------------------------- usage and user


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from scripted_server(tmp_path_factory.mktemp("usage") / "server.db")


def test_usage_is_the_sum_of_the_turns_llm_calls(scripted: Running, client: Client) -> None:
    add = [{"role": "user", "content": "please add 2 and 3"}]
    done = client(scripted).chat.completions.create(model="turnfsm", messages=add)
    assert done.choices[0].message.content == "The answer is 5."
    assert done.usage is not None  # two calls of 10 + 4 tokens
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (20, 8)
    assert done.usage.total_tokens == 28

    chunks = list(
        client(scripted).chat.completions.create(
            model="turnfsm",
            messages=add,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.total_tokens == 28
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert all(ch.usage is None for ch in chunks[:-1])

    plain = list(
        client(scripted).chat.completions.create(
            model="turnfsm",
            messages=add,
            stream=True,
        )
    )
    assert all(ch.usage is None and ch.choices for ch in plain)

    # a model that reported nothing: null
    booked = client(scripted).chat.completions.create(
        model="turnfsm", messages=[{"role": "user", "content": "book a trip"}]
    )
    assert booked.usage is None


def test_the_user_field_is_kept_as_the_contexts_user_parameter(
    scripted: Running, client: Client
) -> None:
    raw = client(scripted).chat.completions.with_raw_response.create(
        model="turnfsm", messages=[{"role": "user", "content": "which user am I?"}], user="u-1"
    )
    cid = raw.headers["x-turnfsm-context-id"]
    assert raw.parse().choices[0].message.content == "user=u-1"  # the model was sent it
    more = client(scripted).chat.completions.create(
        model="turnfsm",
        messages=[{"role": "user", "content": "which user now?"}],
        user="u-2",
        extra_headers={"x-turnfsm-context-id": cid},
    )
    assert more.choices[0].message.content == "user=u-2"
    with scripted.client() as c:
        assert c.get(f"/api/contexts/{cid}").json()["parameters"] == {"user": "u-2"}
        audit = [json.loads(line) for line in c.get(f"/api/contexts/{cid}/audit").text.splitlines()]
        changes = [a for a in audit if a.get("trigger") == "config_updated"]
        assert len(changes) == 1 and "u-2" in json.dumps(changes[0])
        r = c.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "user": ""},
        )
        assert r.status_code == 422 and r.json()["error"]["where"] == "body.user"


def test_a_resent_messages_list_does_not_double_the_context(
    server: Running, client: Client
) -> None:
    import openai

    first = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello"},
    ]
    raw = client(server).chat.completions.with_raw_response.create(model="turnfsm", messages=first)
    cid = raw.headers["x-turnfsm-context-id"]
    answer = raw.parse().choices[0].message.content or ""
    whole = [
        *first,
        # the client's copy of an answer is not compared (a completion that waits
        # for a human ends with a note the stored answer does not have)
        {"role": "assistant", "content": answer + "\n\n[turnfsm: a note]"},
        {"role": "user", "content": "said aside"},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "And now?"},
    ]
    more = client(server).chat.completions.create(
        model="turnfsm", messages=whole, extra_headers={"x-turnfsm-context-id": cid}
    )
    assert (more.model_extra or {})["turnfsm"]["context_id"] == cid
    with server.client() as c:
        page = c.get(f"/api/contexts/{cid}/messages", params={"limit": 100}).json()
        texts = [str(m["message"]["content"]) for m in page["messages"]]
    assert len(texts) == 6  # the first exchange once, the two new ones, the answer
    assert "Hello" in texts[0] and "said aside" in texts[2] and "noted" in texts[3]
    assert "And now?" in texts[4]
    # a list that disagrees with the context: 409, nothing stored
    wrong = [{"role": "user", "content": "Goodbye"}, {"role": "user", "content": "?"}]
    with pytest.raises(openai.ConflictError) as err:
        client(server).chat.completions.create(
            model="turnfsm", messages=wrong, extra_headers={"x-turnfsm-context-id": cid}
        )
    assert err.value.status_code == 409 and "history_conflict" in str(err.value.body)
    with server.client() as c:
        page = c.get(f"/api/contexts/{cid}/messages", params={"limit": 100}).json()
        assert len(page["messages"]) == 6
