"""OpenAI-compatible endpoints: ``POST /v1/chat/completions`` and ``GET /v1/models``.

An OpenAI client pointed at ``{server}/v1`` talks to a turnfsm agent (see the
section "OpenAI-compatible endpoints" of ``docs/server.md``). A request without
the ``x-turnfsm-context-id`` header makes a new context of the caller's tenant:
every message but the last is imported (the OpenAI messages importer), and the
last one, a ``user`` message, is sent. With the header, the named context (of
the same tenant) is continued: the earlier messages are matched, by content
and position, against what the context holds (what it does not hold yet is
appended, a disagreement is a ``409 history_conflict`` with nothing stored),
and the last message is sent. The server's tools run server-side under their
approval policies; a turn that stops for a human ends the completion with a
note naming the pending calls, and the context is resumed through ``/api``.
The request's ``tools`` are the client's: a call of one is answered as
``tool_calls``, and the next request, ending with the ``tool`` messages, gives
their results (``_openai_tools``). Every answer carries the context id in the
``x-turnfsm-context-id`` header (and in the ``turnfsm`` field of the body), and
``usage``: the tokens the model reported for the turn's LLM calls, summed. The
request's ``user`` becomes the context's model parameter ``user``.
"""

import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ..adapters.inbound import InboundMessage, said_by
from ..engine import Turn
from ..engine._output import TypedOutput
from ..errors import InvalidInput
from ..events import ContentDelta
from ..model import TokenUsage
from ..states import State
from ._calls import create_context
from ._deps import HubOf, Tenant
from ._errors import ApiError
from ._hub import Hub, Job, next_batch
from ._json_body import DocumentRoute
from ._openai_output import output_of
from ._openai_tools import (
    Continuation,
    client_tools_of,
    continuation,
    find_waiting,
    handed_out,
    tool_call_deltas,
    tool_calls_out,
)
from ._sse import json_frame, sse_frame

__all__ = ["CONTEXT_HEADER", "MODEL_ID", "router"]

CONTEXT_HEADER = "x-turnfsm-context-id"
"""The header naming the context a completion made or continued."""
MODEL_ID = "turnfsm"
"""The one model ``/v1/models`` lists: the server's agent, whatever its LLM."""
MAX_USER_LENGTH = 256
"""Characters the request's ``user`` may have."""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False
    """Send the turn's ``usage`` in one more chunk (with no choices) before ``[DONE]``."""


class ChatCompletionIn(BaseModel):
    """The fields of an OpenAI Chat Completions request this server reads; the
    others (``temperature``, ...) are accepted and ignored: the context's own
    configuration applies. ``tools`` are tools the client runs, beside the
    server's (checked by ``_openai_tools.client_tools_of``)."""

    model_config = ConfigDict(extra="allow")

    model: str = MODEL_ID
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, min_length=1, max_length=MAX_USER_LENGTH)
    """The end user's id: kept as the context's model parameter ``user`` (see
    ``docs/server.md``)."""
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: Any = None
    response_format: Any = None
    """``json_schema`` or ``json_object``: the answer's type (checked by
    ``_openai_output.output_of``); ``text`` or none: any text."""


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    last = messages[-1]
    where = f"messages[{len(messages) - 1}]"
    if last.get("role") != "user":
        raise InvalidInput(f"{where}.role", "the last message must be a 'user' message")
    content = last.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts: list[str] = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise InvalidInput(
                    f"{where}.content[{i}]", "only text parts can be sent in the last message"
                )
            texts.append(str(part.get("text", "")))
        text = "".join(texts)
    else:
        raise InvalidInput(f"{where}.content", "must be a string or a list of text parts")
    if not text.strip():
        raise InvalidInput(f"{where}.content", "must not be empty")
    return text


def _note(turn: Turn) -> str:
    """The text that ends a completion whose turn waits for a human ("" if none)."""
    if not turn.pending_tool_calls:
        return ""
    calls = ", ".join(f"{c.tool_name} (id {c.id})" for c in turn.pending_tool_calls)
    cid = turn.context_id
    if turn.questions:
        how = f"answer with POST /api/contexts/{cid}/tools/answer"
    else:
        how = f"approve or deny with POST /api/contexts/{cid}/tools/approve"
    return f"\n\n[turnfsm: waiting for a human on {calls}; {how}]"


