"""The notice a turn stopped by the iteration limit stores: an assistant message
marked as a notice, after the results of the calls that were not run, in the
commit that ends the turn; what the model is sent of it on the next turn; its
events; the audit log and the exports that show it; and the engine setting
that turns it off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnfsm import Engine, State, tool
from turnfsm.adapters.outbound.exporters import export_context
from turnfsm.audit import audit_jsonl, audit_records, records_from_audit_lines, verify_audit_log
from turnfsm.engine import StopReason
from turnfsm.errors import InvalidInput, StoreError
from turnfsm.events import MessageCompleted, TurnCompleted
from turnfsm.model import NOTICE_KEY, MessageType, Role
from turnfsm.render import path_from_steps
from turnfsm.storage import Commit, SQLiteStore
from turnfsm.testing import ScriptedLLM

LIMIT = 2


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def _tools_forever(request: Any) -> dict[str, Any]:
    """A model that asks for a tool every time, then answers the next message."""
    last = request.messages[-1]
    if last["role"] == "user" and last["content"] == "thanks":
        return {"text": "You're welcome."}
    n = len(request.messages)
    return {"tool_calls": [{"id": f"c{n}", "name": "lookup", "arguments": {"q": str(n)}}]}


def _notices(ctx: Any) -> list[Any]:
    return [n for n in ctx.history() if n.message.notice is not None]


def test_the_turn_stores_a_notice_after_the_results_of_the_calls_not_run() -> None:
    llm = ScriptedLLM(_tools_forever)

    async def main() -> tuple[Any, Any, list[Any]]:
        async with Engine(llm=llm, tools=[lookup], max_iterations=LIMIT) as engine:
            cid = await engine.create_context()
            async with engine.subscribe(cid) as events:
                turn = await engine.send(cid, "research this forever")
                seen = [ev for ev in events.drain()]
            return turn, await engine.get_context(cid), seen

    turn, ctx, seen = anyio.run(main)
    assert len(llm.requests) == LIMIT
    assert turn.state is State.IDLE and turn.stop_reason is StopReason.MAX_ITERATIONS
    *_, last_call, not_run, notice = ctx.history()
    assert last_call.message.tool_calls and not_run.message.role is Role.TOOL
    assert not_run.message.tool_result.result["status"] == "max_iterations"
    msg = notice.message
    assert (msg.role, msg.message_type, msg.notice) == (
        Role.ASSISTANT,
        MessageType.TEXT,
        "max_iterations",
    )
    assert msg.metadata.extra == {NOTICE_KEY: "max_iterations", "max_iterations": LIMIT}
    assert f"the limit of {LIMIT} LLM calls for one user message" in msg.text
    assert "tool call was not run" in msg.text
    assert turn.text == msg.text and turn.messages[-1].notice == "max_iterations"
    # its event comes after the results and before the turn's end
    kinds = [type(ev) for ev in seen]
    done = [ev for ev in seen if isinstance(ev, MessageCompleted) and ev.message_id == notice.id]
    assert len(done) == 1 and done[0].message.notice == "max_iterations"
    assert kinds.index(TurnCompleted) > seen.index(done[0])


def test_the_model_reads_the_notice_as_the_assistants_words_on_the_next_turn() -> None:
    llm = ScriptedLLM(_tools_forever)

    async def main() -> None:
        async with Engine(llm=llm, tools=[lookup], max_iterations=LIMIT) as engine:
            cid = await engine.create_context(system_prompt="Be brief.")
            await engine.send(cid, "research this forever")
            turn = await engine.send(cid, "thanks")
            assert turn.text == "You're welcome."

    anyio.run(main)
    sent = llm.requests[-1].messages
    said = [m for m in sent if str(m.get("content")).startswith("Stopped: the limit of")]
    assert len(said) == 1 and said[0]["role"] == "assistant"
    # right after the results, right before the new message; never a user or system turn
    at = sent.index(said[0])
    assert sent[at - 1]["role"] == "tool" and sent[at + 1] == {"role": "user", "content": "thanks"}
    assert sent[0] == {"role": "system", "content": "Be brief."}
    # Claude and Gemini read it as the model's turn too, the system prompt untouched
    from turnfsm.adapters.llm._anthropic_body import anthropic_messages
    from turnfsm.adapters.llm._gemini_body import gemini_contents

    system, claude = anthropic_messages(sent)
    assert system == [{"type": "text", "text": "Be brief."}]
    assert [m["role"] for m in claude[-3:]] == ["user", "assistant", "user"]
    assert claude[-2]["content"][0]["text"] == said[0]["content"]
    instruction, gemini = gemini_contents(sent)
    assert all("Stopped" not in json.dumps(part) for part in instruction)
    assert [c["role"] for c in gemini[-3:]] == ["user", "model", "user"]
    assert gemini[-2]["parts"][0]["text"] == said[0]["content"]


def test_limit_notice_false_stores_none() -> None:
    async def main() -> Any:
        llm = ScriptedLLM(_tools_forever)
        async with Engine(llm=llm, tools=[lookup], max_iterations=1, limit_notice=False) as e:
            cid = await e.create_context()
            turn = await e.send(cid, "go")
            assert turn.stop_reason is StopReason.MAX_ITERATIONS
            assert e.limit_notice is False
            return await e.get_context(cid)

    ctx = anyio.run(main)
    assert _notices(ctx) == [] and ctx.history()[-1].message.role is Role.TOOL


@pytest.mark.parametrize("bad", [None, 1, "yes"])
def test_limit_notice_must_be_a_bool(bad: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        Engine(limit_notice=bad)  # type: ignore[arg-type]
    assert caught.value.where == "limit_notice"


def _kind(message: Any) -> str:
    """``notice`` for a notice, else the message's role."""
    return "notice" if message.notice is not None else str(message.role)


