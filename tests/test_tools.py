"""Tests of turnfsm.tools: schemas, approval policies, running calls, the registry."""

import functools
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, Optional

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel, Field

import turnfsm.tools as tools_pkg
from turnfsm.errors import ToolDefinitionError
from turnfsm.model import ToolCallRequest
from turnfsm.tools import (
    Approval,
    Tool,
    ToolOutcome,
    ToolRegistry,
    run_calls,
    tool,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def call(name: str, arguments: dict[str, Any] | None = None, **extra: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"call_{name}", tool_name=name, arguments=arguments or {}, **extra)


class Location(BaseModel):
    """A point on Earth."""

    lat: float
    lon: float


class Report(BaseModel):
    at: datetime
    temp_c: float


def _walk_keys(value: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(value, dict):
        found = [(*path, key) for key in value]
        for key, item in value.items():
            found += _walk_keys(item, (*path, key))
        return found
    if isinstance(value, list):
        return [p for item in value for p in _walk_keys(item, path)]
    return []


# --------------------------------------------------------------------------- public surface


def test_public_names_are_exact_and_sorted() -> None:
    assert tools_pkg.__all__ == sorted(tools_pkg.__all__)
    assert set(tools_pkg.__all__) == {
        "Approval",
        "ApprovalPolicy",
        "SubtaskHost",
        "SubtaskSpec",
        "SubtaskTool",
        "AskedQuestion",
        "QuestionTool",
        "Tool",
        "ToolError",
        "ToolOutcome",
        "ToolRegistry",
        "Toolset",
        "ask_user",
        "current_call",
        "hosting",
        "merge_tools",
        "question_tool",
        "run_calls",
        "subtask",
        "tool",
        "tool_threads",
    }


# --------------------------------------------------------------------------- schemas


def test_schema_from_type_hints() -> None:
    @tool
    def search(
        query: str,
        limit: int,
        threshold: float,
        exact: bool,
        tags: list[str],
        lang: Optional[str],  # noqa: UP045 - Optional is part of what is tested
        unit: Literal["c", "f"] = "c",
        page: int = 1,
        note: str | None = None,
    ) -> list[str]:
        return []

    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer"},
            "threshold": {"type": "number"},
            "exact": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "lang": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
            "page": {"type": "integer", "default": 1},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["query", "limit", "threshold", "exact", "tags", "lang"],
        "additionalProperties": False,
    }
    assert list(search.parameters) == ["type", "properties", "required", "additionalProperties"]


def test_definition_is_openai_shape_and_cached() -> None:
    @tool
    def get_weather(city: str) -> dict[str, Any]:
        """Get the current weather."""
        return {"city": city}

    definition = get_weather.definition()
    assert definition == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
    assert get_weather.definition() is definition


def test_function_without_parameters() -> None:
    @tool
    def now() -> str:
        return "noon"

    assert now.parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    assert now.description == ""


def test_descriptions_from_google_docstring() -> None:
    @tool
    def book(city: str, nights: int = 1, smoking: bool = False) -> str:
        """Book a hotel room
        in a city.

        Only hotels with free cancellation are considered.

        Args:
            city (str): The city, in English.
            nights: How many nights;
                at least one.
            smoking: Whether smoking is allowed.

        Returns:
            A booking reference.
        """
        return "ref"

    assert book.description == "Book a hotel room in a city."
    props = book.parameters["properties"]
    assert props["city"]["description"] == "The city, in English."
    assert props["nights"]["description"] == "How many nights; at least one."
    assert props["smoking"]["description"] == "Whether smoking is allowed."
    assert "Returns" not in str(book.parameters)


def test_explicit_name_and_description_win() -> None:
    @tool(name="lookup-v2", description="Look it up.")
    def lookup(key: Annotated[str, Field(description="From Field.")]) -> str:
        """Docstring summary.

        Args:
            key: From the docstring.
        """
        return key

    assert lookup.name == "lookup-v2"
    assert lookup.description == "Look it up."
    assert lookup.parameters["properties"]["key"]["description"] == "From Field."


def test_pydantic_model_parameter_schema_and_value() -> None:
    seen: list[Any] = []

    @tool
    def forecast(where: Location, days: int = 3) -> Report:
        """Forecast for a location.

        Args:
            where: The place.
        """
        seen.append(where)
        return Report(at=datetime(2024, 5, 1, 12, 0), temp_c=15.5)

    schema = forecast.parameters
    assert schema["properties"]["where"]["$ref"] == "#/$defs/Location"
    assert schema["properties"]["where"]["description"] == "The place."
    assert schema["$defs"]["Location"] == {
        "type": "object",
        "description": "A point on Earth.",
        "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
        "required": ["lat", "lon"],
    }
    assert schema["required"] == ["where"]

    outcome = anyio.run(forecast.run, {"where": {"lat": 51.5, "lon": -0.1}})
    assert outcome == ToolOutcome(True, {"at": "2024-05-01T12:00:00", "temp_c": 15.5})
    assert seen == [Location(lat=51.5, lon=-0.1)]
    assert isinstance(seen[0], Location)


def test_no_title_keywords_but_a_property_named_title_survives() -> None:
    @tool
    def create_issue(title: str, where: Location, labels: list[str] | None = None) -> str:
        return title

    props = create_issue.parameters["properties"]
    assert props["title"] == {"type": "string"}
    title_keys = [p for p in _walk_keys(create_issue.parameters) if p[-1] == "title"]
    assert title_keys == [("properties", "title")]


def test_parameter_names_pydantic_reserves() -> None:
    received: dict[str, Any] = {}

    @tool
    def store(json: str, schema: int, _secret: bool = False, model_name: str = "m") -> None:
        received.update(json=json, schema=schema, _secret=_secret, model_name=model_name)

    props = store.parameters["properties"]
    assert list(props) == ["json", "schema", "_secret", "model_name"]
    assert store.parameters["required"] == ["json", "schema"]
    outcome = anyio.run(store.run, {"json": "{}", "schema": 2, "_secret": True})
    assert outcome.success, outcome
    assert received == {"json": "{}", "schema": 2, "_secret": True, "model_name": "m"}


def test_string_annotations_are_resolved() -> None:
    @tool
    def double(x: "int") -> "int":
        return 2 * x

    assert double.parameters["properties"] == {"x": {"type": "integer"}}
    assert anyio.run(double.run, {"x": 4}) == ToolOutcome(True, 8)


def test_decorated_tool_keeps_the_function_and_is_immutable() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    made = tool(add)
    assert made.fn is add
    assert made.approval is Approval.AUTO
    assert made.idempotent is False
    assert made.timeout == 60.0
    with pytest.raises(AttributeError):
        made.name = "other"
    outcome = ToolOutcome(True, 1)
    with pytest.raises(AttributeError):
        outcome.success = False  # type: ignore[misc]


# --------------------------------------------------------------------------- definition errors


def test_unannotated_parameter_is_rejected() -> None:
    def untyped(city, days: int) -> str:  # type: ignore[no-untyped-def]
        return ""

    with pytest.raises(ToolDefinitionError, match=r"untyped.*parameter 'city' has no type"):
        tool(untyped)


def test_star_args_and_kwargs_are_rejected() -> None:
    def star(*cities: str) -> str:
        return ""

    def double_star(**options: str) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match=r"star.*'\*cities'"):
        tool(star)
    with pytest.raises(ToolDefinitionError, match=r"double_star.*'\*\*options'"):
        tool(double_star)


