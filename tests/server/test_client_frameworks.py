"""Agent frameworks use ``turnfsm serve`` as their model through
``/v1/chat/completions``, their own tools running in the client: pydantic-ai
(an output type, which it asks for through an output tool, and
``@agent.tool_plain``), the OpenAI Agents SDK (``function_tool`` with
``OpenAIChatCompletionsModel``) and LangChain (``bind_tools``).

Each runs against a real server on loopback with a scripted model
(tests/server/client_tools_kit.py) and checks the answer, that the round trip
stayed in one context (none of them sends turnfsm's header), and that the
context holds each message once and one result per call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from .client_tools_kit import SEEN, Served, assert_stored_once, serve_shared

RAN: list[str] = []


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Iterator[Served]]:
    yield from serve_shared(tmp_path_factory.mktemp("frameworks"))


@pytest.fixture
def served(tenants: Iterator[Served]) -> Served:
    """The module's server, as a tenant of the test's own."""
    RAN.clear()
    return next(tenants)


def roles(served: Served, cid: str) -> list[str]:
    return [m["role"] for m in served.messages(cid)]


class Weather(BaseModel):
    city: str
    sky: str


def run_agent(
    served: Served, prompt: str, output_type: type | None = None, tool: bool = False
) -> Any:
    """A pydantic-ai agent on the server (``OpenAIChatModel`` over an SDK client
    closed at the end), with ``get_weather`` as its ``tool_plain`` if asked:
    its run's result."""
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async def run() -> Any:
        url = f"{served.url}/v1"
        async with AsyncOpenAI(base_url=url, api_key=served.token, max_retries=0) as client:
            model = OpenAIChatModel("turnfsm", provider=OpenAIProvider(openai_client=client))
            agent: Any = (
                Agent(model) if output_type is None else Agent(model, output_type=output_type)
            )
            if tool:

                @agent.tool_plain
                def get_weather(city: str) -> str:
                    """The weather in a city."""
                    RAN.append(city)
                    return "sunny"

            return await agent.run(prompt)

    return anyio.run(run)


def test_pydantic_ai_output_type_through_its_output_tool(served: Served) -> None:
    result = run_agent(served, "Where is the sky clear?", Weather)
    assert result.output == Weather(city="Paris", sky="clear")
    # its output tool was offered to the model as a tool of the client's
    assert [t["function"]["name"] for t in SEEN[0].tools] == ["add", "final_result"]
    (cid,) = served.contexts()
    assert roles(served, cid) == ["user", "assistant"]
    # the output call is the client's: pydantic-ai reads it and gives no result,
    # so it waits (a next message closes it "superseded")
    assert served.state(cid) == "AwaitingToolApproval"
    assert_stored_once(served.messages(cid), waiting=1)


def test_pydantic_ai_tool_plain_round_trip(served: Served) -> None:
    result = run_agent(served, "What is the weather in Paris?", tool=True)
    assert result.output == "It is sunny in Paris."
    assert RAN == ["Paris"]  # run by the client, once
    (cid,) = served.contexts()
    assert roles(served, cid) == ["user", "assistant", "tool", "assistant"]
    assert served.state(cid) == "Idle"
    assert_stored_once(served.messages(cid))


def test_pydantic_ai_tool_then_output_type(served: Served) -> None:
    result = run_agent(served, "How is Paris?", Weather, tool=True)
    assert result.output == Weather(city="Paris", sky="sunny")
    assert RAN == ["Paris"]
    (cid,) = served.contexts()
    assert roles(served, cid) == ["user", "assistant", "tool", "assistant"]
    assert_stored_once(served.messages(cid), waiting=1)


def test_openai_agents_function_tool(served: Served) -> None:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no traces sent anywhere

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        RAN.append(city)
        return "cloudy"

    async def run() -> str:
        client = AsyncOpenAI(base_url=f"{served.url}/v1", api_key=served.token, max_retries=0)
        try:
            model = OpenAIChatCompletionsModel(model="turnfsm", openai_client=client)
            agent = Agent(
                name="weather", instructions="Be brief.", tools=[get_weather], model=model
            )
            result = await Runner.run(agent, "What is the weather in Paris?")
            return str(result.final_output)
        finally:
            await client.close()

    assert anyio.run(run) == "It is cloudy in Paris."
    assert RAN == ["Paris"]
    (cid,) = served.contexts()
    assert roles(served, cid) == ["user", "assistant", "tool", "assistant"]
    assert served.state(cid) == "Idle"
    assert_stored_once(served.messages(cid))


def test_langchain_bind_tools_round_trip(served: Served) -> None:
    from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    def get_weather(city: str) -> str:
        """The weather in a city."""
        RAN.append(city)
        return "misty"

    llm = ChatOpenAI(
        model="turnfsm",
        base_url=f"{served.url}/v1",
        api_key=served.token,  # type: ignore[arg-type]
        max_retries=0,
    )
    bound = llm.bind_tools([get_weather])
    messages: list[BaseMessage] = [HumanMessage("What is the weather in Paris?")]
    asked = bound.invoke(messages)
    (call,) = asked.tool_calls  # type: ignore[attr-defined]
    assert (call["name"], call["args"]) == ("get_weather", {"city": "Paris"})
    messages += [asked, ToolMessage(get_weather(**call["args"]), tool_call_id=call["id"])]
    final = bound.invoke(messages)
    assert final.content == "It is misty in Paris."
    (cid,) = served.contexts()
    assert roles(served, cid) == ["user", "assistant", "tool", "assistant"]
    assert_stored_once(served.messages(cid))
