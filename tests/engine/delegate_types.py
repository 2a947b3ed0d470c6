"""Checked by the project's mypy (strict; in its configured files), never run: an engine's
delegated methods have, at their call sites, exactly their part's signature."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any, assert_type

from turnfsm import Engine
from turnfsm.engine import Finished, Recovery, Turn
from turnfsm.engine._delegate import Delegate
from turnfsm.engine._subscribers import Subscription


async def calls(engine: Engine) -> None:
    assert_type(await engine.approve("c", ["a"]), Turn)
    assert_type(await engine.deny("c", "a", reason=None), Turn)
    assert_type(await engine.send("c", "hi", message_id="m"), Turn)
    assert_type(await engine.finish("c", keep=True), Finished)
    assert_type(await engine.recover(), Recovery)
    assert_type(await engine.create_context(system_prompt="s"), str)
    assert_type(engine.subscribe("c"), Subscription)
    assert_type(engine.request_cancel("c"), None)
    approve: Callable[[str, str | Sequence[str]], Coroutine[Any, Any, Turn]] = engine.approve
    del approve
    assert_type(await engine.approve(context_id="c", call_ids="a"), Turn)
    on_class: Delegate[..., Coroutine[Any, Any, Turn]] = Engine.approve
    del on_class
    await engine.approve("c", ["a"], "extra")  # type: ignore[call-arg]
    await engine.finish("c", None)  # type: ignore[call-arg]
    await engine.answer("c", call_id=1, text="t")  # type: ignore[arg-type]