def test_positional_only_parameter_is_rejected() -> None:
    def pos(city: str, /) -> str:
        return city

    with pytest.raises(ToolDefinitionError, match="'city' is positional-only"):
        tool(pos)


@pytest.mark.parametrize("bad", ["has space", "", "x" * 65, "dots.not.allowed", "é"])
def test_bad_names_are_rejected(bad: str) -> None:
    def fine(city: str) -> str:
        return city

    with pytest.raises(ToolDefinitionError, match=r"tool name .* is not valid"):
        tool(fine, name=bad)
    with pytest.raises(ToolDefinitionError, match="is not valid"):
        Tool.from_spec(bad)


def test_lambda_needs_a_name() -> None:
    with pytest.raises(ToolDefinitionError, match="'<lambda>' is not valid"):
        tool(lambda: None)
    assert tool(lambda: None, name="noop").name == "noop"


def test_type_without_json_schema_names_the_parameter() -> None:
    def takes_callback(city: str, anything: Any, on_done: Callable[[], None]) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="parameter 'on_done'"):
        tool(takes_callback)


def test_unresolvable_annotation_is_rejected() -> None:
    def broken(city: "NoSuchType") -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    with pytest.raises(ToolDefinitionError, match="cannot resolve its type annotations"):
        tool(broken)


