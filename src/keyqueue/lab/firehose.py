"""``keyqueue-lab run``: the firehose. A generator floods a few keys; workers drain them; the queue absorbs.

A generator thread adds ``--rate`` adds per second, round-robin over ``--keys`` keys named ``default/obj-N``, into a
:class:`~keyqueue.RateLimitingQueue` with the default controller limiter. ``--workers`` threads take keys, hold
each for ``--work`` (a ``time.sleep``, so the GIL is free meanwhile), fail with probability ``--fail`` (then
``add_rate_limited``, else ``forget``) and always ``done``.

Every number comes from the queue's own decisions: the queue is built with ``stats=True`` and counts what each
add did; the event log prints the :class:`~keyqueue.AddResult` each add returned and what ``done`` returned. The
generator paces itself against a monotonic schedule in batches (every ~1 ms it makes the adds owed so far), and
the run reports the rate it really delivered.

Log levels: by default one processing cycle of each followed key (``--follow``, default ``default/obj-0`` and
``default/obj-1``) is traced per ``--follow-every`` (default 1 s), with runs of no-op adds folded into one line;
``--verbose`` prints every event of every key; ``--quiet`` prints only the ``[STATS]`` lines. ``--slow-motion``
runs at a walking pace, holds ``default/obj-0`` for 300 ms each time and prints every event.
"""

from __future__ import annotations

import argparse
import collections
import math
import queue as stdlib_queue
import random
import shutil
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TextIO

from keyqueue._core import AddResult, QueueSnapshot, QueueStats
from keyqueue.errors import ShutDown
from keyqueue.lab.common import (
    EXIT_INTERRUPTED,
    MAX_THREADS,
    add_json_argument,
    check_size,
    format_count,
    format_duration,
    format_percent,
    human_stream,
    parse_duration,
    write_json,
)
from keyqueue.lab.funnel import FunnelRates, funnel_line, funnel_text
from keyqueue.lab.race import SameKeyDetector
from keyqueue.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from keyqueue.threaded import RateLimitingQueue

__all__ = [
    "FirehoseConfig",
    "FirehoseResult",
    "Sample",
    "add_arguments",
    "key_names",
    "measure_generator_rate",
    "run",
    "run_firehose",
    "slow_motion_config",
]

DEFAULT_FOLLOW = ("default/obj-0", "default/obj-1")
MAX_KEYS = 1_000_000  #: the most distinct keys a run may ask for
_MAX_BATCH = 1000  #: the most adds the generator makes between two looks at the clock and the stop flag

_QUEUED, _DEDUP, _MARKED, _DROPPED = AddResult.QUEUED, AddResult.DEDUP, AddResult.MARKED, AddResult.DROPPED


def key_names(n: int) -> list[str]:
    """The generator's keys: ``default/obj-0`` … ``default/obj-{n-1}``."""
    return [f"default/obj-{i}" for i in range(n)]


@dataclass(frozen=True, slots=True)
class FirehoseConfig:
    """One firehose run. Durations in seconds."""

    rate: float = 50_000.0  #: generator adds per second
    keys: int = 20
    workers: int = 5
    work: float = 0.005  #: how long a worker holds a key
    fail: float = 0.1  #: probability that a reconcile fails (→ add_rate_limited)
    duration: float = 10.0  #: how long the generator runs
    slow_key: str | None = None  #: a key held for ``slow_hold`` instead of ``work``
    slow_hold: float = 0.3
    log: str = "follow"  #: "all" (every event), "follow" (traced cycles of followed keys) or "none"
    follow: tuple[str, ...] = DEFAULT_FOLLOW
    follow_every: float = 1.0  #: in "follow" mode, trace one cycle of each followed key per this many seconds
    sample_every: float = 0.1  #: timeline sampling period
    stats_every: float = 1.0  #: period of the [STATS] lines
    seed: int | None = None
    slow_motion: bool = False

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad setting."""
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be a positive number of adds per second, got {self.rate!r}")
        check_size("keys", self.keys, 1, MAX_KEYS)
        check_size("workers", self.workers, 1, MAX_THREADS)
        if not (0.0 <= self.fail <= 1.0):
            raise ValueError(f"fail must be a probability in [0, 1], got {self.fail!r}")
        for name in ("work", "duration", "slow_hold", "follow_every"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        if not (self.sample_every > 0 and self.stats_every > 0):
            raise ValueError("sample_every and stats_every must be > 0")
        if self.log not in ("all", "follow", "none"):
            raise ValueError(f"log must be 'all', 'follow' or 'none', got {self.log!r}")
        if self.log == "follow":
            known = set(key_names(self.keys))
            for key in self.follow:
                if key not in known:
                    raise ValueError(
                        f"follow: {key!r} is never added by this run; its keys are default/obj-0 … "
                        f"default/obj-{self.keys - 1}"
                    )


def slow_motion_config(**overrides: Any) -> FirehoseConfig:
    """The ``--slow-motion`` settings: 2 adds/s over 2 keys for 10 s, 2 workers, ``default/obj-0`` held 2.5 s
    (so 2–3 adds arrive while it is held), every event logged, ``[STATS]`` every 2.5 s: about 6 lines a second,
    slow enough to read as they come."""
    settings: dict[str, Any] = dict(rate=2.0, keys=2, workers=2, duration=10.0, slow_key="default/obj-0",
                                    slow_hold=2.5, log="all", slow_motion=True, stats_every=2.5)
    settings.update(overrides)
    return FirehoseConfig(**settings)


@dataclass(frozen=True, slots=True)
class Sample:
    """The queue and the generator at one moment of the run."""

    t: float  #: seconds since the generator started
    enqueued: int
    stats: QueueStats
    queue_len: int
    rate_limited: int
    funnel: QueueSnapshot | None = None  #: the sizes of the queue's structures (``q.snapshot()``)

    def as_dict(self) -> dict[str, Any]:
        s, f = self.stats, self.funnel
        sizes = {} if f is None else {"dirty": f.dirty, "fifo": f.fifo, "processing": f.processing,
                                      "delayed": f.delayed}
        return {"t": self.t, "enqueued": self.enqueued, "adds_total": s.adds, "dedup_noop": s.deduplicated,
                "rwp_marked": s.marked, "processed": s.dones, "queue_len": self.queue_len,
                "rate_limited": self.rate_limited, **sizes}

    def rates_since(self, earlier: Sample) -> FunnelRates:
        """The funnel's rates between ``earlier`` and this sample."""
        return FunnelRates.between(earlier.t, earlier.enqueued, earlier.stats, self.t, self.enqueued, self.stats)


