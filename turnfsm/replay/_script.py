"""The replay script's parsing, format ``turnfsm-script/1``.

:func:`parse_script` checks a whole script before anything runs and reports
every problem with its JSON path (``$.steps[3].llm.chunks``) and the reason,
as one :class:`ScriptError`. The models it parses into are
:mod:`turnfsm.replay._script_model`'s (and go by their names here too).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..adapters.llm.scripted import AnswerSpec, ErrorSpec
from ..engine import Mode
from ..errors import InvalidInput
from ..model._json import MAX_DOCUMENT_DEPTH, JSONTooDeep, loads_json
from ._script_model import (
    FORMAT,
    INPUT_KEYS,
    OUTCOME_KEYS,
    STEP_KEYS,
    AnswerInput,
    BranchInput,
    ConfigInput,
    DenyInput,
    ExpectRequest,
    FinalExpect,
    Script,
    ScriptConfig,
    ScriptError,
    ScriptMode,
    ScriptSubtask,
    ScriptTool,
    Step,
    StepExpect,
    ToolOutcomeStep,
    UserInput,
)

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

_Problems = list[tuple[str, str]]


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


def _call_ids(value: Any, here: str, problems: _Problems) -> Any:
    ids = [value] if isinstance(value, str) else value
    if not isinstance(ids, list) or not ids or not all(isinstance(x, str) and x for x in ids):
        problems.append((here, "a call id or a non-empty list of call ids"))
        return None
    return tuple(ids)


def _true(value: Any, here: str, problems: _Problems) -> Any:
    if value is not True:
        problems.append((here, "must be true"))
        return None
    return True


def _branch_name(value: Any, here: str, problems: _Problems) -> Any:
    if not isinstance(value, str) or not value:
        problems.append((here, "a branch name"))
        return None
    return value


def _user(value: Any, here: str, problems: _Problems) -> Any:
    data = {"content": value} if isinstance(value, str) else value
    return _validate(UserInput, data, here, problems)


def _config(value: Any, here: str, problems: _Problems) -> Any:
    parsed = _validate(ConfigInput, value, here, problems)
    if parsed is not None and not parsed.model_fields_set:
        problems.append((here, "a config step names at least one field"))
        return None
    return parsed


def _llm(value: Any, here: str, problems: _Problems) -> Any:
    if isinstance(value, Mapping) and "error" in value and "fail_after" not in value:
        problems.append((here, "an attempt that fails is an 'llm_error' step"))
        return None
    parsed = _validate(AnswerSpec, value, here, problems)
    if parsed is not None and parsed.expect_request is not None:
        path = f"{here}.expect_request"
        if _validate(ExpectRequest, parsed.expect_request, path, problems) is None:
            return None
    return parsed


def _llm_error(value: Any, here: str, problems: _Problems) -> Any:
    err = _validate(ErrorSpec, value, here, problems)
    return AnswerSpec(error=err) if err is not None else None


def _model(model: type[BaseModel]) -> Callable[[Any, str, _Problems], Any]:
    def parse(value: Any, here: str, problems: _Problems) -> Any:
        return _validate(model, value, here, problems)

    return parse


_STEP_PARSERS: dict[str, Callable[[Any, str, _Problems], Any]] = {
    "user": _user,
    "approve": _call_ids,
    "deny": _model(DenyInput),
    "answer": _model(AnswerInput),
    "cancel": _true,
    "retry": _true,
    "reset": _true,
    "branch": _model(BranchInput),
    "config": _config,
    "switch": _branch_name,
    "llm": _llm,
    "llm_error": _llm_error,
    "tool": _model(ToolOutcomeStep),
    "expect": _model(StepExpect),
}
"""How each kind of step's value is parsed: the value, or None with the
problems said."""


def _parse_step(i: int, raw: Any, problems: _Problems) -> Step | None:
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
    parser = _STEP_PARSERS.get(kind)
    if parser is None:
        problems.append((path, f"unknown step {kind!r}; known: {', '.join(sorted(STEP_KEYS))}"))
        return None
    parsed = parser(raw[kind], f"{path}.{kind}", problems)
    if parsed is None:
        return None
    return Step(i, kind, parsed)


def parse_script(data: Any, source: str = "script") -> Script:
    """Check and parse a script (already decoded from JSON or YAML)."""
    problems: _Problems = []
    _check_format(data, source)
    _check_top_keys(data, problems)
    name = data.get("name", "")
    if not isinstance(name, str):
        problems.append(("$.name", "must be a string"))
        name = ""
    config = _validate(ScriptConfig, data.get("config") or {}, "$.config", problems)
    tools = _parse_tools(data.get("tools") or [], problems)
    steps = _parse_steps(data.get("steps"), problems)
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


_TOP_KEYS = frozenset({"format", "name", "config", "tools", "modes", "steps", "expect"})


def _check_format(data: Any, source: str) -> None:
    """Refuse at once what is not a script of this format."""
    if not isinstance(data, Mapping):
        raise ScriptError([("$", f"a script is a JSON object, not {type(data).__name__}")], source)
    fmt = data.get("format")
    if fmt != FORMAT:
        why = "is missing" if fmt is None else f"is {fmt!r}"
        raise ScriptError([("$.format", f"{why}; this runner reads {FORMAT!r}")], source)


def _check_top_keys(data: Mapping[str, Any], problems: _Problems) -> None:
    for key in data:
        if key not in _TOP_KEYS:
            problems.append((f"$.{key}", f"unknown key; known: {', '.join(sorted(_TOP_KEYS))}"))


def _parse_tools(raw_tools: Any, problems: _Problems) -> list[ScriptTool]:
    """The script's tools, each defined once, a sub-task naming only defined ones."""
    tools: list[ScriptTool] = []
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
    return tools


