"""The engine as the code around its public class sees it: :class:`EngineAPI`.

Sub-contexts (``_subcontexts``) and workers (``_worker``) call the engine's
public methods (a child is created, sent its task, resumed, decided on,
deleted) and run
calls through its drive loop. They name what they use here, so that they do
not import the public class, which imports them: the engine's modules import
downward only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..adapters.llm import LLM
from ..model import ChatConfig, ChatContext, ContentPart, FrontendOperatorAs
from ..storage import Store
from ..tools import ToolRegistry
from ._drive import Driver
from ._turn import ChildInfo, Turn

__all__ = ["EngineAPI"]


class EngineAPI(Protocol):
    """What ``_subcontexts`` and ``_worker`` use of :class:`~turnfsm.Engine`."""

    _d: Driver

    @property
    def llm(self) -> LLM | None: ...

    @property
    def store(self) -> Store: ...

    @property
    def owner(self) -> str: ...

    @property
    def tools(self) -> ToolRegistry: ...

    async def get_context(self, context_id: str) -> ChatContext: ...

    async def send(
        self,
        context_id: str,
        content: str | Sequence[ContentPart],
        role: str = "user",
        *,
        message_id: str | None = None,
    ) -> Turn: ...

    async def resume(self, context_id: str) -> Turn: ...

    async def approve(self, context_id: str, call_ids: str | Sequence[str]) -> Turn: ...

    async def deny(
        self, context_id: str, call_id: str | Sequence[str], reason: str | None = ""
    ) -> Turn: ...

    async def children(self, context_id: str) -> list[ChildInfo]: ...

    async def delete_context(self, context_id: str) -> list[str]: ...

    async def _create(
        self,
        *,
        system_prompt: str | None,
        model: str,
        mode: str,
        parameters: dict[str, Any] | None,
        user_prompt: str | None,
        agent_role: str,
        workspace_path: str | None,
        parent_id: str | None,
        context_id: str | None,
        title: str | None,
        tools: Sequence[str] | None,
        subtask_call: str | None,
        history: ChatConfig | None = None,
        frontend_operator_as: FrontendOperatorAs | None = None,
    ) -> str: ...
