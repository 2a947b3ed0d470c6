"""A streamed tool call's pieces (:class:`~turnfsm.model.ToolCallDelta`), checked
where they enter, with each call's id and name remembered.

A model names a call (its id and tool) in its first piece and sends the
arguments' JSON text in the pieces after, each with the call's ``index`` in
the answer only. :class:`CallPieces` gives every piece of a call the id and
name known so far, so a reader that joins mid-call still learns whose
arguments it reads. A piece whose fields do not have their declared types is
an ``invalid_answer``, as a delta whose text is not a ``str`` is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import clean_text
from ._answer import invalid_answer

__all__ = ["CallPiece", "CallPieces"]


@dataclass(frozen=True, slots=True)
class CallPiece:
    """One checked piece: the call's place in the answer, its id and tool name
    once known, and the new argument text (cleaned: a lone surrogate is U+FFFD)."""

    call_index: int
    call_id: str | None
    tool_name: str | None
    arguments: str


@dataclass(slots=True)
class CallPieces:
    """The calls of one attempt's stream seen so far (by ``index``)."""

    named: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)

    def take(self, chunk: Any) -> CallPiece:
        """``chunk`` (a ToolCallDelta) checked, with the id and name known for its call.

        Raises :class:`~turnfsm.errors.PermanentLLMError` (``invalid_answer``)
        naming the field that has the wrong type.
        """
        index = chunk.index
        if type(index) is not int or index < 0:
            raise invalid_answer(f"a ToolCallDelta's index is {index!r}, not an int >= 0")
        call_id, tool_name = self.named.get(index, (None, None))
        ident = chunk.id
        if ident is not None:
            call_id = _text(ident, "id") or call_id
        name = chunk.name
        if name is not None:
            tool_name = _text(name, "name") or tool_name
        arguments = _text(chunk.arguments, "arguments")
        self.named[index] = (call_id, tool_name)
        return CallPiece(index, call_id, tool_name, arguments)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise invalid_answer(
            f"a ToolCallDelta's {what} is a {type(value).__name__}, not a str"
            + (" or None" if what != "arguments" else "")
        )
    return value if value.isascii() else clean_text(value)[0]
