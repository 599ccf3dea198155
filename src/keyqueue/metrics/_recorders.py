"""The per-queue recorders behind :func:`keyqueue.metrics.recorder_for` (internal).

Both implement :class:`keyqueue._core.MetricsRecorder`. The core calls ``add``/``get``/``done``/``retry`` with the
queue's lock held and with integer-nanosecond timestamps from the queue's clock, so neither recorder takes a lock
of its own on the hot path.

* :class:`PushRecorder` forwards every event to the metric objects of a :class:`~keyqueue.metrics.MetricsProvider`,
  exactly as client-go's ``defaultQueueMetrics`` does; the two in-flight gauges are set by :meth:`PushRecorder.refresh`.
* :class:`PullRecorder` only counts, in plain Python ints and lists; a
  :class:`~keyqueue.metrics.SnapshotMetricsProvider` reads those counts (under the queue's lock) when it is asked
  for a snapshot, e.g. at Prometheus scrape time. A priority queue attaches its per-priority depth
  (a :class:`PriorityDepthSource`) to its recorder, so that a snapshot reads it under the same lock.

Both forget a key when it stops needing it: its add time at ``get``, its processing start at ``done``.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_left
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from keyqueue._build import _is_extension
from keyqueue._core import LEDGER_FOLD_AT, purge_stale
from keyqueue.clock import Clock
from keyqueue.metrics._buckets import BUCKET_BOUNDS_NS, HIST_SLOTS, fold_counting, fold_sorting
from keyqueue.metrics._buckets import INF as _INF
from keyqueue.metrics._buckets import SUM as _SUM

if TYPE_CHECKING:
    from keyqueue.metrics import (
        CounterMetric,
        GaugeMetric,
        HistogramMetric,
        MetricsProvider,
        SettableGaugeMetric,
    )

__all__ = [
    "BUCKET_BOUNDS_NS",
    "FOLD_AT",
    "HIST_SLOTS",
    "LockLike",
    "PriorityDepthSource",
    "PullRecorder",
    "PushRecorder",
    "SharedQueueRecorder",
    "bucket_index",
    "fold_into",
    "in_flight_ns",
    "nanos_to_seconds",
]

_NS_PER_S: Final = 1_000_000_000


def _bit_length_tables() -> tuple[tuple[int, ...], tuple[int, ...]]:
    # Bucketing on the hot path without a bisect: all durations with the same bit length L lie in
    # [2**(L-1), 2**L - 1]. If no bound falls inside that range they share one bucket, _LOW[L], and _SPLIT[L] is
    # 2**64 (never exceeded). If a bound 10**k falls inside, the bucket is _LOW[L] for d <= 10**k and the next one
    # above it, so _SPLIT[L] = 10**k. (Ten bounds, factor 10 > 2 apart: at most one per range.) For L > 64 the
    # lookup raises IndexError and the recorder counts +Inf (2**64 ns is 584 years).
    low: list[int] = []
    split: list[int] = []
    for length in range(65):
        lo, hi = (0, 0) if length == 0 else (1 << (length - 1), (1 << length) - 1)
        i_lo, i_hi = bisect_left(BUCKET_BOUNDS_NS, lo), bisect_left(BUCKET_BOUNDS_NS, hi)
        low.append(i_lo)
        split.append(BUCKET_BOUNDS_NS[i_lo] if i_lo != i_hi else 1 << 64)
    return tuple(low), tuple(split)


_LOW, _SPLIT = _bit_length_tables()


def bucket_index(d_ns: int) -> int:
    """The histogram slot of a duration: ``bisect_left(BUCKET_BOUNDS_NS, d_ns)`` (10 = +Inf), via the tables."""
    length = d_ns.bit_length()
    if length >= len(_LOW):
        return _INF
    return _LOW[length] + (d_ns > _SPLIT[length])


#: How many buffered durations a :class:`PullRecorder` keeps per histogram before it folds them into the buckets
#: (see :attr:`PullRecorder.queue_obs`): bounds the buffer at a few kB per queue.
FOLD_AT: Final = LEDGER_FOLD_AT


#: ``fold_into(obs, hist)``: count the durations ``obs`` (integer ns) into the histogram list ``hist``
#: (:data:`HIST_SLOTS` long: a count per bound, +Inf, sum) and empty ``obs``; exactly what counting each with
#: :func:`bucket_index` gives. Where :mod:`keyqueue.metrics._buckets` is compiled (the compiled build) its counting
#: loop (a few ns per duration), else its sort and bisects, which run in C (both measured in both builds).
fold_into: Final[Callable[[list[int], list[int]], None]] = (
    fold_counting if _is_extension(fold_counting.__module__) else fold_sorting
)


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
        "_started",
        "_stopped",
        "_unfinished",
        "_work",
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
        self._started: dict[Hashable, int] = {}  # key -> time it was handed out (until done)
        self.promote_due: Callable[[int], object] | None = None  # see bind_core()
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

    def shut_down(self, t_ns: int) -> None:
        self._stopped = True

    def lost(self, item: Hashable) -> None:
        if purge_stale(self._added, item):
            self._depth.dec()  # it was dirty: counted in depth
        purge_stale(self._started, item)

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
            total, longest = in_flight_ns(list(self._started.values()), now)
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

    A plain queue's core (:meth:`keyqueue._core.QueueCore.keep_ledger`) calls none of :attr:`add`/:meth:`get`/
    :meth:`done`: it uses ``added`` and ``started`` as its own dirty and processing containers (so they hold the
    same keys and times the methods would give them) and appends each duration to ``queue_obs``/``work_obs``, which
    :meth:`fold` counts into the histograms when a buffer reaches :data:`FOLD_AT` entries and before every
    :meth:`read` (and the provider folds a dead queue's buffers). So a scrape sees exactly the counts the methods
    would have produced; only the moment the buckets are computed differs.
    """

    __slots__ = (
        "__weakref__",
        "_frozen",
        "add",
        "added",
        "clock",
        "lock",
        "priority_depth",
        "promote_due",
        "queue_hist",
        "queue_obs",
        "retries",
        "started",
        "work_hist",
        "work_obs",
    )

    def __init__(self, clock: Clock, lock: LockLike | None) -> None:
        self.clock = clock
        self.lock = lock
        self.retries = [0]
        self.queue_hist = [0] * HIST_SLOTS
        self.work_hist = [0] * HIST_SLOTS
        # Durations (ns) not yet counted into queue_hist / work_hist (see fold()); at most FOLD_AT each.
        self.queue_obs: list[int] = []
        self.work_obs: list[int] = []
        self.added: dict[Hashable, int] = {}
        self.started: dict[Hashable, int] = {}  # key -> time it was handed out (until done)
        self.priority_depth: PriorityDepthSource | None = None
        self.promote_due: Callable[[int], object] | None = None  # see bind_core()
        self._frozen: tuple[list[int], int] | None = None  # (processing starts, now) at shutdown
        # MetricsRecorder.add(item, t_ns); setdefault's return value is ignored by the core.
        self.add: Callable[[Hashable, int], None] = cast("Callable[[Hashable, int], None]", self.added.setdefault)

    # get and done are the hot path: a few dict operations and list increments, with the bucket index inlined
    # from bucket_index(). Measured against bisect, closure-based and packed-int variants; this was the fastest.

    def get(self, item: Hashable, t_ns: int) -> None:
        self.started[item] = t_ns
        t0 = self.added.pop(item, None)
        if t0 is not None:
            d = t_ns - t0
            length = d.bit_length()
            h = self.queue_hist
            try:
                h[_LOW[length] + (d > _SPLIT[length])] += 1
            except IndexError:
                h[_INF] += 1
            h[_SUM] += d

    def done(self, item: Hashable, t_ns: int) -> None:
        t0 = self.started.pop(item, None)
        if t0 is not None:
            d = t_ns - t0
            length = d.bit_length()
            h = self.work_hist
            try:
                h[_LOW[length] + (d > _SPLIT[length])] += 1
            except IndexError:
                h[_INF] += 1
            h[_SUM] += d

    def retry(self) -> None:
        self.retries[0] += 1

    def fold(self) -> None:
        """Count the buffered durations into the histograms (called with the queue's lock held)."""
        fold_into(self.queue_obs, self.queue_hist)
        fold_into(self.work_obs, self.work_hist)

    def lost(self, item: Hashable) -> None:
        purge_stale(self.added, item)  # in place: the provider's slot holds this very dict
        purge_stale(self.started, item)

    def shut_down(self, t_ns: int) -> None:
        if self._frozen is None:
            self._frozen = (list(self.started.values()), t_ns)

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
            starts, now = (list(self.started.values()), self.clock.now_ns()) if frozen is None else frozen
            return (
                self.retries[0],
                list(self.queue_hist),
                list(self.work_hist),
                len(self.added),
                list(starts),
                now,
                None if priority_depth is None else priority_depth.snapshot(),
            )


