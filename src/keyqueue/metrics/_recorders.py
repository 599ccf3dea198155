"""The per-queue recorders behind :func:`keyqueue.metrics.recorder_for` (internal).

Both implement :class:`keyqueue._core.MetricsRecorder`. The core calls ``add``/``get``/``done``/``retry`` with the
queue's lock held and with integer-nanosecond times from the queue's clock, so neither recorder takes a lock of its
own on the hot path.

* :class:`PushRecorder` forwards every event to the metric objects of a :class:`~keyqueue.metrics.MetricsProvider`,
  as client-go's ``defaultQueueMetrics`` does; the two in-flight gauges are set by :meth:`PushRecorder.refresh`.
* :class:`PullRecorder` only counts, in plain ints and lists; a :class:`~keyqueue.metrics.SnapshotMetricsProvider`
  reads them (under the queue's lock) when asked for a snapshot, e.g. at scrape time. A priority queue attaches its
  per-priority depth (a :class:`PriorityDepthSource`), so that a snapshot reads it under the same lock.

Both forget a key's add time at ``get``; the processing start times are the core's (its ``processing`` values,
given to the recorder by :func:`bind_core`), so a recorder holds no key once it has been handed out.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from keyqueue.clock import Clock

if TYPE_CHECKING:
    from keyqueue.metrics.interfaces import (
        CounterMetric,
        GaugeMetric,
        HistogramMetric,
        MetricsProvider,
        SettableGaugeMetric,
    )

__all__ = [
    "BUCKET_BOUNDS_NS",
    "HIST_SLOTS",
    "LockLike",
    "PriorityDepthSource",
    "PullRecorder",
    "PushRecorder",
    "SharedQueueRecorder",
    "bind_core",
    "bucket_index",
    "fold_into",
    "in_flight_ns",
    "nanos_to_seconds",
]

#: Upper bounds (``le``) of client-go's duration histograms in integer nanoseconds: 1e-8 s, 1e-7 s, ... 10 s.
#: ``d_ns <= BUCKET_BOUNDS_NS[i]`` holds exactly when ``d_ns / 1e9`` is <= the float bound (correctly rounded
#: division is monotonic and maps each bound to its literal), so bucketing integer ns gives the float counts.
BUCKET_BOUNDS_NS: Final = tuple(10**k for k in range(1, 11))

#: Layout of a histogram list: one count per bound, one for +Inf (at ``_INF``), then the sum in ns (at ``_SUM``).
HIST_SLOTS: Final = len(BUCKET_BOUNDS_NS) + 2
_INF: Final = len(BUCKET_BOUNDS_NS)
_SUM: Final = HIST_SLOTS - 1

_NS_PER_S: Final = 1_000_000_000


def bucket_index(d_ns: int) -> int:
    """The histogram slot of a duration: the first bound it does not exceed (``len(BUCKET_BOUNDS_NS)`` = +Inf)."""
    return bisect_left(BUCKET_BOUNDS_NS, d_ns)


#: A :class:`PullRecorder` counts the durations it buffers into its histograms when a buffer holds this many (and
#: before every read): a sort and ten bisects in C instead of a bucket search per hand-out.
FOLD_AT: Final = 256


def fold_into(obs: list[int], hist: list[int]) -> None:
    """Count the durations ``obs`` (integer ns, >= 0) into ``hist`` (:data:`HIST_SLOTS` long: a count per bound, +Inf,
    sum) and empty ``obs``: exactly what :func:`bucket_index` for each gives."""
    if not obs:
        return
    obs.sort()
    total = len(obs)
    below = 0
    for i, bound in enumerate(BUCKET_BOUNDS_NS):
        n = bisect_right(obs, bound)
        hist[i] += n - below
        below = n
        if n == total:
            break
    hist[_INF] += total - below
    hist[_SUM] += sum(obs)
    obs.clear()


def nanos_to_seconds(ns: int) -> float:
    """Integer nanoseconds to float seconds (``ns / 1e9``: exact for 50_000 → 5e-05, 25_000 → 2.5e-05 ...)."""
    return ns / _NS_PER_S


class LockLike(Protocol):
    """The queue's lock as a recorder sees it: a context manager (``threading.Lock`` and friends)."""

    def __enter__(self) -> Any: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> Any: ...


