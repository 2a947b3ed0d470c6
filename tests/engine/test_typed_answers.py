"""Typed answers (docs/structured-output.md): an output type turns into one
JSON Schema, reaches the model natively or as an instruction, and an answer
that does not match it takes a declared edge (``output_invalid`` while
retries remain, ``output_failed`` after), every step committed and audited."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pydantic
import pytest
from typing_extensions import TypedDict

from turnfsm import Engine, OutputValidationError, Role, SQLiteStore, State, StopReason
from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log
from turnfsm.engine._output import json_path, unfenced
from turnfsm.errors import InvalidInput, OutputTypeError
from turnfsm.testing import ScriptedLLM
from turnfsm.tools import tool

pytestmark = pytest.mark.anyio

PUM = State.PROCESSING_USER_MESSAGE
ALR = State.AWAITING_LLM_RESPONSE
PLR = State.PROCESSING_LLM_RESPONSE
IDLE = State.IDLE
PF = State.PERMANENT_FAILURE


class City(pydantic.BaseModel):
    name: str
    population: int


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Pair(TypedDict):
    left: str
    right: str


class Opaque:
    """A class pydantic has no schema for."""


CITY_SCHEMA: dict[str, Any] = {
    "title": "City record",
    "type": "object",
    "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["name", "population"],
}

PARIS = '{"name": "Paris", "population": 2100000}'


class NativeLLM(ScriptedLLM):
    """A scripted model whose adapter says it asks the provider for the schema."""

    native_output = True


def _digest(schema: dict[str, Any]) -> str:
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


async def test_a_valid_first_answer_is_the_turns_output() -> None:
    llm = ScriptedLLM([{"text": PARIS}])
    async with Engine(llm=llm, output_type=City) as engine:
        cid = await engine.create_context(system_prompt="You name cities.")
        turn = await engine.send(cid, "The capital of France?")
    assert turn.state is IDLE and turn.stop_reason is StopReason.COMPLETED
    assert turn.states == (PUM, ALR, PLR, IDLE)
    assert turn.output == City(name="Paris", population=2100000)
    assert turn.output_error is None
    (request,) = llm.requests
    schema = City.model_json_schema()
    assert request.output is not None
    assert (request.output.name, request.output.mode) == ("City", "instruction")
    assert request.output.schema == schema and request.output.digest == _digest(schema)
    # instruction mode: the schema is asked for in a system message, last in the view
    last = request.messages[-1]
    assert last["role"] == "system" and "JSON only" in last["content"]
    assert json.loads(last["content"].split("\n", 1)[1]) == schema
    answer = turn.messages[-1]
    assert answer.text == PARIS  # the stored message keeps the JSON text
    assert answer.metadata.extra["output"] == {
        "name": "City",
        "digest": _digest(schema),
        "mode": "instruction",
    }


async def test_native_mode_sends_the_schema_and_no_instruction() -> None:
    llm = NativeLLM([{"text": PARIS}])
    async with Engine(llm=llm, output_type=City) as engine:
        cid = await engine.create_context(system_prompt="You name cities.")
        turn = await engine.send(cid, "The capital of France?")
    (request,) = llm.requests
    assert request.output is not None and request.output.mode == "native"
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert turn.messages[-1].metadata.extra["output"]["mode"] == "native"
    assert turn.output == City(name="Paris", population=2100000)


@pytest.mark.parametrize(
    ("output_type", "text", "expected"),
    [(list[int], "[1, 2, 3]", [1, 2, 3]), (int | str, "7", 7)],
)
async def test_a_root_that_is_not_an_object_is_asked_for_in_words_even_natively(
    output_type: Any, text: str, expected: Any
) -> None:
    llm = NativeLLM([{"text": text}])
    async with Engine(llm=llm, output_type=output_type) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "Numbers?")
    (request,) = llm.requests
    assert request.output is not None and request.output.mode == "instruction"
    assert request.messages[-1]["role"] == "system"
    assert turn.messages[-1].metadata.extra["output"]["mode"] == "instruction"
    assert turn.output == expected


async def test_an_invalid_answer_is_sent_back_then_a_valid_one_completes() -> None:
    llm = ScriptedLLM([{"text": '{"name": "Paris"}'}, {"text": f"```json\n{PARIS}\n```"}])
    async with Engine(llm=llm, output_type=City) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "The capital of France?")
        trace = await engine.trace(cid)
        steps = await engine.steps(cid)
        ctx = await engine.get_context(cid)
    assert turn.states == (PUM, ALR, PLR, ALR, PLR, IDLE)
    assert trace == [IDLE, *turn.states]
    assert [s.trigger for s in steps] == [
        "user_message",
        "prompt_ready",
        "response_received",
        "output_invalid",
        "response_received",
        "turn_complete",
    ]
    assert turn.output == City(name="Paris", population=2100000)
    roles = [m.role for m in turn.messages]
    assert roles == [Role.USER, Role.ASSISTANT, Role.USER, Role.ASSISTANT]
    errors = turn.messages[2]
    assert errors.metadata.extra["output_errors"] == [
        {"path": "$.population", "message": "Field required"}
    ]
    assert "$.population: Field required" in errors.text
    # the model saw its answer and the errors before answering again
    second = llm.requests[1].messages
    assert [m["role"] for m in second[-4:]] == ["user", "assistant", "user", "system"]
    assert "$.population" in second[-2]["content"]
    lines = audit_jsonl(audit_records(cid, steps, ctx.message_pool.values())).splitlines()
    assert verify_audit_log(lines).ok
    invalid = json.loads(lines[3])
    assert invalid["trigger"] == "output_invalid" and invalid["actor"] == "system"
    assert invalid["message_ids"] == [turn.message_ids[2]] and invalid["attempt"] == 1


async def test_spent_retries_fail_the_turn_with_a_typed_error_and_retry_asks_again() -> None:
    llm = ScriptedLLM(
        [
            {"text": "Paris, about two million"},
            {"text": '{"name": "Paris", "population": "many"}'},
            {"text": PARIS},
        ]
    )
    async with Engine(llm=llm, output_type=City, output_retries=1) as engine:
        cid = await engine.create_context()
        failed = await engine.send(cid, "The capital of France?")
        assert failed.state is PF and failed.stop_reason is StopReason.FAILED
        assert failed.states == (PUM, ALR, PLR, ALR, PLR, PF)
        assert failed.output is None
        error = failed.output_error
        assert isinstance(error, OutputValidationError)
        assert error.schema_name == "City"
        assert error.problems == (
            (
                "$.population",
                "Input should be a valid integer, unable to parse string as an integer",
            ),
        )
        assert failed.error == str(error)
        # nothing stored is lost: both answers and both error messages
        assert [m.role for m in failed.messages] == [Role.USER, *[Role.ASSISTANT, Role.USER] * 2]
        again = await engine.retry(cid)
        assert again.states == (ALR, PLR, IDLE)
        assert again.output == City(name="Paris", population=2100000)
        assert "$.population" in llm.requests[2].messages[-2]["content"]
        assert await engine.trace(cid) == [IDLE, PUM, ALR, PLR, ALR, PLR, PF, ALR, PLR, IDLE]


async def test_retry_from_failure_gets_the_full_retries_again() -> None:
    bad = {"text": "not json"}
    llm = ScriptedLLM([bad, bad, bad, {"text": PARIS}])
    async with Engine(llm=llm, output_type=City, output_retries=1) as engine:
        cid = await engine.create_context()
        assert (await engine.send(cid, "?")).state is PF
        again = await engine.retry(cid)
    assert again.states == (ALR, PLR, ALR, PLR, IDLE)
    assert again.output == City(name="Paris", population=2100000)


@pytest.mark.parametrize(
    ("output_type", "text", "expected", "name"),
    [
        (City, PARIS, City(name="Paris", population=2100000), "City"),
        (Point, '{"x": 1, "y": 2.5}', Point(1.0, 2.5), "Point"),
        (list[int], "[1, 2, 3]", [1, 2, 3], "list_int"),
        (Pair, '{"left": "a", "right": "b"}', {"left": "a", "right": "b"}, "Pair"),
        (CITY_SCHEMA, PARIS, {"name": "Paris", "population": 2100000}, "City_record"),
    ],
    ids=["model", "dataclass", "list", "typeddict", "json-schema"],
)
async def test_each_kind_of_output_type(
    output_type: Any, text: str, expected: Any, name: str
) -> None:
    llm = ScriptedLLM([{"text": text}])
    async with Engine(llm=llm) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go", output_type=output_type)
    assert turn.output == expected and type(turn.output) is type(expected)
    assert llm.requests[0].output is not None
    assert llm.requests[0].output.name == name


async def test_a_json_schema_answer_is_checked_by_the_schema() -> None:
    llm = ScriptedLLM([{"text": '{"name": 5, "population": 1}'}, {"text": PARIS}])
    async with Engine(llm=llm, output_type=CITY_SCHEMA) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
    assert turn.messages[2].metadata.extra["output_errors"] == [
        {"path": "$.name", "message": "5 is not of type 'string'"}
    ]
    assert turn.output == {"name": "Paris", "population": 2100000}


async def test_a_call_replaces_the_engines_output_type_or_drops_it() -> None:
    llm = ScriptedLLM([{"text": "plain words"}, {"text": "[1]"}])
    async with Engine(llm=llm, output_type=City) as engine:
        cid = await engine.create_context()
        plain = await engine.send(cid, "chat", output_type=None)
        listed = await engine.send(cid, "list", output_type=list[int], output_retries=0)
    assert plain.output is None and plain.state is IDLE
    assert llm.requests[0].output is None and "output" not in plain.messages[-1].metadata.extra
    assert listed.output == [1]


async def test_no_output_type_changes_nothing() -> None:
    llm = ScriptedLLM([{"text": "{not json"}])
    async with Engine(llm=llm) as engine:
        cid = await engine.create_context(system_prompt="s")
        turn = await engine.send(cid, "hi")
        ctx = await engine.get_context(cid)
    assert turn.states == (PUM, ALR, PLR, IDLE) and turn.output is None
    (request,) = llm.requests
    assert request.output is None and [m["role"] for m in request.messages] == ["system", "user"]
    assert turn.messages[-1].metadata.extra == {}
    assert ctx.progress.output is None


@pytest.mark.parametrize(
    ("bad", "where", "says"),
    [
        (5, "output_type", "must be a type or a JSON Schema dict"),
        ("City", "output_type", "must be a type or a JSON Schema dict"),
        (lambda: 1, "output_type", "must be a type or a JSON Schema dict"),
        (Opaque, "output_type", "cannot be an output type: PydanticSchemaGenerationError"),
        (
            {"type": "object", "properties": {"n": {"type": "integr"}}},
            "output_type.properties.n.type",
            "not a valid JSON Schema",
        ),
        ({"type": "object", "default": float("nan")}, "output_type", "not JSON data"),
    ],
    ids=["int", "str", "function", "opaque-class", "bad-schema", "nan"],
)
async def test_a_bad_output_type_is_refused_at_the_call(bad: Any, where: str, says: str) -> None:
    with pytest.raises(OutputTypeError) as made:
        Engine(llm=ScriptedLLM([]), output_type=bad)
    assert made.value.where == where and says in made.value.reason
    llm = ScriptedLLM([])
    async with Engine(llm=llm) as engine:
        cid = await engine.create_context()
        with pytest.raises(OutputTypeError) as sent:
            await engine.send(cid, "hi", output_type=bad)
        assert sent.value.where == where
        assert (await engine.get_context(cid)).message_pool == {}  # nothing stored
    assert llm.requests == []


async def test_output_retries_must_be_a_count() -> None:
    with pytest.raises(InvalidInput, match="output_retries"):
        Engine(output_retries=-1)
    async with Engine(llm=ScriptedLLM([])) as engine:
        cid = await engine.create_context()
        with pytest.raises(InvalidInput, match="output_retries"):
            await engine.send(cid, "hi", output_type=City, output_retries=True)  # type: ignore[arg-type]


async def test_a_validator_that_raises_is_an_invalid_answer() -> None:
    class Strict(pydantic.BaseModel):
        n: int

        @pydantic.field_validator("n")
        @classmethod
        def _boom(cls, value: int) -> int:
            if value < 0:
                raise RuntimeError("negative numbers crash this validator")
            return value

    llm = ScriptedLLM([{"text": '{"n": -1}'}, {"text": '{"n": 1}'}])
    async with Engine(llm=llm, output_type=Strict) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
    assert turn.messages[2].metadata.extra["output_errors"] == [
        {
            "path": "$",
            "message": "the validator raised RuntimeError: negative numbers crash this validator",
        }
    ]
    assert turn.output == Strict(n=1)


async def test_a_refusal_is_not_validated() -> None:
    llm = ScriptedLLM([{"refusal": "I can't."}])
    async with Engine(llm=llm, output_type=City) as engine:
        cid = await engine.create_context()
        turn = await engine.send(cid, "go")
    assert turn.stop_reason is StopReason.REFUSAL and turn.states == (PUM, ALR, PLR, IDLE)
    assert turn.output is None and turn.output_error is None


@tool(approval="required")
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: 2100000 people"


LOOKUP_CALL = {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"city": "Paris"}}]}


async def test_the_output_type_holds_across_an_approval_and_an_unload(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    llm = ScriptedLLM([LOOKUP_CALL, {"text": '{"name": "Paris"}'}, {"text": PARIS}])
    async with Engine(llm=llm, tools=[lookup], store=SQLiteStore(path)) as engine:
        cid = await engine.create_context()
        waiting = await engine.send(cid, "Paris?", output_type=City)
        assert waiting.state is State.AWAITING_TOOL_APPROVAL
        stored = (await engine.store.load(cid)).progress.output
        assert stored is not None and stored.name == "City" and stored.retries == 1
        await engine.unload(cid)
        turn = await engine.approve(cid, "c1")
    assert turn.output == City(name="Paris", population=2100000)
    assert turn.states[-5:] == (ALR, PLR, ALR, PLR, IDLE)
    assert all(r.output is not None for r in llm.requests[1:])


async def test_a_process_that_never_saw_the_type_validates_with_the_stored_schema(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chats.db"
    async with Engine(llm=ScriptedLLM([LOOKUP_CALL]), tools=[lookup], store=SQLiteStore(path)) as a:
        cid = await a.create_context()
        assert (await a.send(cid, "Paris?", output_type=City)).state is State.AWAITING_TOOL_APPROVAL
    llm = ScriptedLLM([{"text": '{"name": "Paris", "population": "x"}'}, {"text": PARIS}])
    async with Engine(llm=llm, tools=[lookup], store=SQLiteStore(path)) as b:
        turn = await b.approve(cid, "c1")
    assert turn.output == {"name": "Paris", "population": 2100000}  # the JSON, by the schema
    assert turn.messages[-2].metadata.extra["output_errors"] == [
        {"path": "$.population", "message": "'x' is not of type 'integer'"}
    ]
    assert llm.requests[0].output is not None and llm.requests[0].output.name == "City"


def _body(current: str, context: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "contextManagement": {
            "currentMessage": {"role": "user", "content": current},
            "conversationContext": context,
        }
    }


async def test_a_request_body_resends_what_the_client_got_of_a_typed_turn() -> None:
    llm = ScriptedLLM([{"text": '{"name": "Paris"}'}, {"text": PARIS}, {"text": "[1, 2]"}])
    async with Engine(llm=llm) as engine:
        first = await engine.send_request(_body("Paris?", []), output_type=City)
        assert first.output == City(name="Paris", population=2100000)
        cid = first.context_id
        # the client holds its question and the answer it got, not the one sent back
        history = [{"role": "user", "content": "Paris?"}, {"role": "assistant", "content": PARIS}]
        second = await engine.send_request(
            _body("Two numbers?", history), cid, output_type=list[int]
        )
    assert second.output == [1, 2] and second.states[0] is PUM
    assert second.message_ids[0] not in first.message_ids  # nothing appended twice


async def test_submit_stores_the_output_type_for_whoever_runs_the_turn(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    async with Engine(llm=ScriptedLLM([]), store=SQLiteStore(path)) as a:
        cid = await a.create_context()
        await a.submit(cid, "Paris?", output_type=City, output_retries=0)
        stored = (await a.store.load(cid)).progress.output
    assert stored is not None and (stored.name, stored.retries) == ("City", 0)
    async with Engine(llm=ScriptedLLM([{"text": PARIS}]), store=SQLiteStore(path)) as b:
        turn = await b.resume(cid)
    assert turn.output == {"name": "Paris", "population": 2100000}


async def test_a_schema_the_store_cannot_hold_is_refused_at_the_call() -> None:
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(70):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(OutputTypeError) as made:
        Engine(output_type=deep)
    assert made.value.where.startswith("output_type.properties.a.properties.a")
    assert "cannot be stored" in made.value.reason


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('  {"a": 1}\n', '{"a": 1}'),
        ('```json\n{"a": 1}\n```', '{"a": 1}'),
        ('```JSON\r\n{"a": 1}\r\n```  ', '{"a": 1}'),
        ("```\n[1, 2]\n```", "[1, 2]"),
        ('Here it is:\n```json\n{"a": 1}\n```', 'Here it is:\n```json\n{"a": 1}\n```'),
        ('```json\n{"a": 1}\n``` and more', '```json\n{"a": 1}\n``` and more'),
    ],
    ids=["spaces", "json-fence", "crlf-upper", "bare-fence", "text-before", "text-after"],
)
def test_only_a_fence_around_the_whole_answer_is_taken_off(text: str, expected: str) -> None:
    assert unfenced(text) == expected


def test_json_paths_name_keys_and_indexes() -> None:
    assert json_path([]) == "$"
    assert json_path(["items", 0, "price"]) == "$.items[0].price"
    assert json_path(["a b", "é", 2]) == '$["a b"]["é"][2]'


async def test_the_engines_output_type_is_read_as_a_copy_of_its_schema() -> None:
    engine = Engine(output_type=City, output_retries=3)
    schema = engine.output_type
    assert schema == City.model_json_schema() and engine.output_retries == 3
    schema["required"].append("mayor")
    assert engine.output_type == City.model_json_schema()
    assert Engine().output_type is None


async def test_the_audit_log_of_a_failed_typed_turn_verifies() -> None:
    llm = ScriptedLLM([{"text": "no json"}, {"text": PARIS}])
    async with Engine(llm=llm, output_type=City, output_retries=0) as engine:
        cid = await engine.create_context()
        failed = await engine.send(cid, "?")
        await engine.retry(cid)
        steps = await engine.steps(cid)
        ctx = await engine.get_context(cid)
    lines = audit_jsonl(audit_records(cid, steps, ctx.message_pool.values())).splitlines()
    assert verify_audit_log(lines).ok
    records = [json.loads(line) for line in lines]
    assert [r["trigger"] for r in records] == [
        "user_message",
        "prompt_ready",
        "response_received",
        "output_failed",
        "retry",
        "response_received",
        "turn_complete",
    ]
    assert records[3]["actor"] == "system" and records[3]["to"] == "PermanentFailure"
    assert records[3]["message_ids"] == [failed.message_ids[2]]
    assert records[4]["actor"] == "user"


async def test_a_handed_out_context_cannot_change_the_turns_schema() -> None:
    llm = ScriptedLLM([LOOKUP_CALL, {"text": PARIS}])
    async with Engine(llm=llm, tools=[lookup]) as engine:
        cid = await engine.create_context()
        await engine.send(cid, "Paris?", output_type=City)
        handed = await engine.get_context(cid)
        assert handed.progress.output is not None
        handed.progress.output.schema["required"].append("mayor")
        turn = await engine.approve(cid, "c1")
    assert llm.requests[1].output is not None
    assert llm.requests[1].output.schema["required"] == ["name", "population"]
    assert turn.output == City(name="Paris", population=2100000)
