"""The per-queue recorders behind :func:`keyqueue.metrics.recorder_for` (internal).

Both implement :class:`keyqueue._core.MetricsRecorder`. The core calls ``add``/``get``/``done``/``retry`` with the
queue's lock held and with integer-nanosecond timestamps from the queue's clock, so neither recorder takes a lock
of its own on the hot path.

* :class:`PushRecorder` forwards every event to the metric objects of a :class:`~keyqueue.metrics.MetricsProvider`,
  exactly as client-go's ``defaultQueueMetrics`` does; the two in-flight gauges are set by :meth:`PushRecorder.refresh`.
* :class:`PullRecorder` only counts, in plain Python ints and lists; a
  :class:`~keyqueue.metrics.SnapshotMetricsProvider` reads those counts (under the queue's lock) when it is asked
  for a snapshot, e.g. at Prometheus scrape time.

Both forget a key when it stops needing it: its add time at ``get``, its processing start at ``done``.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_left
from collections.abc import Hashable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol

from keyqueue.clock import Clock

if TYPE_CHECKING:
    from keyqueue.metrics import (
        CounterMetric,
        GaugeMetric,
        HistogramMetric,
        MetricsProvider,
        SettableGaugeMetric,
    )

__all__ = ["BUCKET_BOUNDS_NS", "HIST_SLOTS", "LockLike", "PullRecorder", "PushRecorder", "nanos_to_seconds"]

_NS_PER_S: Final = 1_000_000_000

#: Upper bounds (``le``) of client-go's duration histograms in integer nanoseconds: 1e-8 s, 1e-7 s, ... 10 s.
#: ``d_ns <= BUCKET_BOUNDS_NS[i]`` holds exactly when ``d_ns / 1e9 <= 1e-8 * 10**i`` (division is monotonic and the
#: bounds are exact), so bucketing in nanoseconds gives the same counts as bucketing the float seconds.
BUCKET_BOUNDS_NS: Final = tuple(10**e for e in range(1, 11))

#: Layout of a histogram list in a :class:`PullRecorder`: one count per bound, one for +Inf, then the sum in ns.
HIST_SLOTS: Final = len(BUCKET_BOUNDS_NS) + 2
_SUM: Final = HIST_SLOTS - 1


def nanos_to_seconds(ns: int) -> float:
    """Integer nanoseconds to float seconds (``ns / 1e9``: exact for 50_000 → 5e-05, 25_000 → 2.5e-05 ...)."""
    return ns / _NS_PER_S


class LockLike(Protocol):
    """The queue's lock as a recorder sees it: a context manager (``threading.Lock`` and friends)."""

    def __enter__(self) -> Any: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> Any: ...


def _guard(lock: LockLike | None) -> contextlib.AbstractContextManager[Any]:
    # A shell without a lock (single-threaded) passes None: readers then rely on the atomicity of single reads of
    # built-in containers (len(), list(d.values()) run without switching threads).
    return contextlib.nullcontext() if lock is None else lock


def in_flight_ns(starts: list[int], now_ns: int) -> tuple[int, int]:
    """(Σ (now - start), max (now - start)) over the processing start times, in ns; (0, 0) if none."""
    if not starts:
        return 0, 0
    return now_ns * len(starts) - sum(starts), now_ns - min(starts)


