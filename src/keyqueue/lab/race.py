"""``keyqueue-lab race``: does any key ever reach two workers at once?

Producers add keys as fast as they can; workers take keys and hold each one for a short while; a detector
notices whenever a worker starts a key that another worker is still holding. With keyqueue the count must be 0.
The same harness over a plain :class:`queue.Queue` (no dirty set, no processing set, no ``done``) is the
control: it must report violations, or the zero above proves nothing.

The hold is ``time.sleep``, which releases the GIL: a busy-wait hold would almost never overlap with another
thread under the GIL, and even the control would report (nearly) zero.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import queue as stdlib_queue
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from keyqueue.errors import ShutDown
from keyqueue.lab.common import (
    EXIT_INTERRUPTED,
    MAX_THREADS,
    add_json_argument,
    check_size,
    format_count,
    format_duration,
    human_stream,
    parse_duration,
    write_json,
)
from keyqueue.lab.race_redis import run_from_args
from keyqueue.threaded import Queue

__all__ = ["QueueKind", "RaceProgress", "RaceResult", "SameKeyDetector", "add_arguments", "check_race", "run",
           "run_race"]

MAX_KEYS = 1_000_000
MAX_ADDS = 1_000_000_000

QueueKind = Literal["keyqueue", "control"]


class SameKeyDetector:
    """Counts the moments a worker starts a key that another worker holds. Thread-safe.

    Call :meth:`start` when a worker begins work on a key and :meth:`finish` when it has stopped (before it
    hands the key back to the queue). Both run under one lock: the check and the update are one step.
    """

    __slots__ = ("_holders", "_lock", "in_flight", "max_in_flight", "starts", "violations")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: dict[Hashable, int] = {}  # key → number of workers holding it right now
        self.violations = 0  #: starts of a key that at least one other worker was holding
        self.in_flight = 0  #: distinct keys held right now
        self.max_in_flight = 0  #: the largest number of distinct keys held at one moment
        self.starts = 0

    def start(self, key: Hashable) -> bool:
        """Record that a worker began ``key``. Returns ``False`` (and counts a violation) if it was held."""
        with self._lock:
            self.starts += 1
            holders = self._holders.get(key, 0)
            self._holders[key] = holders + 1
            if holders:
                self.violations += 1
                return False
            self.in_flight += 1
            if self.in_flight > self.max_in_flight:
                self.max_in_flight = self.in_flight
            return True

    def finish(self, key: Hashable) -> None:
        """Record that a worker stopped working on ``key``. Raises ``KeyError`` if nobody held it."""
        with self._lock:
            holders = self._holders[key] - 1
            if holders:
                self._holders[key] = holders
            else:
                del self._holders[key]
                self.in_flight -= 1


@dataclass(frozen=True, slots=True)
class RaceProgress:
    """How far a running race has come (passed to ``run_race``'s ``on_progress``)."""

    elapsed_s: float
    adds: int  #: add calls made so far (counted in steps of the producers' yield interval)
    adds_total: int  #: add calls the run will make
    reconciles: int
    violations: int
    draining: bool = False  #: every add was made; the workers are working off what is queued


@dataclass(frozen=True, slots=True)
class RaceResult:
    """What one race run measured."""

    queue_kind: str  #: "keyqueue" or "control"
    implementation: str  #: human-readable name of the queue under test
    workers: int
    keys: int
    producers: int
    adds: int  #: add (or put) calls made by the producers
    hold_s: float  #: requested hold per reconcile (a GIL-releasing sleep)
    yield_every: int  #: producers released the GIL after this many adds (0: never)
    reconciles: int  #: keys actually handed to a worker and worked on
    max_in_flight: int  #: the most distinct keys held by workers at one moment
    violations: int  #: a worker started a key another worker was holding
    elapsed_s: float  #: from the start signal until every worker stopped
    interrupted: bool = False  #: Ctrl-C stopped the producers early; ``adds`` counts the adds really made
    dropped: int = 0  #: entries still queued when Ctrl-C came, dropped unworked so that the run stops at once

    @property
    def control(self) -> bool:
        return self.queue_kind == "control"

    @property
    def collapse(self) -> float:
        """adds / reconciles: how many adds one reconcile absorbed on average (NaN when nothing was reconciled)."""
        return self.adds / self.reconciles if self.reconciles else math.nan

    @property
    def as_expected(self) -> bool:
        """keyqueue: no violation. Control: at least one (a detector is only trusted once seen failing)."""
        return self.violations > 0 if self.control else self.violations == 0

    def summary(self) -> dict[str, Any]:
        """The ``--json`` summary."""
        data = asdict(self)
        data.update(collapse=self.collapse, control=self.control, as_expected=self.as_expected)
        return data


def check_race(*, workers: int, keys: int, producers: int, adds: int, hold: float, yield_every: int) -> None:
    """Raise ``ValueError`` naming the first of :func:`run_race`'s sizes that is out of range."""
    check_size("workers", workers, 1, MAX_THREADS)
    check_size("producers", producers, 1, MAX_THREADS)
    check_size("keys", keys, 1, MAX_KEYS)
    check_size("adds", adds, 0, MAX_ADDS)
    check_size("yield_every", yield_every, 0, MAX_ADDS)
    if not hold >= 0:
        raise ValueError(f"hold must be >= 0 seconds, got {hold!r}")


def run_race(
    queue_kind: QueueKind = "keyqueue",
    *,
    workers: int = 16,
    keys: int = 64,
    producers: int = 8,
    adds: int = 320_000,
    hold: float = 20e-6,
    yield_every: int = 16,
    timeout: float = 300.0,
    on_progress: Callable[[RaceProgress], None] | None = None,
    progress_every: float = 1.0,
) -> RaceResult:
    """Run the harness once over ``queue_kind`` and return what it measured. Blocks until the run ends.

    ``keyqueue``: producers ``add`` to a :class:`keyqueue.Queue`; workers ``get``, hold, ``done``; when the
    producers are finished, ``shut_down_with_drain`` lets the workers finish what is left. ``control``: the same
    over :class:`queue.Queue` with ``put``/``get`` and one stop marker per worker. ``adds`` is split evenly over
    the producers (the remainder goes to the first ones); each producer walks the keys round-robin from its own
    offset, and lets other threads run (``time.sleep(0)``) after every ``yield_every`` adds (0: never) — without
    that, under the GIL, eight tight producer loops finish before the workers get going and the run measures
    little concurrency. ``on_progress`` is called from the calling thread every ``progress_every`` seconds
    until the workers stop (``draining`` once every add was made). Ctrl-C (``KeyboardInterrupt`` in the calling
    thread) stops the producers at their next yield point (or within 1,024 adds), drops what is still queued
    (``dropped``), lets each worker finish the key it holds and returns the result with ``interrupted=True``.
    Raises ``ValueError`` for sizes out of range (threads at most :data:`~keyqueue.lab.common.MAX_THREADS`) or a
    negative hold, ``TimeoutError`` if the run does not end within ``timeout`` seconds.
    """
    if queue_kind not in ("keyqueue", "control"):
        raise ValueError(f"queue_kind must be 'keyqueue' or 'control', got {queue_kind!r}")
    check_race(workers=workers, keys=keys, producers=producers, adds=adds, hold=hold, yield_every=yield_every)
    if not progress_every > 0:
        raise ValueError(f"progress_every must be > 0 seconds, got {progress_every!r}")

    names = [f"default/obj-{i}" for i in range(keys)]
    detector = SameKeyDetector()
    reconciles = [0] * workers
    made = [0] * producers  # adds made so far per producer, updated at each yield point
    stop = threading.Event()  # Ctrl-C: producers stop early
    start_gate = threading.Barrier(workers + producers + 1)
    sleep = time.sleep

    add: Callable[[str], object]
    if queue_kind == "keyqueue":
        kq: Queue[str] = Queue()
        add = kq.add
        implementation = "keyqueue.Queue"

        def work(wid: int) -> None:
            get, done = kq.get, kq.done
            count = 0
            start_gate.wait()
            while True:
                try:
                    key = get()
                except ShutDown:
                    break
                detector.start(key)
                sleep(hold)
                detector.finish(key)  # before done(): after done() another worker may rightly take the key
                count += 1
                reconciles[wid] = count
                done(key)
    else:
        cq: stdlib_queue.Queue[str | None] = stdlib_queue.Queue()
        add = cq.put
        implementation = "queue.Queue (CONTROL: no dedup, no processing set, no done — expected to fail)"

        def work(wid: int) -> None:
            get = cq.get
            count = 0
            start_gate.wait()
            while True:
                key = get()
                if key is None:
                    break
                detector.start(key)
                sleep(hold)
                detector.finish(key)
                count += 1
                reconciles[wid] = count

    def produce(pid: int) -> None:
        share = adds // producers + (1 if pid < adds % producers else 0)
        offset = pid * keys // producers
        start_gate.wait()
        every = yield_every or 1024
        is_stopped = stop.is_set
        for i in range(share):
            add(names[(offset + i) % keys])
            if i % every == every - 1:
                made[pid] = i + 1
                if is_stopped():
                    return
                if yield_every:
                    sleep(0)  # release the GIL so that workers run while producers produce
        made[pid] = share

    worker_threads = [threading.Thread(target=work, args=(w,), name=f"race-worker-{w}", daemon=True)
                      for w in range(workers)]
    producer_threads = [threading.Thread(target=produce, args=(p,), name=f"race-producer-{p}", daemon=True)
                        for p in range(producers)]
    for t in (*worker_threads, *producer_threads):
        t.start()
    deadline = time.monotonic() + timeout
    start_gate.wait(timeout)
    started = time.perf_counter()
    next_progress = started + progress_every
    draining = False

    def follow(threads: list[threading.Thread]) -> None:
        """Join ``threads`` (bounded by the deadline), reporting progress meanwhile."""
        nonlocal next_progress
        for t in threads:
            while t.is_alive() and time.monotonic() < deadline:
                t.join(max(0.0, min(deadline - time.monotonic(), next_progress - time.perf_counter())))
                if time.perf_counter() < next_progress:
                    continue
                next_progress += progress_every
                if on_progress is not None:
                    on_progress(RaceProgress(time.perf_counter() - started, sum(made), adds, sum(reconciles),
                                             detector.violations, draining))

    def drop_queued() -> int:
        """Ctrl-C: the entries still queued are dropped, so that the workers stop after the key they hold."""
        dropped = 0
        if queue_kind == "keyqueue":
            dropped = len(kq)
            kq.shut_down()
            return dropped
        with contextlib.suppress(stdlib_queue.Empty):
            while True:
                if cq.get_nowait() is not None:
                    dropped += 1
        for _ in range(workers):
            cq.put(None)
        return dropped

    interrupted = False
    dropped = 0
    try:
        follow(producer_threads)
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        for t in producer_threads:
            t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in producer_threads):
        raise TimeoutError(f"race: producers did not finish within {timeout} s")
    try:
        if interrupted:
            dropped = drop_queued()
        elif queue_kind == "keyqueue":
            draining = True
            if not kq.shut_down_with_drain(max(0.0, deadline - time.monotonic())):
                kq.shut_down()
                raise TimeoutError(f"race: the queue did not drain within {timeout} s")
        else:
            draining = True
            for _ in range(workers):
                cq.put(None)
        follow(worker_threads)
    except KeyboardInterrupt:  # while the workers work off what is queued
        interrupted = True
        dropped = drop_queued()
        follow(worker_threads)
    if any(t.is_alive() for t in worker_threads):
        raise TimeoutError(f"race: workers did not stop within {timeout} s")
    elapsed = time.perf_counter() - started
    return RaceResult(
        queue_kind=queue_kind,
        implementation=implementation,
        workers=workers,
        keys=keys,
        producers=producers,
        adds=sum(made),
        hold_s=hold,
        yield_every=yield_every,
        reconciles=sum(reconciles),
        max_in_flight=detector.max_in_flight,
        violations=detector.violations,
        elapsed_s=elapsed,
        interrupted=interrupted,
        dropped=dropped,
    )