def test_bad_options_are_rejected() -> None:
    def fine(city: str) -> str:
        return city

    async def afine(city: str) -> str:
        return city

    async def async_policy(request: ToolCallRequest) -> bool:
        return True

    with pytest.raises(ToolDefinitionError, match="approval must be"):
        tool(fine, approval="sometimes")  # type: ignore[call-overload]
    with pytest.raises(ToolDefinitionError, match="sync"):
        tool(fine, approval=async_policy)  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match="timeout"):
        tool(fine, timeout=0)
    with pytest.raises(ToolDefinitionError, match="timeout"):
        tool(fine, timeout=-1.0)
    with pytest.raises(ToolDefinitionError, match="blocking=True is for sync"):
        tool(afine, blocking=True)
    with pytest.raises(ToolDefinitionError, match=r"inline=True .* give one of them"):
        tool(fine, inline=True, blocking=True)
    with pytest.raises(ToolDefinitionError, match="inline must be True or False"):
        tool(fine, inline="yes")  # type: ignore[call-overload]
    assert tool(fine, timeout=None).timeout is None


# --------------------------------------------------------------------------- approval


def test_fixed_approval_policies() -> None:
    def fine(city: str) -> str:
        return city

    request = call("fine", {"city": "Paris"})
    assert tool(fine).decide(request) is Approval.AUTO
    assert tool(fine, approval="required").decide(request) is Approval.REQUIRED
    assert tool(fine, approval="deny").decide(request) is Approval.DENY
    assert tool(fine, approval=Approval.DENY).decide(request) is Approval.DENY
    assert tool(fine, approval="required").approval is Approval.REQUIRED


def test_callable_policy_sees_the_call() -> None:
    def fine(amount: int) -> int:
        return amount

    def policy(request: ToolCallRequest) -> bool:
        return bool(request.arguments["amount"] < 100)

    made = tool(fine, approval=policy)
    assert made.decide(call("fine", {"amount": 5})) is Approval.AUTO
    assert made.decide(call("fine", {"amount": 500})) is Approval.DENY


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        (True, Approval.AUTO),
        (False, Approval.DENY),
        ("auto", Approval.AUTO),
        ("required", Approval.REQUIRED),
        ("deny", Approval.DENY),
        (Approval.DENY, Approval.DENY),
        ("maybe", Approval.REQUIRED),
        (1, Approval.REQUIRED),
        (None, Approval.REQUIRED),
    ],
)
def test_callable_policy_results(verdict: Any, expected: Approval) -> None:
    def fine(city: str) -> str:
        return city

    made = tool(fine, approval=lambda request: verdict)
    assert made.decide(call("fine", {"city": "Rome"})) is expected


def test_raising_policy_means_a_human_decides(caplog: pytest.LogCaptureFixture) -> None:
    def fine(city: str) -> str:
        return city

    def policy(request: ToolCallRequest) -> bool:
        raise KeyError("no such account")

    made = tool(fine, approval=policy)
    with caplog.at_level(logging.WARNING, logger="turnfsm.tools"):
        assert made.decide(call("fine", {"city": "Rome"})) is Approval.REQUIRED
    assert "approval policy of tool 'fine' raised" in caplog.text


