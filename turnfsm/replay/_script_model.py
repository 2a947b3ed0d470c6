"""The replay script's model, format ``turnfsm-script/1``: the step keys, the
pydantic models of its config, tools, modes, inputs, outcomes and checks
(strict: an unknown key is a problem), and the parsed :class:`Script` and
:class:`Step`. Parsing and the checks across steps are
:mod:`turnfsm.replay._script`'s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from ..engine import Mode
from ..engine._output import schema_output
from ..errors import OutputTypeError, TurnFSMError
from ..model import MessageType
from ..states import State

__all__ = [
    "FORMAT",
    "INPUT_KEYS",
    "OUTCOME_KEYS",
    "STEP_KEYS",
    "AnswerInput",
    "BranchInput",
    "ConfigInput",
    "DenyInput",
    "ExpectRequest",
    "FinalExpect",
    "Script",
    "ScriptConfig",
    "ScriptError",
    "ScriptMode",
    "ScriptSubtask",
    "ScriptTool",
    "Step",
    "StepExpect",
    "ToolOutcomeStep",
    "UserInput",
]

FORMAT = "turnfsm-script/1"

INPUT_KEYS = frozenset(
    {
        "user",
        "approve",
        "deny",
        "answer",
        "cancel",
        "retry",
        "reset",
        "branch",
        "switch",
        "config",
    }
)
OUTCOME_KEYS = frozenset({"llm", "llm_error", "tool"})
CHECK_KEYS = frozenset({"expect"})
STEP_KEYS = INPUT_KEYS | OUTCOME_KEYS | CHECK_KEYS


class ScriptError(TurnFSMError):
    """A script is invalid; ``problems`` lists (JSON path, reason) for each problem."""

    def __init__(self, problems: Sequence[tuple[str, str]], source: str = "script") -> None:
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  {path}: {reason}" for path, reason in self.problems)
        super().__init__(f"{source} is not a valid {FORMAT} script:\n{lines}")


_STRICT = ConfigDict(extra="forbid", frozen=True)


class RetryConfig(BaseModel):
    model_config = _STRICT
    max_attempts: int = Field(default=3, ge=1)
    initial_delay: float = Field(default=0.5, ge=0)
    max_delay: float = Field(default=30.0, ge=0)


class CompactionConfig(BaseModel):
    """The engine's compaction (:class:`~turnfsm.enhancers.Compaction`): its summary
    calls are ``llm`` steps of the tape, in the order the engine makes them."""

    model_config = _STRICT
    threshold_tokens: int = Field(ge=1)
    keep_tokens: int | None = Field(default=None, ge=0)
    max_summary_input: int = Field(default=16_000, ge=1)

    @model_validator(mode="after")
    def _keep_below_threshold(self) -> CompactionConfig:
        if self.keep_tokens is not None and self.keep_tokens >= self.threshold_tokens:
            raise ValueError("keep_tokens must be below threshold_tokens")
        return self


class ScriptConfig(BaseModel):
    model_config = _STRICT
    model: str = "scripted"
    system_prompt: str | None = None
    mode: str = "chat"
    parameters: dict[str, Any] = Field(default_factory=dict)
    max_iterations: int = Field(default=20, ge=1)
    limit_notice: bool = False
    """Whether a turn stopped by ``max_iterations`` stores its notice: off in
    scripts unless asked for, so that scripts written before the notice
    replay as they were recorded."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    tool_history_rounds: int | None = Field(default=None, ge=0)
    compaction: CompactionConfig | None = None
    output_type: dict[str, Any] | None = None
    """A JSON Schema every answer must match (docs/structured-output.md)."""
    output_retries: int = Field(default=1, ge=0)

    @field_validator("output_type")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                schema_output(value, "output_type")
            except OutputTypeError as exc:
                raise ValueError(str(exc)) from None
        return value


class ScriptSubtask(BaseModel):
    """A tool that runs its ``task`` in a child context (``turnfsm.subtask``)."""

    model_config = _STRICT
    system_prompt: str | None = None
    tools: list[str] | None = None
    model: str | None = None
    summarizer: Literal["llm", "final_answer"] = "llm"
    keep: bool = False


class ScriptTool(BaseModel):
    model_config = _STRICT
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    approval: Literal["auto", "required", "deny"] = "auto"
    idempotent: bool = False
    question: bool = False
    """The built-in question tool under this name: its calls wait for an ``answer``."""
    subtask: ScriptSubtask | None = None
    """A sub-task tool (``turnfsm.subtask``): its calls run in a child context."""

    @model_validator(mode="after")
    def _question_is_fixed(self) -> ScriptTool:
        fixed = {"parameters", "approval", "idempotent"} & self.model_fields_set
        if self.question and fixed:
            raise ValueError(
                "a question tool has fixed parameters and always waits for the user: "
                f"leave out {', '.join(sorted(fixed))}"
            )
        return self

    @model_validator(mode="after")
    def _subtask_alone(self) -> ScriptTool:
        if self.subtask is not None:
            if self.question:
                raise ValueError("a tool is a question tool or a subtask tool, not both")
            given = {"parameters", "idempotent"} & self.model_fields_set
            if given:
                raise ValueError(
                    f"a subtask tool takes one 'task' argument and is not idempotent: "
                    f"leave out {', '.join(sorted(given))}"
                )
        return self


