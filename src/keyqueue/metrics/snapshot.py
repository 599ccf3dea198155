"""A metrics provider that counts inside the queues and computes client-go's metrics on demand.

:class:`SnapshotMetricsProvider` needs no third-party package. Each named queue built with it gets a recorder that
keeps plain counters under the queue's own lock (no extra lock, no metric-object calls on the hot path);
:meth:`SnapshotMetricsProvider.snapshot` turns them into one :class:`QueueMetrics` per queue name, computing the
in-flight gauges (unfinished work, longest-running processor) from the keys being processed at that moment, on
each queue's own clock, and, for names used by a priority queue, the depth per priority label.
:class:`~keyqueue.metrics.PrometheusMetricsProvider` is this provider plus a Prometheus collector.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Final

from keyqueue.clock import Clock
from keyqueue.metrics._recorders import (
    BUCKET_BOUNDS_NS,
    HIST_SLOTS,
    LockLike,
    PullRecorder,
    SharedQueueRecorder,
    fold_into,
    in_flight_ns,
    nanos_to_seconds,
)

__all__ = ["BUCKETS", "PLAIN_PRIORITY_LABEL", "HistogramSnapshot", "QueueMetrics", "SnapshotMetricsProvider"]

#: The priority label under which :attr:`QueueMetrics.depth_by_priority` counts the depth of plain (non-priority)
#: queues that share a name with a priority queue, and the ``priority`` label value of plain queues in
#: :class:`~keyqueue.metrics.PrometheusMetricsProvider`'s ``priority_label=True`` mode.
PLAIN_PRIORITY_LABEL: Final = ""

#: Upper bounds of the two duration histograms, in seconds (client-go: exponential from 1e-8, factor 10, 10 buckets).
BUCKETS: tuple[float, ...] = tuple(nanos_to_seconds(b) for b in BUCKET_BOUNDS_NS)


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A duration histogram as Prometheus exposes it.

    ``buckets``: ``(upper bound in seconds, cumulative count)`` for each bound of :data:`BUCKETS` (the +Inf
    bucket is ``count``); ``sum``: total of all observations in seconds.
    """

    buckets: tuple[tuple[float, int], ...]
    count: int
    sum: float

    @classmethod
    def from_slots(cls, slots: list[int]) -> HistogramSnapshot:
        """Build from a recorder's histogram list (per-bucket counts, +Inf count, sum in ns)."""
        cumulative: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip(BUCKETS, slots, strict=False):
            running += n
            cumulative.append((bound, running))
        count = running + slots[len(BUCKETS)]
        return cls(tuple(cumulative), count, nanos_to_seconds(slots[-1]))


@dataclass(frozen=True, slots=True)
class QueueMetrics:
    """client-go's seven workqueue metrics for one queue name, at one moment.

    * ``depth``: keys that are dirty — waiting, or re-added while being processed (not ``len(queue)``).
    * ``adds``: adds that made a key dirty (deduplicated adds are not counted).
    * ``queue_duration``: per hand-out, the time from the add that made the key dirty to ``get``.
    * ``work_duration``: per ``done``, the time since the matching ``get``.
    * ``unfinished_work_seconds``: Σ over the keys being processed of how long they have been (at snapshot time).
    * ``longest_running_processor_seconds``: the largest of those ages (0 when nothing is being processed).
    * ``retries``: accepted ``add_after`` calls (``add_rate_limited`` included), delayed or not.
    * ``queues``: how many live queues currently use this name (several queues may share one; their counts add up,
      the longest-running value is the maximum).
    * ``depth_by_priority``: ``None`` unless a live queue of this name is a priority queue
      (:class:`keyqueue.PriorityQueue`, :class:`keyqueue.aio.PriorityQueue`). Then: priority label → ready keys,
      summed over the name's live priority queues, where the label is the decimal priority for each queue's first
      25 distinct priorities and ``exceeded_cardinality_limit`` for the rest (the queue's own cap, see
      :class:`keyqueue.priority.PriorityDepth`; a label once given stays, possibly at 0). Plain queues sharing the
      name add their depth under :data:`PLAIN_PRIORITY_LABEL` (``""``; only if such a queue is live). The values
      sum to ``depth``. Ordered: ``""``, numeric labels ascending, ``exceeded_cardinality_limit``.
    """

    name: str
    depth: int
    adds: int
    queue_duration: HistogramSnapshot
    work_duration: HistogramSnapshot
    unfinished_work_seconds: float
    longest_running_processor_seconds: float
    retries: int
    queues: int
    depth_by_priority: dict[str, int] | None = field(default=None, hash=False)


