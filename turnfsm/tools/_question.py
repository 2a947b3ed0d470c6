"""The built-in question tool: the model asks the user, the user answers.

A call to a :class:`QuestionTool` never runs a function. The engine leaves it
pending in ``AwaitingToolApproval`` whatever the approval policy, and the user
answers it with ``Engine.answer`` (the answer text becomes the call's result) or
declines with ``Engine.deny``. See README.md, "Questions".

Its arguments are ``question`` (a non-empty text) and ``choices`` (a list of
non-empty texts, or ``null``). When ``choices`` is a non-empty list the answer
must be one of them; ``null`` or ``[]`` allows any text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from turnfsm.errors import ToolDefinitionError
from turnfsm.model import ToolCallRequest

from ._schema import InvalidArguments, binder_from_function, check_name
from ._spec import Approval, Tool, ToolError

__all__ = [
    "DEFAULT_QUESTION_DESCRIPTION",
    "AskedQuestion",
    "QuestionTool",
    "ask_user",
    "question_tool",
]

DEFAULT_QUESTION_DESCRIPTION = (
    "Ask the user a question and wait for the answer. Use it when you need information "
    "or a decision only the user can give. Give `choices` when the answer must be one "
    "of a few options; the user's answer is returned as text."
)


def _ask(
    question: Annotated[str, Field(min_length=1)],
    choices: list[Annotated[str, Field(min_length=1)]] | None = None,
) -> None:
    """The schema of a question's arguments (the descriptions are in ``_ARG_DOCS``)."""
    # never called: the engine does not run question calls (see the module docstring)
    raise ToolError("a question is answered by the user (Engine.answer), not run")


@dataclass(frozen=True, slots=True)
class AskedQuestion:
    """A question call's arguments, checked: ``choices`` is ``()`` for a free answer."""

    question: str
    choices: tuple[str, ...]


class QuestionTool(Tool):
    """A tool whose calls are questions to the user (see the module docstring).

    Build it with :func:`question_tool`, or use :data:`ask_user`.
    """

    __slots__ = ()

    def ask(self, call: ToolCallRequest) -> AskedQuestion | None:
        """The question ``call`` asks, or ``None`` when its arguments are not a
        valid question (it then gets the usual "invalid arguments" result)."""
        if call.raw_arguments is not None or not isinstance(call.arguments, dict):
            return None
        try:
            values = self._bind(call.arguments)
        except InvalidArguments:
            return None
        return AskedQuestion(values["question"], tuple(values.get("choices") or ()))

    def __repr__(self) -> str:
        return f"QuestionTool(name={self.name!r})"


def question_tool(
    name: str = "ask_user", description: str = DEFAULT_QUESTION_DESCRIPTION
) -> QuestionTool:
    """A question tool called ``name`` (``^[a-zA-Z0-9_-]{1,64}$``), described to the
    model by ``description``. Its parameters are fixed: ``question`` and ``choices``.

    Raises :class:`~turnfsm.errors.ToolDefinitionError` for a bad name.
    """
    check_name(name, f"question tool {name!r}")
    if not isinstance(description, str):
        raise ToolDefinitionError(
            f"question tool {name!r}: description must be a string, not "
            f"{type(description).__name__}"
        )
    parameters, bind = binder_from_function(_ask, name, _ARG_DOCS)
    return QuestionTool(
        name=name,
        description=description,
        parameters=parameters,
        fn=_ask,
        bind=bind,
        approval=Approval.REQUIRED,
        idempotent=True,
        timeout=None,
    )


_ARG_DOCS: dict[str, str] = {
    "question": "the question, as the user will read it",
    "choices": "the answers the user may pick from; leave it out for a free answer",
}

ask_user: QuestionTool
"""The question tool with its default name and description: ``Engine(tools=[ask_user])``.
Made on first use (this module's ``__getattr__``): its arguments' pydantic
model is not built by ``import turnfsm``."""


def __getattr__(name: str) -> QuestionTool:
    if name != "ask_user":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    made = question_tool()
    globals()[name] = made  # later reads find it without this function
    return made
