"""How a finished child is summarised into its parent: the summarizers.

:class:`LLMSummarizer` (the default) asks the engine's LLM adapter,
:class:`FinalAnswer` takes the child's last answer, :class:`SummaryFunction`
wraps a plain callable; :func:`as_summarizer` turns what a caller gives into
one of them. See docs/architecture.md, "Sub-contexts".
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from ...errors import InvalidInput, LLMError, SubContextError
from ...model import ChatContext, LLMRequest, LLMResponse, Role, to_chat_messages
from ...tools._threads import run_in_tool_thread

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "FinalAnswer",
    "LLMSummarizer",
    "Summarizer",
    "SummaryFunction",
    "as_summarizer",
    "summarize",
    "summarizer_name",
]

DEFAULT_SUMMARY_PROMPT = (
    "The conversation above was a sub-task handed off by another conversation, "
    "which will read only your summary of it. Write that summary now: concise, "
    "in plain text, with the result or answer, the facts found and the decisions "
    "made that the other conversation needs, and anything left open or uncertain. "
    "Write only the summary, with no preamble."
)
"""What :class:`LLMSummarizer` asks the model, after the child's history."""


# ---------------------------------------------------------------------- summarizers


@runtime_checkable
class Summarizer(Protocol):
    """Makes the one concise text that stands for a finished child in its parent.

    ``engine`` is the :class:`~turnfsm.Engine` that finishes the child."""

    async def summarize(self, child: ChatContext, engine: Any) -> str: ...


class LLMSummarizer:
    """The default: the engine's LLM adapter is asked for a summary.

    The request is the child's active branch in chat format (its system prompt
    left out: it was the sub-task's instructions) followed by one ``user``
    message holding ``prompt`` (:data:`DEFAULT_SUMMARY_PROMPT` unless given);
    ``model`` defaults to the child's. The call is not a turn of any context: it
    takes no transition and is not retried; an :class:`~turnfsm.errors.LLMError`
    (any other exception of the adapter becomes one, kind ``adapter_error``)
    reaches the caller of ``finish``, and nothing is changed.
    """

    name = "llm"

    def __init__(self, prompt: str = DEFAULT_SUMMARY_PROMPT, *, model: str | None = None) -> None:
        self.prompt = prompt
        self.model = model

    async def summarize(self, child: ChatContext, engine: Any) -> str:
        llm = engine.llm
        if llm is None:
            raise SubContextError(child.id, "the engine has no LLM adapter to summarise with")
        messages = [
            *to_chat_messages(n.message for n in child.history()),
            {"role": "user", "content": self.prompt},
        ]
        request = LLMRequest(
            context_id=child.id,
            model=self.model or child.config.model_id,
            messages=messages,
            parameters=dict(child.config.parameters),
        )
        response: object = None
        try:
            async for chunk in llm.stream(request):
                response = chunk
        except LLMError:
            raise
        except Exception as exc:  # the adapter's own bug: typed, as the engine does
            raise LLMError(
                f"the summary of context {child.id!r}: the adapter raised "
                f"{type(exc).__name__}: {exc}",
                kind="adapter_error",
            ) from exc
        if not isinstance(response, LLMResponse) or not isinstance(response.text, str):
            raise LLMError(
                f"the summary of context {child.id!r}: the adapter's last chunk was "
                f"{type(response).__name__}, not an LLMResponse with text",
                kind="invalid_answer",
            )
        return response.text


class FinalAnswer:
    """The child's final answer as it is: the text of the last assistant message
    of its active branch that was not cancelled."""

    name = "final_answer"

    async def summarize(self, child: ChatContext, engine: Any) -> str:
        for node in reversed(child.history()):
            msg = node.message
            if msg.role is Role.ASSISTANT and not msg.metadata.cancelled and msg.text.strip():
                return msg.text
        raise SubContextError(child.id, "it has no final answer to stand for it")


class SummaryFunction:
    """A plain callable as a summarizer: ``fn(child)`` returns the text (sync or
    async).

    An async function is awaited; a sync one runs in a worker thread, as a sync
    tool does (:func:`~turnfsm.tools.tool_threads` bounds them), so that one
    that calls a model or reads files holds up nothing else of the event loop.
    Cancelled, the caller stops waiting and the thread runs on to its end. In
    a Temporal workflow (a sub-task's summary) a sync one is called in the
    workflow, which runs deterministically on its one thread."""

    name = "function"

    def __init__(self, fn: Callable[[ChatContext], str | Awaitable[str]]) -> None:
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004
        )

    async def summarize(self, child: ChatContext, engine: Any) -> str:
        return await self.call(child, threads=True)

    async def call(self, child: ChatContext, *, threads: bool) -> str:
        """``fn(child)``; a sync ``fn`` runs in a tool thread when ``threads``
        (not on a host that runs on its one thread, a Temporal workflow)."""
        if self.is_async or not threads:
            out = self.fn(child)
        else:
            out = await run_in_tool_thread(functools.partial(self.fn, child))
        if inspect.isawaitable(out):
            out = await out
        return out


def as_summarizer(where: str, value: object) -> Summarizer:
    """``None`` (the LLM summary), a :class:`Summarizer`, or a plain callable."""
    if value is None:
        return LLMSummarizer()
    if callable(getattr(value, "summarize", None)):
        return value  # type: ignore[return-value]
    if callable(value):
        return SummaryFunction(value)
    raise InvalidInput(
        where, f"must be a Summarizer, a callable taking the child, or None, not {value!r}"
    )


def summarizer_name(summarizer: Summarizer) -> str:
    name = getattr(summarizer, "name", None)
    return name if isinstance(name, str) else type(summarizer).__name__


async def summarize(
    summarizer: Summarizer, child: ChatContext, engine: Any, *, threads: bool
) -> object:
    """What ``summarizer`` makes of ``child`` for ``engine`` (not checked yet);
    a plain function runs in a tool thread only when the host runs ``threads``."""
    if isinstance(summarizer, SummaryFunction):
        return await summarizer.call(child, threads=threads)
    return await summarizer.summarize(child, engine)
