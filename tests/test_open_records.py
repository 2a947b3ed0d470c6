"""``turn_progress``, ``new_turn``, ``_decide._decision`` and ``ToolOutcome.of``
make the records ``TurnProgress(...)``, ``Turn(...)``, ``Decision(...)`` and
``ToolOutcome(...)`` make: the same type, fields, equality, repr and
frozenness, as the engine stores, returns and acts on what they make (see
``tests/storage/test_step_log.py`` for the audit records made the same way)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from datetime import UTC, datetime
from typing import Any

import pytest

from turnfsm import ApprovalStatus, State, StopReason, Turn, records
from turnfsm.engine._decide import Decision, _decision, _OpenDecision
from turnfsm.engine._turn import _OpenTurn, new_turn
from turnfsm.model import (
    ClientTool,
    ClientTools,
    InternalMessage,
    MessageMetadata,
    Role,
    TextPart,
    TurnOutput,
    TurnProgress,
)
from turnfsm.model._context import _OpenTurnProgress, turn_progress
from turnfsm.model._llm import (
    LLMResponse,
    ReasoningData,
    ToolCallData,
    _OpenLLMResponse,
)
from turnfsm.model._message import _OpenTextPart, text_part
from turnfsm.states import Trigger
from turnfsm.tools import ToolOutcome
from turnfsm.tools._outcome import _OpenToolOutcome


def _fields(cls: Any) -> list[str]:
    return sorted(f.name for f in dataclasses.fields(cls))


def test_the_open_records_have_the_slots_of_the_records_and_no_more() -> None:
    assert sorted(_OpenTurnProgress.__slots__) == _fields(TurnProgress)
    assert sorted(TurnProgress.__slots__) == _fields(TurnProgress)  # type: ignore[attr-defined]
    assert sorted(_OpenTurn.__slots__) == _fields(Turn)
    assert sorted(Turn.__slots__) == _fields(Turn)  # type: ignore[attr-defined]


OUTPUT = TurnOutput(name="Answer", schema={"type": "object"}, digest="d", invalid=1)
CLIENT = ClientTools(tools=(ClientTool(name="pick", parameters={"type": "object"}),))


@pytest.mark.parametrize(
    "values",
    [
        {"iteration": 1, "attempt": 1},
        {
            "iteration": 3,
            "attempt": 2,
            "retry_at": 12.5,
            "last_error": "timeout",
            "started_call_ids": ("c1", "c2"),
            "output": OUTPUT,
            "client": CLIENT,
        },
    ],
)
def test_turn_progress_makes_the_record_the_class_makes(values: dict[str, Any]) -> None:
    made = turn_progress(**values)
    plain = TurnProgress(**values)
    assert type(made) is TurnProgress
    for name in _fields(TurnProgress):
        assert getattr(made, name) == getattr(plain, name), name
    assert made == plain and repr(made) == repr(plain)
    if values.get("output") is None:  # an output type holds a dict: no hash then
        assert hash(made) == hash(plain)
    assert dataclasses.asdict(made) == dataclasses.asdict(plain)
    assert pickle.loads(pickle.dumps(made)) == plain
    assert copy.deepcopy(made) == plain
    assert dataclasses.replace(made, attempt=9) == dataclasses.replace(plain, attempt=9)
    assert made != turn_progress(**{**values, "attempt": 7})


def test_a_made_progress_is_frozen() -> None:
    made = turn_progress(iteration=1, attempt=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.attempt = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del made.iteration  # type: ignore[misc]
    assert made.attempt == 1


def _turn_values() -> dict[str, Any]:
    return {
        "context_id": "c",
        "state": State.IDLE,
        "stop_reason": StopReason.COMPLETED,
        "states": (State.PROCESSING_USER_MESSAGE, State.IDLE),
        "message_ids": ("m1", "m2"),
        "pending_tool_calls": (),
        "error": None,
        "questions": (),
        "output": {"a": 1},
        "output_error": None,
        "client_tool_calls": (),
    }


def test_new_turn_makes_the_turn_the_class_makes() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    records = tuple(
        InternalMessage(
            role=role, content=[TextPart(text=text)], metadata=MessageMetadata(created_at=at)
        )
        for role, text in ((Role.USER, "hi"), (Role.ASSISTANT, "hello"))
    )
    made = new_turn(records=records, **_turn_values())
    plain = Turn(messages=records, **_turn_values())
    assert type(made) is Turn
    assert made.text == plain.text == "hello"  # read before the copies are made
    for name in _fields(Turn):
        assert getattr(made, name) == getattr(plain, name), name
    # the messages are copies of the records, made once
    assert made.messages == records and made.messages is made.messages
    assert all(a is not b for a, b in zip(made.messages, records, strict=True))
    assert made == plain and repr(made) == repr(plain)
    assert copy.deepcopy(made) == plain
    assert dataclasses.replace(made, error="x") == dataclasses.replace(plain, error="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.state = State.PERMANENT_FAILURE  # type: ignore[misc]
    assert made.state is State.IDLE


@pytest.mark.parametrize(
    "values",
    [
        (Trigger.TURN_COMPLETE, StopReason.COMPLETED, {}),
        (
            Trigger.NEEDS_APPROVAL,
            StopReason.AWAITING_APPROVAL,
            {"c1": (ApprovalStatus.APPROVED, "policy", None)},
        ),
        (Trigger.TOOLS_DECIDED, None, {"c2": (ApprovalStatus.DENIED, "policy", "no")}),
    ],
)
def test_decision_makes_the_record_the_class_makes(values: tuple[Any, Any, Any]) -> None:
    assert sorted(_OpenDecision.__slots__) == _fields(Decision)
    assert sorted(Decision.__slots__) == _fields(Decision)  # type: ignore[attr-defined]
    made = _decision(*values)
    plain = Decision(*values)
    assert type(made) is Decision
    for name in _fields(Decision):
        assert getattr(made, name) == getattr(plain, name), name
    assert made.results == ()
    assert made == plain and repr(made) == repr(plain)
    assert copy.deepcopy(made) == plain
    assert dataclasses.replace(made, results=()) == plain
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.trigger = Trigger.RETRY  # type: ignore[misc]


@pytest.mark.parametrize(
    ("success", "value"),
    [(True, "sunny"), (True, 15), (False, None), (True, {"city": "Oslo", "temps": [1, 2.5]})],
)
def test_tool_outcome_of_makes_the_record_the_class_makes(success: bool, value: Any) -> None:
    assert sorted(_OpenToolOutcome.__slots__) == _fields(ToolOutcome)
    assert sorted(ToolOutcome.__slots__) == _fields(ToolOutcome)  # type: ignore[attr-defined]
    made = ToolOutcome.of(success, value)
    plain = ToolOutcome(success, value)
    assert type(made) is ToolOutcome
    for name in _fields(ToolOutcome):
        assert getattr(made, name) == getattr(plain, name), name
    assert made == plain and repr(made) == repr(plain)
    if not isinstance(value, dict):
        assert hash(made) == hash(plain)
    assert pickle.loads(pickle.dumps(made)) == plain
    assert copy.deepcopy(made) == plain
    assert dataclasses.replace(made, success=not success) == ToolOutcome(not success, value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.success = not success  # type: ignore[misc]


def test_a_subclass_of_tool_outcome_is_made_by_its_own_class() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Mine(ToolOutcome):
        pass

    made = Mine.of(True, "x")
    assert type(made) is Mine and made == Mine(True, "x")


@pytest.mark.parametrize("text", ["hi", "", "Zürich \u00e9t\u00e9"])
def test_text_part_makes_the_part_the_class_makes(text: str) -> None:
    made = text_part(text)
    plain = TextPart(text=text)
    assert type(made) is TextPart
    assert sorted(_OpenTextPart.__slots__) == _fields(TextPart)
    for name in _fields(TextPart):
        assert getattr(made, name) == getattr(plain, name), name
    assert made == plain and repr(made) == repr(plain) and hash(made) == hash(plain)
    assert dataclasses.asdict(made) == dataclasses.asdict(plain)
    assert pickle.loads(pickle.dumps(made)) == plain
    assert copy.deepcopy(made) == plain
    assert dataclasses.replace(made, text="x") == dataclasses.replace(plain, text="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.text = "changed"  # type: ignore[misc]
    assert made.text == text


# ---------------------------------------------------------------------- the adapters' records


def _frozen_reference(cls: Any, values: dict[str, Any]) -> Any:
    """What a frozen dataclass's own ``__init__`` makes: each field through
    ``object.__setattr__``, the defaults for the rest."""
    made = object.__new__(cls)
    for f in dataclasses.fields(cls):
        if f.name in values:
            value = values[f.name]
        elif f.default is not dataclasses.MISSING:
            value = f.default
        else:
            value = f.default_factory()  # type: ignore[misc]
        object.__setattr__(made, f.name, value)
    return made


def _generated_signature(cls: Any) -> inspect.Signature:
    """The ``__init__`` signature ``@dataclass`` would write for ``cls``'s fields."""
    spec = [
        (f.name, f.type, dataclasses.field(default=f.default))
        if f.default is not dataclasses.MISSING
        else (f.name, f.type)
        for f in dataclasses.fields(cls)
    ]
    return inspect.signature(dataclasses.make_dataclass(cls.__name__, spec, frozen=True).__init__)