class PushRecorder:
    """Forwards queue events to a :class:`~keyqueue.metrics.MetricsProvider`'s metric objects (client-go's way).

    ``refresh()`` sets the unfinished-work and longest-running gauges from the keys in flight now. It runs after
    every jump of a clock that reports jumps (:class:`~keyqueue.FakeClock.step`, like client-go's ticker on a fake
    clock) and from :func:`keyqueue.metrics.refresh_in_flight` (for real clocks: call it before a scrape or
    periodically).
    """

    __slots__ = (
        "__weakref__",
        "_added",
        "_adds",
        "_clock",
        "_depth",
        "_latency",
        "_lock",
        "_longest",
        "_retries",
        "_started",
        "_unfinished",
        "_work",
    )

    def __init__(self, provider: MetricsProvider, name: str, clock: Clock, lock: LockLike | None) -> None:
        self._depth: GaugeMetric = provider.new_depth_metric(name)
        self._adds: CounterMetric = provider.new_adds_metric(name)
        self._latency: HistogramMetric = provider.new_latency_metric(name)
        self._work: HistogramMetric = provider.new_work_duration_metric(name)
        self._unfinished: SettableGaugeMetric = provider.new_unfinished_work_seconds_metric(name)
        self._longest: SettableGaugeMetric = provider.new_longest_running_processor_seconds_metric(name)
        self._retries: CounterMetric = provider.new_retries_metric(name)
        self._clock = clock
        self._lock = lock
        self._added: dict[Hashable, int] = {}  # key -> time it became dirty (until get)
        self._started: dict[Hashable, int] = {}  # key -> time it was handed out (until done)
        clock.subscribe(self.refresh)

    def add(self, item: Hashable, t_ns: int) -> None:
        self._adds.inc()
        self._depth.inc()
        added = self._added
        if item not in added:
            added[item] = t_ns

    def get(self, item: Hashable, t_ns: int) -> None:
        self._depth.dec()
        self._started[item] = t_ns
        t0 = self._added.pop(item, None)
        if t0 is not None:
            self._latency.observe((t_ns - t0) / _NS_PER_S)

    def done(self, item: Hashable, t_ns: int) -> None:
        t0 = self._started.pop(item, None)
        if t0 is not None:
            self._work.observe((t_ns - t0) / _NS_PER_S)

    def retry(self) -> None:
        self._retries.inc()

    def refresh(self) -> None:
        """Set the unfinished-work and longest-running gauges from the keys being processed now (takes the
        queue's lock; the gauges' ``set`` is called with it held, as in client-go)."""
        with _guard(self._lock):
            total, longest = in_flight_ns(list(self._started.values()), self._clock.now_ns())
            self._unfinished.set(total / _NS_PER_S)
            self._longest.set(longest / _NS_PER_S)


class PullRecorder:
    """Counts queue events in plain ints/lists; a snapshot provider reads them (under the queue's lock) on demand.

    ``counts`` is ``[adds, retries]``; ``queue_hist``/``work_hist`` are :data:`HIST_SLOTS`-long lists (per-bucket
    counts, +Inf, sum in ns). These lists are shared with the provider, which keeps them after the queue is gone so
    that counters never go backwards. Depth is the number of keys with a pending add time: in the core a key has
    one exactly while it is dirty, so ``len(added)`` is client-go's depth and cannot go negative.
    """

    __slots__ = ("__weakref__", "_added", "_started", "clock", "counts", "lock", "queue_hist", "work_hist")

    def __init__(self, clock: Clock, lock: LockLike | None) -> None:
        self.clock = clock
        self.lock = lock
        self.counts = [0, 0]
        self.queue_hist = [0] * HIST_SLOTS
        self.work_hist = [0] * HIST_SLOTS
        self._added: dict[Hashable, int] = {}
        self._started: dict[Hashable, int] = {}

    def add(self, item: Hashable, t_ns: int) -> None:
        added = self._added
        if item not in added:
            added[item] = t_ns
        self.counts[0] += 1

    def get(self, item: Hashable, t_ns: int) -> None:
        self._started[item] = t_ns
        t0 = self._added.pop(item, None)
        if t0 is not None:
            d = t_ns - t0
            h = self.queue_hist
            h[bisect_left(BUCKET_BOUNDS_NS, d)] += 1
            h[_SUM] += d

    def done(self, item: Hashable, t_ns: int) -> None:
        t0 = self._started.pop(item, None)
        if t0 is not None:
            d = t_ns - t0
            h = self.work_hist
            h[bisect_left(BUCKET_BOUNDS_NS, d)] += 1
            h[_SUM] += d

    def retry(self) -> None:
        self.counts[1] += 1

    def read(self) -> tuple[list[int], list[int], list[int], int, list[int], int]:
        """Under the queue's lock: (counts, queue_hist, work_hist, depth, processing starts, clock now)."""
        with _guard(self.lock):
            return (
                list(self.counts),
                list(self.queue_hist),
                list(self.work_hist),
                len(self._added),
                list(self._started.values()),
                self.clock.now_ns(),
            )
