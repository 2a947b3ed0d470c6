"""Recording: a live conversation written out as a replay script.

A :class:`Recorder` wraps an LLM adapter and tools; an engine built with
``recorder.llm`` and ``recorder.tools`` runs normally while the recorder
writes down every answer (chunks, tool calls, thinking, usage, errors) and
every tool outcome, by call id. Inputs go through the recorder
(``await recorder.send(...)``, ``approve``, ``answer``, ...), which forwards them to the
engine and writes them down too. A sub-task tool (:func:`~turnfsm.tools.subtask`) is given
to the engine as it is: its child's answers and tool outcomes, and the
summary's answer, are written down where they happen, between the parent's
call and its next answer, as a script's ``subtask`` tool has them.
:meth:`Recorder.script` gives a conforming ``turnfsm-script/1`` script, with
the observed trace as its ``expect``, that replays to the same trace and
messages.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio

from ..engine import UNSET, Engine, FinalAnswer, LLMSummarizer, Mode, Turn, Unset
from ..errors import LLMError, ToolDefinitionError, TurnFSMError
from ..events import Event, MessageCompleted
from ..model import (
    ChatConfig,
    LLMChunk,
    LLMRequest,
    LLMResponse,
    TextDelta,
    ThinkingDelta,
)
from ..tools import QuestionTool, SubtaskSpec, SubtaskTool, Tool, ToolError, current_call
from ._script import FORMAT

__all__ = ["Recorder"]


class _RecordingLLM:
    def __init__(self, inner: Any, recorder: Recorder) -> None:
        self.inner = inner
        self.recorder = recorder

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        chunks: list[str] = []
        thinking: list[str] = []
        streamed = False
        done = False
        try:
            async for chunk in self.inner.stream(request):
                if isinstance(chunk, LLMResponse):
                    self.recorder._steps.append(_answer_step(chunk, chunks if streamed else None))
                    done = True
                    yield chunk
                    return
                streamed = True
                if isinstance(chunk, TextDelta):
                    chunks.append(chunk.text)
                elif isinstance(chunk, ThinkingDelta):
                    thinking.append(chunk.text)
                yield chunk
        except LLMError as exc:
            self.recorder._steps.append(_error_step(exc, chunks if streamed else None))
            raise
        except anyio.get_cancelled_exc_class():
            if not done:  # cancelled mid-stream: what arrived, then the cancel request
                self.recorder._steps.append(
                    {"llm": {"chunks": list(chunks), "cancel_after": len(chunks)}}
                )
            raise


def _answer_step(response: LLMResponse, chunks: list[str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if chunks is not None:
        body["chunks"] = list(chunks) if "".join(chunks) == response.text else [response.text]
    elif response.text or not (response.tool_calls or response.refusal is not None):
        body["text"] = response.text
    if response.refusal is not None:
        body["refusal"] = response.refusal
    if response.tool_calls:
        body["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls
        ]
    if response.thinking:
        body["thinking"] = response.thinking
    if response.usage:
        body["usage"] = response.usage
    if response.finish_reason and response.finish_reason not in ("stop", "tool_calls"):
        body["finish_reason"] = response.finish_reason
    return {"llm": body}


def _error_step(exc: LLMError, chunks: list[str] | None) -> dict[str, Any]:
    error: dict[str, Any] = {}
    if exc.status is not None:
        error["status"] = exc.status
    else:
        error["kind"] = exc.kind if exc.kind in ("timeout", "connection") else "connection"
    if exc.retry_after is not None:
        error["retry_after"] = exc.retry_after
    if exc.message:
        error["message"] = exc.message
    if chunks:
        return {"llm": {"chunks": list(chunks), "fail_after": len(chunks), "error": error}}
    return {"llm_error": error}


def _subtask_of(t: SubtaskTool) -> dict[str, Any]:
    """A sub-task tool as a script has it (``tools[].subtask``). Its summary must
    be one a replay makes the same way: the LLM's (any prompt: the answer is on
    the tape) or the child's final answer; a summary function's text would be
    made again by code the script does not hold, so it is refused here."""
    spec: SubtaskSpec = t.spec
    summarizer = spec.summarizer
    if summarizer is None or isinstance(summarizer, LLMSummarizer):
        how = "llm"
    elif isinstance(summarizer, FinalAnswer):
        how = "final_answer"
    else:
        raise ToolDefinitionError(
            f"sub-task tool {t.name!r}: its summarizer {type(summarizer).__name__} cannot be "
            "recorded (a script's sub-task summarises with the LLM or the final answer)"
        )
    out: dict[str, Any] = {}
    if spec.system_prompt is not None:
        out["system_prompt"] = spec.system_prompt
    if spec.tools is not None:
        out["tools"] = list(spec.tools)
    if spec.model is not None:
        out["model"] = spec.model
    out["summarizer"] = how
    if spec.keep:
        out["keep"] = True
    return out


class Recorder:
    """Wraps an LLM and tools, forwards inputs to an engine, and writes a script.

    ::

        recorder = Recorder(OpenAIChatAdapter(...), tools=[get_weather])
        async with Engine(llm=recorder.llm, tools=recorder.tools) as engine:
            await recorder.start(engine, system_prompt="...")
            await recorder.send("What's the weather in London?")
            await recorder.save("weather.json")
    """

    def __init__(
        self,
        llm: Any,
        tools: Iterable[Tool] = (),
        *,
        name: str = "recorded conversation",
        model: str = "scripted",
    ) -> None:
        self.name = name
        self.model = model
        self._inner_tools = list(tools)
        self._subtasks = {
            t.name: _subtask_of(t) for t in self._inner_tools if isinstance(t, SubtaskTool)
        }
        self._steps: list[dict[str, Any]] = []
        self.llm = _RecordingLLM(llm, self)
        # a question tool runs nothing: it is given as it is, its answers are inputs;
        # a sub-task tool is given as it is: what its child does is recorded by the
        # wrapped LLM and tools the child runs with
        self.tools = [
            t if isinstance(t, QuestionTool | SubtaskTool) else self._wrap(t)
            for t in self._inner_tools
        ]
        self._engine: Engine | None = None
        self._cid: str | None = None
        self._config: dict[str, Any] = {}
        self._noticed = False
        """Whether a turn stopped at the iteration limit stored its notice."""

    def _wrap(self, inner: Tool) -> Tool:
        steps = self._steps

        async def run(**arguments: Any) -> Any:
            call = current_call()
            assert call is not None
            outcome = await inner.run(arguments)
            if outcome.success:
                steps.append({"tool": {"id": call.id, "result": outcome.result}})
                return outcome.result
            message = (
                outcome.result.get("error")
                if isinstance(outcome.result, dict)
                else str(outcome.result)
            )
            steps.append({"tool": {"id": call.id, "error": str(message)}})
            raise ToolError(str(message))

        return Tool.from_spec(
            inner.name,
            inner.description,
            inner.parameters,
            run,
            approval=inner.approval,
            idempotent=inner.idempotent,
            timeout=None,
        )

    # ------------------------------------------------------------- inputs

    async def start(
        self,
        engine: Engine,
        *,
        system_prompt: str | None = None,
        model: str | None = None,
        parameters: dict[str, Any] | None = None,
        mode: str = "chat",
    ) -> str:
        """Create the context to record in; returns its id."""
        self._engine = engine
        engine.tap(self._seen)
        model = model or self.model
        self._cid = await engine.create_context(
            system_prompt=system_prompt, model=model, parameters=parameters, mode=mode
        )
        self._config = {"model": model}
        if system_prompt:
            self._config["system_prompt"] = system_prompt
        if mode != "chat":
            self._config["mode"] = mode
        if parameters:
            self._config["parameters"] = parameters
        self._config["max_iterations"] = engine.max_iterations
        self._config["retry"] = {"max_attempts": engine.retry_policy.max_attempts}
        return self._cid

    def _seen(self, event: Event) -> None:
        if isinstance(event, MessageCompleted) and event.message.notice is not None:
            self._noticed = True

    def _target(self) -> tuple[Engine, str]:
        if self._engine is None or self._cid is None:
            raise RuntimeError("call Recorder.start(engine) first")
        return self._engine, self._cid

    async def send(self, text: str, role: str = "user") -> Turn:
        engine, cid = self._target()
        self._steps.append({"user": text if role == "user" else {"content": text, "role": role}})
        return await engine.send(cid, text, role=role)

    async def approve(self, call_ids: str | Sequence[str]) -> Turn:
        engine, cid = self._target()
        ids = [call_ids] if isinstance(call_ids, str) else list(call_ids)
        self._steps.append({"approve": ids[0] if len(ids) == 1 else ids})
        return await engine.approve(cid, ids)

    async def deny(self, call_id: str, reason: str = "") -> Turn:
        engine, cid = self._target()
        self._steps.append({"deny": {"id": call_id, "reason": reason}})
        return await engine.deny(cid, call_id, reason=reason)

    async def answer(self, call_id: str, text: str) -> Turn:
        """Answer a question; an answer the engine refuses (not one of the
        choices, say) is not written down."""
        engine, cid = self._target()
        step = {"answer": {"id": call_id, "text": text}}
        self._steps.append(step)
        try:
            return await engine.answer(cid, call_id, text)
        except TurnFSMError:
            if self._steps and self._steps[-1] is step:  # refused: nothing happened
                self._steps.pop()
            raise

    async def cancel(self) -> Turn:
        engine, cid = self._target()
        self._steps.append({"cancel": True})
        return await engine.cancel(cid)

    async def retry(self) -> Turn:
        engine, cid = self._target()
        self._steps.append({"retry": True})
        return await engine.retry(cid)

    async def reset(self) -> Turn:
        engine, cid = self._target()
        self._steps.append({"reset": True})
        return await engine.reset(cid)

    async def fork(
        self,
        name: str,
        at: int,
        *,
        system_prompt: str | Unset | None = UNSET,
        user_prompt: str | Unset | None = UNSET,
    ) -> Turn:
        """Fork a branch (with its own prompts, when given); recorded once it is done."""
        engine, cid = self._target()
        prompts = {
            k: v
            for k, v in (("system_prompt", system_prompt), ("user_prompt", user_prompt))
            if not isinstance(v, Unset)
        }
        turn = await engine.fork(cid, name, at, **prompts)
        self._steps.append({"branch": {"name": name, "at": at, **prompts}})
        return turn

    async def switch_branch(self, name: str) -> Turn:
        engine, cid = self._target()
        turn = await engine.switch_branch(cid, name)
        self._steps.append({"switch": name})
        return turn

    async def update_config(self, **fields: Any) -> ChatConfig:
        """``Engine.update_config`` with the same keywords (model, mode,
        parameters, title); recorded once it is done."""
        engine, cid = self._target()
        config = await engine.update_config(cid, **fields)
        self._steps.append({"config": dict(fields)})
        return config

    # ------------------------------------------------------------- output

    async def script(self) -> dict[str, Any]:
        """The script so far, with the observed trace, state and count as ``expect``."""
        engine, cid = self._target()
        ctx = await engine.get_context(cid)
        tools = [
            {"name": t.name, "description": t.description, "question": True}
            if isinstance(t, QuestionTool)
            else {
                "name": t.name,
                "description": t.description,
                "approval": t.approval if isinstance(t.approval, str) else "required",
                "subtask": self._subtasks[t.name],
            }
            if isinstance(t, SubtaskTool)
            else {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "approval": t.approval if isinstance(t.approval, str) else "required",
                **({"idempotent": True} if t.idempotent else {}),
            }
            for t in self._inner_tools
        ]
        # the engine's modes, unless it has only the default one
        modes = [m.to_json() for m in engine.modes if m != Mode("chat")]
        return {
            "format": FORMAT,
            "name": self.name,
            # a script stores no notice unless asked to: asked when one was stored
            "config": {**self._config, **({"limit_notice": True} if self._noticed else {})},
            "tools": tools,
            **({"modes": [m.to_json() for m in engine.modes]} if modes else {}),
            "steps": list(self._steps),
            "expect": {
                "trace": [str(s) for s in await engine.trace(cid)],
                "final_state": ctx.current_state,
                "message_count": len(ctx.history()),
            },
        }

    async def save(self, path: str | Path) -> dict[str, Any]:
        data = await self.script()
        await anyio.Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        return data
