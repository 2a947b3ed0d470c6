"""Watching engine calls (docs/observability.md), one module per job:

- ``_observers``: who is asked to watch a call (``Engine.observe``'s observers,
  tracing), and the points where the drive loop reports to the call's watches;
- ``_hooks``: :class:`~turnfsm.engine.Watch`, the hooks of one watched call;
- ``_otel_spans``: the OpenTelemetry spans of a call (GenAI conventions);
- ``_openinference``: the OpenInference attributes beside them (Phoenix).
"""
