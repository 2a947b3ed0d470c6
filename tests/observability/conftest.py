"""Fixtures of the observability tests: an OpenTelemetry SDK whose spans stay
in memory, set as the process's tracer provider for one test only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.util._once import Once

Provider = tuple[TracerProvider, InMemorySpanExporter]


def _reset_global_provider() -> None:
    # the API sets its global provider once per process; the SDK's own tests
    # reset it the same way between tests
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A provider of this test only (not the global one) and its exporter."""
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp, exporter
    tp.shutdown()


@pytest.fixture
def global_spans(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider for this test: what every engine without
    a provider of its own then traces with."""
    tp, exporter = provider
    _reset_global_provider()
    trace.set_tracer_provider(tp)
    yield exporter
    _reset_global_provider()


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]