def bind_core(recorder: object, promote_due: Callable[[int], object]) -> None:
    """Give a recorder the queue core's ``promote_due``, which it calls (under the queue's lock) before it reads
    its numbers: client-go's background loop adds a delayed key the moment it falls due, so depth and adds count
    it from then on; keyqueue has no such loop, so a scrape fires what is due first (exactly what the next
    ``get()`` or ``len()`` would do). Recorders that are not keyqueue's own are left alone."""
    target = getattr(recorder, "inner", recorder)  # a priority queue wraps the recorder
    if isinstance(target, (PullRecorder, PushRecorder)):
        target.promote_due = promote_due


class SharedQueueRecorder(PullRecorder):
    """The hook for one handle on a queue whose state is shared outside this process (:mod:`keyqueue.redis`).

    Such a handle cannot count depth by its own events (other processes add and take keys), so:

    * ``depth_source`` (set by the handle) is called at snapshot time, *before* the queue's lock is taken, and
      returns the shared queue's depth (it may do a network round trip; ``None``: depth 0);
    * adds are counted by the shell in ``adds_total`` (a one-element list, kept by the provider after the handle
      is gone, like ``retries``): the provider reports them instead of deriving adds from depth;
    * :meth:`handed_out` records a ``get`` with the queue duration the shared state measured (``None``: unknown,
      nothing observed); ``done``/``retry`` and the in-flight gauges are :class:`PullRecorder`'s own.

    The shell calls the event hooks with its lock (``lock``) held, as the core does.
    """

    __slots__ = ("adds_total", "depth_source")

    def __init__(self, clock: Clock, lock: LockLike | None) -> None:
        super().__init__(clock, lock)
        self.adds_total = [0]
        self.depth_source: Callable[[], int] | None = None

    def handed_out(self, item: Hashable, t_ns: int, waited_ns: int | None) -> None:
        self.started[item] = t_ns
        if waited_ns is not None:
            h = self.queue_hist
            h[bucket_index(waited_ns)] += 1
            h[_SUM] += waited_ns

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
