"""What the web view shows of a rich conversation (thinking, a refusal, a cut
answer, a question, a sub-context, two branches), and its pure helpers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import anyio
import httpx
import pytest
from server.conftest import loopback_tls, serve_in_thread

from turnfsm import Engine
from turnfsm.render import SequenceRow, SequenceTurn
from turnfsm.storage import StepLog
from turnfsm.testing import ScriptedLLM
from turnfsm.tools import ask_user

QUESTION = {
    "tool_calls": [
        {
            "id": "q1",
            "name": "ask_user",
            "arguments": {"question": "Which city?", "choices": ["Paris", "Rome"]},
        }
    ]
}


@dataclass
class Rich:
    url: str
    cid: str
    child: str

    def tab(self) -> httpx.Client:
        return httpx.Client(
            verify=loopback_tls(), base_url=self.url, headers={"Origin": self.url}, timeout=30
        )


async def _prepare(db: Path) -> tuple[str, str]:
    llm = ScriptedLLM(
        [
            {"thinking": "The user wants me to think.", "text": "Thought it through."},
            {"refusal": "I can't help with that."},
            {"chunks": ["It was a dark"], "finish_reason": "length"},
            {"text": "child done"},
            {"text": "alt answer"},
            QUESTION,
        ]
    )
    async with Engine(llm=llm, tools=[ask_user], store=f"sqlite:///{db}") as engine:
        cid = await engine.create_context(title="Rich")
        for text in ("think", "refuse", "story"):
            await engine.send(cid, text)
        child = await engine.spawn(cid, "sub task", title="Child task")
        await engine.fork(cid, "alt", at=1)
        await engine.send(cid, "again")
        await engine.switch_branch(cid, "main")
        turn = await engine.send(cid, "weather")
        assert turn.questions, turn
    return cid, child.context_id


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rich]:
    """Contexts made by an engine on the store (no tokens: they are the one tenant's)."""
    from turnfsm.server import ServerConfig, create_app

    db = tmp_path_factory.mktemp("web-rich") / "rich.db"
    cid, child = anyio.run(_prepare, db)
    app = create_app(
        lambda: Engine(
            llm=ScriptedLLM([{"text": "Rome it is."}]), tools=[ask_user], store=f"sqlite:///{db}"
        ),
        ServerConfig(heartbeat=0.5),
    )
    for url in serve_in_thread(app):
        yield Rich(url, cid, child)


def test_thinking_refusals_and_cut_answers_are_marked(rich: Rich) -> None:
    with rich.tab() as tab:
        page = tab.get(f"/contexts/{rich.cid}").text
    thinking = page.split('<details class="thinking">', 1)[1].split("</details>", 1)[0]
    assert "The user wants me to think." in thinking
    assert '<p class="refusal" role="note"><strong>Refused:</strong> I can&#39;t help' in page
    assert "<strong>Truncated</strong>: cut at the token limit" in page
    assert "It was a dark" in page


def test_a_question_has_an_answer_box(rich: Rich) -> None:
    with rich.tab() as tab:
        page = tab.get(f"/contexts/{rich.cid}").text
        assert "Questions for you" in page and ">Which city?</label>" in page
        assert "<option>Paris</option>" in page and "<option>Rome</option>" in page
        assert "Approve ask_user" not in page  # a question is answered, not approved
        r = tab.post(f"/contexts/{rich.cid}/answer", data={"call_id": "q1", "text": "Rome"})
        assert r.status_code == 303
        deadline = time.monotonic() + 20
        while "Rome it is." not in (page := tab.get(f"/contexts/{rich.cid}").text):
            assert time.monotonic() < deadline, "the answer never came"
            time.sleep(0.05)
        assert "Questions for you" not in page


def test_sub_contexts_and_branches(rich: Rich) -> None:
    with rich.tab() as tab:
        page = tab.get(f"/contexts/{rich.cid}").text
        assert f'<a href="/contexts/{rich.child}">Child task</a>' in page
        assert '<option value="alt">alt</option>' in page
        assert "alt answer" not in page
        alt = tab.get(f"/contexts/{rich.cid}?branch=alt").text
        assert "alt answer" in alt and "I can&#39;t help" not in alt
        assert "Make alt active" in alt
        child = tab.get(f"/contexts/{rich.child}").text
        assert f'<a href="/contexts/{rich.cid}">' in child  # the parent
        assert "child done" in child
        assert tab.get(f"/contexts/{rich.cid}?branch=nope").status_code == 404
        audit = tab.get(f"/contexts/{rich.cid}/audit?a=main&b=alt").text
    report = audit.split('<pre id="diff-report">', 1)[1].split("</pre>", 1)[0]
    assert report.startswith("traces differ at index")
    assert 'class="differs"' in audit


# ---------------------------------------------------------------------- pure helpers


def test_same_origin() -> None:
    from turnfsm.server._web import same_origin

    own = "127.0.0.1:8000"
    assert same_origin(own, {"origin": "http://127.0.0.1:8000"})
    assert same_origin(own, {"origin": "https://127.0.0.1:8000"})  # a proxy ended TLS
    assert same_origin(own, {"referer": "http://127.0.0.1:8000/contexts/x"})
    assert not same_origin(own, {})
    assert not same_origin("", {"origin": "http://127.0.0.1:8000"})
    assert not same_origin(own, {"origin": "null", "referer": "http://127.0.0.1:8000/"})
    assert not same_origin(own, {"origin": "http://127.0.0.1:8001"})
    assert not same_origin(own, {"referer": "http://127.0.0.1:8000.evil.example/"})
    assert not same_origin(own, {"origin": "file://127.0.0.1:8000"})


def test_addressed_directly() -> None:
    from turnfsm.server._web import addressed_directly

    for host in ("127.0.0.1:8000", "127.0.0.1", "localhost:8000", "[::1]:8000", "10.0.0.5"):
        assert addressed_directly(host), host
    for host in ("evil.example:8000", "evil.example", "", "[::1", "localhost.evil.example"):
        assert not addressed_directly(host), host


def test_a_hosts_check_is_kept_and_bounded() -> None:
    """The same ``Host`` again is answered from the kept answer, the same one,
    and the kept answers are bounded (a client chooses the header)."""
    from turnfsm.server._web import addressed_directly

    addressed_directly.cache_clear()
    assert addressed_directly("127.0.0.1:8000") and addressed_directly("127.0.0.1:8000")
    assert not addressed_directly("evil.example") and not addressed_directly("evil.example")
    info = addressed_directly.cache_info()
    assert (info.hits, info.misses) == (2, 2)
    assert info.maxsize is not None
    for i in range(info.maxsize + 10):
        addressed_directly(f"h{i}.example")
    assert addressed_directly.cache_info().currsize <= info.maxsize


def test_sequence_rows_are_what_the_table_and_the_mermaid_text_draw() -> None:
    rows = (
        SequenceRow("arrow", "user", "engine", "hi; there <b> #1", "call"),
        SequenceRow("arrow", "LLM", "engine", "answer", "reply"),
        SequenceRow("arrow", "LLM", "engine", "transient error", "failed"),
        SequenceRow("note", "engine", "engine", "1 · user_message → ProcessingUserMessage"),
        SequenceRow("note", "engine", "LLM", "both"),
    )
    drawn = SequenceTurn("c#1", 1, 2, 1, 5, rows, participants=("user", "engine", "LLM"))
    assert drawn.heading == "turnfsm: turn 1 of 2 of context c#1, steps 1 to 5"
    assert drawn.mermaid() == (
        "sequenceDiagram\n"
        "    %% turnfsm: turn 1 of 2 of context c#35;1, steps 1 to 5\n"
        "    participant user\n    participant engine\n    participant LLM\n"
        "    user->>engine: hi#59; there #lt;b#gt; #35;1\n"
        "    LLM-->>engine: answer\n"
        "    LLM--xengine: transient error\n"
        "    Note over engine: 1 · user_message → ProcessingUserMessage\n"
        "    Note over engine,LLM: both\n"
    )
    participants = drawn.participants
    assert rows[1].span(participants) == (1, 2) and rows[1].direction(participants) == "left"
    assert rows[0].span(participants) == (0, 2) and rows[0].direction(participants) == "right"
    assert rows[3].span(participants) == (1, 1)


def test_branch_paths() -> None:
    from turnfsm.server._web import branch_paths

    at = datetime(2026, 1, 1, tzinfo=UTC)

    def step(trigger: str, a: str = "Idle", b: str = "Idle", **detail: str) -> StepLog:
        return StepLog(1, a, trigger, b, at, detail or None)

    steps = [
        step("user_message", "Idle", "ProcessingUserMessage"),
        step("prompt_ready", "ProcessingUserMessage", "AwaitingLLMResponse"),
        step("response_received", "AwaitingLLMResponse", "ProcessingLLMResponse"),
        step("turn_complete", "ProcessingLLMResponse", "Idle"),
        step("branch_forked", branch="alt", forked_from="main"),
        step("user_message", "Idle", "ProcessingUserMessage"),
        step("branch_switched", branch="main", previous="alt"),
        step("reset", "PermanentFailure", "Idle"),
    ]
    paths = branch_paths(steps, ["alt", "main"])
    assert [s.trigger for s in paths["main"].steps] == [
        "user_message",
        "prompt_ready",
        "response_received",
        "turn_complete",
        "reset",
    ]
    assert [s.trigger for s in paths["alt"].steps] == [
        "user_message",
        "prompt_ready",
        "response_received",
        "turn_complete",
        "user_message",
    ]
