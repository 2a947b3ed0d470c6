"""The client's tools over ``/v1/chat/completions``, with the official ``openai``
SDK (streamed and not) and plain HTTP for the refusals, against a real server
on loopback whose scripted model calls them (tests/server/client_tools_kit.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from .client_tools_kit import SEEN, Served, assert_stored_once, serve_shared
from .conftest import loopback_tls

if TYPE_CHECKING:
    import openai


WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
HEADER = "x-turnfsm-context-id"


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Iterator[Served]]:
    yield from serve_shared(tmp_path_factory.mktemp("tools"))


@pytest.fixture
def served(tenants: Iterator[Served]) -> Served:
    """The module's server, as a tenant of the test's own."""
    return next(tenants)


@pytest.fixture
def sdk(served: Served) -> Iterator[openai.OpenAI]:
    import openai

    client = openai.OpenAI(
        base_url=f"{served.url}/v1",
        api_key=served.token,
        max_retries=0,
        http_client=openai.DefaultHttpxClient(verify=loopback_tls()),
    )
    try:
        yield client
    finally:
        client.close()


def _results(asked: Any, content: str) -> list[dict[str, Any]]:
    """The assistant message of a completion's calls and a tool message for each."""
    calls = [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.function.name, "arguments": c.function.arguments},
        }
        for c in asked.tool_calls
    ]
    tools = [{"role": "tool", "tool_call_id": c["id"], "content": content} for c in calls]
    return [{"role": "assistant", "content": asked.content, "tool_calls": calls}, *tools]


# --------------------------------------------------------------------------- the round trip


def test_a_call_of_the_clients_tool_comes_back_and_its_result_goes_on(
    served: Served, sdk: openai.OpenAI
) -> None:
    first = [{"role": "user", "content": "What is the weather like?"}]
    raw = sdk.chat.completions.with_raw_response.create(
        model="turnfsm", messages=first, tools=[WEATHER_TOOL]
    )
    cid = raw.headers[HEADER]
    done = raw.parse()
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls"
    (asked,) = choice.message.tool_calls or []
    assert asked.type == "function" and asked.function.name == "get_weather"
    assert json.loads(asked.function.arguments) == {"city": "Paris"}
    assert choice.message.content == "Let me look."
    assert served.state(cid) == "AwaitingToolApproval"
    # the model was offered the server's tool and the client's
    assert [t["function"]["name"] for t in SEEN[-1].tools] == ["add", "get_weather"]

    # the next request, as a client without turnfsm's header sends it
    raw = sdk.chat.completions.with_raw_response.create(
        model="turnfsm", messages=[*first, *_results(choice.message, "sunny")], tools=[WEATHER_TOOL]
    )
    assert raw.headers[HEADER] == cid  # the same context, found by its calls
    again = raw.parse()
    assert again.choices[0].finish_reason == "stop"
    assert again.choices[0].message.content == "It is sunny in Paris."
    assert served.contexts() == [cid]
    stored = served.messages(cid)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[2]["tool_result"] == {"request_id": asked.id, "result": "sunny", "success": True}
    assert_stored_once(stored)


def test_streamed_calls_have_openais_chunk_shape(served: Served, sdk: openai.OpenAI) -> None:
    first = [{"role": "user", "content": "Weather, streamed"}]
    chunks = list(
        sdk.chat.completions.create(
            model="turnfsm", messages=first, tools=[WEATHER_TOOL], stream=True
        )
    )
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    pieces = [d.tool_calls[0] for d in deltas if d.tool_calls]
    head, rest = pieces[0], pieces[1:]
    assert (head.index, head.type, head.function.name, head.function.arguments) == (
        0,
        "function",
        "get_weather",
        "",
    )
    assert head.id and all(p.id is None and p.function.name is None for p in rest)
    assert len(rest) > 1 and all(p.index == 0 for p in rest)  # the arguments, in pieces
    arguments = "".join(p.function.arguments or "" for p in rest)
    assert json.loads(arguments) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    cid = (chunks[-1].model_extra or {})["turnfsm"]["context_id"]
    text = "".join(d.content or "" for d in deltas)
    assert text == "Let me look."

    calls = [
        {
            "id": head.id,
            "type": "function",
            "function": {"name": "get_weather", "arguments": arguments},
        }
    ]
    follow = [
        *first,
        {"role": "assistant", "content": text, "tool_calls": calls},
        {"role": "tool", "tool_call_id": head.id, "content": [{"type": "text", "text": "rainy"}]},
    ]
    chunks = list(
        sdk.chat.completions.create(
            model="turnfsm",
            messages=follow,
            tools=[WEATHER_TOOL],
            stream=True,
            extra_headers={HEADER: cid},
        )
    )
    streamed = [ch.choices[0].delta.content for ch in chunks if ch.choices]
    assert "".join(p or "" for p in streamed) == "It is rainy in Paris."
    assert len([p for p in streamed if p]) > 1
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert served.contexts() == [cid]
    assert_stored_once(served.messages(cid))


