"""What an LLM adapter hands the engine, checked where it enters.

An adapter is code the engine does not control; whatever it returns or raises
ends as one of the declared outcomes of an LLM call, never as a crash that
leaves the context waiting for an answer that will not come:

- An :class:`~turnfsm.errors.LLMError` is the failure it says (transient or
  permanent), with its fields made storable (text cleaned, a ``retry_after``
  that is not a finite number of seconds >= 0 dropped).
- Any other exception (cancellation and other ``BaseException`` aside, which
  propagate) is a permanent failure of kind ``adapter_error`` naming the
  exception's type and message: a bug does not heal by retrying.
- ``stream()`` that does not give an async iterator, a chunk that is not a
  :class:`TextDelta`, :class:`ThinkingDelta`, :class:`ToolCallDelta` or
  :class:`LLMResponse`, a delta whose text is not a ``str``, a stream that ends
  without a response, and a response whose fields do not have their declared
  types (text, thinking, finish reason, model, usage, tool calls, refusal,
  incomplete reason, provider reason, phase, reasoning items, logprobs) are a permanent
  failure of kind ``invalid_answer``.

What is kept is made storable, and every change is recorded in the assistant
message's ``metadata.extra["conversions"]`` (a list of notes):

- texts (answer, thinking, deltas as published, tool names and ids, model,
  finish reason): each lone surrogate becomes U+FFFD;
- usage, logprobs and tool arguments go through :func:`~turnfsm.model.clean_json`
  (logprobs that cannot be stored are dropped, with a note);
  arguments that cannot be stored (too deep, too large, no JSON form) or are
  not a JSON object are kept as text (``raw_arguments``, cut to
  :data:`RAW_ARGUMENTS_LIMIT` characters, with ``arguments_error`` saying what
  and where): the call gets an error result the model can act on;
- tool call ids are made unique in the context, as
  :class:`~turnfsm.model.ToolCallRequest` describes (``provider_id`` keeps what
  the model sent).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import AsyncIterator, Callable, Container, Mapping
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import ValidationError

from .. import records
from ..errors import LLMError, PermanentLLMError
from ..model import (
    ApprovalStatus,
    InternalMessage,
    JSONProblem,
    LLMRequest,
    LLMResponse,
    MessageMetadata,
    MessageType,
    ReasoningData,
    ReasoningItem,
    Role,
    TextDelta,
    ThinkingDelta,
    TokenUsage,
    ToolCallData,
    ToolCallDelta,
    ToolCallRequest,
    clean_json,
    clean_text,
)
from ..model._message import NO_CONTENT, text_part
from ..tools import ToolRegistry
from ._approval import as_question

__all__ = [
    "ADAPTER_ERROR",
    "CALL",
    "CHUNK_KINDS",
    "INVALID",
    "INVALID_ANSWER",
    "RAW_ARGUMENTS_LIMIT",
    "RESPONSE",
    "TEXT",
    "THINKING",
    "ChunkKind",
    "adapter_failure",
    "build_answer",
    "chunk_kind",
    "close_stream",
    "conclude",
    "invalid_answer",
    "open_stream",
    "storable_error",
]

INVALID_ANSWER = "invalid_answer"
ADAPTER_ERROR = "adapter_error"
RAW_ARGUMENTS_LIMIT = 8192
"""Characters of unusable argument text kept on a call."""


ChunkKind = Literal["text", "thinking", "call", "response", "invalid"]
"""What a chunk of an adapter's stream is: a text or thinking delta, a tool
call delta (nothing to publish), the final response, or not a chunk at all."""
TEXT: Final = "text"
THINKING: Final = "thinking"
CALL: Final = "call"
RESPONSE: Final = "response"
INVALID: Final = "invalid"
CHUNK_KINDS: dict[type, ChunkKind] = {
    TextDelta: TEXT,
    ThinkingDelta: THINKING,
    ToolCallDelta: CALL,
    LLMResponse: RESPONSE,
}
"""The kind of each chunk type (looked up by exact type on every chunk;
:func:`chunk_kind` answers for subclasses)."""


# Members read for every answer, as module names: on Python 3.11 reading
# ``Role.X`` goes through the hook of EnumType's ``__getattr__`` (the
# metaclass defines one), which costs several times a module global.
_ASSISTANT: Final = Role.ASSISTANT
_TOOL_CALL: Final = MessageType.TOOL_CALL
_PENDING: Final = ApprovalStatus.PENDING

_new = object.__new__
"""Records made for every answer are made on ``_new(X)``, not as ``X(...)``
(CPython 3.11 packs a class call's keywords into a dict for ``__init__``): the
commonest (an answer's message, its metadata and calls) have every slot
written in place, with its value or default, as ``__init__`` (which checks
nothing) would, sparing its frame; the rarer: ``X.__init__(_new(X), ...)``."""


def chunk_kind(chunk: object) -> ChunkKind:
    """The kind of a chunk whose type is not in :data:`CHUNK_KINDS` (a subclass)."""
    if isinstance(chunk, LLMResponse):
        return RESPONSE
    if isinstance(chunk, TextDelta):
        return TEXT
    if isinstance(chunk, ThinkingDelta):
        return THINKING
    if isinstance(chunk, ToolCallDelta):
        return CALL
    return INVALID


def _type(value: object) -> str:
    return "None" if value is None else type(value).__name__


def invalid_answer(what: str, partial_text: str = "") -> PermanentLLMError:
    """The failure for an answer or chunk that does not have the declared shape."""
    return PermanentLLMError(
        f"the LLM adapter's answer is malformed: {clean_text(what)[0]}",
        kind=INVALID_ANSWER,
        partial_text=partial_text,
    )


def adapter_failure(exc: Exception, partial_text: str = "") -> LLMError:
    """The failure for whatever an adapter raised (an exception, not a cancellation)."""
    if isinstance(exc, LLMError):
        storable_error(exc)
        if not exc.partial_text and partial_text:
            exc.partial_text = partial_text
        return exc
    try:
        text = str(exc)
    except Exception:
        text = "(its message cannot be read)"
    return PermanentLLMError(
        f"the LLM adapter raised {type(exc).__name__}: {clean_text(text)[0]}",
        kind=ADAPTER_ERROR,
        partial_text=partial_text,
    )


def _text_or(value: object, default: str | None) -> str | None:
    if isinstance(value, str):
        return clean_text(value)[0]
    return default


def storable_error(exc: LLMError) -> LLMError:
    """Make an adapter's LLMError safe to describe, store and act on (in place)."""
    message = _text_or(getattr(exc, "message", None), None)
    if message is None:
        try:
            message = clean_text(str(exc))[0]
        except Exception:
            message = type(exc).__name__
    exc.message = message
    kind = getattr(exc, "kind", None)
    exc.kind = _text_or(kind, None if kind is None else repr(kind))
    status = getattr(exc, "status", None)
    if not (type(status) is int and 100 <= status <= 599):
        exc.status = None
    after = getattr(exc, "retry_after", None)
    if after is not None and not (
        isinstance(after, int | float)
        and not isinstance(after, bool)
        and math.isfinite(after)
        and after >= 0
    ):
        exc.retry_after = None
    exc.partial_text = _text_or(getattr(exc, "partial_text", ""), "") or ""
    return exc


def open_stream(stream: object) -> AsyncIterator[Any]:
    """The async iterator of what ``stream()`` returned, or an invalid_answer failure."""
    if hasattr(stream, "__anext__"):
        return stream  # type: ignore[return-value]
    close = getattr(stream, "close", None)
    if hasattr(stream, "__await__") and callable(close):
        close()  # a coroutine never awaited would warn when collected
        raise invalid_answer(
            "stream() returned a coroutine, not an async iterator (an `async def` "
            "that returns instead of yielding?)"
        )
    if hasattr(stream, "__aiter__"):
        it = stream.__aiter__()
        if hasattr(it, "__anext__"):
            return it  # type: ignore[no-any-return]
    raise invalid_answer(f"stream() returned a {_type(stream)}, not an async iterator")


async def close_stream(it: object) -> Exception | None:
    """Close an adapter's stream (async generators have ``aclose``); what it raised."""
    try:
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            await aclose()
    except Exception as exc:
        return exc
    return None


def delta_text(chunk: Any, kind: str) -> tuple[str, int]:
    """A delta's text, cleaned, and how many lone surrogates were replaced."""
    text = chunk.text
    if type(text) is not str and not isinstance(text, str):
        raise invalid_answer(f"a {kind}'s text is a {_type(text)}, not a str")
    return clean_text(text)


def _cut(text: str) -> str:
    if len(text) <= RAW_ARGUMENTS_LIMIT:
        return text
    return f"{text[:RAW_ARGUMENTS_LIMIT]}… [cut: {len(text)} characters in all]"


def _as_text(value: object) -> str:
    """Some text form of an argument value that cannot be stored as it is."""
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except Exception:
        pass
    try:
        return repr(value)
    except Exception:
        return f"(a {_type(value)} with no text form)"


def _arguments(
    value: object, where: str, notes: list[str]
) -> tuple[dict[str, Any], str | None, str | None]:
    """(arguments, raw_arguments, arguments_error) for one call's arguments."""
    if isinstance(value, str):
        raw = _clean(value, where, notes)
        if len(raw) > RAW_ARGUMENTS_LIMIT:
            notes.append(f"{where}: {len(raw)} characters of text, cut to {RAW_ARGUMENTS_LIMIT}")
        return {}, _cut(raw), None
    if type(value) is dict or isinstance(value, Mapping):
        try:  # clean_json copies a dict (and leaves it as it was)
            cleaned, found = clean_json(value if type(value) is dict else dict(value))
        except JSONProblem as problem:
            error = f"{problem} (the arguments were not used)"
            notes.append(f"{where}: {problem}; kept as text")
            return {}, _cut(clean_text(_as_text(value))[0]), error
        except RecursionError:
            error = "$: nested too deeply to read (the arguments were not used)"
            notes.append(f"{where}: nested too deeply to read; kept as text")
            return {}, "(too deeply nested to show)", error
        for note in found:  # mostly none: a loop makes no generator for them
            notes.append(f"{where}{note[1:]}")
        return cleaned, None, None
    notes.append(f"{where}: a {_type(value)}, not a JSON object; kept as text")
    return {}, _cut(clean_text(_as_text(value))[0]), f"a {_type(value)} is not a JSON object"


def _note_fixed(notes: list[str], where: str, count: int) -> None:
    if count:
        notes.append(f"{where}: {count} lone surrogate(s) replaced by U+FFFD")


def _clean(text: str, where: str, notes: list[str]) -> str:
    """``text`` with its lone surrogates replaced, noted under ``where``."""
    cleaned, count = clean_text(text)
    _note_fixed(notes, where, count)
    return cleaned


def _field(response: Any, name: str, notes: list[str]) -> str | None:
    value = getattr(response, name)
    if value is None:
        return None
    if type(value) is str and value.isascii():  # nothing to clean
        return value
    if not isinstance(value, str):
        raise invalid_answer(f"its {name} is a {_type(value)}, not a str or None")
    return _clean(value, name, notes)


def _usage(value: object, notes: list[str]) -> TokenUsage | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise invalid_answer(f"its usage is a {_type(value)}, not a dict or None")
    if not value:
        return None
    try:
        cleaned, found = clean_json(dict(value), "usage")
        usage = records.from_python(TokenUsage, cleaned)
    except JSONProblem as problem:
        raise invalid_answer(str(problem)) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise invalid_answer(f"usage.{where}: {first['msg']}") from None
    notes.extend(found)
    return usage


def _calls(
    value: object, taken_ids: Callable[[], Container[str]], notes: list[str]
) -> list[ToolCallRequest]:
    if not isinstance(value, tuple | list):
        raise invalid_answer(f"its tool_calls is a {_type(value)}, not a tuple")
    if not value:
        return []
    taken = taken_ids()  # read-only: the context's ids
    fresh: set[str] = set()  # this answer's
    calls = []
    for i, c in enumerate(value):
        where = f"tool_calls[{i}]"
        if not isinstance(c, ToolCallData):
            raise invalid_answer(f"{where} is a {_type(c)}, not a ToolCallData")
        name = c.name
        if type(name) is not str or not name.isascii():  # else nothing to clean
            if not isinstance(name, str):
                raise invalid_answer(f"{where}.name is a {_type(name)}, not a str")
            name = _clean(name, f"{where}.name", notes)
        sent = c.id
        if sent is None:
            sent = ""
        elif type(sent) is not str or not sent.isascii():
            if not isinstance(sent, str):
                raise invalid_answer(f"{where}.id is a {_type(sent)}, not a str")
            sent = _clean(sent, f"{where}.id", notes)
        base = sent or f"call_{i + 1}"
        new, k = base, 2
        while new in taken or new in fresh:
            new, k = f"{base}-{k}", k + 1
        fresh.add(new)
        provider_id = None
        if new != sent:
            provider_id = sent
            said = f"the id {sent!r} was already used" if sent else "it had no id"
            notes.append(f"{where}.id: {said}; the call is {new!r}")
        arguments, raw, error = _arguments(c.arguments, f"{where}.arguments", notes)
        call = _new(ToolCallRequest)
        call.id = new
        call.tool_name = name
        call.arguments = arguments
        call.approval_status = _PENDING
        call.decided_by = call.reason = None
        call.outcome_unknown = False
        call.raw_arguments = raw
        call.arguments_error = error
        call.provider_id = provider_id
        calls.append(call)
    return calls


def _reasoning(value: object, notes: list[str]) -> list[ReasoningItem] | None:
    if not isinstance(value, tuple | list):
        raise invalid_answer(f"its reasoning is a {_type(value)}, not a tuple")
    out = []
    for i, item in enumerate(value):
        where = f"reasoning[{i}]"
        if not isinstance(item, ReasoningData):
            raise invalid_answer(f"{where} is a {_type(item)}, not a ReasoningData")
        texts = [item.id, item.provider, *item.summary]
        if item.encrypted_content is not None:
            texts.append(item.encrypted_content)
        if not all(isinstance(t, str) for t in texts):
            raise invalid_answer(f"{where} holds a value that is not a str")
        position = item.position
        if type(position) is not int or position < 0:
            raise invalid_answer(f"{where}.position is {position!r}, not an int >= 0")
        out.append(
            ReasoningItem(
                id=_clean(item.id, f"{where}.id", notes),
                summary=[_clean(t, f"{where}.summary", notes) for t in item.summary],
                encrypted_content=item.encrypted_content,
                provider=item.provider,
                data=_opaque(item.data, f"{where}.data"),
                position=position,
            )
        )
    return out or None


def _opaque(value: object, where: str) -> dict[str, Any] | None:
    """A reasoning item's opaque data: a JSON object the store can keep as it
    is (it goes back to the provider unchanged, so nothing in it is converted:
    data that would need a conversion is an invalid answer)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid_answer(f"{where} is a {_type(value)}, not a dict or None")
    try:
        cleaned, found = clean_json(value, where)
    except JSONProblem as problem:
        raise invalid_answer(str(problem)) from None
    if found:
        raise invalid_answer(f"{where} cannot be kept unchanged: {found[0]}")
    return cleaned  # type: ignore[no-any-return]


def _logprobs(value: object, notes: list[str]) -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise invalid_answer(f"its logprobs is a {_type(value)}, not a list or None")
    try:
        cleaned, found = clean_json(value, "logprobs")
    except JSONProblem as problem:
        notes.append(f"{problem}; the logprobs were not kept")
        return None
    notes.extend(found)
    return cleaned  # type: ignore[no-any-return]


def build_answer(
    response: object,
    *,
    taken_ids: Callable[[], Container[str]],
    streamed_thinking: str | None,
    thinking_fixed: int,
    created_at: datetime,
    model: str,
    attempt: int,
    iteration: int,
    answer_type: MessageType = MessageType.TEXT,
) -> tuple[InternalMessage, list[ToolCallRequest]]:
    """The assistant message for an adapter's final chunk, or an invalid_answer failure.

    ``taken_ids`` gives the call ids already used in the context (asked only
    when the answer has tool calls); ``streamed_thinking`` is the thinking
    deltas' text (already cleaned, ``thinking_fixed`` replacements) used when
    the response has none. An answer with tool calls is a ``ToolCall``
    message, any other has ``answer_type`` (the context's mode's).
    """
    if not isinstance(response, LLMResponse):
        raise invalid_answer(f"it is a {_type(response)}, not an LLMResponse")
    notes: list[str] = []
    text = response.text
    if type(text) is not str or not text.isascii():  # else nothing to clean
        if not isinstance(text, str):
            raise invalid_answer(f"its text is a {_type(text)}, not a str")
        text = _clean(text, "text", notes)
    # the optional text fields: most answers have few of them, and an ASCII
    # str needs no cleaning, so only the others go through _field
    thinking = response.thinking
    if thinking is not None and (type(thinking) is not str or not thinking.isascii()):
        thinking = _field(response, "thinking", notes)
    if thinking is None and streamed_thinking is not None:
        thinking = streamed_thinking
        _note_fixed(notes, "thinking", thinking_fixed)
    finish_reason = response.finish_reason
    if finish_reason is not None and (
        type(finish_reason) is not str or not finish_reason.isascii()
    ):
        finish_reason = _field(response, "finish_reason", notes)
    refusal = response.refusal
    if refusal is not None and (type(refusal) is not str or not refusal.isascii()):
        refusal = _field(response, "refusal", notes)
    incomplete_reason = response.incomplete_reason
    if incomplete_reason is not None:
        incomplete_reason = _field(response, "incomplete_reason", notes)
    provider_reason = response.provider_reason
    if provider_reason is not None:
        provider_reason = _field(response, "provider_reason", notes)
    phase = response.phase
    if phase is not None:
        phase = _field(response, "phase", notes)
    given = response.reasoning
    reasoning = None if type(given) is tuple and not given else _reasoning(given, notes)
    logprobs = response.logprobs
    if logprobs is not None:
        logprobs = _logprobs(logprobs, notes)
    model_name = response.model
    if model_name is not None:
        model_name = _field(response, "model", notes)
    usage = None if response.usage is None else _usage(response.usage, notes)
    asked = response.tool_calls
    calls = [] if type(asked) is tuple and not asked else _calls(asked, taken_ids, notes)
    # both records written slot by slot, every field (see _new):
    # tests/engine/test_answer_records.py holds them to the classes' own
    metadata = _new(MessageMetadata)
    metadata.created_at = created_at
    metadata.model = model_name or model
    metadata.usage = usage
    metadata.attempt = attempt
    metadata.iteration = iteration
    metadata.finish_reason = finish_reason
    metadata.cancelled = False
    metadata._extra = {"conversions": notes} if notes else None  # type: ignore[misc]  # the slot behind ``extra``
    metadata.incomplete_reason = incomplete_reason
    metadata.logprobs = logprobs
    metadata.provider_reason = provider_reason
    message = _new(InternalMessage)
    message.role = _ASSISTANT
    message.content = [text_part(text)] if text else NO_CONTENT  # a tool call's answer: none
    message.tool_calls = calls or None
    message.tool_result = None
    message.message_type = _TOOL_CALL if calls else answer_type
    message.metadata = metadata
    message.thinking = thinking
    message.refusal = refusal
    message.reasoning = reasoning
    message.phase = phase
    return message, calls


def conclude(
    response: object,
    failure: LLMError | None,
    partial: list[str],
    *,
    taken_ids: Callable[[], Container[str]],
    streamed_thinking: str | None,
    thinking_fixed: int,
    created_at: datetime,
    request: LLMRequest,
    attempt: int,
    iteration: int,
    answer_type: MessageType,
    offered: Callable[[], ToolRegistry],
) -> tuple[InternalMessage, list[ToolCallRequest]] | LLMError:
    """What one attempt amounts to, once its stream was read: the answer message
    and its calls, or the failure to take (with the text that arrived as its
    ``partial_text``).

    ``response`` is the stream's final chunk (None: the stream ended without
    one), ``failure`` what ended the stream early, ``partial`` the text deltas.
    The message is built by :func:`build_answer` (``request``'s model, the
    progress's ``attempt`` and ``iteration``); what the enhancers did to the
    view (``request.metadata``) is kept in its ``metadata.extra["view"]``, and
    an answer whose calls only ask questions of ``offered()`` is a ``Question``.
    """
    message: InternalMessage | None = None
    calls: list[ToolCallRequest] = []
    if failure is None and response is None:
        failure = invalid_answer("the stream ended without a response", "".join(partial))
    if failure is None:
        try:
            message, calls = build_answer(
                response,
                taken_ids=taken_ids,
                streamed_thinking=streamed_thinking,
                thinking_fixed=thinking_fixed,
                created_at=created_at,
                model=request.model,
                attempt=attempt,
                iteration=iteration,
                answer_type=answer_type,
            )
        except LLMError as exc:
            failure = exc
        except Exception as exc:  # an answer object whose attributes raise
            failure = invalid_answer(f"reading it raised {type(exc).__name__}: {exc}")
    if failure is not None or message is None:
        if failure is None:  # pragma: no cover - build_answer returns a message
            failure = invalid_answer("no message")
        if not failure.partial_text and partial:
            failure.partial_text = "".join(partial)
        return failure
    if request.metadata:
        # what the enhancers did to the view, kept with the answer for audits
        # (and for the token budget's calibration)
        meta = message.metadata
        extra = {**meta.extra, "view": request.metadata}
        message = dataclasses.replace(message, metadata=dataclasses.replace(meta, extra=extra))
    if calls:
        # type Question when it only asks (questions the context's mode offers)
        message = as_question(message, offered())
    return message, calls