# --------------------------------------------------------------------------- running


@pytest.mark.anyio
async def test_run_returns_the_result() -> None:
    @tool
    def get_weather(city: str) -> dict[str, Any]:
        return {"city": city, "temp_c": 15}

    assert await get_weather.run({"city": "London"}) == ToolOutcome(
        True, {"city": "London", "temp_c": 15}
    )


@pytest.mark.anyio
async def test_invalid_arguments_name_the_argument() -> None:
    ran: list[int] = []

    @tool
    def forecast(city: str, days: int) -> None:
        ran.append(days)

    outcome = await forecast.run({"city": "Oslo", "days": "many", "hours": 3})
    assert outcome.success is False
    error = outcome.result["error"]
    assert error.startswith("invalid arguments for tool 'forecast': ")
    assert "days: Input should be a valid integer" in error
    assert "hours: Extra inputs are not permitted" in error
    locs = [detail["loc"] for detail in outcome.result["details"]]
    assert locs == [["days"], ["hours"]]
    assert all(set(detail) == {"type", "loc", "msg"} for detail in outcome.result["details"])

    missing = await forecast.run({"days": 2})
    assert missing.success is False
    assert "city: Field required" in missing.result["error"]
    assert ran == []


@pytest.mark.anyio
async def test_arguments_that_are_not_an_object() -> None:
    @tool
    def fine(city: str) -> str:
        return city

    outcome = await fine.run(["Oslo"])  # type: ignore[arg-type]
    assert outcome == ToolOutcome(
        False, {"error": "invalid arguments for tool 'fine': not a JSON object"}
    )


@pytest.mark.anyio
async def test_a_raising_tool_gives_a_failed_outcome() -> None:
    @tool
    def explode(city: str) -> str:
        raise ValueError(f"no weather in {city}")

    @tool
    async def silent() -> None:
        raise RuntimeError

    assert await explode.run({"city": "Atlantis"}) == ToolOutcome(
        False, {"error": "ValueError: no weather in Atlantis"}
    )
    assert await silent.run({}) == ToolOutcome(False, {"error": "RuntimeError"})


@pytest.mark.anyio
async def test_hanging_async_tool_times_out() -> None:
    @tool(timeout=0.05)
    async def hang() -> str:
        await anyio.sleep_forever()
        return "never"

    with anyio.fail_after(5):
        outcome = await hang.run({})
    assert outcome == ToolOutcome(False, {"error": "tool 'hang' timed out after 0.05s"})


@pytest.mark.anyio
async def test_a_timeout_error_from_the_tool_is_not_our_timeout() -> None:
    @tool(timeout=5)
    async def remote() -> str:
        raise TimeoutError("upstream took too long")

    outcome = await remote.run({})
    assert outcome == ToolOutcome(False, {"error": "TimeoutError: upstream took too long"})


@pytest.mark.anyio
async def test_no_timeout_runs_to_completion() -> None:
    @tool(timeout=None)
    async def slowish() -> int:
        await anyio.sleep(0.01)
        return 7

    assert await slowish.run({}) == ToolOutcome(True, 7)


@pytest.mark.anyio
async def test_sync_tools_run_in_a_worker_thread_unless_inline() -> None:
    loop_thread = threading.get_ident()

    def where() -> int:
        return threading.get_ident()

    for threaded in (tool(where), tool(where, blocking=True), Tool.from_spec("where", fn=where)):
        assert threaded.blocking is True
        assert threaded.inline is False
        outcome = await threaded.run({})
        assert outcome.success is True
        assert outcome.result != loop_thread
    for inline in (tool(where, inline=True), tool(where, blocking=False)):
        assert inline.blocking is False
        assert inline.inline is True
        assert await inline.run({}) == ToolOutcome(True, loop_thread)
        assert inline.with_approval("required").inline is True


