"""OpenTelemetry spans of engine calls, after the GenAI semantic conventions
(docs/observability.md says which version and what each span carries).

The engine uses ``opentelemetry-api`` only, and only once the process has
imported it: :func:`tracer_of` looks for ``opentelemetry.trace`` among the
loaded modules and asks it for the tracer provider; while none is set (the
API's proxy) a call is not traced at all, so an engine with no SDK costs
what it did. An engine made with ``tracer_provider=`` uses that provider
instead of the global one.

One span per engine call (``turnfsm.send``, ``turnfsm.approve``, ...), a
child per LLM attempt (``chat {model}``) and per tool call
(``execute_tool {name}``), and each transition of the table as an event of
the call's span, named by its edge (``Idle → ProcessingUserMessage``).
Beside the GenAI attributes, each span carries the OpenInference ones
(:mod:`turnfsm.engine._observing._openinference`) that Arize Phoenix reads. Message
content (each attempt's own request messages, its answer, tool arguments and
results, the turn's input and output) is recorded only under the standard
opt-in, ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from ...model import LLMRequest, MessageNode, Role, ToolCallRequest, to_chat_messages
from ...states import State
from ...tools import ToolOutcome
from .._host import Host
from .._runtime import Runtime
from .._turn import StopReason, Turn
from . import _openinference as oi
from ._hooks import Watch

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "TRACE_CONTEXT_KEY",
    "CallSpan",
    "Tracing",
    "maybe",
    "provider_name",
    "tracer_of",
]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The standard opt-in to message content on GenAI spans."""
_CAPTURE_VALUES = frozenset({"true", "1", "span_only", "span_and_event"})

TRACE_CONTEXT_KEY = "trace_context"
"""The key of a submitted message's ``metadata.extra`` that holds the
submitter's W3C trace context (``{"traceparent": ..., "tracestate": ...}``),
for the worker that runs its turn."""

_INPUT_ROLES = frozenset({Role.USER.value, Role.FRONTEND_OPERATOR.value})
_REQUEST_PARAMETERS = (
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("max_completion_tokens", "gen_ai.request.max_tokens"),
    ("max_output_tokens", "gen_ai.request.max_tokens"),
    ("frequency_penalty", "gen_ai.request.frequency_penalty"),
    ("presence_penalty", "gen_ai.request.presence_penalty"),
    ("seed", "gen_ai.request.seed"),
)
_PROVIDERS = {
    "turnfsm.adapters.llm.openai": "openai",
    "turnfsm.adapters.llm.scripted": "turnfsm.scripted",
    "turnfsm.adapters.llm.demo": "turnfsm.demo",
}


class Tracing:
    """An engine's tracing setting: its own tracer provider (None: the
    process's global one), whether message content is recorded, and the
    tracer last made (kept while the provider stays the same)."""

    __slots__ = ("capture_content", "last_provider", "last_tracer", "provider")

    def __init__(self, provider: Any = None, capture_content: bool | None = None) -> None:
        self.provider = provider
        if capture_content is None:
            capture_content = os.environ.get(CAPTURE_CONTENT_ENV, "").lower() in _CAPTURE_VALUES
        self.capture_content = capture_content
        self.last_provider: Any = None
        self.last_tracer: Any = None


def maybe(t: Tracing) -> bool:
    """Whether a call may be traced: a provider was given, or the process
    imported opentelemetry (else no provider can be set, and nothing is
    looked up)."""
    return t.provider is not None or "opentelemetry.trace" in sys.modules


def tracer_of(t: Tracing) -> Any:
    """The tracer a call starting now traces with, or None: no provider is
    set, or opentelemetry was never imported (then no SDK can be set)."""
    provider = t.provider
    if provider is None:
        loaded = sys.modules.get("opentelemetry.trace")
        if loaded is None:
            return None
        provider = loaded.get_tracer_provider()
    if provider is t.last_provider:
        return t.last_tracer
    from opentelemetry import trace

    t.last_provider = provider
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        t.last_tracer = None
    else:
        t.last_tracer = provider.get_tracer("turnfsm")
    return t.last_tracer


