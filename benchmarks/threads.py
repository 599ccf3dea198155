"""Multi-threaded measurements: the firehose and the same-key concurrency harness.

These are wall-clock measurements of a whole scenario (threads, sleeps, the GIL handing over every
``sys.getswitchinterval()`` seconds), so they are timed with ``time.perf_counter`` around the scenario rather than
with :mod:`timeit`; each is repeated and the median reported by the runner.
"""

from __future__ import annotations

import importlib
import inspect
import queue as stdlib_queue
import random
import resource
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from keyqueue import RateLimitingQueue, ShutDown
from keyqueue.threaded import Queue

__all__ = ["RaceOutcome", "adders_workers", "firehose", "race", "race_via_lab", "wakeup_latency"]

_JOIN_TIMEOUT_S = 60.0


def firehose(duration_s: float, n_keys: int = 20, n_workers: int = 5, work_s: float = 0.005) -> dict[str, Any]:
    """One producer thread adds as fast as it can onto ``n_keys`` keys for ``duration_s`` while ``n_workers``
    threads take keys, sleep ``work_s`` and call ``done``. Returns the producer's add count, elapsed time and
    rate, and how many keys the workers processed."""
    q: RateLimitingQueue[str] = RateLimitingQueue()
    names = [f"default/obj-{i}" for i in range(n_keys)]
    processed = [0] * n_workers

    def worker(slot: int) -> None:
        get, done, sleep = q.get, q.done, time.sleep
        n = 0
        while True:
            try:
                key = get()
            except ShutDown:
                break
            sleep(work_s)
            done(key)
            n += 1
        processed[slot] = n

    out: dict[str, Any] = {}

    def producer() -> None:
        add, clock = q.add, time.perf_counter
        chunk = names * max(1, 10_000 // n_keys)  # check the clock once per ~10,000 adds
        adds = 0
        t0 = clock()
        end = t0 + duration_s
        while True:
            for key in chunk:
                add(key)
            adds += len(chunk)
            t = clock()
            if t >= end:
                break
        out["adds"] = adds
        out["elapsed_s"] = t - t0

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_workers)]
    for w in workers:
        w.start()
    p = threading.Thread(target=producer, daemon=True)
    p.start()
    p.join(_JOIN_TIMEOUT_S + duration_s)
    q.shut_down()
    for w in workers:
        w.join(_JOIN_TIMEOUT_S)
    if p.is_alive() or any(w.is_alive() for w in workers):
        raise RuntimeError("firehose: a thread did not finish")
    out["adds_per_s"] = out["adds"] / out["elapsed_s"]
    out["processed"] = sum(processed)
    return out


def _voluntary_switches() -> int:
    # getrusage(RUSAGE_SELF) sums every thread of the process (/proc/self/status counts only the main thread).
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def adders_workers(
    kind: str, duration_s: float, n_adders: int = 8, n_workers: int = 4, n_keys: int = 10_000, seed: int = 1
) -> dict[str, Any]:
    """``n_adders`` threads add random keys (of ``n_keys``) as fast as they can while ``n_workers`` threads
    ``get`` + ``done`` (no work in between) for ``duration_s``. ``kind``: ``"keyqueue"`` (a :class:`Queue`) or
    ``"queue.Queue"`` (``put``/``get``, no dedup). Returns adds/s, keys processed/s (counted up to the end of the
    window, not while draining afterwards) and voluntary context switches/s of the whole process."""
    names = [f"default/obj-{i}" for i in range(n_keys)]
    rng = random.Random(seed)
    plan = [rng.choice(names) for _ in range(50_000)]
    stop = threading.Event()
    adds = [0] * n_adders
    processed = [0] * n_workers
    wq: Queue[str] | None = None
    plain: stdlib_queue.Queue[str | None] | None = None
    if kind == "keyqueue":
        wq = Queue()
        put: Callable[[str], object] = wq.add
    elif kind == "queue.Queue":
        plain = stdlib_queue.Queue()
        put = plain.put
    else:
        raise ValueError(f"kind must be 'keyqueue' or 'queue.Queue', got {kind!r}")

    def adder(slot: int) -> None:
        mine = plan[slot * 997:] + plan[:slot * 997]  # each adder its own order of the same keys
        n = 0
        while not stop.is_set():
            for key in mine:
                put(key)
            n += len(mine)
        adds[slot] = n

    def worker(slot: int) -> None:
        n = 0
        if wq is not None:
            get, done = wq.get, wq.done
            try:
                while True:
                    done(get())
                    n += 1
                    processed[slot] = n
            except ShutDown:
                return
        assert plain is not None
        pget = plain.get
        while pget() is not None:
            n += 1
            processed[slot] = n

    ws = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_workers)]
    ads = [threading.Thread(target=adder, args=(i,), daemon=True) for i in range(n_adders)]
    switches0 = _voluntary_switches()
    t0 = time.perf_counter()
    for t in ws + ads:
        t.start()
    stop.wait(duration_s)
    done_in_window = sum(processed)
    elapsed = time.perf_counter() - t0
    stop.set()
    for t in ads:
        t.join(_JOIN_TIMEOUT_S)
    add_elapsed = time.perf_counter() - t0
    switches = _voluntary_switches() - switches0
    if wq is not None:
        wq.shut_down()
    else:
        assert plain is not None
        for _ in ws:
            plain.put(None)
    for t in ws:
        t.join(_JOIN_TIMEOUT_S)
    if any(t.is_alive() for t in ws + ads):
        raise RuntimeError("adders_workers: a thread did not finish")
    return {
        "kind": kind,
        "adds_per_s": sum(adds) / add_elapsed,
        "processed_per_s": done_in_window / elapsed,
        "voluntary_switches_per_s": switches / add_elapsed,
    }


