"""Tools: what the model may call, who approves a call, and how one call runs.

A :class:`Tool` is immutable and built once, with :func:`tool` (a decorated,
type-annotated function) or :meth:`Tool.from_spec` (a hand-written JSON schema).
Everything a call needs is computed at definition time: the JSON schema, the
OpenAI tool definition, the argument validator and how the function is invoked,
so :meth:`Tool.run` only validates, calls and wraps.

:meth:`Tool.run` never raises for a tool's own failure: invalid arguments, an
exception from the function, a timeout and a missing implementation are all
:class:`ToolOutcome` values with ``success=False`` (tool errors are results, not
state changes: docs/architecture.md, "The table"). Cancellation always propagates.

What a tool returns is stored as JSON, and nothing is changed silently
(:mod:`turnfsm.tools._outcome`).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any, ClassVar, Literal, TypeAlias, overload

import anyio

from turnfsm.errors import ToolDefinitionError
from turnfsm.model import ToolCallRequest

from ._outcome import ToolOutcome
from ._schema import (
    Binder,
    InvalidArguments,
    binder_from_function,
    binder_from_spec,
    check_name,
    parse_docstring,
)
from ._threads import run_in_tool_thread

__all__ = ["Approval", "ApprovalPolicy", "Tool", "ToolError", "ToolOutcome", "tool"]

_log = logging.getLogger("turnfsm.tools")


class ToolError(Exception):
    """Raise it in a tool to fail the call with exactly this message.

    Other exceptions are reported as ``"TypeName: message"``; a ``ToolError``'s
    message reaches the model as it is (``{"error": message}``).
    """


class Approval(StrEnum):
    """What happens to a call before it runs: run it, ask a human, or refuse it."""

    AUTO = "auto"
    REQUIRED = "required"
    DENY = "deny"


ApprovalPolicy: TypeAlias = (
    Approval
    | Literal["auto", "required", "deny"]
    | Callable[[ToolCallRequest], Approval | str | bool]
)
"""A fixed :class:`Approval` (or its value), or a callable deciding per call.