@dataclass(frozen=True, slots=True)
class FirehoseResult:
    config: FirehoseConfig
    enqueued: int  #: generator add calls
    generator_elapsed_s: float
    stats: QueueStats  #: the queue's counters after the workers stopped
    queue_len: int  #: len(q) when the generator stopped
    rate_limited: int  #: add_rate_limited calls
    violations: int  #: a worker started a key another worker held (must be 0)
    max_in_flight: int
    timeline: list[Sample] = field(default_factory=list)
    interrupted: bool = False

    @property
    def delivered_rate(self) -> float:
        return self.enqueued / self.generator_elapsed_s if self.generator_elapsed_s > 0 else 0.0

    @property
    def adds_absorbed(self) -> float:
        """(dedup no-ops + adds that marked a held key) / all adds the queue evaluated."""
        s = self.stats
        return (s.deduplicated + s.marked) / s.adds if s.adds else 0.0

    def summary(self) -> dict[str, Any]:
        c, s = self.config, self.stats
        return {
            "requested_rate": c.rate,
            "delivered_rate": self.delivered_rate,
            "delivered_fraction": self.delivered_rate / c.rate,
            "requested_duration_s": c.duration,
            "duration_s": self.generator_elapsed_s,
            "enqueued": self.enqueued,
            "adds_total": s.adds,
            "queued": s.queued,
            "dedup_noop": s.deduplicated,
            "rwp_marked": s.marked,
            "dropped": s.dropped,
            "redelivered": s.redelivered,
            "gets": s.gets,
            "processed": s.dones,
            "rate_limited": self.rate_limited,
            "retries_fired": s.fired,
            "adds_absorbed": self.adds_absorbed,
            "queue_len": self.queue_len,
            "violations": self.violations,
            "max_in_flight": self.max_in_flight,
            "keys": c.keys,
            "workers": c.workers,
            "work_s": c.work,
            "fail": c.fail,
            "slow_motion": c.slow_motion,
            "slow_key": c.slow_key,
            "slow_hold_s": c.slow_hold if c.slow_key else None,
            "interrupted": self.interrupted,
            "stats": {f.name: getattr(s, f.name) for f in fields(QueueStats)},
            "timeline": [sample.as_dict() for sample in self.timeline],
        }


class _RecordingLimiter(RateLimiter[Hashable]):
    """Wraps the queue's limiter and remembers the last delay it gave each key, so the log can print it.

    For a :class:`~keyqueue.ratelimit.MaxOfRateLimiter` (the default controller limiter) it asks each part
    itself, exactly as the max-of limiter does (every part's ``when``, in order; the delay is the largest), and
    remembers every part's answer: the per-key exponential one and the shared bucket's. Nothing is recomputed.
    """

    def __init__(self, inner: RateLimiter[Hashable]) -> None:
        self.inner = inner
        self.last: dict[Hashable, float] = {}
        self.parts: tuple[RateLimiter[Hashable], ...] = (
            inner.limiters if isinstance(inner, MaxOfRateLimiter) else ())
        self.part_names = tuple(_part_name(part) for part in self.parts)
        self.last_parts: dict[Hashable, tuple[float, ...]] = {}
        exp = next((c for c in self.parts if isinstance(c, ItemExponentialFailureRateLimiter)), None)
        self.base_delay: float | None = getattr(exp, "base_delay", None)
        self.max_delay: float | None = getattr(exp, "max_delay", None)

    def when(self, item: Hashable) -> float:
        if self.parts:
            answers = tuple(part.when(item) for part in self.parts)
            self.last_parts[item] = answers
            delay = max(answers)
        else:
            delay = self.inner.when(item)
        self.last[item] = delay
        return delay

    def explain(self, item: Hashable) -> str:
        """``" = max(per-key 5ms, bucket 59.84s)"`` for the last delay of ``item`` (empty if not known)."""
        answers = self.last_parts.get(item)
        if not answers or len(answers) < 2:
            return ""
        return " = max(" + ", ".join(f"{name} {format_duration(d)}" for name, d in zip(self.part_names, answers,
                                                                                    strict=True)) + ")"

    def forget(self, item: Hashable) -> None:
        self.inner.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return self.inner.num_requeues(item)