class _Slot:
    """One queue's counters as the provider holds them: a weak link to its recorder and strong links to the
    recorder's count lists, so that the counts outlive the queue.

    While the recorder lives, ``added`` is its dict of dirty keys. When it dies, a weakref callback replaces that by
    the number of keys it held (they were added, never handed out, and still count as adds) and drops the dict, so
    no key of a dead queue stays referenced. The callback writes ``pending_at_death`` before it clears ``added``:
    a reader that still sees the dict reads the same number from it (a dead queue's dict no longer changes).
    """

    __slots__ = (
        "added", "adds_total", "pending_at_death", "queue_hist", "queue_obs", "ref", "retries", "work_hist", "work_obs",
    )

    def __init__(self, recorder: PullRecorder) -> None:
        # A handle on a shared queue counts its adds itself (see SharedQueueRecorder); None for the others.
        self.adds_total = recorder.adds_total if isinstance(recorder, SharedQueueRecorder) else None
        self.retries = recorder.retries
        self.queue_hist = recorder.queue_hist
        self.work_hist = recorder.work_hist
        self.queue_obs = recorder.queue_obs  # durations the recorder had not counted yet when it died
        self.work_obs = recorder.work_obs
        self.added: dict[Hashable, int] | None = recorder.added
        self.pending_at_death = 0
        self.ref = weakref.ref(recorder, self._recorder_died)

    def _recorder_died(self, _ref: object) -> None:
        added = self.added
        if added is not None:
            self.pending_at_death = len(added)
            self.added = None

    def fold(self) -> None:
        """For a dead recorder: count the durations it had buffered (nobody writes them any more)."""
        fold_into(self.queue_obs, self.queue_hist)
        fold_into(self.work_obs, self.work_hist)

    def dead_pending(self) -> int:
        """For a dead recorder: its keys that were added and never handed out (for a shared queue's handle: its
        adds beyond those it handed out)."""
        if self.adds_total is not None:
            return self.adds_total[0] - sum(self.queue_hist[:-1])
        added = self.added
        return len(added) if added is not None else self.pending_at_death


class _Totals:
    """Counts summed over several queues (or kept from dead ones): adds not handed out, retries, histograms."""

    __slots__ = ("pending", "queue_hist", "retries", "work_hist")

    def __init__(self) -> None:
        self.pending = 0
        self.retries = 0
        self.queue_hist = [0] * HIST_SLOTS
        self.work_hist = [0] * HIST_SLOTS

    def copy(self) -> _Totals:
        other = _Totals()
        other.pending, other.retries = self.pending, self.retries
        other.queue_hist, other.work_hist = list(self.queue_hist), list(self.work_hist)
        return other

    def add_dead(self, slot: _Slot) -> None:
        # A dead recorder's lists are final: nobody writes them any more.
        slot.fold()
        self.pending += slot.dead_pending()
        self.retries += slot.retries[0]
        _add_into(self.queue_hist, slot.queue_hist)
        _add_into(self.work_hist, slot.work_hist)


class _Series:
    """Everything known about one queue name: the live queues' slots and the folded totals of dead ones."""

    __slots__ = ("retired", "slots")

    def __init__(self) -> None:
        self.slots: list[_Slot] = []
        self.retired = _Totals()

    def retire_dead(self) -> None:
        live: list[_Slot] = []
        for slot in self.slots:
            if slot.ref() is None:
                self.retired.add_dead(slot)
            else:
                live.append(slot)
        self.slots = live


def _label_order(label: str) -> tuple[int, int]:
    # "" first, then the decimal priorities by value, then the overflow label (the only other non-numeric one).
    if label == PLAIN_PRIORITY_LABEL:
        return (0, 0)
    try:
        return (1, int(label))
    except ValueError:
        return (2, 0)


def _add_into(target: list[int], source: list[int]) -> None:
    for i, v in enumerate(source):
        target[i] += v


