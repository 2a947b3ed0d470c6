"""engine.messages: a branch's messages, a page at a time."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit import make_engine

from turnfsm.errors import BranchError, InvalidInput
from turnfsm.storage import SQLiteStore

pytestmark = pytest.mark.anyio


async def test_pages_of_the_active_and_another_branch(tmp_path: Path) -> None:
    answers = [{"text": f"answer {i}"} for i in range(6)]
    engine, _, _ = make_engine(answers, store=SQLiteStore(tmp_path / "s.db"))
    async with engine:
        cid = await engine.create_context()
        for i in range(5):
            await engine.send(cid, f"question {i}")
        texts = [n.message.text for n in await engine.messages(cid)]
        assert texts == [t for i in range(5) for t in (f"question {i}", f"answer {i}")]
        page = await engine.messages(cid, offset=2, limit=3)
        assert [n.message.text for n in page] == ["question 1", "answer 1", "question 2"]
        assert await engine.messages(cid, offset=50) == []
        assert await engine.messages(cid, limit=0) == []
        await engine.fork(cid, "alt", at=1)
        await engine.send(cid, "other")
        alt = await engine.messages(cid, offset=2)
        assert [n.message.text for n in alt] == ["other", "answer 5"]
        main = await engine.messages(cid, branch="main", offset=8)
        assert [n.message.text for n in main] == ["question 4", "answer 4"]
        # the same pages from the store, once the context is unloaded
        await engine.unload(cid)
        assert [n.id for n in await engine.messages(cid, branch="main", offset=8)] == [
            n.id for n in main
        ]
        with pytest.raises(BranchError):
            await engine.messages(cid, branch="nope")
        for kwargs in ({"offset": -1}, {"limit": -1}, {"offset": True}, {"limit": "3"}):
            with pytest.raises(InvalidInput):
                await engine.messages(cid, **kwargs)  # type: ignore[arg-type]