def _parse_steps(raw_steps: Any, problems: _Problems) -> list[Step]:
    if not isinstance(raw_steps, list):
        problems.append(("$.steps", "is required: a list of steps"))
        return []
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        step = _parse_step(i, raw, problems)
        if step is not None:
            steps.append(step)
    return steps


def _parse_modes(
    raw: Any, tools: Sequence[ScriptTool], problems: _Problems
) -> tuple[tuple[Mode, ...], set[str]]:
    """The script's ``modes`` (each a mode whose tool names are the script's
    tools), and the names it declares (those with a problem too)."""
    if raw is None:
        return (), set()
    if not isinstance(raw, list):
        problems.append(("$.modes", "must be a list of modes"))
        return (), set()
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
        if _mode_tools_problems(spec, here, tools, problems):
            continue
        try:
            modes.append(spec.mode())
        except InvalidInput as exc:
            problems.append((here, str(exc)))
    return tuple(modes), seen


def _mode_tools_problems(
    spec: ScriptMode, here: str, tools: Sequence[ScriptTool], problems: _Problems
) -> bool:
    """Say what is wrong with the tools a mode offers and the approvals it
    sets; whether anything was."""
    names = {t.name for t in tools}
    questions = {t.name for t in tools if t.question}
    known = ", ".join(t.name for t in tools) or "(none)"
    found: _Problems = []
    for j, tool in enumerate(spec.tools or ()):
        if tool not in names:
            found.append((f"{here}.tools[{j}]", f"no tool {tool!r} (the tools: {known})"))
    for tool in spec.approval:
        at = f"{here}.approval.{tool}"
        if tool not in names:
            found.append((at, f"no tool {tool!r} (the tools: {known})"))
        elif spec.tools is not None and tool not in spec.tools:
            found.append((at, f"mode {spec.name!r} does not offer {tool!r}"))
        elif tool in questions:
            found.append((at, f"{tool!r} is a question tool: its calls always wait for an answer"))
    problems += found
    return bool(found)


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
    except RecursionError:  # a YAML script nested too deeply for its parser
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
            data = loads_json(text, MAX_DOCUMENT_DEPTH)
        except JSONTooDeep as exc:
            raise ScriptError([("$", f"cannot be read: {exc}")], str(p)) from None
        except json.JSONDecodeError as exc:
            raise ScriptError(
                [("$", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")],
                str(p),
            ) from exc
    return parse_script(data, str(p))
