"""``turnfsm chat``'s model: the endpoint the options name (or the demo
model), its failures that are setup problems, the modes and the defaults."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from ..adapters.llm import LLMChunk, LLMRequest
from ..engine import Mode
from ..errors import LLMError
from ..model import MessageType
from ..tools import Tool
from ._demo_tools import builtin_tools
from ._errors import CLIError
from ._imports import llm_label, load_llm, load_tools
from ._providers import (
    DEFAULT_PROVIDER,
    PLACEHOLDER_KEY,
    PROVIDERS,
    Provider,
    open_provider,
    provider_named,
    provider_of,
)

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_SYSTEM",
    "MODES",
    "MODE_NAMES",
    "PLACEHOLDER_KEY",
    "ApproveMode",
    "ModelSetup",
    "Watched",
    "check_message",
    "open_model",
    "setup_problem",
]

DEFAULT_MODEL = PROVIDERS[DEFAULT_PROVIDER].default_model
DEFAULT_SYSTEM = (
    "You are a helpful assistant in a terminal. You can tell the time, do arithmetic "
    "and read text files in the user's working directory with your tools."
)

ApproveMode = Literal["all", "none", "ask"]

MODES = (
    Mode(
        name="plan",
        instructions=(
            "Plan mode: work out how you would do what the user asks, using your tools "
            "only to look things up, and answer with a short numbered plan. Do not carry "
            "it out; the user will switch to chat mode for that."
        ),
        answer_type=MessageType.PLAN,
    ),
)
"""The modes of the command's engine, beside ``chat`` (the built-in tools only read)."""
MODE_NAMES = ("chat", *(m.name for m in MODES))


def check_message(text: str, where: str) -> str:
    """A message to send: refused when empty or only whitespace."""
    if not text.strip():
        raise CLIError(f"{where}: the message is empty")
    return text


class Watched:
    """The LLM, remembering the last error it raised (to tell setup problems apart)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.last_error: LLMError | None = None

    @property
    def gen_ai_provider_name(self) -> str:
        """The wrapped model's provider, as traces name it (docs/observability.md)."""
        from ..engine._observing._otel_spans import provider_name

        return provider_name(self.llm)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMChunk]:
        self.last_error = None
        inner = self.llm.stream(request)
        try:
            async for chunk in inner:
                yield chunk
        except LLMError as exc:
            self.last_error = exc
            raise
        finally:
            close = getattr(inner, "aclose", None)
            if close is not None:
                await close()


@dataclass
class ModelSetup:
    llm: Any
    endpoint: str
    """Where the model is, for the opening line."""
    tools: list[Tool]
    model: str
    """The model of a new context made without ``--model`` (the provider's
    variable, else its default: :meth:`Provider.model`)."""
    provider: Provider | None = None
    """The provider that answers (``None``: the demo model, or ``--llm``'s)."""

    def shown(self, model: str) -> str:
        """The opening line's model: the provider, the model name a context
        sends (``model``) and where it goes; else what ``endpoint`` says."""
        if self.provider is None:
            return self.endpoint
        return f"{self.provider.name} {model} at {self.endpoint}"


def open_model(args: argparse.Namespace) -> ModelSetup:
    tools = builtin_tools()
    if getattr(args, "ask_user", False):
        # imported when asked for: its arguments model is built on first use, and
        # the first pydantic schema looks up pydantic's plugins (importlib.metadata)
        from ..tools import ask_user

        tools.append(ask_user)
    tools += load_tools(getattr(args, "tools", None) or [])
    named = provider_named(args)
    if args.demo:
        if args.llm is not None:
            raise CLIError("--demo and --llm name two models: give one")
        if named is not None:
            raise CLIError(f"--demo and --provider {named} name two models: give one")
        from ..adapters.llm.demo import DemoLLM
        from ._demo import get_weather

        return ModelSetup(DemoLLM(delay=0.0), "the demo model", [*tools, get_weather], "demo")
    if args.llm is not None:
        if named is not None:
            raise CLIError(f"--llm and --provider {named} name two models: give one")
        llm = load_llm(args.llm)
        label = llm_label(args.llm, llm)
        return ModelSetup(llm, f"model {label} (--llm)", tools, label)
    provider = provider_of(args)
    hint = ""
    if provider.name == DEFAULT_PROVIDER and named is None:
        hint = (
            "; without a key, try the demo model: `turnfsm chat --demo` (or `turnfsm "
            "demo`), or a local server: `turnfsm chat --base-url http://localhost:11434/v1 "
            "--model llama3.2`"
        )
    llm, endpoint = open_provider(
        provider,
        base_url=args.base_url,
        model=args.model,
        timeout=args.timeout,
        stream=not args.no_stream,
        no_key_hint=hint,
    )
    return ModelSetup(llm, endpoint, tools, provider.model(), provider)


def setup_problem(
    error: LLMError | None, endpoint: str, provider: Provider | None = None
) -> str | None:
    """A failure that is a setup problem (exit 2), said in one line (the key
    to check is the provider's: ``OPENAI_API_KEY`` when none is named)."""
    if error is None:
        return None
    if error.kind == "connection" and not error.partial_text:
        return f"cannot reach {endpoint}: {error.message}"
    if error.status in (401, 403):
        keys = (provider or PROVIDERS[DEFAULT_PROVIDER]).keys_named
        return f"{endpoint} refused the API key ({error.describe()}); check {keys} (or --base-url)"
    return None
