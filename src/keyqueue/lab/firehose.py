"""The firehose (``keyqueue-lab run``): a generator floods a few keys; workers drain them; the queue absorbs.

A generator thread adds ``rate`` adds per second, round-robin over ``keys`` keys named ``default/obj-N``, into a
:class:`~keyqueue.RateLimitingQueue` with the default controller limiter. ``workers`` threads take keys, hold
each for ``work`` (a ``time.sleep``, so the GIL is free meanwhile), fail with probability ``fail`` (then
``add_rate_limited``, else ``forget``) and always ``done``.

Every number comes from the queue's own decisions: the queue is built with ``stats=True`` and counts what each
add did; the event log (:mod:`keyqueue.lab.firehose_log`) prints the :class:`~keyqueue.AddResult` each add returned
and what ``done`` returned. The generator paces itself against a monotonic schedule in batches (every ~1 ms it makes
the adds owed so far), and the run reports the rate it really delivered.

The command line is :mod:`keyqueue.lab.firehose_cli`; what it shows (live view, summary, picture) is
:mod:`keyqueue.lab.firehose_view`.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, fields
from typing import Any

from keyqueue._core import QueueSnapshot, QueueStats
from keyqueue.errors import ShutDown
from keyqueue.lab.common import MAX_THREADS, check_size, format_count, format_duration, format_percent
from keyqueue.lab.firehose_log import EventLog
from keyqueue.lab.funnel import FunnelRates, funnel_line
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
    "key_names",
    "measure_generator_rate",
    "run_firehose",
    "slow_motion_config",
    "stats_line",
]

DEFAULT_FOLLOW = ("default/obj-0", "default/obj-1")
MAX_KEYS = 1_000_000  #: the most distinct keys a run may ask for
_MAX_BATCH = 1000  #: the most adds the generator makes between two looks at the clock and the stop flag


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
        return {"t": self.t, "enqueued": self.enqueued, "adds_total": s.adds, "deduplicated": s.deduplicated,
                "marked": s.marked, "processed": s.dones, "queue_len": self.queue_len,
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
            "deduplicated": s.deduplicated,
            "marked": s.marked,
            "dropped": s.dropped,
            "redelivered": s.redelivered,
            "gets": s.gets,
            "processed": s.dones,
            "rate_limited": self.rate_limited,
            "retries_fired": s.fired,
            "absorbed": self.adds_absorbed,
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


def stats_line(sample: Sample, label: str) -> str:
    """The ``[STATS]`` line for one sample."""
    s = sample.stats
    absorbed = (s.deduplicated + s.marked) / s.adds if s.adds else 0.0
    return (
        f"[STATS] {label} enqueued={format_count(sample.enqueued)} adds-total={format_count(s.adds)} "
        f"deduplicated={format_count(s.deduplicated)} marked={format_count(s.marked)} "
        f"processed={format_count(s.dones)} rate-limited={format_count(sample.rate_limited)} "
        f"| absorbed={format_percent(absorbed, 2)} queue.Len={sample.queue_len}"
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

