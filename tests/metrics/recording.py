"""A MetricsProvider for tests that records every call, like client-go's testMetricsProvider."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Gauge:
    value: float = 0.0
    calls: int = 0
    lowest: float = 0.0  # the smallest value it ever had

    def inc(self) -> None:
        self.value += 1
        self.calls += 1

    def dec(self) -> None:
        self.value -= 1
        self.calls += 1
        self.lowest = min(self.lowest, self.value)

    def set(self, value: float) -> None:
        self.value = value
        self.calls += 1


@dataclass
class Counter:
    value: int = 0

    def inc(self) -> None:
        self.value += 1


@dataclass
class Histogram:
    observations: list[float] = field(default_factory=list)

    def observe(self, value: float) -> None:
        self.observations.append(value)


@dataclass
class QueueSeries:
    depth: Gauge = field(default_factory=Gauge)
    adds: Counter = field(default_factory=Counter)
    latency: Histogram = field(default_factory=Histogram)
    work: Histogram = field(default_factory=Histogram)
    unfinished: Gauge = field(default_factory=Gauge)
    longest: Gauge = field(default_factory=Gauge)
    retries: Counter = field(default_factory=Counter)


class RecordingProvider:
    """One :class:`QueueSeries` per queue name; a second queue with the same name shares it (as client-go's
    Prometheus adapter shares children). ``created`` lists every factory call, to check what the queue asked for."""

    def __init__(self) -> None:
        self.series: dict[str, QueueSeries] = {}
        self.created: list[tuple[str, str]] = []

    def _s(self, kind: str, name: str) -> QueueSeries:
        self.created.append((kind, name))
        return self.series.setdefault(name, QueueSeries())

    def new_depth_metric(self, name: str) -> Gauge:
        return self._s("depth", name).depth

    def new_adds_metric(self, name: str) -> Counter:
        return self._s("adds", name).adds

    def new_latency_metric(self, name: str) -> Histogram:
        return self._s("latency", name).latency

    def new_work_duration_metric(self, name: str) -> Histogram:
        return self._s("work", name).work

    def new_unfinished_work_seconds_metric(self, name: str) -> Gauge:
        return self._s("unfinished", name).unfinished

    def new_longest_running_processor_seconds_metric(self, name: str) -> Gauge:
        return self._s("longest", name).longest

    def new_retries_metric(self, name: str) -> Counter:
        return self._s("retries", name).retries