class PriorityDepthSource(Protocol):
    """Per-priority depth a priority queue keeps under its own lock (:class:`keyqueue.priority.PriorityDepth`)."""

    def snapshot(self) -> dict[str, int]:
        """A fresh dict: priority label (decimal priority, or ``exceeded_cardinality_limit`` past the cap) → ready
        keys. Called with the queue's lock held."""
        ...


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
    every jump of a clock that reports jumps (:meth:`keyqueue.FakeClock.step`, like client-go's ticker on a fake
    clock) and from :func:`keyqueue.metrics.refresh_in_flight` (for real clocks: call it before a scrape or
    periodically). Once the queue shuts down it does nothing: like client-go's updater, which stops at shutdown,
    the two gauges keep the last values they were set to.
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
        "_stopped",
        "_unfinished",
        "_work",
        "processing",
        "promote_due",
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
        self.promote_due: Callable[[int], object] | None = None  # see bind_core()
        self.processing: Mapping[Any, int | None] = {}  # the core's keys being processed (see bind_core())
        self._stopped = False  # the queue shut down: refresh() no longer sets the in-flight gauges
        clock.subscribe(self.refresh)

    def add(self, item: Hashable, t_ns: int) -> None:
        self._adds.inc()
        self._depth.inc()
        added = self._added
        if item not in added:
            added[item] = t_ns

    def get(self, item: Hashable, t_ns: int) -> None:
        self._depth.dec()
        t0 = self._added.pop(item, None)
        if t0 is not None:
            self._latency.observe((t_ns - t0) / _NS_PER_S)

    def done(self, item: Hashable, started_ns: int, t_ns: int) -> None:
        self._work.observe((t_ns - started_ns) / _NS_PER_S)

    def retry(self) -> None:
        self._retries.inc()

    def shut_down(self, t_ns: int) -> None:
        self._stopped = True

    def refresh(self) -> None:
        """Set the unfinished-work and longest-running gauges from the keys being processed now (takes the
        queue's lock; the gauges' ``set`` is called with it held, as in client-go). After the queue's shutdown
        it does nothing."""
        with _guard(self._lock):
            if self._stopped:
                return
            now = self._clock.now_ns()
            if self.promote_due is not None:
                self.promote_due(now)  # delayed keys that fell due count in depth now, as in client-go
            total, longest = in_flight_ns(_starts(self.processing), now)
            self._unfinished.set(total / _NS_PER_S)
            self._longest.set(longest / _NS_PER_S)


class PullRecorder:
    """Counts queue events in plain ints/lists; a snapshot provider reads them (under the queue's lock) on demand.

    ``queue_hist``/``work_hist`` are :data:`HIST_SLOTS`-long lists (per-bucket counts, +Inf, sum in ns) and
    ``retries`` is a one-element list. The provider keeps these lists after the queue is gone, so that counters
    never go backwards. ``added`` maps each dirty key to the time it became dirty: the core calls ``add`` only for
    a key that is not dirty and ``get`` removes it, so ``len(added)`` is client-go's depth (never negative) and
    ``adds`` = keys handed out (the queue histogram's count) + ``len(added)``. That spares ``add`` a counter: the
    hook is the dict's own C ``setdefault`` (keeping the first time, as client-go does), not a Python method.

    ``priority_depth``: ``None`` for a plain queue; a priority queue sets it to its per-priority depth at
    construction (:class:`PriorityDepthSource`). Only :meth:`read` looks at it, so the event hooks are the same for
    every queue.

    At the queue's shutdown the in-flight gauges freeze (client-go stops updating them then): :meth:`read` reports
    the processing start times and the clock reading of that moment from then on, whatever is done afterwards.
    """

    __slots__ = (
        "__weakref__",
        "_frozen",
        "add",
        "added",
        "clock",
        "lock",
        "priority_depth",
        "processing",
        "promote_due",
        "queue_hist",
        "queue_obs",
        "retries",
        "work_hist",
        "work_obs",
    )

    def __init__(self, clock: Clock, lock: LockLike | None) -> None:
        self.clock = clock
        self.lock = lock
        self.retries = [0]
        self.queue_hist = [0] * HIST_SLOTS
        self.work_hist = [0] * HIST_SLOTS
        # Durations (ns) not yet counted into queue_hist / work_hist (see fold()).
        self.queue_obs: list[int] = []
        self.work_obs: list[int] = []
        self.added: dict[Hashable, int] = {}
        self.processing: Mapping[Any, int | None] = {}  # key being processed -> its start (see bind_core())
        self.priority_depth: PriorityDepthSource | None = None
        self.promote_due: Callable[[int], object] | None = None  # see bind_core()
        self._frozen: tuple[list[int], int] | None = None  # (processing starts, now) at shutdown
        # MetricsRecorder.add(item, t_ns); setdefault's return value is ignored by the core.
        self.add: Callable[[Hashable, int], None] = cast("Callable[[Hashable, int], None]", self.added.setdefault)

    def get(self, item: Hashable, t_ns: int) -> None:
        obs = self.queue_obs
        obs.append(t_ns - self.added.pop(item))  # the core hands out only keys it reported added
        if len(obs) >= FOLD_AT:
            self.fold()  # both buffers: a done follows a get, so work_obs holds at most FOLD_AT + keys in flight

    def done(self, item: Hashable, started_ns: int, t_ns: int) -> None:
        self.work_obs.append(t_ns - started_ns)

    def fold(self) -> None:
        """Count the buffered durations into the histograms (the queue's lock held)."""
        fold_into(self.queue_obs, self.queue_hist)
        fold_into(self.work_obs, self.work_hist)

    def retry(self) -> None:
        self.retries[0] += 1

    def shut_down(self, t_ns: int) -> None:
        if self._frozen is None:
            self._frozen = (_starts(self.processing), t_ns)

    def read(self) -> tuple[int, list[int], list[int], int, list[int], int, dict[str, int] | None]:
        """Under the queue's lock: (retries, queue_hist, work_hist, depth, processing starts, clock now, depth per
        priority label or ``None`` for a queue without priorities). The per-priority counts sum to ``depth``.
        After the queue's shutdown, the starts and the clock reading are those of the shutdown (frozen gauges)."""
        with _guard(self.lock):
            if self.promote_due is not None:
                self.promote_due(self.clock.now_ns())  # delayed keys that fell due count in depth now (client-go)
            self.fold()
            priority_depth = self.priority_depth
            frozen = self._frozen
            starts, now = (_starts(self.processing), self.clock.now_ns()) if frozen is None else frozen
            return (
                self.retries[0],
                list(self.queue_hist),
                list(self.work_hist),
                len(self.added),
                list(starts),
                now,
                None if priority_depth is None else priority_depth.snapshot(),
            )


