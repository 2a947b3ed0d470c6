"""The public test kit: deterministic clock and ids, the scripted LLM.

::

    from turnfsm import Engine
    from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds

    engine = Engine(llm=ScriptedLLM([{"text": "Hi!"}]), clock=FakeClock(), ids=SequentialIds())
"""

from __future__ import annotations

from .adapters.llm import AnswerSpec, ScriptedLLM
from .engine import FakeClock, SequentialIds

__all__ = ["AnswerSpec", "FakeClock", "ScriptedLLM", "SequentialIds"]