class _FailingIdle(SQLiteStore):
    """A real SQLite store whose commits are recorded; the first commit that
    ends a turn (a step to Idle) fails as a full disk would, once."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.commits: list[tuple[str, list[str]]] = []
        self.fail_next_idle = True

    async def commit(self, commit: Commit) -> None:
        types = [_kind(node.message) for _, node in commit.appended]
        ends = any(s.to_state == State.IDLE and s.from_state != s.to_state for s in commit.steps)
        if ends and self.fail_next_idle and "tool" in types:
            self.fail_next_idle = False
            raise StoreError("disk full (injected)")
        await super().commit(commit)
        self.commits.append((commit.state, types))


def test_the_notice_is_in_the_commit_that_ends_the_turn(tmp_path: Path) -> None:
    """A failure of that commit leaves neither the stop nor the notice; the
    resumed turn then stores both, once, in one commit."""
    url = f"{tmp_path}/notice.db"

    async def main() -> tuple[Any, list[tuple[str, list[str]]]]:
        store = _FailingIdle(url)
        llm = ScriptedLLM(_tools_forever)
        async with Engine(llm=llm, tools=[lookup], store=store, max_iterations=LIMIT) as engine:
            cid = await engine.create_context()
            with pytest.raises(StoreError):
                await engine.send(cid, "research this forever")
        async with Engine(llm=llm, tools=[lookup], store=SQLiteStore(url)) as fresh:
            stored = await fresh.get_context(cid)
            assert stored.current_state != State.IDLE and _notices(stored) == []
        store = _FailingIdle(url)
        store.fail_next_idle = False
        async with Engine(llm=llm, tools=[lookup], store=store, max_iterations=LIMIT) as engine:
            turn = await engine.resume(cid)
            assert turn.stop_reason is StopReason.MAX_ITERATIONS
        async with Engine(llm=llm, tools=[lookup], store=SQLiteStore(url)) as fresh:
            return await fresh.get_context(cid), store.commits

    ctx, commits = anyio.run(main)
    assert len(_notices(ctx)) == 1 and ctx.current_state == State.IDLE
    with_notice = [c for c in commits if "notice" in c[1]]
    assert len(with_notice) == 1
    state, types = with_notice[0]
    assert state == State.IDLE and types[-1] == "notice"
    assert "tool" in types  # the results of the calls not run, with it


def _stopped_context() -> tuple[Any, list[Any]]:
    async def main() -> tuple[Any, list[Any]]:
        llm = ScriptedLLM(_tools_forever)
        async with Engine(llm=llm, tools=[lookup], max_iterations=LIMIT) as engine:
            cid = await engine.create_context(title="stopped")
            await engine.send(cid, "research this forever")
            return await engine.get_context(cid), await engine.steps(cid)

    return anyio.run(main)


def test_the_audit_log_puts_the_notice_in_the_step_that_ends_the_turn() -> None:
    ctx, steps = _stopped_context()
    (notice,) = _notices(ctx)
    records = audit_records(ctx.id, path_from_steps(steps).steps, ctx.message_pool.values())
    (end,) = [r for r in records if r.trigger == "turn_complete"]
    assert end.outcome == "max_iterations" and end.message_ids[-1] == notice.id
    assert sum(notice.id in r.message_ids for r in records) == 1
    text = audit_jsonl(records)
    assert verify_audit_log(text.splitlines()).ok
    assert records_from_audit_lines(text.splitlines()) == records


@pytest.mark.parametrize("fmt", ["session", "entries", "openai"])
def test_every_export_shows_the_notice(fmt: str) -> None:
    ctx, _ = _stopped_context()
    (notice,) = _notices(ctx)
    exported = export_context(ctx, fmt)  # type: ignore[arg-type]
    assert notice.message.text in json.dumps(exported)
    if fmt == "session":
        (record,) = [r for r in exported["records"] if r.get("notice")]
        assert record["role"] == "assistant" and record["max_iterations"] == LIMIT
    if fmt == "openai":
        last = exported[-1]
        assert (last["role"], last["content"], last["notice"]) == (
            "assistant",
            notice.message.text,
            "max_iterations",
        )


GOLDEN = Path(__file__).resolve().parents[1] / "scripts" / "max_iterations.json"


def _replayed(config: dict[str, Any]) -> Any:
    from turnfsm.replay import run_script

    script = json.loads(GOLDEN.read_text())
    script["config"].update(config)
    if config.get("limit_notice"):  # the script's own checks, with the notice
        script["steps"][-1]["expect"]["message_count"] = 6
        script["steps"][-1]["expect"]["last_message"] = {"role": "assistant"}
        script["expect"]["message_count"] = 6
    return run_script(script)


def test_scripts_store_the_notice_only_when_they_ask_for_it() -> None:
    plain = _replayed({})
    assert plain.ok, plain.report()
    assert plain.messages[-1]["message"]["role"] == "tool"
    asked = _replayed({"limit_notice": True})
    assert asked.ok, asked.report()
    last = asked.messages[-1]["message"]
    assert (last["role"], last["message_type"]) == ("assistant", "Text")
    assert last["metadata"]["extra"] == {"notice": "max_iterations", "max_iterations": 2}


def test_a_recorded_stop_at_the_limit_replays_with_its_notice() -> None:
    from turnfsm.replay import Recorder, replay
    from turnfsm.testing import FakeClock, SequentialIds

    async def main() -> tuple[dict[str, Any], Any, list[str]]:
        recorder = Recorder(ScriptedLLM(_tools_forever), tools=[lookup])
        async with Engine(
            llm=recorder.llm,
            tools=recorder.tools,
            max_iterations=LIMIT,
            clock=FakeClock(),
            ids=SequentialIds(),
        ) as engine:
            cid = await recorder.start(engine)
            await recorder.send("research this forever")
            script = await recorder.script()
            live = [_kind(n.message) for n in (await engine.get_context(cid)).history()]
        return script, await replay(script), live

    script, result, live = anyio.run(main)
    assert script["config"]["limit_notice"] is True
    assert result.ok, result.report()
    replayed = [
        "notice" if m["message"]["metadata"]["extra"].get(NOTICE_KEY) else m["message"]["role"]
        for m in result.messages
    ]
    assert replayed == live and live[-1] == "notice"


def test_a_recording_that_never_reaches_the_limit_asks_for_no_notice() -> None:
    from turnfsm.replay import Recorder

    async def main() -> dict[str, Any]:
        recorder = Recorder(ScriptedLLM([{"text": "Hi!"}]))
        async with Engine(llm=recorder.llm, max_iterations=LIMIT) as engine:
            await recorder.start(engine)
            await recorder.send("Hello")
            return await recorder.script()

    script = anyio.run(main)
    assert "limit_notice" not in script["config"]
    assert script["config"]["max_iterations"] == LIMIT
