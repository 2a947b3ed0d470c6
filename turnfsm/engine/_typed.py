"""Typed answers in the turn (docs/structured-output.md): the output type a
call starts a turn with, how its schema reaches the model, and the check of
an answer at ProcessingLLMResponse, whose failure is a declared edge
(``output_invalid`` back to AwaitingLLMResponse with the errors, or
``output_failed`` to PermanentFailure once the retries are spent).

Nothing here runs for a turn without an output type: the engine's only cost
then is one ``is None`` check per request and per answer.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import OutputValidationError
from ..model import (
    InternalMessage,
    LLMRequest,
    MessageMetadata,
    MessageNode,
    OutputSpec,
    Role,
    TextPart,
    TurnOutput,
    TurnProgress,
)
from ..states import Trigger
from . import _history, _steps
from ._host import Host
from ._inputs import UNSET, Unset, check_count
from ._output import OutputInvalid, Outputs, canonical_json, output_type, unfenced
from ._runtime import Runtime
from ._turn import StopReason

__all__ = [
    "ERRORS_KEY",
    "OUTPUT_KEY",
    "check_answer",
    "instruction",
    "mark_answer",
    "shape_request",
    "turn_output",
]

OUTPUT_KEY = "output"
"""The key, in a typed answer's ``metadata.extra``, of ``{"name", "digest",
"mode"}``: the output type it was asked for and how (``native`` or
``instruction``)."""
ERRORS_KEY = "output_errors"
"""The key, in the message that sends an answer's errors back (role ``user``),
of its ``[{"path", "message"}, ...]``."""


def turn_output(
    outputs: Outputs, given: object = UNSET, retries: object = None
) -> TurnOutput | None:
    """The output type a call starts a turn with, checked at the call:
    ``given`` (``output_type=``; left out: the engine's, ``None``: none), and
    ``retries`` (``output_retries=``; None: the engine's)."""
    if given is UNSET and retries is None and outputs.default is None:
        return None  # the usual call: no output type anywhere, nothing to check
    count: int | None = check_count("output_retries", retries, minimum=0, optional=True)
    if isinstance(given, Unset):
        typed = outputs.default
    elif given is None:
        typed = None
    else:
        typed = outputs.remember(output_type(given))
    if typed is None:
        return None
    return typed.stored(outputs.retries if count is None else count)


def instruction(output: TurnOutput) -> dict[str, Any]:
    """The system message that asks for the output type in words, for an
    adapter that cannot ask the provider for it (``native_output`` false)."""
    return {
        "role": "system",
        "content": (
            f"Answer with JSON only: one JSON value, with no text before or after it, "
            f"that matches this JSON Schema (named {output.name}):\n"
            f"{canonical_json(output.schema)}"
        ),
    }


def shape_request(d: Host, request: LLMRequest, output: TurnOutput) -> None:
    """Ask for the output type: ``request.output`` with mode ``native`` when
    the adapter says it can do structured output (a true ``native_output``
    attribute) and the schema's root is an object, else mode ``instruction``
    and a system message at the end of the view. (The providers' structured
    outputs take an object at the root: OpenAI's ``json_schema`` and Claude's
    refuse ``list[int]`` or a union there, so such a type is asked for in
    words with every adapter.)"""
    native = (
        getattr(d.settings.llm, "native_output", False) is True
        and output.schema.get("type") == "object"
    )
    request.output = OutputSpec(
        name=output.name,
        schema=output.schema,
        digest=output.digest,
        strict=output.strict,
        mode="native" if native else "instruction",
    )
    if not native:
        request.messages = [*request.messages, instruction(output)]


def mark_answer(message: InternalMessage, spec: OutputSpec) -> None:
    """Record on an answer without tool calls the output type it was asked
    for: its name, digest and how it was asked (``native`` / ``instruction``)."""
    message.metadata.extra[OUTPUT_KEY] = {
        "name": spec.name,
        "digest": spec.digest,
        "mode": spec.mode,
    }


def _errors_text(name: str, problems: tuple[tuple[str, str], ...]) -> str:
    lines = "\n".join(f"- {path}: {message}" for path, message in problems)
    return (
        f"Your answer does not match the output type {name}:\n{lines}\n"
        "Answer again with JSON only, matching the schema."
    )


def check_answer(d: Host, rt: Runtime, answer: MessageNode | None, output: TurnOutput) -> bool:
    """ProcessingLLMResponse, for a turn with an output type whose answer
    has no tool calls: validate the answer's text.

    The drive loop commits the answer first (in ProcessingLLMResponse, see
    ``_decide.validates``): a validator is the application's code, and
    whatever it does (raise, hang, take the process down), the answer that
    was paid for is kept, and a resume validates it again without calling
    the model.

    Valid: its value is the turn's output (``rt.output``) and False is
    returned (the turn completes as any other). Invalid: the errors are
    appended as a ``user`` message (``metadata.extra["output_errors"]``), and
    the edge is taken: ``output_invalid`` (the model is asked again) while
    retries remain, else ``output_failed`` (the turn fails with an
    :class:`~turnfsm.errors.OutputValidationError`); True is returned."""
    typed = d.settings.outputs.of(output)
    text = answer.message.text if answer is not None else ""
    try:
        rt.output = typed.validate(unfenced(text))
    except OutputInvalid as exc:
        problems = exc.problems
    else:
        return False
    ctx = rt.ctx
    _history.append(
        rt,
        InternalMessage(
            role=Role.USER,
            content=[TextPart(text=_errors_text(output.name, problems))],
            metadata=MessageMetadata(
                created_at=d.now(),
                extra={
                    ERRORS_KEY: [{"path": p, "message": m} for p, m in problems],
                    OUTPUT_KEY: {"name": output.name, "digest": output.digest},
                },
            ),
        ),
        d.settings.ids(),
    )
    p = ctx.progress
    if output.invalid < output.retries:
        ctx.progress = TurnProgress(
            iteration=p.iteration + 1,
            attempt=1,
            output=dataclasses.replace(output, invalid=output.invalid + 1),
            client=p.client,
        )
        _steps.fire(rt, Trigger.OUTPUT_INVALID)
        return True
    error = OutputValidationError(output.name, problems)
    ctx.progress = dataclasses.replace(p, last_error=str(error))
    rt.output_error = error
    rt.stop_reason = StopReason.FAILED
    _steps.fire(rt, Trigger.OUTPUT_FAILED)
    _steps.failed(rt, str(error), "")
    _steps.end_turn(rt)
    return True
