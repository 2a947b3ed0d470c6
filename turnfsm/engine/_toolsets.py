"""An engine's toolsets while it is entered (:class:`EngineToolsets`): started
by ``async with``, their tools joined to the engine's own, a change of a
toolset's list offered from the next request on, stopped by ``aclose``
(docs/mcp.md)."""

from __future__ import annotations

from ..tools import Toolset, merge_tools
from ._drive import Driver

__all__ = ["EngineToolsets"]


class EngineToolsets:
    """The toolsets of one engine, and the tools it had of its own."""

    def __init__(self, driver: Driver, toolsets: tuple[Toolset, ...]) -> None:
        self.driver = driver
        self.toolsets = toolsets
        self.own_tools = tuple(driver.settings.tools)

    async def start(self) -> None:
        """Start every toolset (those started are stopped again if one fails)
        and offer their tools."""
        started: list[Toolset] = []
        try:
            for toolset in self.toolsets:
                started.append(toolset)
                await toolset.start()
            self._use_tools(strict=True)
        except BaseException:
            for toolset in reversed(started):
                await toolset.aclose()
            raise
        for toolset in self.toolsets:
            toolset.on_change(self._changed)

    def _changed(self) -> None:
        self._use_tools(strict=False)

    def _use_tools(self, *, strict: bool) -> None:
        driver = self.driver
        tools = merge_tools(self.own_tools, self.toolsets, strict=strict)
        driver.settings = driver.settings.with_tools(tools)

    async def close(self) -> None:
        """Stop every toolset; the engine offers its own tools only again."""
        # each toolset shields its own stopping (a toolset may hold a task
        # group entered by this task, which no scope of ours may wrap)
        for toolset in reversed(self.toolsets):
            await toolset.aclose()
        driver = self.driver
        if len(driver.settings.tools) != len(self.own_tools):  # a closed toolset offers nothing
            driver.settings = driver.settings.with_tools(self.own_tools)