def provider_name(llm: object) -> str:
    """``gen_ai.provider.name`` for an LLM adapter: its ``gen_ai_provider_name``
    when it has one, else by its module (``openai`` for the OpenAI adapters)."""
    named = getattr(llm, "gen_ai_provider_name", None)
    if isinstance(named, str):
        return named
    return _PROVIDERS.get(type(llm).__module__, "_OTHER")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat-format message's content as the conventions' parts."""
    parts: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, str):
        if content:
            parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append({"type": "text", "content": part.get("text", "")})
            elif isinstance(part, dict):
                parts.append({"type": str(part.get("type", "other"))})
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {})
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": fn.get("name"),
                "arguments": fn.get("arguments"),
            }
        )
    if message.get("role") == "tool":
        parts = [
            {"type": "tool_call_response", "id": message.get("tool_call_id"), "result": content}
        ]
    return parts


def _input_messages(messages: list[dict[str, Any]]) -> tuple[str, str | None]:
    system = [p for m in messages if m.get("role") == "system" for p in _parts(m)]
    chat = [
        {"role": m.get("role"), "parts": _parts(m)} for m in messages if m.get("role") != "system"
    ]
    return _json(chat), _json(system) if system else None


class CallSpan(Watch):
    """The spans of one engine call (a :class:`~turnfsm.engine._observing._hooks.Watch`)."""

    __slots__ = (
        "call",
        "context_id",
        "host",
        "llm_span",
        "llm_token",
        "provider",
        "ran_loop",
        "span",
        "start_ns",
        "token",
        "tracer",
        "tracing",
    )

    def __init__(
        self,
        tracer: Any,
        context_id: str,
        call: str,
        tracing: Tracing,
        provider: str,
        host: Host | None = None,
    ) -> None:
        self.tracer = tracer
        self.host = host
        self.ran_loop = False
        self.provider = provider
        self.context_id = context_id
        self.call = call
        self.tracing = tracing
        self.start_ns = time.time_ns()
        self.span: Any = None
        self.token: Any = None
        self.llm_span: Any = None
        self.llm_token: Any = None

    # -------------------------------------------------------------- the call

    def _start(self, parent: Any) -> Any:
        from opentelemetry import context, trace

        self.span = span = self.tracer.start_span(
            f"turnfsm.{self.call}",
            context=parent,
            kind=trace.SpanKind.INTERNAL,
            start_time=self.start_ns,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "turnfsm",
                "gen_ai.conversation.id": self.context_id,
                "turnfsm.call": self.call,
                oi.SPAN_KIND: oi.CHAIN,
                oi.AGENT_NAME: "turnfsm",
                oi.SESSION_ID: self.context_id,
            },
        )
        self.token = context.attach(trace.set_span_in_context(span, parent))
        return span

    def entered(self, rt: Runtime) -> None:
        if self.span is not None:  # the call runs again on a fresh copy
            return
        parent = None
        if self.call in ("claim", "resume"):
            from opentelemetry import trace

            if not trace.get_current_span().get_span_context().is_valid:
                parent = _submitted_context(rt)
        span = self._start(parent)
        span.set_attribute("turnfsm.state.before", str(rt.holder.state))

    def handing_off(self, rt: Runtime) -> None:
        """``submit``: the new user message carries this span's context to the
        worker that claims its turn."""
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        if self.span is None or not rt.appended:
            return
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        node = rt.appended[-1][1]
        if carrier.get("traceparent") and node.message.role.value in _INPUT_ROLES:
            node.message.metadata.extra[TRACE_CONTEXT_KEY] = carrier

    def transition(self, rt: Runtime, source: str, trigger: str, dest: str) -> None:
        if self.span is not None:
            self.span.add_event(
                f"{source} → {dest}",
                {
                    "turnfsm.trigger": str(trigger),
                    "turnfsm.from_state": str(source),
                    "turnfsm.to_state": str(dest),
                },
            )

    def ended(self, context_id: str, turn: Turn | None, error: BaseException | None) -> None:
        from opentelemetry import context, trace

        if self.span is None:  # refused before the context was loaded
            self._start(None)
        span = self.span
        if self.ran_loop:  # it called the model or ran a tool
            span.set_attribute(oi.SPAN_KIND, oi.AGENT)
        if turn is not None:
            if self.tracing.capture_content:
                span.set_attributes(_turn_values(turn))
            span.set_attribute("turnfsm.state", turn.state.value)
            if turn.stop_reason is not None:
                span.set_attribute("turnfsm.stop_reason", turn.stop_reason.value)
            if turn.stop_reason is StopReason.FAILED or turn.state is State.PERMANENT_FAILURE:
                span.set_attribute("error.type", "turn_failed")
                span.set_status(trace.Status(trace.StatusCode.ERROR, turn.error or "failed"))
        if error is not None:
            span.set_attribute("error.type", type(error).__qualname__)
            span.record_exception(error)
            span.set_status(
                trace.Status(trace.StatusCode.ERROR, str(error) or type(error).__name__)
            )
        span.end()
        if self.token is not None:
            context.detach(self.token)
            self.token = None

    # -------------------------------------------------------------- LLM calls

    def llm_started(self, rt: Runtime) -> None:
        from opentelemetry import context, trace

        ctx = rt.ctx
        model = ctx.config.model_id
        progress = ctx.progress
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": model,
            "gen_ai.conversation.id": ctx.id,
            "turnfsm.attempt": progress.attempt,
            "turnfsm.iteration": progress.iteration,
            oi.SPAN_KIND: oi.LLM,
            oi.LLM_MODEL_NAME: model,
            oi.LLM_PROVIDER: self.provider,
            oi.LLM_SYSTEM: self.provider,
            oi.SESSION_ID: ctx.id,
        }
        params = ctx.config.parameters
        invocation: dict[str, Any] = {}
        for key, name in _REQUEST_PARAMETERS:
            value = params.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attrs[name] = value
                invocation[key] = value
        stop = params.get("stop")
        if isinstance(stop, str):
            attrs["gen_ai.request.stop_sequences"] = [stop]
            invocation["stop"] = stop
        elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
            attrs["gen_ai.request.stop_sequences"] = stop
            invocation["stop"] = stop
        attrs[oi.LLM_INVOCATION_PARAMETERS] = _json(invocation)
        self.ran_loop = True
        self.llm_span = span = self.tracer.start_span(
            f"chat {model}", kind=trace.SpanKind.CLIENT, attributes=attrs
        )
        self.llm_token = context.attach(trace.set_span_in_context(span))

    def llm_request(self, rt: Runtime, request: LLMRequest) -> None:
        """The attempt's own request, as sent: its messages on its span."""
        span = self.llm_span
        if span is None or not self.tracing.capture_content:
            return
        messages, system = _input_messages(request.messages)
        attrs: dict[str, Any] = {
            "gen_ai.input.messages": messages,
            oi.INPUT_VALUE: _json(request.messages),
            oi.INPUT_MIME_TYPE: oi.JSON_MIME,
        }
        if system is not None:
            attrs["gen_ai.system_instructions"] = system
        attrs.update(oi.messages_attributes(oi.LLM_INPUT_MESSAGES, request.messages))
        span.set_attributes(attrs)

    def llm_ended(
        self, rt: Runtime, answer: MessageNode | None, error: BaseException | None
    ) -> None:
        from opentelemetry import context, trace

        span = self.llm_span
        if span is None:
            return
        self.llm_span = None
        context.detach(self.llm_token)
        if answer is not None:
            md = answer.message.metadata
            if md.model:
                span.set_attribute("gen_ai.response.model", md.model)
                span.set_attribute(oi.LLM_MODEL_NAME, md.model)
            usage = md.usage
            if usage is not None:
                prompt, completion = usage.prompt_tokens, usage.completion_tokens
                span.set_attributes(
                    {
                        "gen_ai.usage.input_tokens": prompt,
                        "gen_ai.usage.output_tokens": completion,
                        oi.LLM_TOKEN_COUNT_PROMPT: prompt,
                        oi.LLM_TOKEN_COUNT_COMPLETION: completion,
                        oi.LLM_TOKEN_COUNT_TOTAL: usage.total_tokens or prompt + completion,
                    }
                )
            if md.finish_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [md.finish_reason])
            response_id = md.extra.get("response_id")
            if isinstance(response_id, str):
                span.set_attribute("gen_ai.response.id", response_id)
            if self.tracing.capture_content:
                chat = to_chat_messages([answer.message])
                out = [
                    {"role": m.get("role"), "parts": _parts(m), "finish_reason": md.finish_reason}
                    for m in chat
                ]
                span.set_attribute("gen_ai.output.messages", _json(out))
                span.set_attributes(_output_value(chat))
                span.set_attributes(oi.messages_attributes(oi.LLM_OUTPUT_MESSAGES, chat))
        elif error is not None:
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(error) or "interrupted"))
        else:
            state = str(rt.holder.state)
            kind = (
                "llm_failed_transient"
                if state == State.TRANSIENT_FAILURE
                else "llm_failed_permanent"
            )
            span.set_attribute("error.type", kind)
            span.set_status(
                trace.Status(trace.StatusCode.ERROR, rt.ctx.progress.last_error or kind)
            )
        span.end()

    # -------------------------------------------------------------- tools

    def tool_started(self, rt: Runtime, call: ToolCallRequest) -> Any:
        from opentelemetry import context, trace

        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.tool_name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": rt.ctx.id,
            oi.SPAN_KIND: oi.TOOL,
            oi.TOOL_NAME: call.tool_name,
            oi.SESSION_ID: rt.ctx.id,
        }
        known = self.host.settings.tools.get(call.tool_name) if self.host is not None else None
        if known is not None:
            attrs[oi.TOOL_DESCRIPTION] = known.description
            attrs[oi.TOOL_PARAMETERS] = _json(known.parameters)
        if self.tracing.capture_content:
            arguments = _json(call.arguments)
            attrs["gen_ai.tool.call.arguments"] = arguments
            attrs[oi.INPUT_VALUE] = arguments
            attrs[oi.INPUT_MIME_TYPE] = oi.JSON_MIME
        self.ran_loop = True
        span = self.tracer.start_span(
            f"execute_tool {call.tool_name}", kind=trace.SpanKind.INTERNAL, attributes=attrs
        )
        return span, context.attach(trace.set_span_in_context(span))

    def tool_ended(
        self,
        rt: Runtime,
        call: ToolCallRequest,
        started: Any,
        outcome: ToolOutcome | None,
        error: BaseException | None,
    ) -> None:
        from opentelemetry import context, trace

        if started is None:
            return
        span, token = started
        context.detach(token)
        if outcome is not None:
            if self.tracing.capture_content:
                result = _json(outcome.result)
                span.set_attributes(
                    {
                        "gen_ai.tool.call.result": result,
                        oi.OUTPUT_VALUE: result,
                        oi.OUTPUT_MIME_TYPE: oi.JSON_MIME,
                    }
                )
            if not outcome.success:
                result = outcome.result
                status = result.get("status") if isinstance(result, dict) else None
                span.set_attribute(
                    "error.type", status if isinstance(status, str) else "tool_error"
                )
                span.set_status(trace.Status(trace.StatusCode.ERROR, _error_text(result)))
        elif error is not None:
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(error) or "interrupted"))
        span.end()


