"""The model providers ``--provider`` names: one table of how each one's
adapter is built, the extra it needs, where its key and endpoint come from
and the model it defaults to.

Every command that runs a model (``chat``, ``record``, ``resume``,
``recover``, ``serve``, ``worker``, ``temporal-worker``) reads its provider
here; adding a provider is one entry of :data:`PROVIDERS`. An adapter is
imported only when its provider is used, so the SDKs of the others need not
be installed.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput
from ._errors import CLIError

__all__ = [
    "DEFAULT_PROVIDER",
    "PLACEHOLDER_KEY",
    "PROVIDERS",
    "Connection",
    "Provider",
    "add_provider_options",
    "open_provider",
    "provider_named",
    "provider_of",
]

PLACEHOLDER_KEY = "not-needed"
"""Sent with a base URL when no key is set (local servers need none)."""


@dataclass(frozen=True)
class Connection:
    """What the options say about the model: passed to a provider's ``make``."""

    model: str | None
    """The model every request names, or ``None``: each context's own model."""
    api_key: str
    base_url: str | None
    """``None``: the provider's own API."""
    timeout: float
    stream: bool


@dataclass(frozen=True)
class Provider:
    """One entry of :data:`PROVIDERS`."""

    name: str
    what: str
    """What it is, for ``--help``."""
    adapter: str
    """``module:attribute`` of the adapter class, imported when first used."""
    sdk: str
    """The module of the SDK the adapter imports (a missing one is a missing extra)."""
    extra: str | None
    """The extra that installs the SDK (``None``: always installed)."""
    key_vars: tuple[str, ...]
    """The variables the key is read from, the first one set winning."""
    base_url_var: str | None
    """The variable the SDK reads its base URL from; ``--base-url`` wins over it."""
    default_model: str
    """The model of a new context when neither ``--model`` nor :attr:`model_var` names one."""
    make: Callable[[Any, Connection], Any]
    """Builds the adapter from its class and the connection."""
    streams_only: bool = False
    """Whether the adapter always streams (``--no-stream`` is refused)."""
    model_var: str | None = None
    """The variable that names the model of a new context; ``--model`` wins over it."""

    def key(self) -> str | None:
        for name in self.key_vars:
            value = os.environ.get(name)
            if value:
                return value
        return None

    def env_base_url(self) -> str | None:
        return (os.environ.get(self.base_url_var) or None) if self.base_url_var else None

    def model(self) -> str:
        """The model of a new context made without ``--model``: :attr:`model_var`'s
        value when it is set and not empty, else :attr:`default_model`."""
        if self.model_var is not None:
            value = os.environ.get(self.model_var, "").strip()
            if value:
                return value
        return self.default_model

    @property
    def keys_named(self) -> str:
        """The key variables, as a sentence names them."""
        return " or ".join(self.key_vars)


def _openai(cls: Any, c: Connection) -> Any:
    return cls(
        base_url=c.base_url, api_key=c.api_key, model=c.model, timeout=c.timeout, stream=c.stream
    )


def _anthropic_or_google(cls: Any, c: Connection) -> Any:
    return cls(c.model, api_key=c.api_key, base_url=c.base_url, timeout=c.timeout)


def _openai_provider(name: str, what: str, adapter: str) -> Provider:
    """One of the OpenAI SDK's APIs: the SDK, key, base URL and model they share."""
    return Provider(
        name=name,
        what=what,
        adapter=f"turnfsm.adapters.llm.openai:{adapter}",
        sdk="openai",
        extra=None,
        key_vars=("OPENAI_API_KEY",),
        base_url_var="OPENAI_BASE_URL",
        # the small model: cheap and quick for a terminal chat, and it calls tools
        default_model="gpt-4o-mini",
        make=_openai,
        model_var="OPENAI_MODEL",
    )


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        _openai_provider(
            "openai",
            "Chat Completions of the OpenAI API or any OpenAI-compatible server",
            "OpenAIChatAdapter",
        ),
        _openai_provider("openai-responses", "the OpenAI Responses API", "OpenAIResponsesAdapter"),
        Provider(
            name="anthropic",
            what="Claude through the Messages API",
            adapter="turnfsm.adapters.llm:AnthropicLLM",
            sdk="anthropic",
            extra="anthropic",
            key_vars=("ANTHROPIC_API_KEY",),
            base_url_var="ANTHROPIC_BASE_URL",
            default_model="claude-haiku-4-5",
            make=_anthropic_or_google,
            streams_only=True,
        ),
        Provider(
            name="google",
            what="Gemini through the Gemini API",
            adapter="turnfsm.adapters.llm:GeminiLLM",
            sdk="google.genai",
            extra="google",
            # the google-genai SDK's order: GOOGLE_API_KEY wins when both are set
            key_vars=("GOOGLE_API_KEY", "GEMINI_API_KEY"),
            base_url_var="GOOGLE_GEMINI_BASE_URL",
            default_model="gemini-2.5-flash",
            make=_anthropic_or_google,
            streams_only=True,
        ),
    )
}
DEFAULT_PROVIDER = "openai"


