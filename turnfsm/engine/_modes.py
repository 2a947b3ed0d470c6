"""Modes: named ways of working (plan, act, ...) that a context switches between.

A :class:`Mode` gives the model extra instructions, chooses which of the
engine's tools are offered, overrides their approval, and says what type the
model's final text answer is stored with. The engine is given its modes once
(``Engine(modes=[...])``); a context names the one in force in
``ChatConfig.mode``, set by ``create_context(mode=...)`` and switched at rest by
``update_config(mode=...)``. Everything a mode changes goes through the
declared table's existing effects (docs/architecture.md, "Modes"):

- ``prepare``: the system-prompt enhancer appends the instructions, the
  tool-definitions enhancer offers the mode's tools only;
- ``call_llm``: a text answer (no tool calls) gets the mode's ``answer_type``;
- ``decide``: the approval policy sees the mode's view of the tools (its
  overrides applied; a tool it does not offer is unknown there);
- ``run_tools``: a call of a tool the mode does not offer is not run; its
  result says so, and the model sees it.

A mode named ``chat`` with no changes always exists, unless the engine is
given one with that name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

from ..errors import EnhancerError, InvalidInput, TurnFSMError
from ..model import ChatContext, MessageType
from ..tools import Approval, QuestionTool, Tool, ToolRegistry
from ._inputs import check_id, check_text

__all__ = ["DEFAULT_MODE", "Mode", "ModeApproval", "Modes", "UnknownMode"]

DEFAULT_MODE = "chat"
"""The mode a context starts in, which every engine knows."""

ModeApproval: TypeAlias = Approval | Literal["auto", "required", "deny"]
"""An approval override of one tool in one mode."""

_ANSWER_TYPES = (MessageType.TEXT, MessageType.PLAN)
"""What a final text answer may be stored as (not a tool call, not a tool result)."""

_CACHE_LIMIT = 256
"""Tool views kept per engine (one per mode and allow-list)."""


def _frozen_approval(value: object) -> Mapping[str, Approval]:
    """The approval overrides, checked, as a read-only mapping."""
    if not isinstance(value, Mapping):
        raise InvalidInput(
            "Mode.approval", f"must be a mapping of tool names to approvals, not {value!r}"
        )
    out: dict[str, Approval] = {}
    for name, verdict in value.items():
        if not isinstance(name, str) or not name:
            raise InvalidInput("Mode.approval", f"a key must be a tool name, not {name!r}")
        try:
            out[name] = Approval(verdict)
        except ValueError:
            raise InvalidInput(
                f"Mode.approval[{name!r}]",
                f"must be 'auto', 'required' or 'deny', not {verdict!r}",
            ) from None
    return MappingProxyType(out)


@dataclass(frozen=True, slots=True)
class Mode:
    """One mode of the engine.

    ``name`` follows the id rule (1 to 200 characters, no control character).
    ``instructions`` are appended to the system message while the context is
    in this mode, as a block ``<mode name="NAME">`` ... ``</mode>`` after a
    blank line (docs/architecture.md, "Modes"); ``None`` adds nothing.
    ``tools`` names the engine's tools offered in this mode, in the engine's
    order (``None``: all of them; ``()``: none). ``approval`` overrides the
    approval policy of some of them in this mode (``"auto"``, ``"required"``
    or ``"deny"``, replacing the tool's own policy, callable or not).
    ``answer_type`` is the :class:`~turnfsm.model.MessageType` the model's
    final text answer is stored with (``Text`` or ``Plan``; an answer that
    calls tools is always ``ToolCall``); its string value is accepted too.

    Frozen: ``tools`` is kept as a tuple and ``approval`` as a read-only
    mapping. The engine checks the names against its tools when it is made.
    """

    name: str
    instructions: str | None = None
    tools: Sequence[str] | None = None
    approval: Mapping[str, ModeApproval] = field(default_factory=dict)
    answer_type: MessageType = MessageType.TEXT

    def __post_init__(self) -> None:
        setter = object.__setattr__
        check_id("Mode.name", self.name)
        check_text("Mode.instructions", self.instructions, optional=True)
        tools = self.tools
        if tools is not None:
            if isinstance(tools, str | bytes) or not isinstance(tools, Iterable):
                raise InvalidInput(
                    "Mode.tools", f"must be a sequence of tool names or None, not {tools!r}"
                )
            tools = tuple(tools)
            for i, name in enumerate(tools):
                if not isinstance(name, str) or not name:
                    raise InvalidInput(f"Mode.tools[{i}]", f"must be a tool name, not {name!r}")
                if name in tools[:i]:
                    raise InvalidInput(f"Mode.tools[{i}]", f"{name!r} is named twice")
            setter(self, "tools", tools)
        setter(self, "approval", _frozen_approval(self.approval))
        try:
            kind = MessageType(self.answer_type)
        except ValueError:
            kind = None
        if kind not in _ANSWER_TYPES:
            allowed = ", ".join(repr(str(t)) for t in _ANSWER_TYPES)
            raise InvalidInput(
                "Mode.answer_type", f"must be one of {allowed}, not {self.answer_type!r}"
            )
        setter(self, "answer_type", kind)

    def __hash__(self) -> int:
        return hash(
            (
                self.name,
                self.instructions,
                self.tools,
                tuple(sorted(self.approval.items())),
                self.answer_type,
            )
        )

    def offers(self, tool: str) -> bool:
        """Whether this mode offers the tool called ``tool`` (by name only)."""
        return self.tools is None or tool in self.tools

    def to_json(self) -> dict[str, object]:
        """The mode as a replay script declares it (its ``modes`` key)."""
        out: dict[str, object] = {"name": self.name}
        if self.instructions is not None:
            out["instructions"] = self.instructions
        if self.tools is not None:
            out["tools"] = list(self.tools)
        if self.approval:
            out["approval"] = {k: str(v) for k, v in self.approval.items()}
        if self.answer_type is not MessageType.TEXT:
            out["answer_type"] = str(self.answer_type)
        return out


class UnknownMode(EnhancerError):
    """A stored context names a mode this engine was not given (another
    process, configured differently, set it). The turn fails through
    ``prepare_failed`` (or, on a retry, ``llm_failed_permanent``) with this
    message; ``update_config(mode=...)`` and ``retry`` continue it."""

    def __init__(self, mode: str, known: Sequence[str]) -> None:
        self.enhancer = "modes"
        self.mode = mode
        TurnFSMError.__init__(
            self,
            f"the context's mode {mode!r} is not a mode of this engine (its modes: "
            f"{', '.join(known)}); switch it with update_config(mode=...) and retry",
        )


class Modes:
    """The engine's modes by name, checked against its tools once, and the
    view of the tools each one offers."""

    __slots__ = ("_by_name", "_definitions", "_offered", "_tools", "_views", "names")

    def __init__(self, modes: Iterable[Mode], tools: ToolRegistry) -> None:
        if isinstance(modes, str | bytes | Mode) or not isinstance(modes, Iterable):
            raise InvalidInput("modes", f"must be a sequence of Mode, not {modes!r}")
        by_name: dict[str, Mode] = {}
        for i, mode in enumerate(modes):
            if not isinstance(mode, Mode):
                raise InvalidInput(f"modes[{i}]", f"must be a Mode, not {type(mode).__name__}")
            if mode.name in by_name:
                raise InvalidInput(f"modes[{i}].name", f"two modes are named {mode.name!r}")
            known = ", ".join(tools.names) or "(none)"
            for j, name in enumerate(mode.tools or ()):
                if name not in tools:
                    raise InvalidInput(
                        f"modes[{i}].tools[{j}]",
                        f"the engine has no tool {name!r} (its tools: {known})",
                    )
            for name in mode.approval:
                if name not in tools:
                    raise InvalidInput(
                        f"modes[{i}].approval[{name!r}]",
                        f"the engine has no tool {name!r} (its tools: {known})",
                    )
                if not mode.offers(name):
                    raise InvalidInput(
                        f"modes[{i}].approval[{name!r}]",
                        f"mode {mode.name!r} does not offer the tool {name!r}",
                    )
                if isinstance(tools.get(name), QuestionTool):
                    raise InvalidInput(
                        f"modes[{i}].approval[{name!r}]",
                        f"{name!r} is a question tool: its calls always wait for the "
                        "user's answer, whatever the approval",
                    )
            by_name[mode.name] = mode
        if DEFAULT_MODE not in by_name:
            by_name = {DEFAULT_MODE: Mode(DEFAULT_MODE), **by_name}
        self._by_name = by_name
        self._tools = tools
        self._views: dict[tuple[str, tuple[str, ...] | None], ToolRegistry] = {}
        self._definitions: dict[str, list[dict[str, Any]]] = {}
        """``definitions`` of a context with no allow-list, by its mode's name."""
        self._offered: dict[str, ToolRegistry] = {}
        """``offered`` of a context with no allow-list, by its mode's name."""
        self.names: tuple[str, ...] = tuple(by_name)

    def __iter__(self) -> Iterator[Mode]:
        return iter(self._by_name.values())

    def get(self, name: str) -> Mode | None:
        """The mode called ``name``, or None."""
        return self._by_name.get(name)

    def check(self, where: str, name: object) -> str:
        """A mode name given to a public call: one of the engine's modes."""
        if not isinstance(name, str):
            raise InvalidInput(where, f"must be a mode name (str), not {type(name).__name__}")
        if name not in self._by_name:
            raise InvalidInput(
                where, f"unknown mode {name!r}; the engine's modes: {', '.join(self.names)}"
            )
        return name

    def instructions(self, ctx: ChatContext) -> tuple[str, str] | None:
        """The (name, instructions) of the context's mode, for the system
        message; None when it has none (or is unknown)."""
        mode = self._by_name.get(ctx.config.mode)
        if mode is None or not mode.instructions:
            return None
        return mode.name, mode.instructions

    def definitions(self, ctx: ChatContext) -> list[dict[str, Any]]:
        """The definitions of the tools offered in the context's mode, among
        its own allow-list (``config.tools``) when it has one (the view's own
        list: do not mutate)."""
        config = ctx.config
        allowed = config.tools
        if allowed is None:  # no allow-list of its own: kept by mode name, as
            # every request asks (tools_for would build its key each time)
            found = self._definitions.get(config.mode)
            if found is not None:
                return found
        definitions = self.tools_for(self._by_name.get(config.mode), allowed).definitions()
        if allowed is None:
            if len(self._definitions) >= _CACHE_LIMIT:
                self._definitions.clear()
            self._definitions[config.mode] = definitions
        return definitions

    def offered(self, name: str, allowed: Sequence[str] | None) -> ToolRegistry:
        """``tools_for(get(name), allowed)`` in one frame: a turn asks several
        times. With no allow-list, kept by the mode's name (``tools_for``
        would build its key each time)."""
        if allowed is None:
            found = self._offered.get(name)
            if found is not None:
                return found
        view = self.tools_for(self._by_name.get(name), allowed)
        if allowed is None:
            if len(self._offered) >= _CACHE_LIMIT:
                self._offered.clear()
            self._offered[name] = view
        return view

    def require(self, ctx: ChatContext) -> Mode:
        """The context's mode, or :class:`UnknownMode`."""
        mode = self._by_name.get(ctx.config.mode)
        if mode is None:
            raise UnknownMode(ctx.config.mode, self.names)
        return mode

    def tools_for(self, mode: Mode | None, allowed: Sequence[str] | None = None) -> ToolRegistry:
        """The tools offered in ``mode`` (None, an unknown mode: none), with the
        mode's approval overrides applied, and only those in ``allowed`` when
        it is given (a context's own allow-list: the two compose as an
        intersection). Built once per (mode, allow-list) and kept."""
        if mode is None:
            return _NONE
        key = (mode.name, None if allowed is None else tuple(allowed))
        view = self._views.get(key)
        if view is None:
            keep = None if allowed is None else frozenset(allowed)
            view = ToolRegistry(
                _with_override(t, mode)
                for t in self._tools
                if mode.offers(t.name) and (keep is None or t.name in keep)
            )
            if len(self._views) >= _CACHE_LIMIT:
                self._views.clear()
            self._views[key] = view
        return view


def _with_override(tool: Tool, mode: Mode) -> Tool:
    verdict = mode.approval.get(tool.name)
    return tool if verdict is None else tool.with_approval(verdict)


_NONE = ToolRegistry()