def wakeup_latency(kind: str, samples: int, gap_s: float = 0.001) -> dict[str, Any]:
    """How long a key waits between its ``add`` and a blocked worker's ``get`` returning it when the adding thread
    keeps running Python code afterwards (an informer or trigger thread that adds mostly duplicate keys in a loop
    and never blocks): the queue-side part of the pipeline's enqueue → ``Get`` latency.

    The adding thread loops over 64 hot keys and, every ``gap_s``, adds a fresh key carrying its
    ``perf_counter`` timestamp; one worker thread waits in ``get`` and records the difference. ``kind="keyqueue"``:
    the hot adds are lock-free dedup adds to the same :class:`Queue`. ``kind="baseline"``: a
    :class:`queue.SimpleQueue` behind the same loop of ``key in pending`` probes (the dedup a hand-written queue
    does in front of it). Returns median / p90 / max in µs."""
    hot = [f"default/hot-{i}" for i in range(64)]
    lat: list[float] = []
    finished = threading.Event()
    if kind == "keyqueue":
        wq: Queue[Any] = Queue()
        for k in hot:
            wq.add(k)
        for _ in hot:
            wq.get()  # the hot keys are processing and marked: every later add of them is a lock-free DEDUP
        for k in hot:
            wq.add(k)
        add: Callable[[Any], object] = wq.add

        def offer(key: Any) -> None:
            add(key)

        def take() -> Any:
            item = wq.get()
            wq.done(item)
            return item
    elif kind == "baseline":
        sq: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
        pending = set(hot)
        sput = sq.put

        def offer(key: Any) -> None:
            if key not in pending:
                sput(key)

        take = sq.get
    else:
        raise ValueError(f"kind must be 'keyqueue' or 'baseline', got {kind!r}")

    def worker() -> None:
        clock = time.perf_counter
        while len(lat) < samples:
            t_add = take()[1]
            lat.append(clock() - t_add)
        finished.set()

    def adder() -> None:
        clock = time.perf_counter
        i = 0
        next_at = clock() + gap_s
        while not finished.is_set():
            for k in hot:
                offer(k)
            t = clock()
            if t >= next_at:
                i += 1
                offer((i, t))
                next_at = t + gap_s

    threads = [threading.Thread(target=f, daemon=True) for f in (worker, adder)]
    for t in threads:
        t.start()
    finished.wait(_JOIN_TIMEOUT_S)
    if kind == "keyqueue":
        wq.shut_down()
    for t in threads:
        t.join(_JOIN_TIMEOUT_S)
    if len(lat) < samples:
        raise RuntimeError(f"wakeup_latency: only {len(lat)} of {samples} samples")
    us = sorted(x * 1e6 for x in lat[:samples])
    return {"kind": kind, "samples": samples, "median_us": statistics.median(us),
            "p90_us": us[int(0.9 * (len(us) - 1))], "max_us": us[-1]}