def _output_value(chat: list[dict[str, Any]]) -> dict[str, Any]:
    """``output.value`` of a chat span: the answer's text, or the whole answer
    as JSON when it asks for tool calls (or has no text)."""
    if len(chat) == 1 and not chat[0].get("tool_calls"):
        text = oi.content_text(chat[0].get("content"))
        if text is not None:
            return {oi.OUTPUT_VALUE: text, oi.OUTPUT_MIME_TYPE: oi.TEXT_MIME}
    return {oi.OUTPUT_VALUE: _json(chat), oi.OUTPUT_MIME_TYPE: oi.JSON_MIME}


def _turn_values(turn: Turn) -> dict[str, Any]:
    """``input.value`` and ``output.value`` of a call's span: the text of the
    user messages the call added, and of its last answer (each when there is
    one)."""
    attrs: dict[str, Any] = {}
    asked = [m.text for m in turn.messages if m.role.value in _INPUT_ROLES and m.text]
    if asked:
        attrs[oi.INPUT_VALUE] = "\n\n".join(asked)
        attrs[oi.INPUT_MIME_TYPE] = oi.TEXT_MIME
    answer = turn.text
    if answer:
        attrs[oi.OUTPUT_VALUE] = answer
        attrs[oi.OUTPUT_MIME_TYPE] = oi.TEXT_MIME
    return attrs


def _error_text(result: Any) -> str:
    if isinstance(result, dict) and isinstance(result.get("error"), str):
        return str(result["error"])
    return "the tool failed"


def _submitted_context(rt: Runtime) -> Any:
    """The trace context a submitted message brought (``submit``), read from
    the newest user message of the active branch; None when it has none."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    ctx = rt.ctx
    branch = ctx.branches.get(ctx.active_branch_name)
    if branch is None:
        return None
    pool = ctx.message_pool
    for mid in reversed(branch.message_ids):
        node = pool.get(mid)
        if node is None or node.message.role.value not in _INPUT_ROLES:
            continue
        carrier = node.message.metadata.extra.get(TRACE_CONTEXT_KEY)
        if isinstance(carrier, dict) and isinstance(carrier.get("traceparent"), str):
            return TraceContextTextMapPropagator().extract(
                {k: v for k, v in carrier.items() if isinstance(v, str)}
            )
        return None
    return None
