"""``turnfsm chat``'s conversation on the terminal: the turns, the streamed
text, the approvals and questions asked, the JSON of ``--json``."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TextIO, cast

import anyio
import anyio.to_thread
from rich.console import Console
from rich.markup import escape

from .. import records
from .._numbers import whole_number
from ..engine import Engine, RetryPolicy, Turn
from ..engine._offered import offered_tools, tool_summary
from ..errors import ContextNotFound, InvalidInput
from ..events import (
    ContentDelta,
    Event,
    MessageCompleted,
    Retrying,
    ToolCallsRequested,
    ToolResult,
)
from ..model import InternalMessage, MessageType, Role, ToolCallRequest
from ..states import RESTING, State
from ..tools import QuestionTool, ToolRegistry
from ._chat_model import (
    DEFAULT_SYSTEM,
    MODE_NAMES,
    MODES,
    ApproveMode,
    Watched,
    check_message,
    open_model,
    setup_problem,
)
from ._errors import CLIError
from ._history_options import history_settings
from ._mcp import mcp_toolsets
from ._stdin import read_line_from
from ._store import HOW_TO_APPROVE, denial_reason, open_cli_store
from ._turn_options import turn_settings

__all__ = ["Chat"]


class Chat:
    def __init__(
        self,
        args: argparse.Namespace,
        stdin: TextIO,
        out: TextIO,
        err: TextIO,
        prog: str = "turnfsm chat",
    ) -> None:
        self.args = args
        self.prog = prog
        self.stdin = stdin
        self.out = out
        self.err = err
        self.tty = stdin.isatty()
        self.approve = cast(ApproveMode, args.approve or ("ask" if self.tty else "none"))
        self.ask = self.tty or self.approve == "ask"
        """Whether questions are read from stdin (else they are denied)."""
        self.console = Console(file=out, highlight=False, soft_wrap=True)
        self.as_json: bool = args.json
        self.streamed: set[str] = set()
        """Messages whose text was shown as it streamed."""
        self.channel: tuple[str, str] | None = None
        """The (message, channel) the open line belongs to."""
        self.line_open = False

    async def main(self) -> int:
        if self.args.message is not None:
            check_message(self.args.message, "--message")  # before anything is created
        # resuming (--context) needs a store that exists: never make one for it
        async with self.session(create=not self.args.context) as (engine, url):
            cid = await self._open_context(url)
            async with engine.subscribe(cid) as events:
                self.events = events
                if self.args.message is not None:
                    return await self._one(cid, self.args.message)
                return await self._loop(cid)

    @contextlib.asynccontextmanager
    async def session(self, *, create: bool) -> AsyncIterator[tuple[Engine, str]]:
        """The engine on the model and the store the options name, and the store's URL."""
        setup = open_model(self.args)
        self.setup = setup
        self.endpoint = setup.endpoint
        self.default_model = setup.model
        self.watched = Watched(setup.llm)
        try:
            store, url = open_cli_store(self.args.store, create=create)
            async with Engine(
                llm=self.watched,
                tools=setup.tools,
                store=store,
                retry=RetryPolicy(max_attempts=self.args.max_attempts),
                logger=_quiet_logger(self.err),
                modes=MODES,
                **history_settings(self.args),
                **turn_settings(self.args),
                toolsets=mcp_toolsets(self.args),
            ) as engine:
                self.engine = engine
                yield engine, url
        finally:
            close = getattr(setup.llm, "aclose", None)
            if close is not None:
                await close()

    async def resume(self, cid: str) -> int:
        """Continue a context left in a non-resting state, showing it as a turn."""
        async with self.session(create=False) as (engine, url):
            try:
                ctx = await engine.get_context(cid)
            except ContextNotFound as exc:
                raise CLIError(f"{exc} in {url}") from None
            if ctx.current_state in RESTING:
                self._note(f"context {cid} is at rest in {ctx.current_state}: nothing to resume")
                return 0
            async with engine.subscribe(cid) as events:
                self.events = events
                turn = await self._call(functools.partial(engine.resume, cid))
                states = list(turn.states)
                settled = await self._settle(cid, turn, turn.pending_tool_calls)
                if settled is not None:
                    states.extend(settled.states)
                    turn = _merged(turn, settled)
            if self.as_json:
                await self._json(turn, states)
            else:
                self._note(f"context {cid}: {' -> '.join(states)}")
            if turn.state is State.PERMANENT_FAILURE:
                self._fail_line(turn)
                return 1
            return 0

    async def _open_context(self, url: str) -> str:
        engine = self.engine
        if self.args.context:
            try:
                ctx = await engine.get_context(self.args.context)
            except ContextNotFound as exc:
                raise CLIError(f"{exc} in {url}") from None
            if ctx.current_state not in RESTING:
                raise CLIError(
                    f"context {ctx.id} was interrupted in {ctx.current_state}; continue it "
                    f"with: turnfsm resume {ctx.id} --store {url}"
                )
            mode = ctx.config.mode
            wanted = getattr(self.args, "mode", None)
            if wanted is not None and wanted != mode:
                mode = (await engine.update_config(ctx.id, mode=wanted)).mode
            model = getattr(self.args, "model", None)
            if model and model != ctx.config.model_id:  # the context shows what is sent
                await engine.update_config(ctx.id, model=model)
            if not self.as_json:
                shown = self.setup.shown(model or ctx.config.model_id)
                self._note(
                    f"resumed context {ctx.id}: {len(ctx.history())} messages, "
                    f"{ctx.current_state}; {shown}{_mode_note(mode)}"
                )
            return ctx.id
        mode = getattr(self.args, "mode", None) or "chat"
        model = self.args.model or self.default_model
        cid = await engine.create_context(
            system_prompt=self.args.system_prompt or DEFAULT_SYSTEM, model=model, mode=mode
        )
        if not self.as_json:
            kept = f"resume with --context {cid}"
            if url.lower().startswith("memory://"):
                kept = (
                    "a memory:// store is gone at exit: give --store sqlite:///chats.db to keep it"
                )
            shown = self.setup.shown(model)
            self._note(f"context {cid} in {url}; {shown}{_mode_note(mode)} ({kept})")
        return cid

    async def _switch_mode(self, cid: str, text: str) -> None:
        """``/mode`` (say the mode) or ``/mode NAME`` (switch to it)."""
        name = text.removeprefix("/mode").strip()
        if not name:
            ctx = await self.engine.get_context(cid)
            self._note(f"mode {ctx.config.mode} (modes: {', '.join(MODE_NAMES)})")
            return
        try:
            config = await self.engine.update_config(cid, mode=name)
        except InvalidInput as exc:
            self._note(str(exc))
            return
        self._note(f"mode {config.mode}")

    async def _list_tools(self, cid: str) -> None:
        """``/tools``: the tools the model is offered in this context, one a line."""
        ctx = await self.engine.get_context(cid)
        offered = [tool_summary(t) for t in offered_tools(self.engine, ctx)]
        self._note(f"{len(offered)} tools offered in mode {ctx.config.mode}:")
        for row in offered:
            about = (row["description"].strip().splitlines() or [""])[0]
            line = f"  {row['name']} ({row['approval']})" + (f": {about}" if about else "")
            self.console.print(line, markup=False)

    # ------------------------------------------------------------------ turns

    async def _one(self, cid: str, text: str) -> int:
        turn, states = await self._turn(cid, text)
        if self.as_json:
            await self._json(turn, states)
        if turn.state is State.PERMANENT_FAILURE:
            self._fail_line(turn)
            return 1
        return 0

    async def _loop(self, cid: str) -> int:
        ctx = await self.engine.get_context(cid)
        if ctx.pending_tool_calls():
            turn = await self._settle(cid, None, ctx.pending_tool_calls())
            if turn is not None and self.as_json:
                await self._json(turn, list(turn.states))
        while True:
            line = await self._read("you> ")
            if line is None:
                if self.tty:
                    self.console.print()
                return 0
            text = line.strip()
            if not text:
                continue
            if text in ("/exit", "/quit"):
                return 0
            if text == "/mode" or text.startswith("/mode "):
                await self._switch_mode(cid, text)
                continue
            if text == "/tools":
                await self._list_tools(cid)
                continue
            turn, states = await self._turn(cid, text)
            if self.as_json:
                await self._json(turn, states)
            if turn.state is State.PERMANENT_FAILURE:
                self._fail_line(turn, to_console=True)

    async def _turn(self, cid: str, text: str) -> tuple[Turn, list[State]]:
        """Send ``text``, settle the approvals, return the last turn and every state."""
        turn = await self._call(lambda: self.engine.send(cid, text))
        states = list(turn.states)
        settled = await self._settle(cid, turn, turn.pending_tool_calls)
        if settled is not None:
            states.extend(settled.states)
            turn = _merged(turn, settled)
        return turn, states

    async def _settle(
        self, cid: str, turn: Turn | None, pending: Sequence[ToolCallRequest]
    ) -> Turn | None:
        """Decide every pending call (per ``--approve``); the turns that followed."""
        last: Turn | None = None
        while pending:
            call = pending[0]
            question = _question(self.engine.tools, call)
            if question is not None:
                nxt = await self._answer(cid, call, *question)
                last = nxt if last is None else _merged(last, nxt)
                pending = nxt.pending_tool_calls
                continue
            shown = f"{call.tool_name}({json.dumps(call.arguments, ensure_ascii=False)})"
            if self.approve == "all":
                approved, reason = True, ""
            elif self.approve == "none":
                approved, reason = False, denial_reason(self.args.approve)
            else:
                answer = await self._read(f"approve {shown}? [y/N] ", to=self.err)
                approved = (answer or "").strip().lower() in ("y", "yes")
                reason = "" if approved else "the user said no"
            if not self.as_json:
                why = ""
                if not approved and self.args.approve is None:  # the default, and the way out
                    why = f": {reason} ({HOW_TO_APPROVE})"
                self._note(f"{'approved' if approved else 'denied'} {shown}{why}")
            if approved:
                nxt = await self._call(functools.partial(self.engine.approve, cid, call.id))
            else:
                nxt = await self._call(functools.partial(self.engine.deny, cid, call.id, reason))
            last = nxt if last is None else _merged(last, nxt)
            pending = nxt.pending_tool_calls
        return last

    async def _answer(
        self, cid: str, call: ToolCallRequest, question: str, choices: tuple[str, ...]
    ) -> Turn:
        """Ask ``question`` on the terminal and answer it; an empty line, the end
        of input, or no terminal declines it (a denial the model sees)."""
        engine = self.engine
        reason = ""
        text: str | None = None
        if not self.ask:
            reason = "no terminal to ask the user on (stdin is not a terminal)"
        else:
            self.err.write(_question_text(question, choices))
            while True:
                line = await self._read("answer> ", to=self.err)
                if line is None:
                    reason = "no answer (the input ended)"
                    break
                text, problem = _pick(line.strip(), choices)
                if problem is None:
                    break
                self.err.write(f"{problem}\n")
        if not self.as_json:
            why = f" ({reason})" if reason else ""
            self._note(f"answered {question!r}: {text}" if text else f"declined {question!r}{why}")
        if text:
            return await self._call(functools.partial(engine.answer, cid, call.id, text))
        return await self._call(functools.partial(engine.deny, cid, call.id, reason))

    async def _call(self, fn: Callable[[], Awaitable[Turn]]) -> Turn:
        """Run one engine call while its events are shown as they arrive."""
        box: list[Turn] = []
        failures: list[Exception] = []
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                try:
                    box.append(await fn())
                except Exception as exc:
                    failures.append(exc)
                finally:
                    tg.cancel_scope.cancel()

            tg.start_soon(run)
            async for event in self.events:
                self._show(event)
        for event in self.events.drain():
            self._show(event)
        self._end_line()
        if failures:
            raise failures[0]
        turn = box[0]
        if turn.state is State.PERMANENT_FAILURE:
            fatal = setup_problem(self.watched.last_error, self.endpoint, self.setup.provider)
            if fatal:
                raise CLIError(fatal)
        return turn

    # ------------------------------------------------------------------ output

    def _show(self, ev: Event) -> None:
        if self.as_json:
            return
        c = self.console
        if isinstance(ev, ContentDelta):
            thinking = ev.channel == "thinking"
            if self.channel != (ev.message_id, ev.channel) or not self.line_open:
                self._end_line()
                self.channel = (ev.message_id, ev.channel)
                c.print("[dim]thinking>[/dim] " if thinking else "[bold]assistant>[/bold] ", end="")
                self.line_open = True
            if not thinking:
                self.streamed.add(ev.message_id)
            c.print(ev.delta, end="", markup=False, style="dim italic" if thinking else "")
            c.file.flush()
        elif isinstance(ev, MessageCompleted):
            msg = ev.message
            if msg.notice is not None:  # the engine's, not the model's
                self._end_line()
                c.print(f"[yellow]notice> {escape(msg.text)}[/yellow]")
            elif msg.role is Role.ASSISTANT and ev.message_id not in self.streamed and msg.text:
                c.print("[bold]assistant>[/bold] ", end="")
                c.print(msg.text, markup=False)
            self._end_line()
            line = _outcome_line(msg)
            if line is not None:
                c.print(f"[yellow]{escape(line)}[/yellow]")
        elif isinstance(ev, ToolCallsRequested):
            self._end_line()
            for call in ev.calls:
                if _question(self.engine.tools, call) is not None:
                    continue  # asked when the context rests (see _answer)
                args = call.arguments if call.raw_arguments is None else call.raw_arguments
                shown = f"{call.tool_name}({json.dumps(args, ensure_ascii=False)})"
                c.print(f"[cyan]tool call>[/cyan] {escape(shown)}")
        elif isinstance(ev, ToolResult):
            self._end_line()
            text = json.dumps(ev.result, ensure_ascii=False, default=str)
            if len(text) > 300:
                text = text[:297] + "..."
            colour = "green" if ev.success else "red"
            c.print(f"[{colour}]tool result>[/{colour}] {escape(ev.tool_name)}: {escape(text)}")
        elif isinstance(ev, Retrying):
            self._end_line()
            self._note(f"retrying in {ev.delay:.1f}s (attempt {ev.attempt} failed: {ev.error})")

    def _end_line(self) -> None:
        if self.line_open:
            self.console.print()
            self.line_open = False

    def _note(self, text: str) -> None:
        self.console.print(f"[dim]{escape(text)}[/dim]")

    def _fail_line(self, turn: Turn, *, to_console: bool = False) -> None:
        line = f"the model call failed: {turn.error or 'unknown error'}"
        if to_console and not self.as_json:
            self.console.print(f"[red]{escape(line)}[/red]")
        else:
            print(f"{self.prog}: {line}", file=self.err)

    async def _json(self, turn: Turn, states: Sequence[State]) -> None:
        ctx = await self.engine.get_context(turn.context_id)
        decided = {  # the messages of a turn are as first written: calls still Pending
            c.id: c for n in ctx.history() for c in n.message.tool_calls or ()
        }
        doc = {
            "context_id": turn.context_id,
            "state": str(turn.state),
            "stop_reason": str(turn.stop_reason) if turn.stop_reason else None,
            "states": [str(s) for s in states],
            "text": turn.text,
            "error": turn.error,
            "mode": ctx.config.mode,
            "messages": [_message_json(m, decided) for m in turn.messages],
        }
        self.out.write(json.dumps(doc, ensure_ascii=False, default=str) + "\n")
        self.out.flush()

    async def _read(self, prompt: str, *, to: TextIO | None = None) -> str | None:
        """One line from stdin (``None`` at its end); the prompt only on a terminal,
        or for approvals (to stderr)."""
        target = to if to is not None else (self.out if self.tty else None)
        if target is not None:
            target.write(prompt)
            target.flush()
        line = await read_line_from(self.stdin)  # Ctrl-C ends the wait at once
        return line.rstrip("\n") if line else None