@pytest.mark.anyio
async def test_blocking_tool_times_out_and_the_thread_is_abandoned() -> None:
    release = threading.Event()
    finished = threading.Event()

    def stuck() -> str:
        release.wait(5)
        finished.set()
        return "late"

    with anyio.fail_after(5):
        outcome = await tool(stuck, blocking=True, timeout=0.05).run({})
    assert outcome == ToolOutcome(False, {"error": "tool 'stuck' timed out after 0.05s"})
    assert not finished.is_set()
    release.set()
    assert finished.wait(5)


@pytest.mark.anyio
async def test_tool_without_implementation() -> None:
    remote = Tool.from_spec("remote", "Runs elsewhere.")
    assert await remote.run({}) == ToolOutcome(
        False, {"error": "tool 'remote' has no implementation"}
    )


# --------------------------------------------------------------------------- cancellation


@pytest.mark.anyio
@pytest.mark.parametrize("limit", [None, 10.0])
async def test_cancellation_propagates_from_run(limit: float | None) -> None:
    started = anyio.Event()

    @tool(timeout=limit)
    async def hang() -> str:
        started.set()
        await anyio.sleep_forever()
        return "never"

    outcomes: list[ToolOutcome] = []
    after_run: list[bool] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:

            async def runner(scope: anyio.CancelScope) -> None:
                with scope:
                    outcomes.append(await hang.run({}))
                    after_run.append(True)

            scope = anyio.CancelScope()
            group.start_soon(runner, scope)
            await started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    assert outcomes == []
    assert after_run == []


@pytest.mark.anyio
async def test_cancellation_propagates_from_a_blocking_tool() -> None:
    release = threading.Event()

    def stuck() -> str:
        release.wait(5)
        return "late"

    outcomes: list[ToolOutcome] = []
    with anyio.fail_after(5), anyio.move_on_after(0.05) as scope:
        outcomes.append(await tool(stuck, blocking=True, timeout=None).run({}))
    release.set()
    assert scope.cancelled_caught
    assert outcomes == []


@pytest.mark.anyio
async def test_cancellation_propagates_from_run_calls() -> None:
    @tool(timeout=10)
    async def hang(n: int) -> int:
        await anyio.sleep_forever()
        return n

    registry = ToolRegistry([hang])
    outcomes: list[list[ToolOutcome]] = []
    with anyio.fail_after(5), anyio.move_on_after(0.05) as scope:
        outcomes.append(await run_calls(registry, [call("hang", {"n": i}) for i in range(3)]))
    assert scope.cancelled_caught
    assert outcomes == []


# --------------------------------------------------------------------------- run_calls


@pytest.mark.anyio
async def test_run_calls_unknown_tool() -> None:
    @tool
    def alpha() -> int:
        return 1

    @tool
    def beta() -> int:
        return 2

    registry = ToolRegistry([alpha, beta])
    outcomes = await run_calls(registry, [call("gamma")])
    assert outcomes == [
        ToolOutcome(False, {"error": "unknown tool 'gamma'; available tools: alpha, beta"})
    ]
    empty = await run_calls(ToolRegistry(), [call("gamma")])
    assert empty[0].result["error"] == "unknown tool 'gamma'; available tools: (none)"


@pytest.mark.anyio
async def test_run_calls_raw_arguments_are_not_run() -> None:
    ran: list[str] = []

    @tool
    def note(text: str = "") -> None:
        ran.append(text)

    outcomes = await run_calls(ToolRegistry([note]), [call("note", raw_arguments='{"text": ')])
    assert outcomes == [
        ToolOutcome(
            False,
            {
                "error": "invalid arguments for tool 'note': not a JSON object",
                "raw": '{"text": ',
            },
        )
    ]
    assert ran == []


