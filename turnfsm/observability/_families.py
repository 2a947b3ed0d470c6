"""Counters and histograms of :class:`~turnfsm.observability.EngineMetrics`
kept in plain numbers and read by prometheus_client at each scrape.

prometheus_client's own ``Counter.inc`` and ``Histogram.observe`` check that
the metric is observable and take a lock per value (a histogram's sum and its
bucket apart), a handful of Python calls each; the observer updates about
twenty values every engine call, in the call's task. Here an update is one
call that takes the metrics' one lock, and a scrape (:meth:`collect`, a
prometheus_client ``Collector``) builds the same families with the same
samples, in the same order, that prometheus_client's metrics would: ``_total``
and ``_created`` of a counter child, the cumulative ``_bucket``\\ s, ``_count``,
``_sum`` and ``_created`` of a histogram child, children in the order they
were first asked for, an unlabelled metric's child from the start.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Sequence
from typing import Generic, TypeVar

from prometheus_client import metrics as _prometheus_metrics
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample
from prometheus_client.utils import INF, floatToGoString

__all__ = [
    "Counted",
    "CountedChild",
    "Histogrammed",
    "HistogrammedChild",
    "Pending",
    "apply",
]


C = TypeVar("C", "CountedChild", "HistogrammedChild")


def _use_created() -> bool:
    """Whether prometheus_client writes ``_created`` series (its
    ``PROMETHEUS_DISABLE_CREATED_SERIES`` and ``disable_created_metrics()``
    decide, in a module global it reads at each scrape of its own metrics)."""
    return bool(getattr(_prometheus_metrics, "_use_created", True))


class CountedChild:
    """One counter's value for one tuple of label values."""

    __slots__ = ("created", "lock", "value")

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (not negative, as a counter only goes up)."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        with self.lock:
            self.value += amount

    def add(self, amount: float) -> None:
        """:meth:`inc` by a checked amount, with the lock held (:func:`apply`)."""
        self.value += amount


class HistogrammedChild:
    """One histogram's buckets, count and sum for one tuple of label values:
    each bucket counted apart (not cumulative) until a scrape adds them up."""

    __slots__ = ("bounds", "counts", "created", "lock", "sum")

    def __init__(self, lock: threading.Lock, bounds: Sequence[float]) -> None:
        self.lock = lock
        self.bounds = bounds
        self.counts = [0.0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        """Count ``amount`` (a duration) in the first bucket whose upper bound
        it does not exceed, and add it to the sum."""
        with self.lock:
            self.add(amount)

    def add(self, amount: float) -> None:
        """:meth:`observe`, with the lock held (:func:`apply`)."""
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


Pending = list[tuple[CountedChild | HistogrammedChild, float]]
"""Updates not yet applied: each child with the amount to add or observe."""


def apply(lock: threading.Lock, pending: Pending) -> None:
    """Apply ``pending`` in one hold of ``lock``, the metrics' lock."""
    with lock:
        for child, amount in pending:
            child.add(amount)


class _Family(Collector, Generic[C]):
    """A metric's children, one per tuple of label values, in a registry."""

    kind = ""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: CollectorRegistry,
        lock: threading.Lock,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.lock = lock
        self.children: dict[tuple[str, ...], C] = {}
        if not self.labelnames:
            self.children[()] = self._child()
        registry.register(self)

    def _child(self) -> C:
        raise NotImplementedError

    def labels(self, *values: str) -> C:
        """The child of these label values (made on first use)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes the labels {self.labelnames}, given {values}")
        with self.lock:
            child = self.children.get(values)
            if child is None:
                child = self.children[values] = self._child()
        return child

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, self.kind)]


class Counted(_Family[CountedChild]):
    """A counter (``NAME_total``, ``NAME_created`` per child)."""

    kind = "counter"

    def _child(self) -> CountedChild:
        return CountedChild(self.lock)

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = _use_created()
        with self.lock:
            rows = [(values, c.value, c.created) for values, c in self.children.items()]
        for values, value, at in rows:
            family.add_metric(values, value, at if created else None)
        return [family]


class Histogrammed(_Family[HistogrammedChild]):
    """A histogram (``NAME_bucket``, ``_count``, ``_sum``, ``_created`` per
    child) over ``buckets`` and ``+Inf``."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
        lock: threading.Lock,
    ) -> None:
        self.bounds = (*(float(b) for b in buckets), INF)
        # (prometheus_client's own spelling of a bound, as its histograms write it)
        self.les = tuple(floatToGoString(b) for b in self.bounds)  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, registry=registry, lock=lock)

    def _child(self) -> HistogrammedChild:
        return HistogrammedChild(self.lock, self.bounds)

    def collect(self) -> list[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = _use_created()
        with self.lock:
            rows = [(k, list(c.counts), c.sum, c.created) for k, c in self.children.items()]
        for values, counts, total, at in rows:
            buckets, seen = [], 0.0
            for le, count in zip(self.les, counts, strict=True):
                seen += count
                buckets.append((le, seen))
            family.add_metric(values, buckets, total)
            if created:
                labels = dict(zip(self.labelnames, values, strict=True))
                family.samples.append(Sample(f"{self.name}_created", labels, at, None, None))
        return [family]
