"""Prometheus export under client-go's names (needs ``prometheus_client``: ``pip install 'keyqueue[metrics]'``).

:class:`PrometheusMetricsProvider` is a :class:`~keyqueue.metrics.SnapshotMetricsProvider` (counting happens inside
each queue, under its lock) plus a collector that turns a snapshot into the seven metric families of client-go's
standard adapter (``k8s.io/component-base/metrics/prometheus/workqueue``) at scrape time: same names, types, help
texts, label ``name`` and histogram buckets. No ``*_created`` samples are produced. With ``priority_label=True``
``workqueue_depth`` alone also carries controller-runtime's ``priority`` label (see
:class:`PrometheusMetricsProvider`). :func:`serve` publishes a registry on ``/metrics``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from keyqueue.metrics.snapshot import PLAIN_PRIORITY_LABEL, HistogramSnapshot, QueueMetrics, SnapshotMetricsProvider

__all__ = ["HELP", "MetricsServer", "PrometheusMetricsProvider", "serve"]

#: Metric name -> help text, as declared by client-go's standard Prometheus adapter (component-base prefixes its
#: stability level, e.g. "[BETA] ", when it registers them; that prefix is not part of the declared text).
HELP: Final[dict[str, str]] = {
    "workqueue_depth": "Current depth of workqueue",
    "workqueue_adds_total": "Total number of adds handled by workqueue",
    "workqueue_queue_duration_seconds": "How long in seconds an item stays in workqueue before being requested.",
    "workqueue_work_duration_seconds": "How long in seconds processing an item from workqueue takes.",
    "workqueue_unfinished_work_seconds": (
        "How many seconds of work has done that is in progress and hasn't been observed by work_duration. "
        "Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate "
        "at which this increases."
    ),
    "workqueue_longest_running_processor_seconds": (
        "How many seconds has the longest running processor for workqueue been running."
    ),
    "workqueue_retries_total": "Total number of retries handled by workqueue",
}

# The `le` label values exactly as Go's client writes them (shortest form: "1" and "10", not "1.0" and "10.0").
_LE: Final = ("1e-08", "1e-07", "1e-06", "1e-05", "0.0001", "0.001", "0.01", "0.1", "1", "10")

_LABELS: Final = ("name",)
_DEPTH_PRIORITY_LABELS: Final = ("name", "priority")


def _families(snapshot: dict[str, QueueMetrics], priority_label: bool) -> Iterator[Metric]:
    depth = GaugeMetricFamily(
        "workqueue_depth", HELP["workqueue_depth"], labels=_DEPTH_PRIORITY_LABELS if priority_label else _LABELS
    )
    adds = CounterMetricFamily("workqueue_adds_total", HELP["workqueue_adds_total"], labels=_LABELS)
    queue_duration = HistogramMetricFamily(
        "workqueue_queue_duration_seconds", HELP["workqueue_queue_duration_seconds"], labels=_LABELS
    )
    work_duration = HistogramMetricFamily(
        "workqueue_work_duration_seconds", HELP["workqueue_work_duration_seconds"], labels=_LABELS
    )
    unfinished = GaugeMetricFamily(
        "workqueue_unfinished_work_seconds", HELP["workqueue_unfinished_work_seconds"], labels=_LABELS
    )
    longest = GaugeMetricFamily(
        "workqueue_longest_running_processor_seconds",
        HELP["workqueue_longest_running_processor_seconds"],
        labels=_LABELS,
    )
    retries = CounterMetricFamily("workqueue_retries_total", HELP["workqueue_retries_total"], labels=_LABELS)
    for name, m in snapshot.items():
        label = [name]
        if not priority_label:
            depth.add_metric(label, m.depth)  # a priority queue's total: its ready keys over all priorities
        elif m.depth_by_priority is None:
            depth.add_metric([name, PLAIN_PRIORITY_LABEL], m.depth)
        else:
            for priority, n in m.depth_by_priority.items():
                depth.add_metric([name, priority], n)
        adds.add_metric(label, m.adds)  # no `created=`: no *_created sample
        queue_duration.add_metric(label, _buckets(m.queue_duration), m.queue_duration.sum)
        work_duration.add_metric(label, _buckets(m.work_duration), m.work_duration.sum)
        unfinished.add_metric(label, m.unfinished_work_seconds)
        longest.add_metric(label, m.longest_running_processor_seconds)
        retries.add_metric(label, m.retries)
    yield from (adds, depth, longest, queue_duration, retries, unfinished, work_duration)


def _buckets(h: HistogramSnapshot) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = [(le, n) for le, (_, n) in zip(_LE, h.buckets, strict=True)]
    out.append(("+Inf", h.count))
    return out


class _Collector:
    """The registry-facing side of one provider: a snapshot rendered as metric families at each scrape."""

    def __init__(self, provider: SnapshotMetricsProvider, priority_label: bool) -> None:
        self._provider = provider
        self._priority_label = priority_label

    def collect(self) -> Iterator[Metric]:
        snapshot = self._provider.snapshot()
        if snapshot:  # no named queue yet: export nothing at all (as an unused Go metric vector does)
            yield from _families(snapshot, self._priority_label)

    def describe(self) -> Iterator[Metric]:
        # The names this collector owns, so the registry can refuse a clash at register() time without collecting.
        return _families({}, self._priority_label)


class PrometheusMetricsProvider(SnapshotMetricsProvider):
    """Exports client-go's workqueue metrics, computed at scrape time, into a ``prometheus_client`` registry.

    ``registry``: where to register (default: ``prometheus_client.REGISTRY``); registration happens here, at
    construction. Raises ``ValueError`` if the registry already has metrics with these names (e.g. another
    ``PrometheusMetricsProvider``): reuse that provider for all queues, or give each provider its own registry.
    Several queues with different names share one provider; two queues with the same name share one series (their
    counts add up). Queues with an empty name export nothing; until a named queue exists nothing is exported.

    Each scrape takes every live queue's lock once, briefly, to copy its counters; nothing runs in the background.

    What is exported, per queue name:

    * ``priority_label=False`` (default; client-go's exposition, for existing dashboards): all seven families
      carry exactly one label, ``name``. ``workqueue_depth`` of a priority queue is its total ready keys (keys
      waiting for a delay are not counted). No ``priority`` label appears anywhere.
    * ``priority_label=True`` (controller-runtime's flavour): ``workqueue_depth`` carries ``name`` and
      ``priority``; the other six families still carry only ``name``. A plain queue's depth is one series with
      ``priority=""``. A priority queue's ready keys are split by the priority they are ready at: one series per
      label, the decimal priority (``"-5"``, ``"0"``, ``"10"``) for each of the queue's first 25 distinct
      priorities, and ``exceeded_cardinality_limit`` for every later one (the queue's own cap,
      :class:`keyqueue.priority.PriorityDepth`); a label once given stays, at 0 when empty, while the queue lives.
      The series of one name sum to its depth in the default mode. Queues sharing a name add up per label (each
      priority queue caps its own labels).

    Raises ``TypeError`` for a ``registry`` that is not a ``CollectorRegistry`` or a ``priority_label`` that is not
    a ``bool`` (nothing is registered then).
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, priority_label: bool = False) -> None:
        super().__init__()
        if registry is not None and not isinstance(registry, CollectorRegistry):
            raise TypeError(
                f"registry must be a prometheus_client CollectorRegistry, got {type(registry).__name__}: "
                f"{registry!r:.80}"
            )
        if not isinstance(priority_label, bool):
            raise TypeError(
                f"priority_label must be a bool, got {type(priority_label).__name__}: {priority_label!r:.80}"
            )
        self.registry: CollectorRegistry = REGISTRY if registry is None else registry
        #: Whether ``workqueue_depth`` carries the ``priority`` label (fixed at construction).
        self.priority_label: Final = priority_label
        self._collector = _Collector(self, priority_label)
        try:
            self.registry.register(self._collector)
        except ValueError as exc:
            raise ValueError(
                "this registry already has workqueue_* metrics (another PrometheusMetricsProvider?); reuse that "
                f"provider or pass a separate registry: {exc}"
            ) from None

    def unregister(self) -> None:
        """Remove this provider's metrics from its registry (the queues keep counting). Idempotent."""
        with contextlib.suppress(KeyError):
            self.registry.unregister(self._collector)


# -- serving /metrics ---------------------------------------------------------------------------------------------


_POLL_INTERVAL: Final = 0.05  # seconds; bounds how long MetricsServer.close() waits for the serving loop


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Do not log every scrape to stderr."""


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


@dataclass(frozen=True)
class MetricsServer:
    """A running ``/metrics`` endpoint (from :func:`serve`). Use :meth:`close` or ``with`` to stop it."""

    server: WSGIServer
    thread: threading.Thread
    port: int
    url: str

    def close(self, timeout: float = 5.0) -> None:
        """Stop serving and release the port. Blocks until the serving loop has stopped (it notices within
        about 50 ms), then joins its thread for at most ``timeout`` seconds. A scrape being answered at that
        moment finishes in its own daemon thread; it is not waited for."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(port: int = 0, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None) -> MetricsServer:
    """Serve ``registry`` (default: ``prometheus_client.REGISTRY``) in the Prometheus text format over HTTP, from a
    daemon thread, and return at once. ``port=0`` picks a free port: read it from the result's ``port``/``url``.

    One line for a process: ``serve(9100, registry=PrometheusMetricsProvider(reg).registry)``. Any path answers
    (``/metrics`` by convention). Raises ``OSError`` if the address cannot be bound, ``ValueError`` for a port
    outside 0..65535 and ``TypeError`` for an ``addr`` that is not a ``str`` or a ``registry`` that is not a
    ``CollectorRegistry`` (e.g. the provider itself instead of its ``.registry``); nothing is started then.
    """
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int in 0..65535, got {type(port).__name__}: {port!r}")
    if not isinstance(addr, str):
        raise TypeError(f"addr must be a str, got {type(addr).__name__}: {addr!r:.80}")
    if registry is not None and not isinstance(registry, CollectorRegistry):
        hint = " (pass provider.registry)" if isinstance(registry, PrometheusMetricsProvider) else ""
        raise TypeError(
            f"registry must be a prometheus_client CollectorRegistry{hint}, got {type(registry).__name__}: "
            f"{registry!r:.80}"
        )
    app = make_wsgi_app(REGISTRY if registry is None else registry)
    server_class = _ThreadingServer6 if ":" in addr else _ThreadingServer
    httpd = make_server(addr, port, app, server_class, handler_class=_QuietHandler)
    bound = int(httpd.server_address[1])
    host = f"[{addr}]" if ":" in addr else addr
    # serve_forever polls for shutdown every poll_interval s; the default 0.5 s would make every close() that long.
    thread = threading.Thread(
        target=httpd.serve_forever, args=(_POLL_INTERVAL,), name=f"keyqueue-metrics:{bound}", daemon=True
    )
    thread.start()
    return MetricsServer(httpd, thread, bound, f"http://{host}:{bound}/metrics")