def _mode_note(mode: str) -> str:
    """The mode, for the opening line, when it is not the default one."""
    return "" if mode == "chat" else f"; mode {mode}"


def _quiet_logger(err: TextIO) -> Any:
    """The engine's log, errors only: failed attempts are shown as they happen, and
    a failed turn ends in one line."""
    return _ErrorsOnly(err, {})


class _ErrorsOnly:
    """Stands for a structlog logger filtered at ERROR: lines below it are dropped
    where they are logged, and structlog is imported for the first error, so a
    chat that logs none does not import it."""

    __slots__ = ("_context", "_err")

    def __init__(self, err: TextIO, context: dict[str, Any]) -> None:
        self._err = err
        self._context = context

    def bind(self, **values: Any) -> _ErrorsOnly:
        return _ErrorsOnly(self._err, {**self._context, **values})

    def new(self, **values: Any) -> _ErrorsOnly:
        return _ErrorsOnly(self._err, dict(values))

    def _dropped(self, *args: Any, **kw: Any) -> None:
        return None

    debug = info = msg = warning = warn = _dropped

    def _real(self) -> Any:
        import structlog

        return structlog.wrap_logger(
            structlog.PrintLogger(self._err),
            wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.KeyValueRenderer(key_order=["level", "event"]),
            ],
        ).bind(**self._context)

    def error(self, *args: Any, **kw: Any) -> Any:
        return self._real().error(*args, **kw)

    def exception(self, *args: Any, **kw: Any) -> Any:
        return self._real().exception(*args, **kw)

    def critical(self, *args: Any, **kw: Any) -> Any:
        return self._real().critical(*args, **kw)

    fatal = critical