def _part_name(limiter: RateLimiter[Hashable]) -> str:
    if isinstance(limiter, ItemExponentialFailureRateLimiter):
        return "per-key"
    if isinstance(limiter, BucketRateLimiter):
        return f"bucket({limiter.qps:g}/s)"
    return type(limiter).__name__


# -- the event log ------------------------------------------------------------------------------------------

_STOP = object()


class EventLog:
    """Formats events and writes them from one thread, in the order they were emitted.

    Threads call :meth:`emit` with small tuples (cheap; no formatting, no I/O on the caller's thread):

    * ``("add", key, AddResult)`` — a generator add and what the queue did with it
    * ``("get", key, worker, seq)`` — a worker took ``key``; ``seq`` counts hand-outs of that key
    * ``("rl", key, worker, attempt, delay, parts)`` — a failed reconcile went to ``add_rate_limited``; ``parts``
      says what each part of the limiter answered (``" = max(per-key 5ms, bucket(10/s) 59.84s)"``, or empty)
    * ``("done", key, worker, seq, ok, redelivered, failures_forgotten)``
    * ``("line", text)`` — a ready line ([STATS] and the like)

    ``mode="all"`` prints every event. ``mode="follow"`` traces one processing cycle (from a ``Get`` to the next
    ``Get`` of the same key, normally seq+1) of each key every ``follow_every`` seconds (0: every cycle), and folds
    each run of no-op adds into one line. ``mode="none"`` prints only ``line`` events.
    """

    def __init__(self, write: Callable[[str], None], mode: str = "all", follow_every: float = 1.0) -> None:
        self._write = write
        self._mode = mode
        self._every = follow_every
        self._q: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="lab-event-log", daemon=True)
        self.emit: Callable[[Any], None] = self._q.put
        # Printer-thread state
        self._phase: dict[Hashable, str] = {}  # "waiting" | "held" | "marked"
        self._holder: dict[Hashable, int] = {}
        self._tracing: set[Hashable] = set()
        self._trace_started: dict[Hashable, float] = {}
        self._folded: dict[Hashable, int] = {}  # no-op adds not printed yet, per key
        self.lines_written = 0

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float | None = None) -> None:
        """Write what is pending, then stop the thread. Blocks until everything emitted so far is written (at most
        ``timeout`` seconds; ``None``, the default: however long the writes take — a ``--verbose`` run on a slow
        terminal can trail the queue by seconds, and the summary must not overtake or truncate its log)."""
        self._q.put(_STOP)
        self._thread.join(timeout)

    def line(self, text: str) -> None:
        self._q.put(("line", text))

    # printer thread

    def _loop(self) -> None:
        get, get_nowait = self._q.get, self._q.get_nowait
        while True:
            batch = [get()]
            while len(batch) < 2000:
                try:
                    batch.append(get_nowait())
                except stdlib_queue.Empty:
                    break
            out: list[str] = []
            stop = False
            for event in batch:
                if event is _STOP:
                    stop = True
                    break
                self._handle(event, out)
            if stop:
                for key in list(self._folded):
                    self._flush_folded(key, out)
            if out:
                self.lines_written += len(out)
                self._write("\n".join(out))
            if stop:
                return

    def _flush_folded(self, key: Hashable, out: list[str]) -> None:
        n = self._folded.pop(key, 0)
        if n:
            out.append(f"[DEDUP] key={key} … {format_count(n)} more adds, each a no-op the same way")

    def _handle(self, event: tuple[Any, ...], out: list[str]) -> None:
        kind = event[0]
        if kind == "line":
            out.append(event[1])
            return
        key = event[1]
        mode = self._mode
        if kind == "get":
            # "marked" here means a generator add marked the key between the worker's get() and this event (the
            # worker emits after get() returns): the key is held *and* marked. Otherwise it is now simply held.
            if self._phase.get(key) != "marked":
                self._phase[key] = "held"
            self._holder[key] = event[2]
            if mode == "all":
                out.append(f"[WORKER-{event[2]}] key={key} Get seq={event[3]}")
            elif mode == "follow":
                self._flush_folded(key, out)
                printed = False
                if key in self._tracing:  # the cycle is complete: show the next hand-out and stop
                    out.append(f"[WORKER-{event[2]}] key={key} Get seq={event[3]}")
                    printed = True
                    self._tracing.discard(key)
                now = time.monotonic()
                if now - self._trace_started.get(key, -math.inf) >= self._every:
                    self._trace_started[key] = now
                    self._tracing.add(key)
                    if not printed:
                        out.append(f"[WORKER-{event[2]}] key={key} Get seq={event[3]}")
            return
        shown = mode == "all" or (mode == "follow" and key in self._tracing)
        if kind == "add":
            result = event[2]
            phase = self._phase.get(key, "absent")
            if result == _DEDUP:
                if shown:
                    if mode == "follow" and key in self._folded:
                        self._folded[key] += 1
                        return
                    out.append(f"[ENQUEUE] key={key} (generator)")
                    if phase == "marked":
                        why = "already marked for redelivery — the add is a no-op"
                    elif phase == "waiting":
                        why = "already waiting in the FIFO — the add is a no-op"
                    elif phase == "held":  # an add the log did not see (a retry that fired) marked it
                        why = "already marked for redelivery (by a retry that fired) — the add is a no-op"
                    else:  # a retry that fired queued it
                        why = "already waiting in the FIFO (a retry fired) — the add is a no-op"
                    out.append(f"[DEDUP] key={key} {why}")
                    if mode == "follow":
                        self._folded[key] = 0
                return
            if mode == "follow":
                self._flush_folded(key, out)
            if result == _MARKED:
                # Normally the holder's Get was logged already. If not, a worker has taken the key but its Get
                # event is still on its way (the worker emits it after get() returns): do not name a stale holder.
                holder = f"WORKER-{self._holder.get(key, '?')}" if phase == "held" else "a worker (its Get follows)"
                self._phase[key] = "marked"
                if shown:
                    out.append(f"[ENQUEUE] key={key} (generator)")
                    out.append(
                        f"[REQUEUE-WHILE-PROCESSING] key={key} {holder} holds it — "
                        "marked dirty; done() will queue it once more"
                    )
            elif result == _QUEUED:
                self._phase[key] = "waiting"
                if shown:
                    out.append(f"[ENQUEUE] key={key} (generator) → joined the FIFO")
            elif shown:
                out.append(f"[ENQUEUE] key={key} (generator) → dropped: the queue is shutting down")
            return
        if mode == "follow":
            self._flush_folded(key, out)
        if kind == "rl":
            if shown:
                _, _, wid, attempt, delay, parts = event
                out.append(f"[RATELIMIT] key={key} attempt={attempt} backoff={format_duration(delay)}{parts}")
        elif kind == "done":
            _, _, wid, seq, ok, redelivered, forgotten = event
            self._phase[key] = "waiting" if redelivered else "absent"
            if shown:
                if ok:
                    tail = "Forget"
                    if forgotten:
                        tail += f" (backoff reset: {forgotten} failure{'s' if forgotten != 1 else ''} forgotten)"
                else:
                    tail = "AddRateLimited"
                out.append(f"[WORKER-{wid}] key={key} Done seq={seq} result={'OK' if ok else 'ERR'} → {tail}")
                if redelivered:
                    out.append(
                        f"[REDELIVERY] key={key} was added while WORKER-{wid} held it → done() put it back in "
                        "the FIFO (once)"
                    )


