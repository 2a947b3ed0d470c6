"""The engine's settings as read-only properties (and its one setter,
``llm``), read from the one :class:`~turnfsm.engine._settings.Settings`
object that the drive loop holds: a base of :class:`~turnfsm.engine.Engine`."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from ..adapters.llm import LLM
from ..enhancers import Enhancer
from ..storage import Store
from ..tools import ToolRegistry
from ._clock import Clock
from ._drive import Driver
from ._modes import Mode
from ._retry import RetryPolicy

__all__ = ["EngineSettings"]


class EngineSettings:
    """The settings an :class:`~turnfsm.engine.Engine` was made with."""

    _d: Driver

    @property
    def llm(self) -> LLM | None:
        return self._d.settings.llm

    @llm.setter
    def llm(self, llm: LLM | None) -> None:
        d = self._d
        d.settings = dataclasses.replace(d.settings, llm=llm)

    @property
    def tools(self) -> ToolRegistry:
        return self._d.settings.tools

    @property
    def modes(self) -> tuple[Mode, ...]:
        """The engine's modes (``chat`` first unless it was given one)."""
        return tuple(self._d.settings.modes)

    @property
    def store(self) -> Store:
        return self._d.settings.store

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._d.settings.retry_policy

    @property
    def max_iterations(self) -> int:
        return self._d.settings.max_iterations

    @property
    def limit_notice(self) -> bool:
        """Whether a turn stopped at ``max_iterations`` stores a notice saying so."""
        return self._d.settings.limit_notice

    @property
    def clock(self) -> Clock:
        return self._d.settings.clock

    @property
    def enhancers(self) -> tuple[Enhancer, ...]:
        return self._d.settings.enhancers

    @property
    def max_loaded(self) -> int:
        return self._d.settings.max_loaded

    @property
    def max_loaded_messages(self) -> int:
        return self._d.settings.max_loaded_messages

    @property
    def lease_ttl(self) -> float:
        return self._d.settings.lease_ttl

    @property
    def owner(self) -> str:
        """This engine's name on the leases it takes (one per Engine object)."""
        return self._d.settings.owner

    @property
    def output_type(self) -> Any:
        """The engine's default output type, as a copy of its JSON Schema (None: none)."""
        typed = self._d.settings.outputs.default
        return None if typed is None else copy.deepcopy(typed.schema)

    @property
    def output_retries(self) -> int:
        """How many answers that miss the output type are sent back, by default."""
        return self._d.settings.outputs.retries

    @property
    def leases(self) -> bool:
        """Whether a running call's lease is renewed (``Engine(leases=False)``: not)."""
        return self._d.settings.leases

    @property
    def threads(self) -> bool:
        """Whether a sync summarizer runs in a worker thread (``threads=False``: not)."""
        return self._d.settings.threads