def format_result(r: RaceResult) -> str:
    """The text report of one run."""
    mark = "must be > 0 (the control)" if r.control else "must be 0"
    rows = [
        ("queue under test", r.implementation),
        ("workers", f"{r.workers}"),
        ("distinct keys", f"{r.keys}"),
        (f"adds from {r.producers} producers", format_count(r.adds)),
        ("reconciles executed", format_count(r.reconciles)),
        ("collapse ratio", f"{r.collapse:.1f}× (adds per reconcile)" if r.reconciles else "- (no reconcile)"),
        ("max distinct keys in flight", f"{r.max_in_flight} (workers={r.workers})"),
        ("same-key violations", f"{format_count(r.violations)}   ← {mark}"),
        *([("dropped at Ctrl-C", f"{format_count(r.dropped)} queued entries, never worked on")]
          if r.interrupted else []),
        ("hold per reconcile", f"{format_duration(r.hold_s)} (time.sleep: releases the GIL)"),
        ("producers yield", f"every {r.yield_every} adds" if r.yield_every else "never"),
        ("elapsed", format_duration(r.elapsed_s)),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}} : {value}" for label, value in rows]
    if r.as_expected:
        verdict = (
            "as expected: without a processing set, two workers held the same key at once"
            if r.control
            else "as expected: no key was ever held by two workers at once"
        )
    else:
        verdict = (
            "NOT as expected: the control saw no overlap, so this run cannot show that the detector works"
            if r.control
            else "NOT as expected: a key was handed to a second worker while the first still held it"
        )
    if r.interrupted:
        verdict = "interrupted: " + verdict.replace("as expected: ", "so far ", 1)
    lines.append(verdict)
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=16, help="worker threads (default 16)")
    parser.add_argument("--keys", type=int, default=64, help="distinct keys (default 64)")
    parser.add_argument("--producers", type=int, default=8, help="producer threads (default 8)")
    parser.add_argument("--adds", type=int, default=320_000, help="add calls in total (default 320000)")
    parser.add_argument("--hold", type=parse_duration, default=20e-6,
                        help="how long a worker holds each key, a GIL-releasing sleep (default 20us)")
    parser.add_argument("--yield-every", type=int, default=16, metavar="N",
                        help="producers release the GIL (sleep(0)) every N adds so workers run meanwhile; "
                             "0 = never (default 16)")
    parser.add_argument("--progress-every", type=parse_duration, default=1.0, metavar="DURATION",
                        help="print how far the run has come this often (default 1s)")
    parser.add_argument("--control", action="store_true",
                        help="run the identical harness over stdlib queue.Queue; it must report violations")
    parser.add_argument("--backend", choices=("memory", "redis"), default="memory",
                        help="memory: threads on keyqueue.Queue (default); redis: worker processes on "
                             "keyqueue.redis.Queue, control = a plain Redis list (see keyqueue.lab.race_redis)")
    parser.add_argument("--processes", type=int, default=4,
                        help="with --backend redis: worker processes, each running --workers/--processes threads "
                             "(default 4)")
    parser.add_argument("--redis-url", default=None,
                        help="with --backend redis: an existing Redis (default $KEYQUEUE_REDIS_URL, else a fresh "
                             "redis-server)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Exit status 0 when the expected outcome held (0 violations; > 0 with --control), else 1; 2 for bad options;
    130 when Ctrl-C cut the run short (after the result of the adds made so far)."""
    out = human_stream(args)
    if args.backend == "redis":
        return run_from_args(args, out)

    def progress(p: RaceProgress) -> None:
        adds = (f"all {format_count(p.adds_total)} adds made, workers draining the queue" if p.draining
                else f"{format_count(p.adds)} of {format_count(p.adds_total)} adds")
        print(f"race: {format_duration(p.elapsed_s)}: {adds}, {format_count(p.reconciles)} reconciles, "
              f"{format_count(p.violations)} violations so far", file=out, flush=True)

    try:
        check_race(workers=args.workers, keys=args.keys, producers=args.producers, adds=args.adds, hold=args.hold,
                   yield_every=args.yield_every)
    except ValueError as exc:
        print(f"race: {exc}", file=out)
        return 2
    what = "queue.Queue (the control)" if args.control else "keyqueue.Queue"
    print(f"race: {format_count(args.adds)} adds from {args.producers} producers onto {args.keys} keys, "
          f"{args.workers} workers, on {what}; progress every {format_duration(args.progress_every)}",
          file=out, flush=True)
    try:
        result = run_race(
            "control" if args.control else "keyqueue",
            workers=args.workers,
            keys=args.keys,
            producers=args.producers,
            adds=args.adds,
            hold=args.hold,
            yield_every=args.yield_every,
            on_progress=progress,
            progress_every=args.progress_every,
        )
    except ValueError as exc:
        print(f"race: {exc}", file=out)
        return 2
    print(format_result(result), file=out, flush=True)
    write_json(args.json, result.summary())
    if result.interrupted:
        return EXIT_INTERRUPTED
    return 0 if result.as_expected else 1