The callable gets the :class:`~turnfsm.model.ToolCallRequest` and returns an
:class:`Approval`, one of the strings ``"auto"``, ``"required"``, ``"deny"``, or a
bool (``True`` = auto, ``False`` = deny). Anything else, or an exception, means
:attr:`Approval.REQUIRED`: when the policy cannot decide, a human does.
"""


class Tool:
    """One tool the model may call. Immutable; build it with :func:`tool` or :meth:`from_spec`.

    Attributes:
        name: the name the model calls it by (``^[a-zA-Z0-9_-]{1,64}$``).
        description: what it does, for the model.
        parameters: the JSON schema of its arguments object (do not mutate).
        fn: the implementation, or ``None`` when it runs elsewhere.
        approval: the approval policy (strings are normalised to :class:`Approval`).
        idempotent: whether running a call twice is harmless; a started call of a
            non-idempotent tool with no recorded outcome goes back to a human on resume.
        timeout: seconds a call may take, or ``None``. It bounds async functions and
            sync ones run in a worker thread (from the call's start, a wait for a
            free thread included); an ``inline`` function runs to completion in the
            event loop's thread and cannot be interrupted.
        inline: a sync function runs in the event loop's thread instead of a worker
            thread: for cheap, pure functions only (see :func:`tool`).
        blocking: whether the function runs in a worker thread (every sync
            function that is not ``inline``). On timeout or cancellation the thread
            is abandoned, not stopped: it finishes in the background and its result
            is dropped.
    """

    _runs_children: ClassVar[bool] = False
    """Whether its calls run child contexts through the engine's sub-task host
    (the sub-task tools: see ``ToolRegistry.hosts``)."""

    __slots__ = (
        "_bind",
        "_definition",
        "_invoke",
        "approval",
        "blocking",
        "description",
        "fn",
        "idempotent",
        "inline",
        "name",
        "parameters",
        "timeout",
    )

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any] | None
    approval: ApprovalPolicy
    idempotent: bool
    timeout: float | None
    inline: bool
    blocking: bool
    _bind: Binder
    _definition: dict[str, Any]
    _invoke: Callable[[Callable[..., Any], dict[str, Any]], Awaitable[Any]] | None

    def __init__(
        self,
        *,
        name: str,
        description: str,
        parameters: dict[str, Any],
        fn: Callable[..., Any] | None,
        bind: Binder,
        approval: ApprovalPolicy = Approval.AUTO,
        idempotent: bool = False,
        timeout: float | None = 60.0,
        inline: bool = False,
        blocking: bool | None = None,
    ) -> None:
        """Internal: use :func:`tool` or :meth:`Tool.from_spec`."""
        what = f"tool {name!r}"
        check_name(name, what)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise ToolDefinitionError(
                f"{what}: timeout must be a positive number of seconds or None, not {timeout!r}"
            )
        is_async = fn is not None and (
            inspect.iscoroutinefunction(fn)
            or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004
        )
        inline = _resolve_inline(what, is_async, inline, blocking)
        threaded = fn is not None and not is_async and not inline
        # How the function is invoked, chosen once: None means "call it directly".
        invoke = _await_call if is_async else _thread_call if threaded else None
        setter = object.__setattr__
        setter(self, "name", name)
        setter(self, "description", description)
        setter(self, "parameters", parameters)
        setter(self, "fn", fn)
        setter(self, "approval", _normalise_policy(approval, what))
        setter(self, "idempotent", bool(idempotent))
        setter(self, "timeout", None if timeout is None else float(timeout))
        setter(self, "inline", inline)
        setter(self, "blocking", threaded)
        setter(self, "_bind", bind)
        setter(self, "_invoke", invoke)
        setter(
            self,
            "_definition",
            {
                "type": "function",
                "function": {"name": name, "description": description, "parameters": parameters},
            },
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Tool is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Tool is immutable; cannot delete {name!r}")

    def __repr__(self) -> str:
        approval = self.approval if isinstance(self.approval, str) else "<callable>"
        return (
            f"Tool(name={self.name!r}, approval={approval!s}, idempotent={self.idempotent}, "
            f"timeout={self.timeout})"
        )

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_spec(
        cls,
        name: str,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        fn: Callable[..., Any] | None = None,
        *,
        approval: ApprovalPolicy = Approval.AUTO,
        idempotent: bool = False,
        timeout: float | None = 60.0,
        inline: bool = False,
        blocking: bool | None = None,
    ) -> Tool:
        """A tool from a hand-written JSON schema (``parameters``, an object schema).

        Arguments are checked against the schema's basics: required keys, unknown
        keys when ``additionalProperties`` is false, and each property's JSON type.
        ``fn`` receives the arguments as keyword arguments; ``fn=None`` declares a
        tool implemented elsewhere (running it gives a failed outcome). ``parameters``
        defaults to an object with no properties and no extra keys allowed.
        A sync ``fn`` runs in a worker thread unless ``inline=True`` (as :func:`tool`).
        """
        check_name(name, f"tool {name!r}")
        if parameters is None:
            schema: dict[str, Any] = {
                "type": "object",
                "properties": {},
                "required": [],
                "additionalProperties": False,
            }
        elif isinstance(parameters, dict):
            schema = _deep_copy(parameters)
        else:
            raise ToolDefinitionError(
                f"tool {name!r}: parameters must be a JSON schema dict, "
                f"not {type(parameters).__name__}"
            )
        if fn is not None and not callable(fn):
            raise ToolDefinitionError(f"tool {name!r}: fn must be callable or None")
        return cls(
            name=name,
            description=description,
            parameters=schema,
            fn=fn,
            bind=binder_from_spec(name, schema),
            approval=approval,
            idempotent=idempotent,
            timeout=timeout,
            inline=inline,
            blocking=blocking,
        )

    # ------------------------------------------------------------------ use

    def definition(self) -> dict[str, Any]:
        """The OpenAI chat tool definition (the same dict on every call; do not mutate)."""
        return self._definition

    def with_approval(self, approval: ApprovalPolicy) -> Tool:
        """A copy of this tool with another approval policy, the rest unchanged
        (the engine's modes use it to override a tool's policy in one mode).
        The copy is of the same class."""
        return type(self)(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            fn=self.fn,
            bind=self._bind,
            approval=approval,
            idempotent=self.idempotent,
            timeout=self.timeout,
            inline=self.inline,
        )

    def decide(self, call: ToolCallRequest) -> Approval:
        """The policy's decision for ``call``.

        A callable policy that raises, or returns anything but an :class:`Approval`,
        one of its string values or a bool, gives :attr:`Approval.REQUIRED` (logged
        as a warning on the ``turnfsm.tools`` logger): a human decides.
        """
        policy = self.approval
        if isinstance(policy, Approval):
            return policy
        if isinstance(policy, str):  # pragma: no cover - strings are normalised at init
            return Approval(policy)
        try:
            verdict = policy(call)
        except Exception:
            _log.warning(
                "approval policy of tool %r raised for call %r; a human decides",
                self.name,
                call.id,
                exc_info=True,
            )
            return Approval.REQUIRED
        if verdict is True:
            return Approval.AUTO
        if verdict is False:
            return Approval.DENY
        if isinstance(verdict, str) and verdict in _APPROVAL_VALUES:
            return Approval(verdict)
        if inspect.iscoroutine(verdict):
            verdict.close()
        _log.warning(
            "approval policy of tool %r returned %r for call %r; a human decides",
            self.name,
            verdict,
            call.id,
        )
        return Approval.REQUIRED

    async def run(self, arguments: dict[str, Any]) -> ToolOutcome:
        """Validate ``arguments``, run the function, and wrap what happened.

        Invalid arguments, an exception, a timeout or a missing implementation give
        ``success=False`` with an ``"error"`` message; a pydantic model returned by
        the function is dumped in JSON mode. Cancellation propagates.
        """
        if not isinstance(arguments, dict):
            return ToolOutcome(
                False, {"error": f"invalid arguments for tool {self.name!r}: not a JSON object"}
            )
        try:
            kwargs = self._bind(arguments)
        except InvalidArguments as exc:
            return ToolOutcome.of(
                False,
                {
                    "error": f"invalid arguments for tool {self.name!r}: {exc}",
                    "details": exc.details,
                },
            )
        fn = self.fn
        if fn is None:
            return ToolOutcome(False, {"error": f"tool {self.name!r} has no implementation"})
        try:
            invoke = self._invoke
            if invoke is None:
                result = fn(**kwargs)
            else:
                timeout = self.timeout
                if timeout is None:
                    result = await invoke(fn, kwargs)
                else:
                    result = None
                    with anyio.move_on_after(timeout) as scope:
                        result = await invoke(fn, kwargs)
                    if scope.cancelled_caught:
                        return ToolOutcome(
                            False, {"error": f"tool {self.name!r} timed out after {timeout:g}s"}
                        )
            if (
                type(result) is not dict
                and invoke is not _await_call
                and inspect.isawaitable(result)
            ):
                if inspect.iscoroutine(result):
                    result.close()
                return ToolOutcome(
                    False,
                    {
                        "error": f"tool {self.name!r} returned an awaitable from a sync "
                        "function; declare the function async def"
                    },
                )
        except ToolError as exc:
            return ToolOutcome.of(False, {"error": _exc_text(exc) or type(exc).__name__})
        except Exception as exc:
            text = _exc_text(exc)
            name = type(exc).__name__
            return ToolOutcome.of(False, {"error": f"{name}: {text}" if text else name})
        # stored history is JSON: a datetime or a tuple must not survive as one
        return ToolOutcome.of(True, result, f"tool {self.name!r}")


_APPROVAL_VALUES = frozenset(Approval)


def _exc_text(exc: BaseException) -> str:
    """``str(exc)``, or a note when even that fails (a broken ``__str__``)."""
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__} could not be printed>"


def _normalise_policy(policy: object, what: str) -> ApprovalPolicy:
    if isinstance(policy, str):
        if policy not in _APPROVAL_VALUES:
            raise ToolDefinitionError(
                f"{what}: approval must be 'auto', 'required', 'deny' or a callable, not {policy!r}"
            )
        return Approval(policy)
    if callable(policy):
        if inspect.iscoroutinefunction(policy):
            raise ToolDefinitionError(
                f"{what}: an approval policy must be a plain (sync) callable; it is asked "
                "while the model's answer is processed"
            )
        return policy
    raise ToolDefinitionError(
        f"{what}: approval must be 'auto', 'required', 'deny' or a callable, not {policy!r}"
    )


async def _await_call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    return await fn(**kwargs)


async def _thread_call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    # abandoned on cancellation: the caller stops waiting, the thread runs on
    return await run_in_tool_thread(functools.partial(fn, **kwargs))


def _resolve_inline(what: str, is_async: bool, inline: object, blocking: object) -> bool:
    """Whether a sync function runs in the event loop's thread: ``inline=True``,
    or its older spelling ``blocking=False``; ``blocking=True`` (the default now)
    is accepted as it was."""
    if not isinstance(inline, bool):
        raise ToolDefinitionError(f"{what}: inline must be True or False, not {inline!r}")
    if blocking is None:
        return inline
    if not isinstance(blocking, bool):
        raise ToolDefinitionError(f"{what}: blocking must be True or False, not {blocking!r}")
    if blocking and is_async:
        raise ToolDefinitionError(
            f"{what}: blocking=True is for sync functions; an async function is awaited"
        )
    if blocking and inline:
        raise ToolDefinitionError(
            f"{what}: inline=True runs the function in the event loop's thread and "
            "blocking=True in a worker thread; give one of them"
        )
    return not blocking


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _deep_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_deep_copy(item) for item in value]
    return value


# --------------------------------------------------------------------------- decorator


@overload
def tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    approval: ApprovalPolicy = Approval.AUTO,
    idempotent: bool = False,
    timeout: float | None = 60.0,
    inline: bool = False,
    blocking: bool | None = None,
) -> Tool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    approval: ApprovalPolicy = Approval.AUTO,
    idempotent: bool = False,
    timeout: float | None = 60.0,
    inline: bool = False,
    blocking: bool | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    approval: ApprovalPolicy = Approval.AUTO,
    idempotent: bool = False,
    timeout: float | None = 60.0,
    inline: bool = False,
    blocking: bool | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` of a type-annotated function: ``@tool`` or ``@tool(...)``.

    The JSON schema comes from the type hints (a pydantic model built with
    ``pydantic.create_model``; pydantic-model parameters work), the description from
    the docstring's first paragraph, and per-parameter descriptions from its
    Google-style ``Args:`` section. Arguments are validated with that model (extra
    keys forbidden) and the function gets the validated values. The original
    function stays available as ``.fn``.

    A sync function runs in a worker thread, so that a call that sleeps or waits
    on I/O holds up nothing else of the event loop (the server's other requests,
    streams and turns); it still sees the caller's context variables
    (:func:`current_call`, the tool's tracing span). A cancelled or timed-out call
    stops waiting for the thread, which runs on to its end and whose result is
    dropped. The threads are bounded by :func:`tool_threads` (40 at once in each
    event loop, apart from the threads the store and others use); a call that finds
    them all busy waits for one. ``inline=True`` runs a sync function in the event
    loop's thread instead, without the hop to a thread: for cheap, pure functions
    (arithmetic, a lookup in memory) only, as nothing else runs while it does, and
    its ``timeout`` cannot stop it. ``blocking=False`` is an older spelling of
    ``inline=True``; ``blocking=True``, once the way to ask for a worker thread,
    is accepted and changes nothing. An async function is awaited in the event loop.

    Raises :class:`~turnfsm.errors.ToolDefinitionError` for an unannotated parameter,
    ``*args`` / ``**kwargs``, a positional-only parameter, a type with no JSON
    schema, or a name not matching ``^[a-zA-Z0-9_-]{1,64}$``.
    """

    def build(func: Callable[..., Any]) -> Tool:
        if not callable(func):
            raise ToolDefinitionError(f"@tool needs a function, not {type(func).__name__}")
        tool_name = name if name is not None else getattr(func, "__name__", None)
        check_name(tool_name, f"tool function {getattr(func, '__qualname__', func)!r}")
        assert isinstance(tool_name, str)
        documented = func.func if isinstance(func, functools.partial) else func
        summary, arg_docs = parse_docstring(inspect.getdoc(documented))
        parameters, bind = binder_from_function(func, tool_name, arg_docs)
        return Tool(
            name=tool_name,
            description=summary if description is None else description,
            parameters=parameters,
            fn=func,
            bind=bind,
            approval=approval,
            idempotent=idempotent,
            timeout=timeout,
            inline=inline,
            blocking=blocking,
        )

    if fn is None:
        return build
    return build(fn)
