"""The replay script model, format ``turnfsm-script/1``.

:func:`parse_script` checks a whole script before anything runs and reports
every problem with its JSON path (``$.steps[3].llm.chunks``) and the reason,
as one :class:`ScriptError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..adapters.llm.scripted import AnswerSpec, ErrorSpec
from ..engine import Mode
from ..engine._output import schema_output
from ..errors import InvalidInput, OutputTypeError, TurnFSMError
from ..model import MessageType
from ..states import State

__all__ = [
    "FORMAT",
    "INPUT_KEYS",
    "OUTCOME_KEYS",
    "Script",
    "ScriptConfig",
    "ScriptError",
    "ScriptMode",
    "ScriptSubtask",
    "ScriptTool",
    "Step",
    "load_script",
    "parse_script",
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


def _loc(base: str, loc: Sequence[int | str]) -> str:
    path = base
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _validate(model: type[BaseModel], data: Any, path: str, problems: list[tuple[str, str]]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            problems.append((_loc(path, err["loc"]), err["msg"]))
        return None


def _parse_step(i: int, raw: Any, problems: list[tuple[str, str]]) -> Step | None:
    path = f"$.steps[{i}]"
    if not isinstance(raw, Mapping):
        problems.append((path, f"a step is an object with one key, not {type(raw).__name__}"))
        return None
    keys = list(raw)
    if len(keys) != 1:
        problems.append(
            (path, f"a step has exactly one key, this one has {len(keys)}: {', '.join(keys)}")
        )
        return None
    kind = keys[0]
    value = raw[kind]
    here = f"{path}.{kind}"
    if kind not in STEP_KEYS:
        problems.append((path, f"unknown step {kind!r}; known: {', '.join(sorted(STEP_KEYS))}"))
        return None
    parsed: Any = None
    if kind == "user":
        parsed = _validate(
            UserInput, {"content": value} if isinstance(value, str) else value, here, problems
        )
    elif kind == "approve":
        ids = [value] if isinstance(value, str) else value
        if not isinstance(ids, list) or not ids or not all(isinstance(x, str) and x for x in ids):
            problems.append((here, "a call id or a non-empty list of call ids"))
        else:
            parsed = tuple(ids)
    elif kind == "deny":
        parsed = _validate(DenyInput, value, here, problems)
    elif kind == "answer":
        parsed = _validate(AnswerInput, value, here, problems)
    elif kind in ("cancel", "retry", "reset"):
        if value is not True:
            problems.append((here, "must be true"))
        else:
            parsed = True
    elif kind == "branch":
        parsed = _validate(BranchInput, value, here, problems)
    elif kind == "config":
        parsed = _validate(ConfigInput, value, here, problems)
        if parsed is not None and not parsed.model_fields_set:
            problems.append((here, "a config step names at least one field"))
            parsed = None
    elif kind == "switch":
        if not isinstance(value, str) or not value:
            problems.append((here, "a branch name"))
        else:
            parsed = value
    elif kind == "llm":
        if isinstance(value, Mapping) and "error" in value and "fail_after" not in value:
            problems.append((here, "an attempt that fails is an 'llm_error' step"))
        else:
            parsed = _validate(AnswerSpec, value, here, problems)
            if parsed is not None and parsed.expect_request is not None:
                checks = _validate(
                    ExpectRequest, parsed.expect_request, f"{here}.expect_request", problems
                )
                if checks is None:
                    parsed = None
    elif kind == "llm_error":
        err = _validate(ErrorSpec, value, here, problems)
        parsed = AnswerSpec(error=err) if err is not None else None
    elif kind == "tool":
        parsed = _validate(ToolOutcomeStep, value, here, problems)
    elif kind == "expect":
        parsed = _validate(StepExpect, value, here, problems)
    if parsed is None:
        return None
    return Step(i, kind, parsed)


def parse_script(data: Any, source: str = "script") -> Script:
    """Check and parse a script (already decoded from JSON or YAML)."""
    problems: list[tuple[str, str]] = []
    if not isinstance(data, Mapping):
        raise ScriptError([("$", f"a script is a JSON object, not {type(data).__name__}")], source)
    fmt = data.get("format")
    if fmt != FORMAT:
        why = "is missing" if fmt is None else f"is {fmt!r}"
        raise ScriptError([("$.format", f"{why}; this runner reads {FORMAT!r}")], source)
    known = {"format", "name", "config", "tools", "modes", "steps", "expect"}
    for key in data:
        if key not in known:
            problems.append((f"$.{key}", f"unknown key; known: {', '.join(sorted(known))}"))
    name = data.get("name", "")
    if not isinstance(name, str):
        problems.append(("$.name", "must be a string"))
        name = ""
    config = _validate(ScriptConfig, data.get("config") or {}, "$.config", problems)
    tools: list[ScriptTool] = []
    raw_tools = data.get("tools") or []
    if not isinstance(raw_tools, list):
        problems.append(("$.tools", "must be a list"))
        raw_tools = []
    for i, t in enumerate(raw_tools):
        spec = _validate(ScriptTool, t, f"$.tools[{i}]", problems)
        if spec is not None:
            if any(s.name == spec.name for s in tools):
                problems.append((f"$.tools[{i}].name", f"tool {spec.name!r} is defined twice"))
            tools.append(spec)
    defined = {t.name for t in tools}
    for i, t in enumerate(tools):
        for used in (t.subtask.tools or ()) if t.subtask is not None else ():
            if used not in defined:
                problems.append((f"$.tools[{i}].subtask.tools", f"no tool named {used!r}"))
    raw_steps = data.get("steps")
    steps: list[Step] = []
    if not isinstance(raw_steps, list):
        problems.append(("$.steps", "is required: a list of steps"))
    else:
        for i, raw in enumerate(raw_steps):
            step = _parse_step(i, raw, problems)
            if step is not None:
                steps.append(step)
    expect = None
    if data.get("expect") is not None:
        expect = _validate(FinalExpect, data["expect"], "$.expect", problems)
    _check_call_ids(steps, problems)
    _check_answers(steps, tools, problems)
    modes, declared = _parse_modes(data.get("modes"), tools, problems)
    _check_mode_names(declared, config, steps, problems)
    if problems:
        raise ScriptError(problems, source)
    assert config is not None
    return Script(name or source, config, tuple(tools), tuple(steps), expect, data, modes)


def _parse_modes(
    raw: Any, tools: Sequence[ScriptTool], problems: list[tuple[str, str]]
) -> tuple[tuple[Mode, ...], set[str]]:
    """The script's ``modes`` (each a mode whose tool names are the script's
    tools), and the names it declares (those with a problem too)."""
    if raw is None:
        return (), set()
    if not isinstance(raw, list):
        problems.append(("$.modes", "must be a list of modes"))
        return (), set()
    names = {t.name for t in tools}
    questions = {t.name for t in tools if t.question}
    known = ", ".join(t.name for t in tools) or "(none)"
    modes: list[Mode] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        here = f"$.modes[{i}]"
        spec = _validate(ScriptMode, item, here, problems)
        if spec is None:
            continue
        if spec.name in seen:
            problems.append((f"{here}.name", f"mode {spec.name!r} is defined twice"))
            continue
        seen.add(spec.name)
        bad = False
        for j, tool in enumerate(spec.tools or ()):
            if tool not in names:
                problems.append((f"{here}.tools[{j}]", f"no tool {tool!r} (the tools: {known})"))
                bad = True
        for tool in spec.approval:
            if tool not in names:
                problems.append(
                    (f"{here}.approval.{tool}", f"no tool {tool!r} (the tools: {known})")
                )
                bad = True
            elif spec.tools is not None and tool not in spec.tools:
                problems.append(
                    (f"{here}.approval.{tool}", f"mode {spec.name!r} does not offer {tool!r}")
                )
                bad = True
            elif tool in questions:
                problems.append(
                    (
                        f"{here}.approval.{tool}",
                        f"{tool!r} is a question tool: its calls always wait for an answer",
                    )
                )
                bad = True
        if bad:
            continue
        try:
            modes.append(spec.mode())
        except InvalidInput as exc:
            problems.append((here, str(exc)))
    return tuple(modes), seen


def _check_mode_names(
    declared: set[str],
    config: ScriptConfig | None,
    steps: Sequence[Step],
    problems: list[tuple[str, str]],
) -> None:
    """Each mode a script names (``config.mode``, ``config`` steps, ``expect``
    steps) is one it declares, or ``chat``."""
    known = {"chat", *declared}
    listed = ", ".join(sorted(known))
    used: list[tuple[str, str]] = []
    if config is not None:
        used.append(("$.config.mode", config.mode))
    for s in steps:
        if s.kind == "config" and s.value.mode is not None:
            used.append((f"$.steps[{s.index}].config.mode", s.value.mode))
        elif s.kind == "expect" and s.value.mode is not None:
            used.append((f"$.steps[{s.index}].expect.mode", s.value.mode))
    for path, name in used:
        if name not in known:
            problems.append((path, f"unknown mode {name!r}; the script's modes: {listed}"))


def _check_call_ids(steps: Sequence[Step], problems: list[tuple[str, str]]) -> None:
    """An id used by approve/deny/tool must be the id of a tool call some llm step asks for."""
    ids: set[str] = set()
    for s in steps:
        if s.kind == "llm":
            for c in s.value.tool_calls or ():
                if c.id in ids:
                    problems.append(
                        (f"$.steps[{s.index}].llm.tool_calls", f"call id {c.id!r} is used twice")
                    )
                ids.add(c.id)
    for s in steps:
        used: list[str] = []
        if s.kind == "approve":
            used = list(s.value)
        elif s.kind in ("deny", "tool", "answer"):
            used = [s.value.id]
        for cid in used:
            if cid not in ids:
                problems.append(
                    (
                        f"$.steps[{s.index}].{s.kind}",
                        f"no llm step asks for a tool call with id {cid!r}",
                    )
                )


def _check_answers(
    steps: Sequence[Step], tools: Sequence[ScriptTool], problems: list[tuple[str, str]]
) -> None:
    """An ``answer`` must answer a call to a tool declared with ``"question": true``."""
    questions = {t.name for t in tools if t.question}
    names = {c.id: c.name for s in steps if s.kind == "llm" for c in s.value.tool_calls or ()}
    for s in steps:
        if s.kind != "answer" or s.value.id not in names:  # unknown ids are said above
            continue
        name = names[s.value.id]
        if name not in questions:
            problems.append(
                (
                    f"$.steps[{s.index}].answer.id",
                    f"call {s.value.id!r} calls {name!r}, which is not a question tool "
                    '(declare it in tools with "question": true)',
                )
            )


def load_script(path: str | Path) -> Script:
    """Read a script file (``.json``, or ``.yaml``/``.yml`` when PyYAML is installed)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError([("$", f"cannot read the file: {exc.strerror or exc}")], str(p)) from exc
    except UnicodeDecodeError as exc:
        raise ScriptError(
            [("$", f"not UTF-8 text ({exc.reason} at byte {exc.start})")], str(p)
        ) from None
    if "\x00" in text:
        raise ScriptError([("$", "not a text file (it holds NUL bytes)")], str(p))
    try:
        return _parse_text(p, text)
    except RecursionError:
        raise ScriptError([("$", "nested too deeply to read")], str(p)) from None


def _parse_text(p: Path, text: str) -> Script:
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ScriptError(
                [("$", "YAML scripts need PyYAML (pip install pyyaml)")], str(p)
            ) from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ScriptError([("$", f"not valid YAML: {exc}")], str(p)) from exc
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScriptError(
                [("$", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")],
                str(p),
            ) from exc
    return parse_script(data, str(p))
