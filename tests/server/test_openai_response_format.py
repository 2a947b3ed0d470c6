"""``response_format`` on ``/v1/chat/completions``: the answer's type, through
the engine's output type (docs/structured-output.md).

A real server on loopback with a scripted model that answers by what it is
asked: the first answer misses a field when the user says ``sloppy`` (and is
sent back with its errors), ``never`` never matches. Clients: the ``openai``
SDK (``parse`` and a stream), pydantic-ai's ``NativeOutput`` and LangChain's
``with_structured_output``, each unmodified.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic import BaseModel

from turnfsm import Engine
from turnfsm.adapters.llm import LLMRequest
from turnfsm.testing import ScriptedLLM

from .client_tools_kit import Served, assert_stored_once, serve_shared

SEEN: list[LLMRequest] = []


class Weather(BaseModel):
    city: str
    sky: str


def _asked(request: LLMRequest) -> str:
    users = [m for m in request.messages if m["role"] == "user"]
    content = users[0]["content"]
    return content if isinstance(content, str) else json.dumps(content)


async def answer(request: LLMRequest) -> dict[str, Any]:
    SEEN.append(request)
    asked = _asked(request)
    if request.output is None:
        return {"text": "Plain words."}
    sent_back = any("does not match" in str(m.get("content")) for m in request.messages)
    if "never" in asked:
        return {"text": '{"city": "Paris"}'}
    if "sloppy" in asked and not sent_back:
        return {"chunks": ['{"city": ', '"Paris"}']}
    if request.output.name == "json_object":
        return {"text": '```json\n{"any": ["object"]}\n```'}
    return {"chunks": ['{"city": "Paris", ', '"sky": "clear"}']}


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Iterator[Served]]:
    def engine(db: Path) -> Engine:
        return Engine(llm=ScriptedLLM(answer), store=f"sqlite:///{db}")

    yield from serve_shared(tmp_path_factory.mktemp("typed"), engine, SEEN)


@pytest.fixture
def served(tenants: Iterator[Served]) -> Served:
    """The module's server, as a tenant of the test's own (``SEEN`` emptied)."""
    return next(tenants)


def weather_format(strict: bool | None = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "weather", "schema": Weather.model_json_schema()}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def post(served: Served, body: dict[str, Any]) -> httpx.Response:
    with served.client() as c:
        return c.post("/v1/chat/completions", json={"model": "turnfsm", **body})


def test_the_openai_sdk_parse_gets_the_validated_object(served: Served) -> None:
    from openai import OpenAI

    with OpenAI(base_url=f"{served.url}/v1", api_key=served.token, max_retries=0) as client:
        done = client.chat.completions.parse(
            model="turnfsm",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            response_format=Weather,
        )
    assert done.choices[0].message.parsed == Weather(city="Paris", sky="clear")
    (request,) = SEEN
    assert request.output is not None and request.output.name == "Weather"
    assert request.output.schema == {**Weather.model_json_schema(), "additionalProperties": False}
    (cid,) = served.contexts()
    assert_stored_once(served.messages(cid))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_answer_that_misses_goes_back_and_the_completion_is_the_valid_one(
    served: Served, stream: bool
) -> None:
    body = {
        "messages": [{"role": "user", "content": "Weather in Paris, sloppy?"}],
        "response_format": weather_format(),
        "stream": stream,
    }
    r = post(served, body)
    assert r.status_code == 200, r.text
    if stream:
        frames = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert frames[-1] == "[DONE]"
        chunks = [json.loads(f) for f in frames[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    else:
        text = r.json()["choices"][0]["message"]["content"]
    # only the validated answer reaches the client: not the one sent back
    assert json.loads(text) == {"city": "Paris", "sky": "clear"}
    first, second = SEEN
    errors = [m for m in second.messages if "does not match" in str(m.get("content"))]
    assert [m["role"] for m in errors] == ["user"] and "sky" in errors[0]["content"]
    assert first.output == second.output
    # the context keeps both answers and the errors sent back, each once
    (cid,) = served.contexts()
    stored = served.messages(cid)
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert_stored_once(stored)


def test_json_object_asks_for_any_object_and_answers_it_without_its_fence(
    served: Served,
) -> None:
    r = post(
        served,
        {
            "messages": [{"role": "user", "content": "Anything?"}],
            "response_format": {"type": "json_object"},
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == '{"any": ["object"]}'
    (request,) = SEEN
    assert request.output is not None and request.output.schema == {"type": "object"}


def test_text_and_no_response_format_ask_for_no_type(served: Served) -> None:
    for body in ({}, {"response_format": {"type": "text"}}):
        r = post(served, {"messages": [{"role": "user", "content": "Hi"}], **body})
        assert r.json()["choices"][0]["message"]["content"] == "Plain words."
    assert [s.output for s in SEEN] == [None, None]


def test_retries_spent_is_a_502_naming_what_did_not_match(served: Served) -> None:
    r = post(
        served,
        {
            "messages": [{"role": "user", "content": "Weather, never right?"}],
            "response_format": weather_format(),
        },
    )
    assert r.status_code == 502
    error = r.json()
    assert "turn_failed" in json.dumps(error) and "sky" in json.dumps(error)
    assert len(SEEN) == 2  # the first answer and one retry (the default)
    (cid,) = served.contexts()
    assert served.state(cid) == "PermanentFailure"


@pytest.mark.parametrize(
    ("response_format", "where"),
    [
        ("json", "body.response_format"),
        ({"type": "xml"}, "body.response_format.type"),
        ({"type": "json_schema"}, "body.response_format.json_schema"),
        ({"type": "json_schema", "json_schema": {"name": "a b"}}, "json_schema.name"),
        (
            {"type": "json_schema", "json_schema": {"name": "w", "strict": "yes"}},
            "json_schema.strict",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": 7}}},
            "json_schema.schema.type",
        ),
    ],
)
def test_a_malformed_response_format_is_a_422_naming_where_and_stores_nothing(
    served: Served, response_format: Any, where: str
) -> None:
    r = post(
        served,
        {"messages": [{"role": "user", "content": "Hi"}], "response_format": response_format},
    )
    assert r.status_code == 422, r.text
    assert where in json.dumps(r.json())
    assert served.contexts() == [] and SEEN == []


def test_pydantic_ai_native_output(served: Served) -> None:
    from openai import AsyncOpenAI
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async def run() -> Any:
        async with AsyncOpenAI(
            base_url=f"{served.url}/v1", api_key=served.token, max_retries=0
        ) as client:
            model = OpenAIChatModel("turnfsm", provider=OpenAIProvider(openai_client=client))
            agent = Agent(model, output_type=NativeOutput(Weather))
            return (await agent.run("Weather in Paris?")).output

    assert anyio.run(run) == Weather(city="Paris", sky="clear")
    (request,) = SEEN
    assert request.output is not None and request.tools == []  # no output tool
    (cid,) = served.contexts()
    assert served.state(cid) == "Idle"
    assert_stored_once(served.messages(cid))


def test_langchain_with_structured_output(served: Served) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model="turnfsm",
        base_url=f"{served.url}/v1",
        api_key=served.token,  # type: ignore[arg-type]
        max_retries=0,
    )
    structured = llm.with_structured_output(Weather, method="json_schema")
    assert structured.invoke("Weather in Paris?") == Weather(city="Paris", sky="clear")
    (request,) = SEEN
    assert request.output is not None and request.tools == []
    (cid,) = served.contexts()
    assert_stored_once(served.messages(cid))
