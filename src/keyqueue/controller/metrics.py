"""controller-runtime's controller metrics (``controller_runtime_*``), counted in plain ints and exported by a
``prometheus_client`` collector registered once per registry."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any, Final

__all__ = ["RECONCILE_TIME_BUCKETS", "ControllerMetrics", "metrics_for"]

#: ``controller_runtime_reconcile_time_seconds`` bucket bounds (controller-runtime's).
RECONCILE_TIME_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05,
    0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
    0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0,
    2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    6.0, 7.0, 8.0, 9.0, 10.0,
    15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
)  # fmt: skip

_RESULTS: Final = ("error", "requeue_after", "requeue", "success")


class ControllerMetrics:
    """controller-runtime's controller metrics for one controller name, counted in plain ints under a lock and
    exported by a collector registered once per ``prometheus_client`` registry. Thread-safe."""

    __slots__ = (
        "_lock",
        "active_workers",
        "errors",
        "max_concurrent",
        "name",
        "panics",
        "terminal_errors",
        "time_buckets",
        "time_count",
        "time_sum",
        "totals",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self.totals = dict.fromkeys(_RESULTS, 0)
        self.errors = 0
        self.terminal_errors = 0
        self.panics = 0
        self.time_buckets = [0] * len(RECONCILE_TIME_BUCKETS)  # per bucket, not cumulative
        self.time_count = 0
        self.time_sum = 0.0
        self.active_workers = 0
        self.max_concurrent = 0

    def started(self, workers: int) -> None:
        with self._lock:
            self.max_concurrent = workers

    def worker_active(self, delta: int) -> None:
        with self._lock:
            self.active_workers += delta

    def panicked(self) -> None:
        """An unexpected exception that is not recovered (``recover_panic=False``): only the panic counter moves."""
        with self._lock:
            self.panics += 1

    def reconciled(self, result: str, seconds: float, error: bool, terminal: bool, panic: bool) -> None:
        with self._lock:
            self.totals[result] += 1
            if error:
                self.errors += 1
            if terminal:
                self.terminal_errors += 1
            if panic:
                self.panics += 1
            self.time_count += 1
            self.time_sum += seconds
            for i, bound in enumerate(RECONCILE_TIME_BUCKETS):
                if seconds <= bound:
                    self.time_buckets[i] += 1
                    break

    def read(self) -> dict[str, Any]:
        """A consistent copy of every value (histogram buckets cumulative, as exported)."""
        with self._lock:
            cumulative: list[int] = []
            running = 0
            for n in self.time_buckets:
                running += n
                cumulative.append(running)
            return {
                "totals": dict(self.totals),
                "errors": self.errors,
                "terminal_errors": self.terminal_errors,
                "panics": self.panics,
                "time_buckets": cumulative,
                "time_count": self.time_count,
                "time_sum": self.time_sum,
                "active_workers": self.active_workers,
                "max_concurrent": self.max_concurrent,
            }


class _Collector:
    """The ``prometheus_client`` collector of every controller registered in one registry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, ControllerMetrics] = {}

    def metrics_for(self, name: str) -> ControllerMetrics:
        # Controllers with the same name in one registry share one set of series (counters add up).
        with self._lock:
            m = self._by_name.get(name)
            if m is None:
                m = self._by_name[name] = ControllerMetrics(name)
            return m

    def describe(self) -> list[Any]:
        return []  # unchecked collector: the registry does not validate names up front

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        with self._lock:
            controllers = list(self._by_name.values())
        total = CounterMetricFamily(
            "controller_runtime_reconcile", "Total number of reconciliations per controller",
            labels=["controller", "result"],
        )
        errors = CounterMetricFamily(
            "controller_runtime_reconcile_errors", "Total number of reconciliation errors per controller",
            labels=["controller"],
        )
        terminal = CounterMetricFamily(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller", labels=["controller"],
        )
        panics = CounterMetricFamily(
            "controller_runtime_reconcile_panics", "Total number of reconciliation panics per controller",
            labels=["controller"],
        )
        hist = HistogramMetricFamily(
            "controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller",
            labels=["controller"],
        )
        active = GaugeMetricFamily(
            "controller_runtime_active_workers", "Number of currently used workers per controller",
            labels=["controller"],
        )
        maxc = GaugeMetricFamily(
            "controller_runtime_max_concurrent_reconciles", "Maximum number of concurrent reconciles per controller",
            labels=["controller"],
        )
        for m in controllers:
            v = m.read()
            for result, n in v["totals"].items():
                total.add_metric([m.name, result], n)
            errors.add_metric([m.name], v["errors"])
            terminal.add_metric([m.name], v["terminal_errors"])
            panics.add_metric([m.name], v["panics"])
            # `le` as Go writes it ("1", not "1.0")
            buckets = [(f"{b:g}", c) for b, c in zip(RECONCILE_TIME_BUCKETS, v["time_buckets"], strict=True)]
            buckets.append(("+Inf", v["time_count"]))
            hist.add_metric([m.name], buckets, v["time_sum"])
            active.add_metric([m.name], v["active_workers"])
            maxc.add_metric([m.name], v["max_concurrent"])
        yield from (total, errors, terminal, panics, hist, active, maxc)


_collectors_lock = threading.Lock()
_collectors: weakref.WeakKeyDictionary[Any, _Collector] = weakref.WeakKeyDictionary()


def metrics_for(registry: Any, name: str) -> ControllerMetrics:
    """The :class:`ControllerMetrics` of controller ``name`` in ``registry`` (registering the collector on first
    use of that registry). Needs ``prometheus_client`` (the ``metrics`` extra)."""
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = _collectors[registry] = _Collector()
            registry.register(collector)
    return collector.metrics_for(name)