@dataclass
class RaceOutcome:
    implementation: str
    workers: int
    keys: int
    producers: int
    adds: int
    hold_s: float
    reconciles: int
    collapse: float
    max_in_flight: int
    violations: int
    elapsed_s: float
    harness: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Detector:
    """Counts every moment a worker starts on a key another worker still holds (a same-key violation)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: dict[str, int] = {}
        self.violations = 0
        self.max_in_flight = 0
        self.reconciles = 0

    def enter(self, key: str) -> None:
        with self._lock:
            n = self._holders.get(key, 0)
            if n:
                self.violations += 1
            self._holders[key] = n + 1
            self.reconciles += 1
            if len(self._holders) > self.max_in_flight:
                self.max_in_flight = len(self._holders)

    def exit(self, key: str) -> None:
        with self._lock:
            n = self._holders[key] - 1
            if n:
                self._holders[key] = n
            else:
                del self._holders[key]


def race(
    *,
    control: bool = False,
    workers: int = 16,
    keys: int = 64,
    producers: int = 8,
    adds: int = 320_000,
    hold_s: float = 20e-6,
    seed: int = 1,
) -> RaceOutcome:
    """The seed's same-key harness: ``producers`` threads add ``adds`` random keys (of ``keys``) in total;
    ``workers`` threads take a key, hold it ``hold_s`` (``time.sleep``, which releases the GIL so overlaps are
    possible), release it. ``control=True`` swaps the work queue for a plain :class:`queue.Queue` (no dedup, no
    processing set), which must show violations for the zero of the real queue to mean anything."""
    names = [f"default/obj-{i}" for i in range(keys)]
    per_producer = [adds // producers + (1 if p < adds % producers else 0) for p in range(producers)]
    plans = []
    for p, n in enumerate(per_producer):
        rng = random.Random(seed * 1000 + p)
        plans.append([rng.choice(names) for _ in range(n)])
    det = _Detector()
    start = threading.Barrier(producers + 1)

    if control:
        plain: stdlib_queue.Queue[str | None] = stdlib_queue.Queue()
        put: Callable[[str], object] = plain.put

        def work() -> None:
            while True:
                key = plain.get()
                if key is None:
                    return
                det.enter(key)
                time.sleep(hold_s)
                det.exit(key)

    else:
        wq: Queue[str] = Queue()
        put = wq.add

        def work() -> None:
            get, done = wq.get, wq.done
            while True:
                try:
                    key = get()
                except ShutDown:
                    return
                det.enter(key)
                time.sleep(hold_s)
                det.exit(key)
                done(key)

    def produce(plan: list[str]) -> None:
        start.wait()
        for key in plan:
            put(key)

    ws = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    ps = [threading.Thread(target=produce, args=(plan,), daemon=True) for plan in plans]
    for t in ws + ps:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ps:
        t.join(_JOIN_TIMEOUT_S)
    if control:
        for _ in ws:
            plain.put(None)
    else:
        wq.shut_down_with_drain(_JOIN_TIMEOUT_S)
    for t in ws:
        t.join(_JOIN_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    if any(t.is_alive() for t in ws + ps):
        raise RuntimeError("race harness: a thread did not finish")
    return RaceOutcome(
        implementation="queue.Queue (control)" if control else "keyqueue.Queue",
        workers=workers,
        keys=keys,
        producers=producers,
        adds=adds,
        hold_s=hold_s,
        reconciles=det.reconciles,
        collapse=adds / det.reconciles if det.reconciles else float("inf"),
        max_in_flight=det.max_in_flight,
        violations=det.violations,
        elapsed_s=elapsed,
        harness="benchmarks.threads.race",
    )


def race_via_lab(
    *, control: bool, workers: int, keys: int, producers: int, adds: int, hold_s: float
) -> RaceOutcome | None:
    """Run the lab's harness (``keyqueue.lab.race.run_race``) with these sizes; ``None`` if it is not there or
    does not accept them (the caller then uses :func:`race`)."""
    try:
        mod = importlib.import_module("keyqueue.lab.race")
    except ImportError:
        return None
    run_race = getattr(mod, "run_race", None)
    if run_race is None:
        return None
    try:
        inspect.signature(run_race).bind("control" if control else "keyqueue", workers=workers, keys=keys,
                                         producers=producers, adds=adds, hold=hold_s)
    except TypeError:
        return None
    res = run_race("control" if control else "keyqueue", workers=workers, keys=keys, producers=producers,
                   adds=adds, hold=hold_s)
    reconciles = int(res.reconciles)
    return RaceOutcome(
        implementation=str(getattr(res, "implementation", "")),
        workers=workers,
        keys=keys,
        producers=producers,
        adds=int(res.adds),
        hold_s=hold_s,
        reconciles=reconciles,
        collapse=res.adds / reconciles if reconciles else float("inf"),
        max_in_flight=int(res.max_in_flight),
        violations=int(res.violations),
        elapsed_s=float(res.elapsed_s),
        harness="keyqueue.lab.race.run_race (producers yield every "
                f"{getattr(res, 'yield_every', '?')} adds)",
    )