# -- the run -----------------------------------------------------------------------------------------------


def stats_line(sample: Sample, label: str) -> str:
    """The ``[STATS]`` line for one sample."""
    s = sample.stats
    absorbed = (s.deduplicated + s.marked) / s.adds if s.adds else 0.0
    return (
        f"[STATS] {label} enqueued={format_count(sample.enqueued)} adds-total={format_count(s.adds)} "
        f"dedup-noop={format_count(s.deduplicated)} rwp-marked={format_count(s.marked)} "
        f"processed={format_count(s.dones)} rate-limited={format_count(sample.rate_limited)} "
        f"| adds-absorbed={format_percent(absorbed, 2)} queue.Len={sample.queue_len}"
    )


class _Firehose:
    def __init__(self, config: FirehoseConfig, log: EventLog, metrics_provider: Any = None,
                 queue_factory: Callable[[RateLimiter[Hashable]], Any] | None = None) -> None:
        self.c = config
        self.log = log
        self.limiter = _RecordingLimiter(default_controller_rate_limiter())
        # queue_factory(limiter) builds another queue with the same API (--backend redis: keyqueue.redis's; its
        # limiter runs in Redis, so the log's delays are not recorded).
        self.q: RateLimitingQueue[str] = queue_factory(self.limiter.inner) if queue_factory else RateLimitingQueue(
            self.limiter, stats=True, name="lab" if metrics_provider is not None else "",
            metrics_provider=metrics_provider,
        )
        self.keys = key_names(config.keys)
        if config.log == "all":
            self.followed: frozenset[str] = frozenset(self.keys)
        elif config.log == "follow":
            self.followed = frozenset(config.follow)
        else:
            self.followed = frozenset()
        self.follow_lock = threading.Lock()  # orders a followed key's add/done with the event it emits
        self.detector = SameKeyDetector()
        self.seqs: dict[str, int] = {}
        self.failures = [0] * config.workers
        self.enqueued = 0
        self.started = 0.0
        self.generator_elapsed = 0.0
        self.stop = threading.Event()  # ends the generator early (Ctrl-C)
        self.generator_done = threading.Event()
        self.timeline: list[Sample] = []

    def sample(self) -> Sample:
        return Sample(time.monotonic() - self.started, self.enqueued, self.q.stats(), len(self.q),
                      sum(self.failures), self.q.snapshot())

    def generate(self) -> None:
        c, add, keys, followed = self.c, self.q.add, self.keys, self.followed
        emit, lock = self.log.emit, self.follow_lock
        n = len(keys)
        rate, duration = c.rate, c.duration
        # After a stall, catch up by at most 50 ms worth per tick, and never more than _MAX_BATCH adds between two
        # looks at the clock and the stop flag: the run ends on time and Ctrl-C is seen at any rate.
        max_batch = min(max(1, int(rate * 0.05)), _MAX_BATCH)
        monotonic, sleep = time.monotonic, time.sleep
        sent = 0
        idx = 0
        start = self.started
        try:
            while True:
                now = monotonic()
                elapsed = now - start
                owed = int(min(elapsed, duration) * rate) - sent
                if owed > max_batch:
                    owed = max_batch
                if followed:
                    for _ in range(owed):
                        key = keys[idx]
                        idx += 1
                        if idx == n:
                            idx = 0
                        if key in followed:
                            with lock:
                                emit(("add", key, add(key)))
                        else:
                            add(key)
                else:
                    for _ in range(owed):
                        add(keys[idx])
                        idx += 1
                        if idx == n:
                            idx = 0
                sent += owed
                self.enqueued = sent
                if elapsed >= duration or self.stop.is_set():
                    break
                # Sleep ~1 ms at high rates; at low rates until the next add is due (at most 50 ms).
                wait = (sent + 1) / rate - (monotonic() - start)
                sleep(min(max(wait, 0.001), 0.05, max(duration - elapsed, 0.0) + 1e-4))
        finally:
            self.generator_elapsed = monotonic() - start
            self.generator_done.set()

    def work(self, index: int) -> None:
        c, q, emit, lock = self.c, self.q, self.log.emit, self.follow_lock
        wid = index + 1
        followed, seqs, detector, limiter = self.followed, self.seqs, self.detector, self.limiter
        rng = random.Random(None if c.seed is None else c.seed * 1_000_003 + index)
        fail, work, slow_key, slow_hold = c.fail, c.work, c.slow_key, c.slow_hold
        sleep = time.sleep
        failures = self.failures
        while True:
            try:
                key = q.get()
            except ShutDown:
                return
            seq = seqs.get(key, 0) + 1  # only the holder of a key touches its counter
            seqs[key] = seq
            detector.start(key)
            logged = key in followed
            if logged:
                with lock:
                    emit(("get", key, wid, seq))
            hold = slow_hold if key == slow_key else work
            if hold > 0:
                sleep(hold)
            ok = not (fail > 0 and rng.random() < fail)
            forgotten = 0
            if ok:
                if logged:
                    forgotten = q.num_requeues(key)
                q.forget(key)
            else:
                q.add_rate_limited(key)
                failures[index] += 1
                if logged:
                    attempt = q.num_requeues(key)
                    emit(("rl", key, wid, attempt, limiter.last.get(key, 0.0), limiter.explain(key)))
            detector.finish(key)
            if logged:
                with lock:
                    redelivered = q.done(key)
                    emit(("done", key, wid, seq, ok, redelivered, forgotten))
            else:
                q.done(key)

    def monitor(self, on_sample: Callable[[Sample], None] | None) -> None:
        c = self.c
        next_stats = c.stats_every
        previous = Sample(0.0, 0, QueueStats(), 0, 0)
        while not self.generator_done.wait(c.sample_every - (time.monotonic() - self.started) % c.sample_every):
            sample = self.sample()
            self.timeline.append(sample)
            if on_sample is not None:
                on_sample(sample)
            if sample.t + 1e-3 >= next_stats:
                self.log.line(stats_line(sample, f"t={sample.t:.0f}s"))
                assert sample.funnel is not None
                self.log.line(funnel_line(sample.funnel, sample.rates_since(previous)))
                previous = sample
                next_stats += c.stats_every

    def run(self, on_sample: Callable[[Sample], None] | None = None) -> FirehoseResult:
        c = self.c
        workers = [threading.Thread(target=self.work, args=(i,), name=f"lab-worker-{i + 1}", daemon=True)
                   for i in range(c.workers)]
        for t in workers:
            t.start()
        self.started = time.monotonic()
        generator = threading.Thread(target=self.generate, name="lab-generator", daemon=True)
        monitor = threading.Thread(target=self.monitor, args=(on_sample,), name="lab-monitor", daemon=True)
        generator.start()
        monitor.start()
        interrupted = False
        try:
            while generator.is_alive():
                generator.join(0.2)
        except KeyboardInterrupt:
            interrupted = True
            self.stop.set()
            generator.join()
        monitor.join()
        end = self.sample()
        self.timeline.append(end)
        if on_sample is not None:
            on_sample(end)
        # Stop: delayed retries are dropped; keys already queued (and re-added while held) are still finished.
        # A Ctrl-C during that drain stops it: what is still queued is dropped.
        try:
            if not self.q.shut_down_with_drain(timeout=max(10.0, 20 * c.slow_hold)):
                self.q.shut_down()
        except KeyboardInterrupt:
            interrupted = True
            self.q.shut_down()
        for t in workers:
            t.join(10.0)
        return FirehoseResult(
            config=c,
            enqueued=self.enqueued,
            generator_elapsed_s=self.generator_elapsed,
            stats=self.q.stats(),
            queue_len=end.queue_len,
            rate_limited=sum(self.failures),
            violations=self.detector.violations,
            max_in_flight=self.detector.max_in_flight,
            timeline=self.timeline,
            interrupted=interrupted,
        )