def _content(turn: Turn, typed: TypedOutput | None) -> str:
    """The completion's text: with a ``response_format`` that asked for a type,
    the validated answer as JSON (not the model's text, which may have had a
    code fence around it), else the answer and the note of what waits."""
    if typed is not None and turn.output is not None:
        return json.dumps(turn.output, ensure_ascii=False)
    return turn.text + _note(turn)


def _extra(turn: Turn) -> dict[str, Any]:
    extra = {
        "context_id": turn.context_id,
        "state": str(turn.state),
        "pending_tool_calls": [
            {"id": c.id, "tool_name": c.tool_name, "arguments": c.arguments}
            for c in turn.pending_tool_calls
        ],
    }
    if turn.client_tool_calls:
        extra["client_tool_calls"] = [
            {"id": c.id, "tool_name": c.tool_name, "arguments": c.arguments}
            for c in turn.client_tool_calls
        ]
    return extra


def _usage(turn: Turn) -> dict[str, int] | None:
    """The tokens the model reported for the turn's LLM calls, summed (``None``
    when it reported none). A call that reported no total counts prompt plus
    completion."""
    reported: list[TokenUsage] = [
        m.metadata.usage for m in turn.messages if m.metadata.usage is not None
    ]
    if not reported:
        return None
    prompt = sum(u.prompt_tokens for u in reported)
    completion = sum(u.completion_tokens for u in reported)
    total = sum(u.total_tokens or u.prompt_tokens + u.completion_tokens for u in reported)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def _failed(turn: Turn) -> ApiError | None:
    if turn.state is State.PERMANENT_FAILURE or turn.error is not None:
        return ApiError(502, "turn_failed", turn.error or "the turn failed")
    return None


router = APIRouter(prefix="/v1", tags=["openai"], route_class=DocumentRoute)


@router.get("/models")
async def models(who: Tenant) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "turnfsm"}],
    }


async def _keep_user(hub: Hub, cid: str, user: str) -> None:
    """The request's ``user`` as the context's model parameter (a
    ``config_updated`` record in the audit when it changes)."""
    params = (await hub.engine.get_context(cid)).config.parameters
    if params.get("user") != user:
        await hub.engine.update_config(cid, parameters={**params, "user": user})


def _resent(earlier: list[dict[str, Any]]) -> list[InboundMessage]:
    """The earlier messages of a request that continues a context, as the
    engine matches a resent history: read as the importer reads them (a first
    plain ``system`` message is the system prompt, not history), then what a
    body carries of them (no tool messages, no calls without text)."""
    if not earlier:
        return []
    from ..adapters.inbound.importers import import_openai_messages  # a first message needs none

    return said_by(import_openai_messages(earlier).history())


async def _context_for(
    hub: Hub, body: ChatCompletionIn, who: str, given: str | None
) -> tuple[str, str, list[InboundMessage]]:
    text = _last_user_text(body.messages)
    if given is not None:
        resent = _resent(body.messages[:-1])  # a malformed list is refused here
        await hub.check(given, who)
        if body.user is not None:
            async with hub.reserve(who):  # 429 before the config changes
                await _keep_user(hub, given, body.user)
        return given, text, resent
    earlier = body.messages[:-1]
    params = {"user": body.user} if body.user is not None else None
    # over the tenant's turn limit: 429 before a context is made
    async with hub.reserve(who):
        if earlier:
            from ..adapters.inbound.importers import import_openai_messages

            # ids from the engine's factory, as a context made here gets them
            ctx = import_openai_messages(earlier, ids=hub.engine.new_id)
            # the server's model, as a context made here gets it
            ctx.config = dataclasses.replace(
                ctx.config,
                model_id=hub.config.model,
                parameters=params if params is not None else ctx.config.parameters,
            )
            await hub.engine.store.create(ctx)
            cid = ctx.id
            await hub.adopt(cid, who)
        else:
            cid = await create_context(hub, who, parameters=params)
    return cid, text, []