@pytest.mark.anyio
async def test_run_calls_no_calls() -> None:
    assert await run_calls(ToolRegistry(), []) == []


@pytest.mark.anyio
async def test_run_calls_keeps_order_when_later_calls_finish_first() -> None:
    finished: list[str] = []

    @tool
    async def wait(label: str, delay: float) -> str:
        await anyio.sleep(delay)
        finished.append(label)
        return label

    @tool
    def instant(label: str) -> str:
        finished.append(label)
        return label

    registry = ToolRegistry([wait, instant])
    calls = [
        call("wait", {"label": "slow", "delay": 0.06}),
        call("wait", {"label": "medium", "delay": 0.03}),
        call("instant", {"label": "now"}),
        call("missing"),
        call("wait", {"label": "bad", "delay": "soon"}),
    ]
    with anyio.fail_after(5):
        outcomes = await run_calls(registry, calls)
    assert finished == ["now", "medium", "slow"]
    assert [o.result for o in outcomes[:3]] == ["slow", "medium", "now"]
    assert [o.success for o in outcomes] == [True, True, True, False, False]
    assert outcomes[3].result["error"].startswith("unknown tool 'missing'")
    assert outcomes[4].result["error"].startswith("invalid arguments for tool 'wait': delay")


@pytest.mark.anyio
async def test_run_calls_runs_concurrently() -> None:
    ping_ready = anyio.Event()
    pong_ready = anyio.Event()

    @tool
    async def ping() -> str:
        ping_ready.set()
        await pong_ready.wait()
        return "ping"

    @tool
    async def pong() -> str:
        pong_ready.set()
        await ping_ready.wait()
        return "pong"

    # Run one after the other, each would wait forever for the other.
    with anyio.fail_after(2):
        outcomes = await run_calls(ToolRegistry([ping, pong]), [call("ping"), call("pong")])
    assert outcomes == [ToolOutcome(True, "ping"), ToolOutcome(True, "pong")]


# --------------------------------------------------------------------------- from_spec


WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name."},
        "days": {"type": "integer"},
        "scale": {"type": "number"},
        "metric": {"type": "boolean"},
        "hours": {"type": "array", "items": {"type": "integer"}},
        "filters": {"type": "object"},
        "note": {"type": ["string", "null"]},
        "anything": {"description": "No type: anything goes."},
    },
    "required": ["city"],
    "additionalProperties": False,
}


def test_from_spec_definition_and_copy() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    }
    made = Tool.from_spec("search", "Search the web.", schema, idempotent=True)
    schema["properties"]["q"]["type"] = "integer"
    assert made.definition() == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}},
                "required": ["q"],
            },
        },
    }
    assert made.idempotent is True
    assert made.fn is None


@pytest.mark.anyio
async def test_from_spec_passes_keyword_arguments() -> None:
    def weather(city: str, **rest: Any) -> dict[str, Any]:
        return {"city": city, **rest}

    made = Tool.from_spec("weather", "Weather.", WEATHER_SCHEMA, weather)
    arguments = {
        "city": "Oslo",
        "days": 2,
        "scale": 3,
        "metric": True,
        "hours": [1, 2],
        "filters": {"rain": True},
        "note": None,
        "anything": [1, "x"],
    }
    assert await made.run(arguments) == ToolOutcome(True, arguments)


