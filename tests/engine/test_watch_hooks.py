"""A watch is told only of the hooks it overrides: :class:`Watch`'s own do
nothing, so a watch that keeps every one leaves the call unwatched, and one
that lacks a hook is still called on it (and the failure logged)."""

from __future__ import annotations

from typing import Any

import pytest
from kit import make_engine

from turnfsm import tool
from turnfsm.engine import Watch
from turnfsm.engine._observing import _observers
from turnfsm.engine._observing._observers import Watches

pytestmark = pytest.mark.anyio

TOOL_TURN: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "c1", "name": "get_weather", "arguments": {"city": "L"}}]},
    {"text": "done"},
]


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "temp_c": 15}


class _Ended(Watch):
    __slots__ = ("seen",)

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def ended(self, context_id: str, turn: Any, error: BaseException | None) -> None:
        self.seen.append(f"ended {turn.state}")


class _Open(Watch):
    """No slots: an instance may set a hook of its own."""


class _Observer:
    def __init__(self, make: Any) -> None:
        self.make = make

    def begin(self, context_id: str, call: str) -> Any:
        return self.make()


def test_each_hook_goes_to_the_watches_that_override_it() -> None:
    ended = _Ended([])
    watches = Watches([Watch(), ended], log=None)
    assert watches.any()
    assert watches._ended == (ended,)
    assert watches._transition == watches._entered == watches._tools == ()
    assert not watches.llm and not watches.tools
    assert not Watches([Watch(), Watch()], log=None).any()


async def test_a_watch_of_ended_only_is_told_of_each_call_end() -> None:
    seen: list[str] = []
    async with make_engine(TOOL_TURN, tools=[get_weather]).engine as engine:
        engine.observe(_Observer(lambda: _Ended(seen)))
        cid = await engine.create_context()
        turn = await engine.send(cid, "hi")
    assert turn.text == "done"
    assert seen == ["ended Idle"]


async def test_a_watch_that_keeps_every_hook_leaves_the_call_unwatched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Watches | None] = []
    original = _observers.begin

    def begin(*args: Any) -> Any:
        found = original(*args)
        made.append(found)
        return found

    monkeypatch.setattr(_observers, "begin", begin)
    async with make_engine(TOOL_TURN, tools=[get_weather]).engine as engine:
        engine.observe(_Observer(Watch))
        cid = await engine.create_context()
        turn = await engine.send(cid, "hi")
    assert turn.text == "done"
    assert made == [None]


async def test_a_hook_set_on_the_instance_is_called() -> None:
    triggers: list[str] = []

    def make() -> _Open:
        w = _Open()
        w.transition = lambda rt, source, trigger, dest: triggers.append(str(trigger))  # type: ignore[method-assign]
        return w

    async with make_engine(TOOL_TURN, tools=[get_weather]).engine as engine:
        engine.observe(_Observer(make))
        cid = await engine.create_context()
        await engine.send(cid, "hi")
    assert triggers[0] == "user_message" and triggers[-1] == "turn_complete"
    assert len(triggers) == 7


async def test_a_watch_lacking_a_hook_is_called_and_logged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Bare:
        pass

    async with make_engine(TOOL_TURN, tools=[get_weather]).engine as engine:
        engine.observe(_Observer(Bare))
        cid = await engine.create_context()
        turn = await engine.send(cid, "hi")
    assert turn.text == "done"
    printed = capsys.readouterr()
    assert "observer_failed" in printed.out + printed.err
    assert "transition" in printed.out + printed.err


class _Moves(Watch):
    __slots__ = ()

    def transition(self, rt: Any, source: str, trigger: str, dest: str) -> None:
        pass


def test_watches_of_the_same_classes_in_another_order_get_their_own_hooks() -> None:
    # which watch takes which hook is worked out once per sequence of classes
    ended, moves = _Ended([]), _Moves()
    first = Watches([ended, moves], log=None)
    assert first._ended == (ended,) and first._transition == (moves,)
    again = Watches([_Moves(), ended, moves], log=None)
    assert again._ended == (ended,) and again._transition[1:] == (moves,)
    assert len(again._transition) == 2
    swapped = Watches([moves, ended], log=None)
    assert swapped._ended == (ended,) and swapped._transition == (moves,)
    other = _Ended([])
    assert Watches([other, moves], log=None)._ended == (other,)


def test_a_hook_an_instance_sets_is_seen_after_one_of_its_class_without() -> None:
    # instances that may carry hooks of their own are looked at every time
    assert not Watches([_Open()], log=None).any()
    w = _Open()
    w.transition = lambda rt, source, trigger, dest: None  # type: ignore[method-assign]
    assert Watches([_Open(), w], log=None)._transition == (w,)
    assert Watches([w], log=None)._transition == (w,)