def _merged(first: Turn, then: Turn) -> Turn:
    return Turn(
        context_id=then.context_id,
        state=then.state,
        stop_reason=then.stop_reason,
        states=(*first.states, *then.states),
        messages=(*first.messages, *then.messages),
        message_ids=(*first.message_ids, *then.message_ids),
        pending_tool_calls=then.pending_tool_calls,
        error=then.error,
        questions=then.questions,
    )


def _question(tools: ToolRegistry, call: ToolCallRequest) -> tuple[str, tuple[str, ...]] | None:
    """The question and choices ``call`` asks, when it is a question."""
    tool = tools.get(call.tool_name)
    asked = tool.ask(call) if isinstance(tool, QuestionTool) else None
    return None if asked is None else (asked.question, asked.choices)


def _question_text(question: str, choices: Sequence[str]) -> str:
    lines = [f"question> {question}"]
    lines += [f"  {i}. {c}" for i, c in enumerate(choices, 1)]
    hint = f"a number from 1 to {len(choices)}, or the text; " if choices else ""
    lines.append(f"  ({hint}an empty line declines)")
    return "\n".join(lines) + "\n"


def _pick(line: str, choices: Sequence[str]) -> tuple[str | None, str | None]:
    """The answer a typed line gives: (text, None), (None, None) to decline, or
    (None, problem) to ask again. With choices, a number picks one, and a text
    matches one exactly, else ignoring case."""
    if not line:
        return None, None
    if not choices:
        return line, None
    if line in choices:
        return line, None
    try:
        return choices[whole_number(line, "choice", 1, len(choices)) - 1], None
    except InvalidInput:
        pass  # not a number of a choice: a text, below
    folded = [c for c in choices if c.casefold() == line.casefold()]
    if len(folded) == 1:
        return folded[0], None
    return None, f"pick one of: {', '.join(choices)} (1 to {len(choices)}), or an empty line"