@pytest.mark.anyio
async def test_from_spec_missing_required() -> None:
    made = Tool.from_spec("weather", "Weather.", WEATHER_SCHEMA, lambda **kw: kw)
    outcome = await made.run({"days": 2})
    assert outcome.success is False
    assert outcome.result["error"] == "invalid arguments for tool 'weather': city: Field required"
    assert outcome.result["details"] == [
        {"type": "missing", "loc": ["city"], "msg": "Field required"}
    ]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("city", 3, "city: Input should be of JSON type string, not integer"),
        ("days", 2.5, "days: Input should be of JSON type integer, not number"),
        ("days", True, "days: Input should be of JSON type integer, not boolean"),
        ("scale", "big", "scale: Input should be of JSON type number, not string"),
        ("metric", "yes", "metric: Input should be of JSON type boolean, not string"),
        ("hours", {"a": 1}, "hours: Input should be of JSON type array, not object"),
        ("filters", [], "filters: Input should be of JSON type object, not array"),
        ("note", 1, "note: Input should be of JSON type string or null, not integer"),
    ],
)
async def test_from_spec_wrong_type(key: str, value: Any, message: str) -> None:
    ran: list[Any] = []
    made = Tool.from_spec("weather", "Weather.", WEATHER_SCHEMA, lambda **kw: ran.append(kw))
    outcome = await made.run({"city": "Oslo", key: value})
    assert outcome.success is False
    assert outcome.result["error"] == f"invalid arguments for tool 'weather': {message}"
    assert outcome.result["details"][0]["loc"] == [key]
    assert ran == []


@pytest.mark.anyio
async def test_from_spec_extra_key() -> None:
    closed = Tool.from_spec("weather", "Weather.", WEATHER_SCHEMA, lambda **kw: kw)
    outcome = await closed.run({"city": "Oslo", "wind": True})
    assert outcome.success is False
    assert outcome.result["error"] == (
        "invalid arguments for tool 'weather': wind: Extra inputs are not permitted"
    )
    open_schema = {**WEATHER_SCHEMA, "additionalProperties": True}
    lenient = Tool.from_spec("weather", "Weather.", open_schema, lambda **kw: kw)
    assert await lenient.run({"city": "Oslo", "wind": True}) == ToolOutcome(
        True, {"city": "Oslo", "wind": True}
    )


@pytest.mark.anyio
async def test_from_spec_without_parameters_takes_no_arguments() -> None:
    made = Tool.from_spec("ping", fn=lambda: "pong")
    assert await made.run({}) == ToolOutcome(True, "pong")
    extra = await made.run({"x": 1})
    assert extra.success is False
    assert "x: Extra inputs are not permitted" in extra.result["error"]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "string"}, "type 'object'"),
        ({"type": "object", "properties": []}, "'properties' must be an object"),
        ({"type": "object", "required": "city"}, "'required' must be a list"),
        ({"properties": {"a": {"type": "text"}}}, "unknown JSON type"),
        ({"properties": {"a": "string"}}, "property 'a' must be an object"),
    ],
)
def test_from_spec_bad_schema(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message):
        Tool.from_spec("bad", "Bad.", schema)


# --------------------------------------------------------------------------- registry


def test_registry_lookup_and_definitions() -> None:
    @tool
    def alpha() -> int:
        return 1

    beta = Tool.from_spec("beta", "Beta.")
    registry = ToolRegistry([alpha, beta])
    assert registry.get("alpha") is alpha
    assert registry.get("gamma") is None
    assert "beta" in registry
    assert "gamma" not in registry
    assert alpha not in registry  # membership is by name
    assert len(registry) == 2
    assert list(registry) == [alpha, beta]
    assert registry.names == ("alpha", "beta")
    definitions = registry.definitions()
    assert definitions == [alpha.definition(), beta.definition()]
    assert registry.definitions() is definitions
    assert len(ToolRegistry()) == 0


def test_registry_rejects_duplicates_and_non_tools() -> None:
    first = Tool.from_spec("same", "One.")
    second = Tool.from_spec("same", "Two.")
    with pytest.raises(ToolDefinitionError, match="two tools are named 'same'"):
        ToolRegistry([first, second])

    def plain(city: str) -> str:
        return city

    with pytest.raises(ToolDefinitionError, match="decorate it with @tool"):
        ToolRegistry([plain])  # type: ignore[list-item]


# --------------------------------------------------------------------------- other callables


