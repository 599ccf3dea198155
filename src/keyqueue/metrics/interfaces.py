"""client-go's metric interfaces (``MetricsProvider`` and the metric objects it makes) and the no-op provider."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = [
    "CounterMetric",
    "GaugeMetric",
    "HistogramMetric",
    "MetricsProvider",
    "NoopMetricsProvider",
    "SettableGaugeMetric",
]


@runtime_checkable
class GaugeMetric(Protocol):
    """A gauge moved by one: ``depth``."""

    def inc(self) -> None: ...

    def dec(self) -> None: ...


@runtime_checkable
class SettableGaugeMetric(Protocol):
    """A gauge set to a value: unfinished work, longest-running processor (seconds)."""

    def set(self, value: float) -> None: ...


@runtime_checkable
class CounterMetric(Protocol):
    """A counter: adds, retries."""

    def inc(self) -> None: ...


@runtime_checkable
class HistogramMetric(Protocol):
    """A distribution of durations in seconds: queue duration (latency), work duration."""

    def observe(self, value: float) -> None: ...


@runtime_checkable
class MetricsProvider(Protocol):
    """Creates the seven metrics of one queue; called once per metric when a named queue is built.

    The same ``name`` may be asked for again (a second queue with that name); returning the same metric objects
    then makes the two queues share them, as client-go's Prometheus adapter does. The metric objects are called with
    the queue's lock held, so they must not block or call back into the queue. ``prometheus_client``'s
    ``Gauge``/``Counter``/``Histogram`` children fit these interfaces.
    """

    def new_depth_metric(self, name: str) -> GaugeMetric: ...

    def new_adds_metric(self, name: str) -> CounterMetric: ...

    def new_latency_metric(self, name: str) -> HistogramMetric: ...

    def new_work_duration_metric(self, name: str) -> HistogramMetric: ...

    def new_unfinished_work_seconds_metric(self, name: str) -> SettableGaugeMetric: ...

    def new_longest_running_processor_seconds_metric(self, name: str) -> SettableGaugeMetric: ...

    def new_retries_metric(self, name: str) -> CounterMetric: ...


class _NoopMetric:
    __slots__ = ()

    def inc(self) -> None:
        pass

    def dec(self) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


_NOOP_METRIC = _NoopMetric()


class NoopMetricsProvider:
    """Emits nothing (the default). A queue given this provider gets no recorder, so it costs nothing."""

    def new_depth_metric(self, name: str) -> GaugeMetric:
        return _NOOP_METRIC

    def new_adds_metric(self, name: str) -> CounterMetric:
        return _NOOP_METRIC

    def new_latency_metric(self, name: str) -> HistogramMetric:
        return _NOOP_METRIC

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        return _NOOP_METRIC

    def new_unfinished_work_seconds_metric(self, name: str) -> SettableGaugeMetric:
        return _NOOP_METRIC

    def new_longest_running_processor_seconds_metric(self, name: str) -> SettableGaugeMetric:
        return _NOOP_METRIC

    def new_retries_metric(self, name: str) -> CounterMetric:
        return _NOOP_METRIC

    def __repr__(self) -> str:
        return "NoopMetricsProvider()"