class ScriptMode(BaseModel):
    """One mode of the engine (see :class:`~turnfsm.engine.Mode`)."""

    model_config = _STRICT
    name: str = Field(min_length=1)
    instructions: str | None = None
    tools: list[str] | None = None
    approval: dict[str, Literal["auto", "required", "deny"]] = Field(default_factory=dict)
    answer_type: Literal["Text", "Plan"] = "Text"

    def mode(self) -> Mode:
        return Mode(
            name=self.name,
            instructions=self.instructions,
            tools=self.tools,
            approval=self.approval,
            answer_type=MessageType(self.answer_type),
        )


class UserInput(BaseModel):
    model_config = _STRICT
    content: str = Field(min_length=1)
    role: Literal["user", "frontend_operator"] = "user"


class DenyInput(BaseModel):
    model_config = _STRICT
    id: str = Field(min_length=1)
    reason: str = ""


class AnswerInput(BaseModel):
    model_config = _STRICT
    id: str = Field(min_length=1)
    text: str = Field(min_length=1)


class BranchInput(BaseModel):
    """A fork; the prompts, when given, are the new branch's own (``null``: none)."""

    model_config = _STRICT
    name: str = Field(min_length=1)
    at: int = Field(ge=-1)
    system_prompt: str | None = None
    user_prompt: str | None = None

    def prompts(self) -> dict[str, str | None]:
        """The prompts the step gives (those left out keep the source branch's)."""
        return {
            k: getattr(self, k)
            for k in ("system_prompt", "user_prompt")
            if k in self.model_fields_set
        }


class ConfigInput(BaseModel):
    """A config update: the fields given change, the others stay."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    model: str | None = Field(default=None, min_length=1)
    mode: str | None = Field(default=None, min_length=1)
    parameters: dict[str, Any] | None = None
    title: str | None = None

    @field_validator("model", "mode", "parameters")
    @classmethod
    def _not_null(cls, v: Any) -> Any:
        if v is None:
            raise ValueError("must not be null (leave the field out to keep it)")
        return v

    def fields(self) -> dict[str, Any]:
        """The fields the step gives, as ``update_config`` keywords."""
        return {k: getattr(self, k) for k in self.model_fields_set}


class ToolOutcomeStep(BaseModel):
    model_config = _STRICT
    id: str = Field(min_length=1)
    result: Any = None
    error: str | None = None

    @field_validator("error")
    @classmethod
    def _not_empty(cls, v: str | None) -> str | None:
        if v is not None and not v:
            raise ValueError("an error message must not be empty")
        return v


class ExpectRequest(BaseModel):
    """Checks on the request the engine sent for one LLM call."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    message_count: int | None = Field(default=None, ge=0)
    roles: list[str] | None = None
    system_contains: str | None = None
    tools: list[str] | None = None
    last_user_contains: str | None = None


class LastMessage(BaseModel):
    model_config = _STRICT
    role: Literal["system", "user", "assistant", "tool", "frontend_operator"] | None = None
    text: str | None = None
    type: Literal["Text", "Plan", "Question", "ToolCall", "ToolResult"] | None = None


class StepExpect(BaseModel):
    model_config = _STRICT
    state: State | None = None
    pending: list[str] | None = None
    last_message: LastMessage | None = None
    message_count: int | None = Field(default=None, ge=0)
    branch: str | None = None
    mode: str | None = None


class FinalExpect(BaseModel):
    model_config = _STRICT
    trace: list[State] | None = None
    final_state: State | None = None
    message_count: int | None = Field(default=None, ge=0)


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the tape: its ``kind`` (the key) and its parsed ``value``."""

    index: int
    kind: str
    value: Any

    @property
    def is_input(self) -> bool:
        return self.kind in INPUT_KEYS

    @property
    def is_outcome(self) -> bool:
        return self.kind in OUTCOME_KEYS

    def describe(self) -> str:
        return f"step {self.index} ({self.kind})"


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    config: ScriptConfig
    tools: tuple[ScriptTool, ...]
    steps: tuple[Step, ...]
    expect: FinalExpect | None
    raw: Mapping[str, Any]
    modes: tuple[Mode, ...] = ()
