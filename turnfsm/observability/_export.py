"""OTLP export for ``turnfsm serve``, ``worker`` and ``chat``: the OpenTelemetry
SDK, set up as the standard environment variables ask (docs/observability.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

__all__ = ["TelemetrySetupError", "tracing_from_env"]


class TelemetrySetupError(Exception):
    """The environment asks for an export that cannot be set up (the ``otel``
    extra is missing, an exporter or protocol turnfsm does not offer)."""


_ON = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def _exporters_asked(env: Mapping[str, str]) -> list[str]:
    """The trace exporters the environment names (``[]``: none)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [n for n in names if n]
    if not names:
        # no exporter named: OTLP when an endpoint is given, else nothing
        return ["otlp"] if any(env.get(k) for k in _ON) else []
    return [n for n in names if n != "none"]


def tracing_from_env(
    service_name: str, env: Mapping[str, str] | None = None
) -> Callable[[], None] | None:
    """Set the process's tracer provider when the environment asks for an
    export, and return the function that flushes and ends it (call it on
    exit); None when nothing is asked (the engine then traces nothing).

    Asked for by ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, ``none``;
    comma-separated), or by an OTLP endpoint alone
    (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``);
    ``OTEL_SDK_DISABLED=true`` turns it off. OTLP goes over HTTP with
    protobuf (``http/protobuf``, the SDK's exporter reads the endpoint,
    headers, timeout and compression from its own variables); spans are sent
    in batches (``OTEL_BSP_*``). ``service_name`` is the resource's
    ``service.name`` unless ``OTEL_SERVICE_NAME`` or
    ``OTEL_RESOURCE_ATTRIBUTES`` give one.
    """
    env = os.environ if env is None else env
    names = _exporters_asked(env)
    if not names:
        return None
    for name in names:
        if name not in ("otlp", "console"):
            raise TelemetrySetupError(
                f"OTEL_TRACES_EXPORTER={name!r}: turnfsm exports traces with 'otlp' "
                "(OTLP over HTTP) or 'console'"
            )
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if "otlp" in names and protocol != "http/protobuf":
        raise TelemetrySetupError(
            f"OTLP protocol {protocol!r}: turnfsm exports OTLP over HTTP with protobuf "
            "(OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)"
        )
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )

        exporters: list[SpanExporter] = []
        for name in names:
            if name == "otlp":
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )

                exporters.append(OTLPSpanExporter())
            else:
                exporters.append(ConsoleSpanExporter())
    except ImportError as exc:
        raise TelemetrySetupError(
            f"exporting traces needs the otel extra ({exc.name} is missing): "
            "pip install 'turnfsm[otel]'"
        ) from None
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider.shutdown
