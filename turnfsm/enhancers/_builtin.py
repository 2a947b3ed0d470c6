"""The built-in enhancers: the system prompt and the tool definitions (the
engine puts them first, after the tool history when it is set)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..model import ChatContext, LLMRequest

__all__ = ["SystemPromptEnhancer", "ToolDefinitionsEnhancer", "mode_block"]


class SystemPromptEnhancer:
    """Puts the active branch's system prompt, then its user prompt, first.

    The two are joined by a blank line into one ``system`` message; a branch with
    neither gets none (or ``default``, when given).

    ``mode`` (the engine passes it) gives the name of the context's mode and
    its instructions, or ``None`` for none. Instructions are appended to the
    same ``system`` message after a blank line, delimited as::

        <mode name="plan">
        the mode's instructions
        </mode>

    (alone, when there is no prompt). The name is the stored one; its ``"``,
    ``<`` and ``>`` are not expected (mode names are checked ids) but are
    escaped all the same.
    """

    def __init__(
        self,
        default: str | None = None,
        *,
        mode: Callable[[ChatContext], tuple[str, str] | None] | None = None,
    ) -> None:
        self.default = default
        self.mode = mode

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        branch = context.branches[context.active_branch_name]
        # the non-empty parts kept by hand rather than by a generator: this
        # runs for every request
        parts: list[str] = []
        prompt = branch.system_prompt
        first = prompt.content if prompt else self.default
        if first:
            parts.append(first)
        if branch.user_prompt:
            parts.append(branch.user_prompt)
        if self.mode is not None:
            found = self.mode(context)
            if found is not None:
                parts.append(mode_block(*found))
        if parts:
            system = {"role": "system", "content": "\n\n".join(parts)}
            request.messages = [system, *request.messages]
        return request


def mode_block(name: str, instructions: str) -> str:
    """A mode's instructions as they are appended to the system message."""
    safe = name.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    safe = safe.replace(">", "&gt;")
    return f'<mode name="{safe}">\n{instructions}\n</mode>'


class ToolDefinitionsEnhancer:
    """Offers the tool definitions (OpenAI ``tools`` format) to the model.

    ``definitions`` are the same for every context; ``per_context`` (the engine
    passes it, to offer each context's mode its own tools), when given, gives
    them for one context instead.
    """

    def __init__(
        self,
        definitions: Sequence[dict[str, Any]] | Callable[[], list[dict[str, Any]]] = (),
        *,
        per_context: Callable[[ChatContext], list[dict[str, Any]]] | None = None,
    ) -> None:
        self._definitions = definitions
        self._per_context = per_context

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        if self._per_context is not None:
            request.tools = self._per_context(context)
            return request
        defs = self._definitions
        request.tools = defs() if callable(defs) else list(defs)
        return request