def bind_core(recorder: object, promote_due: Callable[[int], object],
              processing: Mapping[Any, int | None]) -> None:
    """Give a recorder the queue core's ``promote_due``, which it calls (under the queue's lock) before it reads
    its numbers: client-go's background loop adds a delayed key the moment it falls due, so depth and adds count
    it from then on; keyqueue has no such loop, so a scrape fires what is due first (exactly what the next
    ``get()`` or ``len()`` would do). The core's ``processing`` (key -> when it was handed out) gives the in-flight
    gauges their start times. Recorders that are not keyqueue's own are left alone."""
    if isinstance(recorder, (PullRecorder, PushRecorder)):
        recorder.promote_due = promote_due
        recorder.processing = processing


def _starts(processing: Mapping[Any, int | None]) -> list[int]:
    """The start times of the keys being processed (every value is a time when the queue records metrics)."""
    return [t for t in processing.values() if t is not None]


class SharedQueueRecorder(PullRecorder):
    """The hook for one handle on a queue whose state is shared outside this process (:mod:`keyqueue.redis`).

    Such a handle cannot count depth by its own events (other processes add and take keys), so:

    * ``depth_source`` (set by the handle) is called at snapshot time, *before* the queue's lock is taken, and
      returns the shared queue's depth (it may do a network round trip; ``None``: depth 0);
    * adds are counted by the shell in ``adds_total`` (a one-element list, kept by the provider after the handle
      is gone, like ``retries``): the provider reports them instead of deriving adds from depth;
    * :meth:`handed_out` records a ``get`` with the queue duration the shared state measured (``None``: unknown,
      nothing observed) and :meth:`finished` a ``done``: the handle keeps the start times itself (``started``, which
      is also its ``processing``); ``retry`` and the in-flight gauges are :class:`PullRecorder`'s own.

    The shell calls the event hooks with its lock (``lock``) held, as the core does.
    """

    __slots__ = ("adds_total", "depth_source", "started")

    def __init__(self, clock: Clock, lock: LockLike | None) -> None:
        super().__init__(clock, lock)
        self.started: dict[Hashable, int | None] = {}  # key -> time it was handed out (until finished or abandoned)
        self.processing = self.started
        self.adds_total = [0]
        self.depth_source: Callable[[], int] | None = None

    def handed_out(self, item: Hashable, t_ns: int, waited_ns: int | None) -> None:
        self.started[item] = t_ns
        if waited_ns is not None:
            h = self.queue_hist
            h[bucket_index(waited_ns)] += 1
            h[_SUM] += waited_ns

    def finished(self, item: Hashable, t_ns: int) -> None:
        """``item``'s done: observe its work duration from the start recorded by :meth:`handed_out`."""
        t0 = self.started.pop(item, None)
        if t0 is not None:
            self.work_obs.append(t_ns - t0)

    def abandon(self, item: Hashable) -> None:
        """Forget ``item``'s processing start without observing a work duration (its lease was lost)."""
        self.started.pop(item, None)

    def read(self) -> tuple[int, list[int], list[int], int, list[int], int, dict[str, int] | None]:
        """As :meth:`PullRecorder.read`, with the shared depth from ``depth_source`` (read first, without the lock)."""
        source = self.depth_source
        depth = 0 if source is None else source()
        retries, queue_hist, work_hist, _, starts, now, by_priority = super().read()
        return retries, queue_hist, work_hist, depth, starts, now, by_priority

    def adds_beyond(self, queue_count: int, depth: int) -> int:
        """What the provider adds to (handed out + depth) so that this handle's adds come out as ``adds_total``."""
        return self.adds_total[0] - queue_count - depth