def _message_json(msg: InternalMessage, decided: dict[str, ToolCallRequest]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": str(msg.role), "text": msg.text}
    if msg.message_type is MessageType.PLAN:
        out["type"] = str(msg.message_type)
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "name": c.tool_name,
                "arguments": c.arguments if c.raw_arguments is None else c.raw_arguments,
                "approval": str(decided.get(c.id, c).approval_status),
            }
            for c in msg.tool_calls
        ]
    if msg.tool_result is not None:
        out["tool_call_id"] = msg.tool_result.request_id
        out["success"] = msg.tool_result.success
        out["result"] = msg.tool_result.result
    if msg.thinking:
        out["thinking"] = msg.thinking
    if msg.metadata.usage is not None:
        out["usage"] = records.to_python(msg.metadata.usage)
    if msg.refusal is not None:
        out["refusal"] = msg.refusal
    if msg.outcome is not None:
        out["outcome"] = msg.outcome
    return out


_OUTCOME_LINES = {
    "length": "[the answer was cut off at the token limit]",
    "content_filter": "[the provider's content filter stopped the answer; what arrived is shown]",
}


def _outcome_line(msg: InternalMessage) -> str | None:
    """One line saying how an answer ended, when not normally."""
    outcome = msg.outcome
    if outcome is None:
        return None
    if outcome == "refusal":
        return f"refused> {msg.refusal}"
    if outcome in _OUTCOME_LINES:
        return _OUTCOME_LINES[outcome]
    return f"[the answer is incomplete: {msg.metadata.incomplete_reason}]"