def measure_generator_rate(keys: int = 20, seconds: float = 0.03) -> float:
    """Adds per second the generator's loop makes on this machine, measured now for about ``seconds`` into a
    fresh counting queue with nobody else running: the most any run can deliver (with workers competing for the
    interpreter, less)."""
    q: RateLimitingQueue[str] = RateLimitingQueue(stats=True)
    add, names = q.add, key_names(keys)
    n = len(names)
    made = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for i in range(1000):
            add(names[i % n])
        made += 1000
        now = time.perf_counter()
        if now >= deadline:
            break
    q.shut_down()
    return made / (now - started)


def run_firehose(
    config: FirehoseConfig,
    write: Callable[[str], None] | None = None,
    *,
    on_sample: Callable[[Sample], None] | None = None,
    metrics_provider: Any = None,
    queue_factory: Callable[[RateLimiter[Hashable]], Any] | None = None,
) -> FirehoseResult:
    """Run the firehose described by ``config``; blocks for about ``config.duration`` seconds plus the drain.

    ``write`` receives the event log and ``[STATS]`` lines (several lines per call, joined with newlines) from a
    dedicated thread; ``None`` discards them. ``on_sample`` is called (on the monitor thread) with every sample.
    Ctrl-C (``KeyboardInterrupt`` in the calling thread) ends the generator early (within at most 1,000 adds,
    whatever the rate), or the drain after it; the result says so. A rate beyond what the generator can make
    is not an error here: the run ends on time and reports the rate it delivered (the CLI refuses such rates,
    see :func:`measure_generator_rate`). Raises ``ValueError`` for a bad config.
    """
    config.validate()
    log = EventLog(write if write is not None else (lambda text: None), config.log, config.follow_every)
    log.start()
    try:
        firehose = _Firehose(config, log, metrics_provider, queue_factory)
        result = firehose.run(on_sample)
    finally:
        log.close()
    return result