def add_provider_options(
    p: argparse.ArgumentParser, *, model_help: str, model_note: str = ""
) -> None:
    """``--provider``, ``--responses`` (its alias), ``--base-url`` and ``--model``
    (``model_help``, then the defaults, then ``model_note``)."""
    listed = "; ".join(
        f"{x.name}: {x.what} (${', else $'.join(x.key_vars)}"
        + (f", extra {x.extra})" if x.extra else ")")
        for x in PROVIDERS.values()
    )
    p.add_argument(
        "--provider",
        choices=tuple(PROVIDERS),
        metavar="NAME",
        help=f"who answers ({DEFAULT_PROVIDER} unless given): {listed}",
    )
    urls = ", ".join(f"${x.base_url_var} for {x.name}" for x in _by_base_url_var())
    p.add_argument(
        "--base-url",
        metavar="URL",
        help="the provider's endpoint, e.g. an OpenAI-compatible server at "
        f"http://localhost:11434/v1 (default: {urls}, else the provider's API; the flag "
        "wins over the variable); without a key a placeholder one is sent",
    )
    p.add_argument(
        "--model",
        metavar="NAME",
        help=f"{model_help} (default: {_model_defaults()}; the flag wins over the "
        f"variable{model_note})",
    )
    p.add_argument(
        "--responses",
        action="store_true",
        help="the same as --provider openai-responses (the Responses API)",
    )


def _by_base_url_var() -> list[Provider]:
    """One provider per base URL variable (openai-responses shares openai's)."""
    seen: dict[str | None, Provider] = {}
    for x in PROVIDERS.values():
        seen.setdefault(x.base_url_var, x)
    return [x for var, x in seen.items() if var is not None]


def _model_defaults() -> str:
    """Each provider's default model, as ``--help`` says it: the model
    variable, else the default model (providers that share both, once)."""
    said: dict[tuple[str | None, str], list[str]] = {}
    for x in PROVIDERS.values():
        said.setdefault((x.model_var, x.default_model), []).append(x.name)
    return ", ".join(
        (f"${var}, else " if var else "") + f"{model} for {' and '.join(names)}"
        for (var, model), names in said.items()
    )


def provider_named(args: argparse.Namespace) -> str | None:
    """The provider ``--provider`` or ``--responses`` names (``None``: neither
    was given); both, disagreeing, is an error."""
    given: str | None = getattr(args, "provider", None)
    if getattr(args, "responses", False):
        if given not in (None, "openai-responses"):
            raise CLIError(
                f"--responses is --provider openai-responses, and --provider {given} was "
                "given too: give one"
            )
        return "openai-responses"
    return given


def provider_of(args: argparse.Namespace) -> Provider:
    """The provider the options name, else the default."""
    return PROVIDERS[provider_named(args) or DEFAULT_PROVIDER]


def open_provider(
    provider: Provider,
    *,
    base_url: str | None,
    model: str | None,
    timeout: float,
    stream: bool = True,
    no_key_hint: str = "",
) -> tuple[Any, str]:
    """The provider's adapter and the base URL it calls. The base URL is
    ``base_url`` (``--base-url``), else the provider's variable; the key its
    variables'; with a base URL and no key, a placeholder key is sent.
    Without either, or without the provider's extra, one line (exit 2)."""
    if not stream and provider.streams_only:
        raise CLIError(f"--no-stream: the {provider.name} provider always streams")
    base_url = base_url or provider.env_base_url()
    key = provider.key()
    if key is None and base_url is None:
        raise CLIError(f"no {provider.keys_named} is set and no --base-url was given{no_key_hint}")
    cls = _adapter_class(provider)
    connection = Connection(model, key or PLACEHOLDER_KEY, base_url, timeout, stream)
    try:
        llm = provider.make(cls, connection)
    except InvalidInput as exc:
        raise CLIError(str(exc)) from None
    return llm, str(getattr(llm, "base_url", None) or base_url or f"the {provider.name} API")


def _adapter_class(provider: Provider) -> Any:
    """The provider's adapter class, imported now; a missing SDK is the extra
    to install, a missing adapter says so (one line each)."""
    module, _, attribute = provider.adapter.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except ImportError as exc:
        missing = _missing_module(exc)
        if missing is not None and _within(missing, provider.sdk) and provider.extra:
            raise CLIError(
                f"--provider {provider.name} needs the {provider.extra} extra ({provider.sdk} "
                f"is not installed): pip install 'turnfsm[{provider.extra}]'"
            ) from None
        raise CLIError(
            f"--provider {provider.name}: importing {provider.adapter} failed: {exc}"
        ) from None
    except AttributeError:
        raise CLIError(
            f"--provider {provider.name}: its adapter, {module}.{attribute}, is not in "
            "this version of turnfsm"
        ) from None


def _missing_module(exc: BaseException) -> str | None:
    """The module a ``ModuleNotFoundError`` in ``exc``'s chain could not find."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and current.name:
            return current.name
        current = current.__cause__ or current.__context__
    return None


def _within(missing: str, sdk: str) -> bool:
    """Whether a missing ``missing`` module means ``sdk`` is missing (it, a
    package above it, or a module of it)."""
    return missing == sdk or sdk.startswith(missing + ".") or missing.startswith(sdk + ".")
