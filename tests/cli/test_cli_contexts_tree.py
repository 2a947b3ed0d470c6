"""``turnfsm contexts show --tree`` draws a context's sub-contexts; ``contexts
delete`` keeps the engine's rule for a parent (refused while a sub-context is
not finished)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from turnfsm import Engine, FinalAnswer
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

from .conftest import Cli, contexts


def _make(url: str) -> tuple[str, str, str]:
    async def go() -> tuple[str, str, str]:
        llm = ScriptedLLM([{"text": "a"}, {"text": "b"}])
        engine = Engine(llm=llm, store=url, clock=FakeClock(), ids=SequentialIds())
        async with engine:
            root = await engine.create_context(title="Root")
            one = await engine.spawn(root, "first", title="One")
            two = await engine.spawn(one.context_id, "second")
            await engine.finish(two.context_id, summarizer=FinalAnswer(), keep=True)
            return root, one.context_id, two.context_id

    return anyio.run(go)


def test_show_draws_the_tree_and_delete_keeps_the_rule(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    root, one, two = _make(url)
    ran = cli("contexts", "show", one, "--tree", "--store", url)
    assert ran.code == 0, ran.err
    assert ran.out.splitlines() == [
        f'{root}  Idle  "Root"',
        f'└── {one} *  Idle  "One"',
        f"    └── {two}  Idle  (finished)",
    ]
    ran = cli("contexts", "show", root, "--store", url)
    tree = json.loads(ran.out)["tree"]
    assert tree["id"] == root and [c["id"] for c in tree["children"]] == [one]
    assert tree["children"][0]["children"][0] == {
        "id": two,
        "state": "Idle",
        "title": None,
        "finished": True,
        "children": [],
    }
    ran = cli("contexts", "delete", root, "--store", url)
    assert ran.code == 2 and "not finished" in ran.one_line() and one in ran.err
    assert {c["id"] for c in contexts(cli, url)} == {root, one, two}
    ran = cli("contexts", "delete", one, "--store", url)
    assert ran.code == 0, ran.err
    assert ran.out.splitlines() == [f"deleted {two}", f"deleted {one}"]
    assert [c["id"] for c in contexts(cli, url)] == [root]