# -- text ----------------------------------------------------------------------------------------------------


def format_summary(r: FirehoseResult) -> str:
    c, s = r.config, r.stats
    final = Sample(r.generator_elapsed_s, r.enqueued, s, r.queue_len, r.rate_limited)
    asked = c.rate * c.duration
    per_handout = f"{r.enqueued / s.gets:.1f} generator adds per hand-out" if s.gets else "no hand-out yet"
    lines = [
        stats_line(final, "final"),
        f"generator: asked for {format_count(c.rate)} adds/s for {format_duration(c.duration)} "
        f"({format_count(asked)} adds); delivered {format_count(r.enqueued)} adds in "
        f"{format_duration(r.generator_elapsed_s)} = {format_count(r.delivered_rate)} adds/s "
        f"({format_percent(r.delivered_rate / c.rate)} of the requested rate)"
        + (" — interrupted" if r.interrupted else ""),
        f"funnel: {format_count(s.adds)} adds reached the queue ({format_count(s.fired)} of them fired retries); "
        f"{format_count(s.queued)} joined the FIFO, {format_count(s.deduplicated)} were no-ops, "
        f"{format_count(s.marked)} marked a held key, {format_count(s.redelivered)} redeliveries",
        f"workers: {format_count(s.gets)} hand-outs to {c.workers} workers ({per_handout}), "
        f"{format_count(r.rate_limited)} failures sent to add_rate_limited; a key was started while "
        f"another worker held it {r.violations} times (must be 0); at most {r.max_in_flight} keys in flight",
        f"queue.Len when the generator stopped: {r.queue_len} (of {c.keys} keys) — it tracks distinct hot keys, "
        "not the event count; retries still scheduled at the end were dropped by the shutdown",
    ]
    return "\n".join(lines)