def test_the_servers_calls_run_before_the_clients_are_handed_out(
    served: Served, sdk: openai.OpenAI
) -> None:
    first = [{"role": "user", "content": "both please"}]
    raw = sdk.chat.completions.with_raw_response.create(
        model="turnfsm", messages=first, tools=[WEATHER_TOOL]
    )
    cid = raw.headers[HEADER]
    message = raw.parse().choices[0].message
    assert [c.function.name for c in message.tool_calls or []] == ["get_weather"]
    stored = served.messages(cid)
    assert stored[-1]["tool_result"]["result"] == 5  # the server's add ran first
    done = sdk.chat.completions.create(
        model="turnfsm",
        messages=[*first, *_results(message, "windy")],
        tools=[WEATHER_TOOL],
        extra_headers={HEADER: cid},
    )
    assert done.choices[0].message.content == "It is windy in Paris."
    assert_stored_once(served.messages(cid))


def test_tool_choice_and_parallel_calls_reach_the_model(served: Served, sdk: openai.OpenAI) -> None:
    sdk.chat.completions.create(
        model="turnfsm",
        messages=[{"role": "user", "content": "forced"}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False,
    )
    params = SEEN[-1].parameters
    assert params["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert params["parallel_tool_calls"] is False
    sdk.chat.completions.create(
        model="turnfsm",
        messages=[{"role": "user", "content": "required"}],
        tools=[WEATHER_TOOL],
        tool_choice="required",
    )
    assert SEEN[-1].parameters["tool_choice"] == "required"
    assert "parallel_tool_calls" not in SEEN[-1].parameters


def test_without_tools_the_endpoint_answers_as_before(served: Served, sdk: openai.OpenAI) -> None:
    done = sdk.chat.completions.create(
        model="turnfsm", messages=[{"role": "user", "content": "What is the weather?"}]
    )
    assert done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.tool_calls is None
    assert done.choices[0].message.content == "Hello."
    assert SEEN[-1].tools[-1]["function"]["name"] == "add"
    assert "tool_choice" not in SEEN[-1].parameters


# --------------------------------------------------------------------------- refused


def _post(served: Served, body: dict[str, Any], **headers: str) -> Any:
    with served.client() as c:
        return c.post("/v1/chat/completions", json=body, headers=headers)


@pytest.mark.parametrize(
    ("tools", "where"),
    [
        ([{"type": "function", "function": {"name": "no spaces"}}], "tools[0].function.name"),
        ([{"type": "code_interpreter"}], "tools[0].type"),
        ([WEATHER_TOOL, {"type": "function"}], "tools[1].function"),
        (
            [{"type": "function", "function": {"name": "x", "parameters": "{}"}}],
            "tools[0].function.parameters",
        ),
    ],
)
def test_malformed_tools_are_a_422_with_the_path(
    served: Served, tools: list[Any], where: str
) -> None:
    r = _post(served, {"messages": [{"role": "user", "content": "hi"}], "tools": tools})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["where"] == where
    assert served.contexts() == []  # refused before anything was made


def test_a_tool_the_server_has_is_refused_by_name(served: Served) -> None:
    clash = {"type": "function", "function": {"name": "add", "parameters": {}}}
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER_TOOL, clash]}
    r = _post(served, body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "tool_name_clash"
    assert error["where"] == "tools[1].function.name" and "'add'" in error["message"]
    assert served.contexts() == []


def test_a_tool_choice_of_no_such_tool_is_refused(served: Served) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "nope"}},
    }
    r = _post(served, body)
    assert r.status_code == 422
    assert r.json()["error"]["where"] == "tool_choice.function.name"


def test_tool_messages_must_answer_the_assistants_calls(served: Served) -> None:
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "x", "content": "y"},
        ],
        "tools": [WEATHER_TOOL],
    }
    r = _post(served, body)
    assert r.status_code == 422
    assert r.json()["error"]["where"] == "messages[1]"


