"""L2: the prompt preparation pipeline.

An enhancer shapes the request view the LLM will see; it never changes stored
history. Each gets the request built so far and the context, and returns the
request to send: it may assign new values to the request's fields (the request
object is fresh for every call) but must never mutate the lists it was given,
which the engine keeps incrementally.
"""

from ._base import Enhancer, SystemPromptEnhancer, ToolDefinitionsEnhancer, ToolHistoryTrimmer

__all__ = ["Enhancer", "SystemPromptEnhancer", "ToolDefinitionsEnhancer", "ToolHistoryTrimmer"]