class _Plain:
    """Writes lines to a text stream (no live view). On a terminal, lines longer than its width are wrapped at
    word boundaries (continuations indented), so that the terminal never breaks a word; elsewhere (a file, a
    pipe) every line stays whole."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.width = shutil.get_terminal_size().columns if stream.isatty() else 0

    def write(self, text: str) -> None:
        if self.width > 20:
            text = "\n".join(
                textwrap.fill(line, self.width - 1, subsequent_indent="    ", break_long_words=False,
                              break_on_hyphens=False) if len(line) >= self.width else line
                for line in text.split("\n")
            )
        self.stream.write(text + "\n")
        self.stream.flush()


def _live_view(stream: TextIO, config: FirehoseConfig) -> tuple[Any, Callable[[str], None], Callable[[Sample], None]]:
    """A rich live view: a progress bar through the duration and the current counters; log lines scroll above."""
    from rich.console import Console, Group
    from rich.live import Live
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    console = Console(file=stream)
    latest: list[Sample] = []
    history: collections.deque[Sample] = collections.deque()

    def render() -> Any:
        sample = latest[-1] if latest else None
        t = sample.t if sample is not None else 0.0
        bar = Table.grid(padding=(0, 1))
        bar.add_row(Text("firehose", style="bold"), ProgressBar(total=config.duration or 1.0,
                                                               completed=min(t, config.duration), width=40),
                    Text(f"{format_duration(t)} / {format_duration(config.duration)}"))
        if sample is None:
            return bar
        s = sample.stats
        absorbed = (s.deduplicated + s.marked) / s.adds if s.adds else 0.0
        earlier = next((h for h in history if sample.t - h.t <= 1.0 + 1e-6), history[0]) if history else sample
        funnel = Text(funnel_text(sample.funnel, sample.rates_since(earlier), workers=config.workers)
                      if sample.funnel is not None else "")
        grid = Table.grid(padding=(0, 2))
        for _ in range(4):
            grid.add_column(justify="right")
        grid.add_row("enqueued", format_count(sample.enqueued), "adds/s", format_count(sample.enqueued / t if t else 0))
        grid.add_row("adds-total", format_count(s.adds), "dedup-noop", format_count(s.deduplicated))
        grid.add_row("rwp-marked", format_count(s.marked), "processed", format_count(s.dones))
        grid.add_row("rate-limited", format_count(sample.rate_limited), "adds-absorbed", format_percent(absorbed, 2))
        grid.add_row("queue.Len", str(sample.queue_len), "redelivered", format_count(s.redelivered))
        return Group(bar, Text("the funnel, over the last second:", style="bold"), funnel, grid)

    live = Live(get_renderable=render, console=console, refresh_per_second=4, transient=False)

    def write(text: str) -> None:
        console.print(Text(text))  # wrapped at word boundaries to the terminal's width

    def on_sample(sample: Sample) -> None:
        history.append(sample)
        while len(history) > 2 and sample.t - history[0].t > 1.5:
            history.popleft()
        latest[:] = [sample]

    return live, write, on_sample


# -- CLI -----------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = FirehoseConfig()
    parser.add_argument("--rate", type=float, default=None,
                        help=f"generator adds per second (default {d.rate:.0f}; slow motion 2)")
    parser.add_argument("--keys", type=int, default=None, help=f"distinct keys (default {d.keys}; slow motion 2)")
    parser.add_argument("--workers", type=int, default=None,
                        help=f"worker threads (default {d.workers}; slow motion 2)")
    parser.add_argument("--work", type=parse_duration, default=None,
                        help="how long a worker holds a key (default 5ms)")
    parser.add_argument("--fail", type=float, default=None,
                        help=f"probability that a reconcile fails (default {d.fail})")
    parser.add_argument("--duration", type=parse_duration, default=None,
                        help="how long the generator runs (default 10s, also in slow motion)")
    parser.add_argument("--slow-motion", action="store_true",
                        help="walking pace: 2 adds/s on 2 keys for 10s, default/obj-0 held 2.5s, every event "
                             "logged (about 6 lines/s)")
    parser.add_argument("--hold", type=parse_duration, default=None,
                        help="slow motion: how long default/obj-0 is held (default 2.5s)")
    parser.add_argument("--follow", action="append", metavar="KEY", default=None,
                        help="trace this key in the log (repeatable; default default/obj-0 and default/obj-1)")
    parser.add_argument("--follow-every", type=parse_duration, default=1.0,
                        help="trace one processing cycle of each followed key per this interval (default 1s; "
                             "0 = every cycle)")
    level = parser.add_mutually_exclusive_group()
    level.add_argument("--verbose", "-v", action="store_true", help="log every event of every key")
    level.add_argument("--quiet", "-q", action="store_true", help="print only the [STATS] lines and the summary")
    parser.add_argument("--plain", action="store_true", help="no live view, plain lines even on a terminal")
    parser.add_argument("--seed", type=int, default=None, help="seed for the workers' failures")
    parser.add_argument("--plot", metavar="FILE.png", default=None,
                        help="draw adds/s, processed/s and queue length over time (needs matplotlib: keyqueue[plot])")
    parser.add_argument("--backend", choices=("memory", "redis"), default="memory",
                        help="memory: keyqueue.RateLimitingQueue (default); redis: keyqueue.redis.RateLimitingQueue")
    parser.add_argument("--redis-url", default=None,
                        help="with --backend redis: an existing Redis (default $KEYQUEUE_REDIS_URL, else a fresh "
                             "redis-server)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve the queue's Prometheus metrics on this port during the run (if available)")
    add_json_argument(parser)


def config_from_args(args: argparse.Namespace) -> FirehoseConfig:
    """Build the run's config from parsed options (slow motion changes the defaults, explicit options win)."""
    given = {name: getattr(args, name) for name in ("rate", "keys", "workers", "work", "fail", "duration")
             if getattr(args, name) is not None}
    if args.hold is not None:
        given["slow_hold"] = args.hold
    if args.follow:
        given["follow"] = tuple(args.follow)
    given["follow_every"] = args.follow_every
    given["seed"] = args.seed
    if args.quiet:
        given["log"] = "none"
    elif args.verbose:
        given["log"] = "all"
    if args.slow_motion:
        return slow_motion_config(**given)
    return FirehoseConfig(**given)