def test_results_no_context_waits_for_are_a_409(served: Served) -> None:
    calls = [
        {"id": "call_x", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    ]
    body = {
        "messages": [
            {"role": "user", "content": "never asked"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "call_x", "content": "sun"},
        ],
        "tools": [WEATHER_TOOL],
    }
    r = _post(served, body)
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "no_waiting_context"
    assert "messages[2].tool_call_id" in r.json()["error"]["message"]


def test_results_for_calls_the_context_does_not_wait_for_are_a_409(
    served: Served, sdk: openai.OpenAI
) -> None:
    first = [{"role": "user", "content": "What is the weather like?"}]
    message = (
        sdk.chat.completions.create(model="turnfsm", messages=first, tools=[WEATHER_TOOL])
        .choices[0]
        .message
    )
    follow = _results(message, "sunny")
    follow[0]["tool_calls"][0]["id"] = follow[1]["tool_call_id"] = "call_other"
    r = _post(served, {"messages": [*first, *follow], "tools": [WEATHER_TOOL]})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "no_waiting_context"
    (cid,) = served.contexts()
    assert served.state(cid) == "AwaitingToolApproval"  # nothing was stored
    assert [m["role"] for m in served.messages(cid)] == ["user", "assistant"]


def test_results_after_a_history_the_context_does_not_hold_are_a_conflict(
    served: Served, sdk: openai.OpenAI
) -> None:
    first = [{"role": "user", "content": "What is the weather like?"}]
    raw = sdk.chat.completions.with_raw_response.create(
        model="turnfsm", messages=first, tools=[WEATHER_TOOL]
    )
    cid = raw.headers[HEADER]
    other = [*first, {"role": "user", "content": "and one it never saw"}]
    body = {"messages": [*other, *_results(raw.parse().choices[0].message, "x")]}
    r = _post(served, {**body, "tools": [WEATHER_TOOL]}, **{HEADER: cid})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "history_conflict"
    assert r.json()["error"]["where"] == "context[1]"
    assert served.state(cid) == "AwaitingToolApproval"
    assert [m["role"] for m in served.messages(cid)] == ["user", "assistant"]


def test_two_contexts_waiting_alike_need_the_header(served: Served, sdk: openai.OpenAI) -> None:
    first = [{"role": "user", "content": "twin"}]
    made = [
        sdk.chat.completions.with_raw_response.create(
            model="turnfsm", messages=first, tools=[WEATHER_TOOL]
        )
        for _ in range(2)
    ]
    message = made[0].parse().choices[0].message
    body = {"messages": [*first, *_results(message, "hot")], "tools": [WEATHER_TOOL]}
    r = _post(served, body)
    assert r.status_code == 409 and r.json()["error"]["code"] == "ambiguous_context"
    cid = made[1].headers[HEADER]
    r = _post(served, body, **{HEADER: cid})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "It is hot in Paris."
    assert served.state(cid) == "Idle"
    assert served.state(made[0].headers[HEADER]) == "AwaitingToolApproval"


def test_a_headerless_continuation_goes_to_the_context_with_its_history(
    served: Served, sdk: openai.OpenAI
) -> None:
    # two contexts wait for a call of the same id, after different messages
    asked = {}
    for text in ("twin in Rome", "twin in Oslo"):
        raw = sdk.chat.completions.with_raw_response.create(
            model="turnfsm", messages=[{"role": "user", "content": text}], tools=[WEATHER_TOOL]
        )
        asked[text] = (raw.headers[HEADER], raw.parse().choices[0].message)
    cid, message = asked["twin in Oslo"]
    first = [{"role": "user", "content": "twin in Oslo"}]
    raw = sdk.chat.completions.with_raw_response.create(
        model="turnfsm", messages=[*first, *_results(message, "cold")], tools=[WEATHER_TOOL]
    )
    assert raw.headers[HEADER] == cid
    assert raw.parse().choices[0].message.content == "It is cold in Paris."
    assert served.state(asked["twin in Rome"][0]) == "AwaitingToolApproval"
    assert_stored_once(served.messages(cid))


def test_a_new_user_message_instead_supersedes_the_calls(
    served: Served, sdk: openai.OpenAI
) -> None:
    first = [{"role": "user", "content": "What is the weather?"}]
    raw = sdk.chat.completions.with_raw_response.create(
        model="turnfsm", messages=first, tools=[WEATHER_TOOL]
    )
    cid = raw.headers[HEADER]
    done = sdk.chat.completions.create(
        model="turnfsm",
        messages=[{"role": "user", "content": "Forget it"}],
        extra_headers={HEADER: cid},
    )
    assert done.choices[0].message.content == "Hello."
    stored = served.messages(cid)
    closed = [m["tool_result"]["result"]["status"] for m in stored if m.get("tool_result")]
    assert closed == ["superseded"]
    assert_stored_once(stored)
