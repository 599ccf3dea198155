"""Queue metrics with client-go's semantics and, optionally, its Prometheus names.

Every queue takes ``metrics_provider=`` (default: the process-wide provider set with :func:`set_provider`, a no-op
until then). A queue with an empty ``name`` emits nothing and pays nothing: its core gets no recorder at all.

Three kinds of provider:

* :class:`PrometheusMetricsProvider` (needs ``prometheus_client``, the ``metrics`` extra; imported on first use):
  exports ``workqueue_depth``, ``workqueue_adds_total``, ``workqueue_queue_duration_seconds``,
  ``workqueue_work_duration_seconds``, ``workqueue_unfinished_work_seconds``,
  ``workqueue_longest_running_processor_seconds`` and ``workqueue_retries_total`` with label ``name``, exactly as
  client-go's standard adapter does (``priority_label=True`` adds controller-runtime's ``priority`` label to
  ``workqueue_depth`` only, splitting a priority queue's depth per priority). :func:`serve` publishes a registry on
  ``/metrics``.
* :class:`SnapshotMetricsProvider`: the same numbers as plain Python objects
  (:meth:`~SnapshotMetricsProvider.snapshot`), no dependency. Both count inside the queue, under the queue's
  lock, and compute the in-flight gauges when read.
* any object implementing :class:`MetricsProvider` (client-go's ``MetricsProvider`` interface): the queue calls its
  metric objects on every event, with the queue's lock held; the two in-flight gauges are set after every jump
  of a :class:`~keyqueue.FakeClock` and by :func:`refresh_in_flight`.

Semantics (client-go's): ``depth`` counts dirty keys (waiting, or re-added while being processed); ``adds``
counts adds that made a key dirty; queue duration runs from that add to ``get``, work duration from ``get`` to
``done``; retries count accepted ``add_after`` calls. Durations are integer nanoseconds of the queue's clock
divided by 1e9.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from keyqueue.clock import Clock
from keyqueue.metrics._recorders import LockLike, PullRecorder, PushRecorder
from keyqueue.metrics.interfaces import (
    CounterMetric,
    GaugeMetric,
    HistogramMetric,
    MetricsProvider,
    NoopMetricsProvider,
    SettableGaugeMetric,
)
from keyqueue.metrics.snapshot import BUCKETS, HistogramSnapshot, QueueMetrics, SnapshotMetricsProvider

if TYPE_CHECKING:
    from keyqueue.metrics.prometheus import MetricsServer as MetricsServer
    from keyqueue.metrics.prometheus import PrometheusMetricsProvider as PrometheusMetricsProvider
    from keyqueue.metrics.prometheus import serve as serve

# PrometheusMetricsProvider, MetricsServer and serve are importable from here too (loaded on first use, see
# __getattr__); they are left out of __all__ so that a star-import works without prometheus_client.
__all__ = [
    "BUCKETS",
    "CounterMetric",
    "GaugeMetric",
    "HistogramMetric",
    "HistogramSnapshot",
    "MetricsProvider",
    "NoopMetricsProvider",
    "QueueMetrics",
    "SettableGaugeMetric",
    "SnapshotMetricsProvider",
    "get_provider",
    "recorder_for",
    "refresh_in_flight",
    "set_provider",
]


AnyProvider = MetricsProvider | SnapshotMetricsProvider

_METHODS = (
    "new_depth_metric",
    "new_adds_metric",
    "new_latency_metric",
    "new_work_duration_metric",
    "new_unfinished_work_seconds_metric",
    "new_longest_running_processor_seconds_metric",
    "new_retries_metric",
)


def _check_provider(provider: object) -> AnyProvider:
    if isinstance(provider, SnapshotMetricsProvider):
        return provider
    missing = [m for m in _METHODS if not callable(getattr(provider, m, None))]
    if missing:
        raise TypeError(
            "a metrics provider must be a SnapshotMetricsProvider/PrometheusMetricsProvider or implement "
            f"MetricsProvider (missing {', '.join(missing)}); got {type(provider).__name__}: {provider!r:.80}"
        )
    return provider  # type: ignore[return-value]  # duck-typed: it has all seven factory methods


# -- the process-wide provider ---------------------------------------------------------------------------------

_global_lock = threading.Lock()
_global_provider: AnyProvider = NoopMetricsProvider()


def set_provider(provider: AnyProvider | None) -> AnyProvider:
    """Make ``provider`` the process-wide default (``None``: back to the no-op provider). Returns the previous one.

    Like client-go's ``SetProvider`` it affects only queues built afterwards without ``metrics_provider=``; unlike
    it, every call takes effect (client-go honours only the first), so tests can install and restore providers.
    Raises ``TypeError`` (naming the type) for an object that is not a provider; nothing changes then.
    """
    global _global_provider
    new = NoopMetricsProvider() if provider is None else _check_provider(provider)
    with _global_lock:
        previous, _global_provider = _global_provider, new
    return previous


def get_provider() -> AnyProvider:
    """The process-wide default provider (a :class:`NoopMetricsProvider` until :func:`set_provider`)."""
    return _global_provider


# -- hooking a queue up -------------------------------------------------------------------------------------------

_push_lock = threading.Lock()
_push_recorders: weakref.WeakSet[PushRecorder] = weakref.WeakSet()


def recorder_for(
    name: str, provider: object, clock: Clock, lock: LockLike | None
) -> PullRecorder | PushRecorder | None:
    """The metrics hooks for a queue called ``name``, or ``None`` when it emits nothing (the core then does one
    ``is not None`` check per event and nothing else).

    ``provider``: the queue's ``metrics_provider=`` argument; ``None`` means the process-wide provider.
    ``clock``/``lock``: the queue's clock and the lock under which the core is called (``None`` for a shell that is
    confined to one thread). Returns ``None`` for an empty name or a :class:`NoopMetricsProvider`. Raises
    ``TypeError`` for a provider of the wrong type (even with an empty name, so the mistake shows at once).
    """
    chosen = _global_provider if provider is None else _check_provider(provider)
    if not name or isinstance(chosen, NoopMetricsProvider):
        return None
    if isinstance(chosen, SnapshotMetricsProvider):
        recorder: PullRecorder = chosen._recorder(name, clock, lock)
        return recorder
    push = PushRecorder(chosen, name, clock, lock)
    with _push_lock:
        _push_recorders.add(push)
    return push


def refresh_in_flight() -> None:
    """Set the unfinished-work and longest-running gauges of every live queue whose provider is a plain
    :class:`MetricsProvider` (client-go runs this every 500 ms; keyqueue has no background thread, so call it
    before a scrape or from your own timer). Takes each queue's lock in turn. Snapshot and Prometheus providers do
    not need it: they compute these gauges when read."""
    with _push_lock:
        recorders = list(_push_recorders)
    for recorder in recorders:
        recorder.refresh()


_LAZY = {"PrometheusMetricsProvider", "MetricsServer", "serve"}


def __getattr__(attr: str) -> Any:
    # PEP 562: the Prometheus pieces import prometheus_client only when first used, so `import keyqueue` works
    # without the optional dependency.
    if attr in _LAZY:
        try:
            from keyqueue.metrics import prometheus
        except ModuleNotFoundError as exc:
            if exc.name is not None and exc.name.split(".")[0] == "prometheus_client":
                raise ImportError(
                    f"keyqueue.metrics.{attr} needs prometheus_client: pip install 'keyqueue[metrics]'"
                ) from exc
            raise
        return getattr(prometheus, attr)
    raise AttributeError(f"module 'keyqueue.metrics' has no attribute {attr!r}")