class SnapshotMetricsProvider:
    """Counts every named queue built with it; :meth:`snapshot` reports client-go's metrics per queue name.

    Pass it as ``metrics_provider=`` to a queue or install it with :func:`keyqueue.metrics.set_provider`. Queues
    with an empty name are not tracked. Several queues may use one name: their counters add up (as client-go's
    adapters hand both queues the same metric children). Counters of a queue that has been garbage-collected are
    kept, so a counter never goes backwards; its depth and in-flight keys no longer count.

    The provider holds no reference to a queue. It sees a live queue's dirty keys only through that queue's
    recorder (which forgets a key's add time when it is handed out and its start time when it is done), and lets
    go of them when the queue is garbage-collected. Thread-safe.
    """

    def __init__(self) -> None:
        self._series_lock = threading.Lock()
        self._series: dict[str, _Series] = {}

    def _recorder(
        self, name: str, clock: Clock, lock: LockLike | None, kind: type[PullRecorder] = PullRecorder
    ) -> PullRecorder:
        """A new recorder for one queue called ``name`` (used by :func:`keyqueue.metrics.recorder_for`; ``kind``
        :class:`SharedQueueRecorder` by :mod:`keyqueue.redis`)."""
        recorder = kind(clock, lock)
        slot = _Slot(recorder)
        with self._series_lock:
            series = self._series.get(name)
            if series is None:
                series = self._series[name] = _Series()
            series.retire_dead()
            series.slots.append(slot)
        return recorder

    def forget(self, name: str) -> bool:
        """Drop every series of queue name ``name``: counters, histograms and gauges, of live and of dead queues.
        Returns ``True`` if the name was known.

        Call it when the queues of that name are finished with (shut down, or garbage-collected): a provider keeps
        the counts of dead queues forever otherwise, so that counters never go backwards, and a process that makes
        queues with ever new names (one per tenant, per job, ...) grows its scrape without bound (each name is 31
        Prometheus samples). After ``forget`` the name is not exported and :meth:`snapshot` does not report it; a
        queue of that name that is still alive is no longer reported either (its counts are dropped with the
        rest), and a queue built later with that name starts from zero. Raises ``TypeError`` for a non-str name.
        Thread-safe; takes no queue's lock.
        """
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}: {name!r:.80}")
        with self._series_lock:
            return self._series.pop(name, None) is not None

    def names(self) -> list[str]:
        """The queue names seen so far, sorted."""
        with self._series_lock:
            return sorted(self._series)

    def snapshot(self) -> dict[str, QueueMetrics]:
        """The metrics of every queue name seen so far, keyed by name (sorted), as of now.

        Briefly takes each live queue's lock (one at a time) to copy its counters and in-flight start times; never
        blocks on anything else. The in-flight gauges use each queue's own clock.
        """
        out: dict[str, QueueMetrics] = {}
        with self._series_lock:
            for name in sorted(self._series):
                series = self._series[name]
                series.retire_dead()
                totals = series.retired.copy()
                depth = unfinished_ns = longest_ns = live = plain_live = plain_depth = 0
                by_priority: dict[str, int] | None = None
                for slot in series.slots:
                    recorder = slot.ref()
                    if recorder is None:  # died since retire_dead(): read it as retired (folded next time)
                        totals.add_dead(slot)
                        continue
                    retries, qh, wh, d, starts, now, prio = recorder.read()
                    if isinstance(recorder, SharedQueueRecorder):
                        totals.pending += recorder.adds_beyond(sum(qh[:-1]), d)
                    del recorder
                    live += 1
                    if prio is None:
                        plain_live += 1
                        plain_depth += d
                    else:
                        if by_priority is None:
                            by_priority = {}
                        for label, n in prio.items():
                            by_priority[label] = by_priority.get(label, 0) + n
                    totals.retries += retries
                    _add_into(totals.queue_hist, qh)
                    _add_into(totals.work_hist, wh)
                    depth += d
                    total, oldest = in_flight_ns(starts, now)
                    unfinished_ns += total
                    longest_ns = max(longest_ns, oldest)
                if by_priority is not None:
                    if plain_live:
                        by_priority[PLAIN_PRIORITY_LABEL] = by_priority.get(PLAIN_PRIORITY_LABEL, 0) + plain_depth
                    by_priority = {label: by_priority[label] for label in sorted(by_priority, key=_label_order)}
                queue_duration = HistogramSnapshot.from_slots(totals.queue_hist)
                out[name] = QueueMetrics(
                    name=name,
                    depth=depth,
                    # Every add made a key dirty; it has since been handed out (counted by the queue histogram)
                    # or is still dirty (depth), or its queue died with it unhanded (pending).
                    adds=queue_duration.count + depth + totals.pending,
                    queue_duration=queue_duration,
                    work_duration=HistogramSnapshot.from_slots(totals.work_hist),
                    unfinished_work_seconds=nanos_to_seconds(unfinished_ns),
                    longest_running_processor_seconds=nanos_to_seconds(longest_ns),
                    retries=totals.retries,
                    queues=live,
                    depth_by_priority=by_priority,
                )
        return out

    def __repr__(self) -> str:
        return f"<{type(self).__name__} names={self.names()!r}>"