async def _continued(
    hub: Hub, body: ChatCompletionIn, who: str, given: str | None, cont: Continuation
) -> tuple[str, list[InboundMessage]]:
    """The context a request with tool results continues (named by the header,
    else found by its calls and history), and its resent history."""
    resent = _resent(cont.earlier)  # a malformed list is refused here
    if given is not None:
        await hub.check(given, who)
        cid = given
    else:
        cid = await find_waiting(hub, who, cont, resent)
    if body.user is not None:
        async with hub.reserve(who):  # 429 before the config changes
            await _keep_user(hub, cid, body.user)
    return cid, resent


def _completion(
    turn: Turn, typed: TypedOutput | None, completion_id: str, created: int, model: str
) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` body for a finished turn, or the
    turn's failure raised."""
    failed = _failed(turn)
    if failed is not None:
        raise failed
    message: dict[str, Any] = {"role": "assistant", "content": _content(turn, typed)}
    finish = "stop"
    if handed_out(turn):
        message = {
            "role": "assistant",
            "content": turn.text or None,
            "tool_calls": tool_calls_out(turn),
        }
        finish = "tool_calls"
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": _usage(turn),
        "turnfsm": _extra(turn),
    }


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    hub: HubOf,
    body: ChatCompletionIn,
    who: Tenant,
    context_id: Annotated[str | None, Header(alias=CONTEXT_HEADER)] = None,
) -> Any:
    client = client_tools_of(hub, body.tools, body.tool_choice, body.parallel_tool_calls)
    typed = output_of(body.response_format)  # a 422 before anything is stored
    typing: dict[str, Any] = {} if typed is None else {"output_type": typed}
    cont = continuation(body.messages) if client is not None else None
    engine = hub.engine
    if cont is None:
        cid, text, resent = await _context_for(hub, body, who, context_id)

        def send() -> Awaitable[Turn]:
            return engine.send(cid, text, context=resent, client_tools=client, **typing)
    else:
        cid, resent = await _continued(hub, body, who, context_id, cont)
        results = cont.results

        def send() -> Awaitable[Turn]:
            return engine.submit_results(cid, results, context=resent, client_tools=client)

    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    headers = {CONTEXT_HEADER: cid}

    if not body.stream:
        job = await hub.launch(cid, send, wait=True)
        assert job.turn is not None
        completion = _completion(job.turn, typed, completion_id, created, body.model)
        return JSONResponse(completion, headers=headers)

    sub = engine.subscribe(cid)
    try:
        job = await hub.launch(cid, send, wait=False)
    except BaseException:
        await sub.aclose()
        raise

    include_usage = body.stream_options is not None and body.stream_options.include_usage

    def chunk(delta: dict[str, Any] | None, finish: str | None = None, **more: Any) -> bytes:
        data: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": body.model,
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if include_usage:  # as OpenAI does: null on every chunk but the usage one
            data["usage"] = None
        data.update(more)
        return json_frame(data)

    async def events(job: Job) -> AsyncIterator[bytes]:
        streamed = False
        try:
            yield chunk({"role": "assistant", "content": ""})
            while True:
                batch, _ = await next_batch(sub, job)
                for ev in batch:
                    if typed is not None:  # the validated answer comes whole, at the end
                        continue
                    if isinstance(ev, ContentDelta) and ev.channel == "text" and ev.delta:
                        streamed = True
                        yield chunk({"content": ev.delta})
                if job.done.is_set() and not batch:
                    break
        finally:
            await sub.aclose()
        turn = job.turn
        if turn is None or _failed(turn) is not None:
            reason = (turn.error if turn else None) or str(job.error or "the turn failed")
            error = {"message": reason, "type": "turn_failed", "code": "turn_failed"}
            yield json_frame({"error": error})
            return
        tail = _content(turn, typed) if not streamed else _note(turn)
        if tail:
            yield chunk({"content": tail})
        finish = "stop"
        if handed_out(turn):
            for delta in tool_call_deltas(tool_calls_out(turn)):
                yield chunk(delta)
            finish = "tool_calls"
        yield chunk({}, finish, turnfsm=_extra(turn))
        if include_usage:
            yield chunk(None, usage=_usage(turn))
        yield sse_frame(b"[DONE]")

    return StreamingResponse(events(job), media_type="text/event-stream", headers=headers)