class Greeter:
    """Greets people."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    async def __call__(self, who: str) -> str:
        return f"{self.prefix} {who}"


@pytest.mark.anyio
async def test_callable_object_and_partial() -> None:
    greet = tool(Greeter("hello"), name="greet")
    assert greet.description == "Greets people."
    assert greet.parameters["properties"] == {"who": {"type": "string"}}
    assert await greet.run({"who": "Ada"}) == ToolOutcome(True, "hello Ada")

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    add_two = tool(functools.partial(add, b=2), name="add_two")
    assert add_two.description == "Add two numbers."
    assert add_two.parameters["required"] == ["a"]
    assert await add_two.run({"a": 1}) == ToolOutcome(True, 3)


@pytest.mark.anyio
async def test_sync_function_returning_an_awaitable_fails_cleanly() -> None:
    async def inner(x: int) -> int:
        return x

    def wrapper(x: int) -> Any:
        return inner(x)

    outcome = await tool(wrapper).run({"x": 1})
    assert outcome.success is False
    assert "declare the function async def" in outcome.result["error"]


@pytest.mark.anyio
async def test_current_call_is_visible_inside_the_tool_and_only_there() -> None:
    from turnfsm.tools import current_call

    seen: list[str | None] = []

    async def echo(x: int) -> int:
        call = current_call()
        seen.append(call.id if call else None)
        await anyio.lowlevel.checkpoint()
        return x

    reg = ToolRegistry(
        [
            Tool.from_spec(
                "echo", "", {"type": "object", "properties": {"x": {"type": "integer"}}}, echo
            )
        ]
    )
    calls = [ToolCallRequest(id=f"c{i}", tool_name="echo", arguments={"x": i}) for i in range(3)]
    outcomes = await run_calls(reg, calls)
    assert [o.result for o in outcomes] == [0, 1, 2]
    assert sorted(s for s in seen if s) == ["c0", "c1", "c2"]
    assert current_call() is None


@pytest.mark.anyio
async def test_tool_error_message_reaches_the_model_verbatim() -> None:
    from turnfsm.tools import ToolError

    def lookup(city: str) -> str:
        raise ToolError(f"no such city: {city}")

    outcome = await tool(lookup).run({"city": "Atlantis"})
    assert outcome == ToolOutcome(False, {"error": "no such city: Atlantis"})


def test_outcome_of_plain_json_is_a_copy_sharing_nothing() -> None:
    value = {"city": "L", "temps": [1, 2.5, None], "nested": {"ok": True}, "pair": (1, "a")}
    outcome = ToolOutcome.of(True, value)
    assert outcome == ToolOutcome(
        True, {"city": "L", "temps": [1, 2.5, None], "nested": {"ok": True}, "pair": [1, "a"]}
    )
    assert outcome.notes == ()
    value["temps"].append(3)  # type: ignore[attr-defined]
    value["nested"]["ok"] = False  # type: ignore[index]
    assert outcome.result["temps"] == [1, 2.5, None]
    assert outcome.result["nested"] == {"ok": True}


def test_outcome_of_mixed_json_converts_the_long_way() -> None:
    class Point(BaseModel):
        x: int

    outcome = ToolOutcome.of(True, {"p": Point(x=1), "t": float("nan"), 3: "three"})
    assert outcome.success
    assert outcome.result == {"p": {"x": 1}, "t": "NaN", "3": "three"}
    assert len(outcome.notes) == 2


def test_hosting_sets_the_host_for_its_block_and_resets_it_on_error() -> None:
    from turnfsm.tools import _subtask

    host: Any = object()
    assert _subtask._HOST.get() is None
    with _subtask.hosting(host, "parent"):
        assert _subtask._HOST.get() == (host, "parent")
        with _subtask.hosting(host, "inner"):
            assert _subtask._HOST.get() == (host, "inner")
        assert _subtask._HOST.get() == (host, "parent")
    assert _subtask._HOST.get() is None
    with pytest.raises(RuntimeError), _subtask.hosting(host, "parent"):
        raise RuntimeError("a tool's crash")
    assert _subtask._HOST.get() is None