def _start_metrics(port: int, out: TextIO) -> tuple[Any, Any]:
    """A Prometheus provider on a private registry and a ``/metrics`` server for it, or (None, None) with a
    message when the metrics extra is missing or the port cannot be bound (the run goes on without metrics)."""
    try:
        from prometheus_client import CollectorRegistry

        from keyqueue.metrics import PrometheusMetricsProvider, serve
    except ImportError as exc:
        print(f"run: --metrics-port: metrics are not available ({exc}); running without them", file=out)
        return None, None
    try:
        provider = PrometheusMetricsProvider(CollectorRegistry())
        server = serve(port, registry=provider.registry)
    except (OSError, ValueError) as exc:
        print(f"run: --metrics-port: could not serve metrics on port {port}: {exc}", file=out)
        return None, None
    print(f"run: the queue's metrics (name 'lab') are served at {server.url} during the run", file=out)
    return provider, server


def run(args: argparse.Namespace) -> int:
    """Exit status 0 after a run in which no key reached two workers at once; 1 otherwise; 2 for bad options
    (including a ``--rate`` beyond the generator's measured maximum); 130 if Ctrl-C cut the run short (after the
    summary of what ran)."""
    out = human_stream(args)
    try:
        config = config_from_args(args)
        config.validate()
    except (ValueError, TypeError) as exc:
        print(f"run: {exc}", file=out)
        return 2
    if config.rate > _RATE_CHECKED_ABOVE:
        ceiling = measure_generator_rate(config.keys)
        if config.rate > ceiling:
            print(f"run: --rate {config.rate:g} adds/s is more than the generator can make here: measured just now, "
                  f"at most {format_count(ceiling)} adds/s; choose a lower --rate", file=out)
            return 2
    if args.plot is not None:
        from keyqueue.lab.plot import PlotUnavailable, require_matplotlib

        try:
            require_matplotlib()
        except PlotUnavailable as exc:
            print(f"run: {exc}", file=out)
            return 2
    provider, server = _start_metrics(args.metrics_port, out) if args.metrics_port is not None else (None, None)
    mode = {"all": "every event of every key", "none": "only [STATS]",
            "follow": f"one cycle of {', '.join(config.follow)} every {format_duration(config.follow_every)}"}
    header = (
        f"firehose: {format_count(config.rate)} adds/s onto {config.keys} keys for {format_duration(config.duration)}; "
        f"{config.workers} workers hold each key {format_duration(config.work)}"
        + (f" ({config.slow_key}: {format_duration(config.slow_hold)})" if config.slow_key else "")
        + f", fail {format_percent(config.fail, 0)} → add_rate_limited; log: {mode[config.log]}"
    )
    live = None
    on_sample: Callable[[Sample], None] | None = None
    use_live = not args.plain and out.isatty() and _has_rich()
    if use_live:
        live, write, on_sample = _live_view(out, config)
    else:
        write = _Plain(out).write
    write(header)
    if live is not None:
        live.start()
    factory, redis_server = _redis_backend(args, write) if args.backend == "redis" else (None, None)
    try:
        result = run_firehose(config, write, on_sample=on_sample, metrics_provider=provider, queue_factory=factory)
    finally:
        if live is not None:
            live.stop()
        if server is not None:
            server.close()
        if factory is not None:
            factory.cleanup()
        if redis_server is not None:
            redis_server.stop()
    _Plain(out).write(format_summary(result))
    if args.plot is not None:
        from keyqueue.lab.plot import plot_run

        plot_run(result, args.plot)
        _Plain(out).write(f"plot written to {args.plot}")
    write_json(args.json, result.summary())
    if result.interrupted:
        return EXIT_INTERRUPTED
    return 0 if result.violations == 0 else 1


def _redis_backend(args: argparse.Namespace, write: Callable[[str], None]) -> tuple[Any, Any]:
    """``--backend redis``: a factory for keyqueue.redis.RateLimitingQueue, and the RedisServer it started."""
    import os
    import uuid

    from keyqueue.redis import RateLimitingQueue as RedisRateLimitingQueue
    from keyqueue.redis import RedisServer

    url = args.redis_url or os.environ.get("KEYQUEUE_REDIS_URL")
    server = None if url else RedisServer().start()
    url = url or server.url  # type: ignore[union-attr]
    write(f"backend: keyqueue.redis on {url} (every add, get and done is one Redis round trip)")

    made: list[Any] = []

    class Factory:
        def __call__(self, limiter: RateLimiter[Hashable]) -> Any:
            q = RedisRateLimitingQueue(f"lab-{uuid.uuid4().hex[:8]}", url=url, rate_limiter=limiter, stats=True)
            made.append(q)
            return q

        def cleanup(self) -> None:  # the queue's state outlives the run in Redis: delete it
            for q in made:
                q.delete()
                q.close()

    return Factory(), server


_RATE_CHECKED_ABOVE = 100_000.0  # below this every machine keeps up; above it the CLI measures the generator first


def _has_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - convenience for `python -m`
    parser = argparse.ArgumentParser(prog="keyqueue-lab run")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