_CALL = ToolCallData("call_1", "get_weather", {"city": "London"})
_RESPONSES: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {}),
    ((), {"text": "The weather in London is 15 C.", "finish_reason": "stop"}),
    ((), {"tool_calls": (_CALL,), "finish_reason": "tool_calls", "usage": {"total_tokens": 3}}),
    (
        ("hi", (), "thought", None, "length", "m", "no", "max_output_tokens"),
        {
            "reasoning": (ReasoningData(id="r", summary=("s",)),),
            "phase": "final_answer",
            "logprobs": [{"token": "hi"}],
            "provider_reason": "max_tokens",
        },
    ),
]


@pytest.mark.parametrize(("args", "kwargs"), _RESPONSES)
def test_llm_response_makes_what_a_frozen_dataclass_makes(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    assert sorted(_OpenLLMResponse.__slots__) == _fields(LLMResponse)
    assert sorted(LLMResponse.__slots__) == _fields(LLMResponse)  # type: ignore[attr-defined]
    names = [f.name for f in dataclasses.fields(LLMResponse)]
    made = LLMResponse(*args, **kwargs)
    plain = _frozen_reference(LLMResponse, {**dict(zip(names, args, strict=False)), **kwargs})
    assert type(made) is LLMResponse
    for name in names:
        assert getattr(made, name) == getattr(plain, name), name
    assert made == plain and repr(made) == repr(plain)
    if made.usage is None and made.logprobs is None:
        assert hash(made) == hash(plain)
    assert pickle.loads(pickle.dumps(made)) == plain
    assert copy.deepcopy(made) == plain
    assert dataclasses.replace(made, text="x") == dataclasses.replace(plain, text="x")
    # what a Temporal activity sends back: the record's adapter, both ways
    assert records.to_python(made) == records.to_python(plain)
    back = records.from_python(LLMResponse, records.to_python(made))
    assert type(back) is LLMResponse and back == plain
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.text = "changed"  # type: ignore[misc]
    assert made.text == plain.text


def test_llm_response_takes_the_arguments_a_dataclass_takes() -> None:
    cls: Any = LLMResponse
    # the parameters: names, kinds, defaults and annotations (the return's is
    # written ``None`` by one and ``'None'`` by the other)
    assert inspect.signature(cls.__init__).parameters == _generated_signature(cls).parameters
    assert cls.__match_args__ == tuple(f.name for f in dataclasses.fields(cls))


def test_a_subclass_of_llm_response_is_made_by_its_own_class() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Mine(LLMResponse):
        source: str = "here"

    made = Mine(text="hi", source="there")
    assert type(made) is Mine and (made.text, made.source) == ("hi", "there")
    assert made.finish_reason is None
