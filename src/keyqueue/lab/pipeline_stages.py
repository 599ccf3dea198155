"""The pipeline's stage statistics: the raw samples each stage records (:class:`Samples`, and :class:`TimedQueue`,
the queue that stamps ``get`` and ``done``), their percentiles (:class:`StageStats`, :func:`stage_stats`), the
hand-off probe's counts (:func:`slice_summary`), the run's adds replayed on instant workers (:func:`replay_bound`)
and the queue's own cost on one thread, measured now (:func:`microbench_queue`).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

from keyqueue.lab.handoff import HandoffProbe, HandoffSample
from keyqueue.lab.load import percentile
from keyqueue.lab.replay import replay
from keyqueue.threaded import RateLimitingQueue

__all__ = [
    "ENQUEUE_TO_GET_GOAL_NS",
    "Samples",
    "StageStats",
    "TimedQueue",
    "microbench_queue",
    "replay_bound",
    "slice_summary",
    "stage_stats",
]

#: The goal for the enqueue → worker Get median (ns): the replay rows count the adds that wait longer.
ENQUEUE_TO_GET_GOAL_NS: Final = 300_000


@dataclass(frozen=True)
class StageStats:
    """Percentiles of one stage, in seconds (NaN when there is no sample)."""

    n: int
    p50: float
    p95: float
    p99: float
    max: float
    mean: float
    negative: int = 0  #: samples below zero (write → event: the event arrived before the write's answer)
    above: int = 0  #: samples above the ``above_ns`` given to :meth:`of` (0 when none was given)

    @classmethod
    def of(cls, samples_ns: list[int], above_ns: int | None = None) -> StageStats:
        values = sorted(samples_ns)
        if not values:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        secs = [v / 1e9 for v in values]
        above = 0 if above_ns is None else sum(1 for v in values if v > above_ns)
        return cls(len(secs), percentile(secs, 50), percentile(secs, 95), percentile(secs, 99), secs[-1],
                   sum(secs) / len(secs), sum(1 for v in values if v < 0), above)


@dataclass
class Samples:
    """The raw stage samples of a pipeline run, in ``perf_counter_ns`` (appended under the pipeline's lock)."""

    api: list[int] = field(default_factory=list)
    handler: list[int] = field(default_factory=list)
    write_to_event: list[int] = field(default_factory=list)
    sent_to_event: list[int] = field(default_factory=list)
    chunk_to_handler: list[int] = field(default_factory=list)
    add: list[int] = field(default_factory=list)
    enqueue_to_get: list[int] = field(default_factory=list)
    enqueue_to_get_idle: list[int] = field(default_factory=list)
    enqueue_to_get_free: list[int] = field(default_factory=list)  # more idle workers than keys waiting at the add
    enqueue_to_get_busy: list[int] = field(default_factory=list)  # the others: they wait for a reconcile to end
    arrivals: list[tuple[int, str]] = field(default_factory=list)  # (ns, key) of every add (for replay_bound)
    handoff: list[HandoffSample] = field(default_factory=list)  # the gaps of adds a worker was free for, split up
    reconcile: list[int] = field(default_factory=list)

    def by_stage(self, done_ns: list[int], busy_ns: list[int]) -> dict[str, list[int]]:
        """The sample lists by stage name (the lists themselves, not copies), with the queue's ``done`` call times
        and the workers' busy times (kept by :class:`TimedQueue`)."""
        return {"api_write": self.api, "trigger_handler": self.handler, "write_to_informer": self.write_to_event,
                "write_sent_to_informer": self.sent_to_event,
                "watch_chunk_to_handler": self.chunk_to_handler, "queue_add": self.add,
                "enqueue_to_get": self.enqueue_to_get, "enqueue_to_get_idle": self.enqueue_to_get_idle,
                "enqueue_to_get_free": self.enqueue_to_get_free, "enqueue_to_get_busy": self.enqueue_to_get_busy,
                "queue_done": done_ns, "reconcile": self.reconcile, "worker_busy": busy_ns}


class TimedQueue(RateLimitingQueue[str]):
    """The pipeline's queue: notes (per thread) when ``get`` returned, times each ``done`` call and how long a
    worker held each key (from ``get`` returning to its next ``get`` call: the reconcile and the worker's own
    turnaround).

    The controller's workers call ``get`` and ``done``; the reconcile function runs in between, in the same thread,
    and reads the stamp. Three ``perf_counter_ns`` calls are all this adds, plus the :class:`HandoffProbe`'s reads
    (the worker's scheduler counters before and after ``get``, the watched CPU clocks after it: ~5 µs, none of it
    between the add and the stamp).
    """

    def __init__(self, probe: HandoffProbe, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.local = threading.local()
        self.probe = probe
        self.done_ns: list[int] = []  # list.append is atomic: no lock needed
        self.busy_ns: list[int] = []

    def get(self, timeout: float | None = None) -> str:
        local = self.local
        t_get = getattr(local, "t_get", 0)
        if t_get:
            local.t_get = 0
            self.busy_ns.append(time.perf_counter_ns() - t_get)
        probe = self.probe
        sched0 = probe.sched()
        key = super().get(timeout)
        local.t_get = time.perf_counter_ns()
        local.handoff = (sched0, probe.sched(), probe.cpu())
        return key

    def done(self, item: str) -> bool:
        t0 = time.perf_counter_ns()
        requeued = super().done(item)
        self.done_ns.append(time.perf_counter_ns() - t0)
        return requeued


def stage_stats(lists: dict[str, list[int]], handoff: list[HandoffSample], recent: int = 0) -> dict[str, StageStats]:
    """The statistics of each stage in ``lists`` (:meth:`Samples.by_stage`) and of each part of the hand-offs in
    ``handoff``; with ``recent > 0``, of each stage's last ``recent`` samples (``handoff`` is already cut)."""
    out = {name: StageStats.of(values[-recent:] if recent > 0 else values) for name, values in lists.items()}
    for part in ("loop", "informer", "runqueue"):  # -1: not known for that sample
        out[f"handoff_{part}"] = StageStats.of([v for h in handoff if (v := getattr(h, part)) != -1])
    out["handoff_others"] = StageStats.of([h.others for h in handoff])
    out["handoff_idle"] = StageStats.of([h.idle for h in handoff])  # signed: clocks read a few µs apart
    return out


def slice_summary(counts: list[int]) -> dict[str, float]:
    """Of the sorted ``counts`` of times a woken worker was put on a core (:attr:`HandoffSample.slices`): ``n``,
    ``mean``, ``once`` (the share woken once), ``p50``, ``p95``. Empty without counts."""
    if not counts:
        return {}
    return {"n": len(counts), "mean": sum(counts) / len(counts), "once": sum(1 for c in counts if c <= 1) /
            len(counts), "p50": float(counts[len(counts) // 2]),
            "p95": float(counts[min(len(counts) - 1, int(0.95 * len(counts)))])}


def replay_bound(arrivals: list[tuple[int, str]], busy_ns: list[int], workers: int,
                 reconcile: float | None) -> dict[str, StageStats]:
    """The ``arrivals`` (``(ns, key)`` of each add) replayed on ``workers`` instant workers
    (:func:`keyqueue.lab.replay.replay`): the waits of the adds that queued a key, with workers that hold each key
    for exactly ``reconcile`` seconds (``"reconcile"``; left out when ``None``) and for the measured ``busy_ns``, in
    turn (``"measured"``; left out when empty). Empty without arrivals."""
    if not arrivals:
        return {}
    out: dict[str, StageStats] = {}
    if reconcile is not None:
        out["reconcile"] = StageStats.of(replay(arrivals, workers, round(reconcile * 1e9)), ENQUEUE_TO_GET_GOAL_NS)
    if busy_ns:
        out["measured"] = StageStats.of(replay(arrivals, workers, busy_ns), ENQUEUE_TO_GET_GOAL_NS)
    return out


def microbench_queue(cycles: int = 20_000) -> dict[str, float]:
    """Median cost in seconds of ``add``, ``get``, ``done`` of one key on a fresh, uncontended queue (one thread),
    measured now, in batches of 100 cycles, on a queue built like the pipeline's (``stats=True``)."""
    q: RateLimitingQueue[str] = RateLimitingQueue(stats=True)
    clock = time.perf_counter_ns
    per: dict[str, list[float]] = {"add": [], "get": [], "done": [], "cycle": []}
    batch = 100
    for _ in range(max(1, cycles // batch)):
        ta = tg = td = 0
        for _ in range(batch):
            t0 = clock()
            q.add("default/obj")
            t1 = clock()
            key = q.get()
            t2 = clock()
            q.done(key)
            t3 = clock()
            ta += t1 - t0
            tg += t2 - t1
            td += t3 - t2
        per["add"].append(ta / batch / 1e9)
        per["get"].append(tg / batch / 1e9)
        per["done"].append(td / batch / 1e9)
        per["cycle"].append((ta + tg + td) / batch / 1e9)
    return {k: percentile(sorted(v), 50) for k, v in per.items()}
