"""Bulk ordering and a multi-threaded fuzz of the priority queue, with a control that must fail the same checks.

The fuzz logs every add, hand-out and done *inside the queue's lock* (a subclass of the core appends to a list), so
the log is the order in which the queue really applied them. A plain replay of that log checks, for every hand-out,
that its priority is the highest priority added to that key since the key's previous hand-out, and that no key is
handed out again before its ``done``. Consumers also run an independent same-key detector, and a recorder checks
that no per-priority depth ever goes negative. The control is a naive priority queue (a heap, no dedup, no
processing set) run through the same harness: the same checks must report violations there.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import threading
import time
from typing import Any, cast

from keyqueue import PriorityQueue, ShutDown, aio
from keyqueue._core import EMPTY, AddResult, PriorityCore
from keyqueue.metrics import SnapshotMetricsProvider
from keyqueue.metrics._recorders import PullRecorder
from keyqueue.priority import PriorityDepth

# -- 1000 keys at each of 5 priorities ------------------------------------------------------------------------------


def expected_bulk() -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    adds = [(f"p{p}-{i}", p) for i in range(1000) for p in (0, 3, -2, 7, 1)]  # interleaved priorities
    want = sorted(adds, key=lambda kp: (-kp[1], int(kp[0].split("-")[1])))
    return adds, want


def test_5000_keys_in_priority_then_fifo_order_threaded() -> None:
    adds, want = expected_bulk()
    q: PriorityQueue[str] = PriorityQueue()
    for key, prio in adds:
        assert q.add(key, priority=prio) == AddResult.QUEUED
    assert len(q) == 5000
    got = []
    for _ in range(5000):
        key, prio = q.get_with_priority(timeout=0)
        q.done(key)
        got.append((key, prio))
    assert got == want
    assert len(q) == 0


def test_5000_keys_in_priority_then_fifo_order_aio() -> None:
    adds, want = expected_bulk()

    async def main() -> list[tuple[str, int]]:
        q: aio.PriorityQueue[str] = aio.PriorityQueue()
        for key, prio in adds:
            q.add(key, priority=prio)
        got = []
        async with asyncio.timeout(10):
            for _ in range(5000):
                key, prio = await q.get_with_priority()
                q.done(key)
                got.append((key, prio))
        return got

    assert asyncio.run(main()) == want


# -- the fuzz harness ------------------------------------------------------------------------------------------------


class DepthProbe(PriorityDepth):
    """The queue's per-priority depth; after every change checks that no depth is negative."""

    def __init__(self) -> None:
        super().__init__()
        self.negative = 0

    def _check(self) -> None:
        if any(v < 0 for v in self.snapshot().values()):
            self.negative += 1

    def inc(self, priority: int) -> None:
        super().inc(priority)
        self._check()

    def dec(self, priority: int) -> None:
        super().dec(priority)
        self._check()


_tick_lock = threading.Lock()
_tick_next = itertools.count()


def tick() -> int:
    """The next number of one global order of events, taken under a lock: ``next()`` of a shared iterator is not
    guaranteed atomic without the GIL, and two events must never share a number."""
    with _tick_lock:
        return next(_tick_next)



class LoggedCore(PriorityCore[str]):
    """Appends (op, key, priority, tick) to ``log`` inside the queue's lock (the shell holds it around every call).
    Adds that the shell answers lock-free (a dedup of a ready key) never reach the core and are not logged."""

    log: list[tuple[Any, ...]]

    def _ready(self, item: str, priority: int, at_ns: int | None) -> AddResult:
        outcome = super()._ready(item, priority, at_ns)
        self.log.append(("add", item, priority, tick()))
        return outcome

    def pop(self) -> str | Any:
        got = super().pop()
        if got is not EMPTY:
            self.log.append(("get", got, self.handed[got], tick()))
        return got

    def done(self, item: str) -> bool:
        self.log.append(("done", item))
        return super().done(item)


class LoggedPQ(PriorityQueue[str]):
    def _new_core(self, recorder: Any, stats: bool, ordering: Any) -> Any:
        self.probe = self._depth = DepthProbe()
        if isinstance(recorder, PullRecorder):
            recorder.priority_depth = self._depth
        core = LoggedCore(self.clock, metrics=recorder, stats=stats, depth=self._depth)
        core.log = []
        self._ranks = core.order.ranks
        return core

    @property
    def log(self) -> list[tuple[Any, ...]]:
        return cast(LoggedCore, self._core).log


class BrokenFastPathPQ(LoggedPQ):
    """A mutation control for the lock-free dedup: it answers DEDUP for any ready key, ignoring the priority."""

    def add(self, item: str, *, priority: int = 0, after: float = 0.0, rate_limited: bool = False) -> AddResult:
        if item in self._core.order.ranks:
            return AddResult.DEDUP
        return super().add(item, priority=priority, after=after, rate_limited=rate_limited)


class NaivePQ:
    """The control: a heap of (-priority, seq, key) under one condition; no dedup, no processing set."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.heap: list[tuple[int, int, str]] = []
        self.seq = itertools.count()
        self.log: list[tuple[Any, ...]] = []
        self.closed = False

    def add(self, key: str, *, priority: int = 0) -> None:
        with self.cond:
            heapq.heappush(self.heap, (-priority, next(self.seq), key))
            self.log.append(("add", key, priority, tick()))
            self.cond.notify()

    def get_with_priority(self, timeout: float | None = None) -> tuple[str, int]:
        with self.cond:
            while not self.heap:
                if self.closed:
                    raise ShutDown
                self.cond.wait(timeout)
            neg, _, key = heapq.heappop(self.heap)
            self.log.append(("get", key, -neg, tick()))
            return key, -neg

    def done(self, key: str) -> None:
        with self.cond:
            self.log.append(("done", key))

    def shut_down(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def replay(log: list[tuple[Any, ...]]) -> dict[str, int]:
    """Check a linearised log. Returns violation counts: 'double' (handed out again before done), 'priority' (not
    the max priority added since the previous hand-out), 'phantom' (handed out with no add since the previous
    hand-out), plus 'gets'."""
    since: dict[str, int] = {}
    held: set[str] = set()
    v = {"double": 0, "priority": 0, "phantom": 0, "gets": 0}
    for ev in log:
        op, key = ev[0], ev[1]
        if op == "add":
            since[key] = max(since.get(key, ev[2]), ev[2])
        elif op == "get":
            v["gets"] += 1
            if key in held:
                v["double"] += 1
            held.add(key)
            top = since.pop(key, None)
            if top is None:
                v["phantom"] += 1
            elif top != ev[2]:
                v["priority"] += 1
        else:
            held.discard(key)
    return v


def lost_adds(log: list[tuple[Any, ...]], adds: list[tuple[int, int, str, int]]) -> tuple[int, int]:
    """Check every add as its producer saw it — (tick before, tick after, key, priority) — including the ones the
    queue answered without its lock: the first hand-out of the key after the add returned must have at least that
    priority. Adds with a hand-out of their key between the two ticks are ambiguous and skipped. Returns (lost,
    checked)."""
    gets: dict[str, list[tuple[int, int]]] = {}
    for ev in log:
        if ev[0] == "get":
            gets.setdefault(ev[1], []).append((ev[3], ev[2]))
    lost = checked = 0
    for before, after, key, prio in adds:
        ticks = gets.get(key, [])
        if any(before < t < after for t, _ in ticks):
            continue
        checked += 1
        nxt = next((p for t, p in ticks if t > after), None)
        if nxt is None or nxt < prio:
            lost += 1
    return lost, checked


def run_fuzz(q: Any, *, producers: int, consumers: int, adds: int, keys: int, seed: int) -> dict[str, int]:
    """Producers add random keys at random priorities while consumers take, hold briefly and finish keys.
    Returns the replay's counts plus 'overlap' from the consumers' own same-key detector."""
    lock = threading.Lock()
    in_flight: set[str] = set()
    overlap = [0]
    added: list[tuple[int, int, str, int]] = []
    start = threading.Barrier(producers + consumers, timeout=5)

    def produce(i: int) -> None:
        rnd = random.Random(seed * 1000 + i)
        start.wait()
        mine = []
        for _ in range(adds):
            key, prio = f"k{rnd.randrange(keys)}", rnd.randint(-3, 3)
            before = tick()
            q.add(key, priority=prio)
            mine.append((before, tick(), key, prio))
            if rnd.random() < 0.05:
                time.sleep(0)  # let the consumers in (the GIL would otherwise favour one tight loop)
        with lock:
            added.extend(mine)

    def consume(i: int) -> None:
        rnd = random.Random(seed * 1000 + 500 + i)
        start.wait()
        while True:
            try:
                key, _ = q.get_with_priority(timeout=5)
            except ShutDown:
                return
            with lock:
                if key in in_flight:
                    overlap[0] += 1
                in_flight.add(key)
            if rnd.random() < 0.2:
                time.sleep(0.0001)  # widen the window in which a second holder could show up
            with lock:
                in_flight.discard(key)
            q.done(key)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
    workers = [threading.Thread(target=consume, args=(i,)) for i in range(consumers)]
    for t in threads + workers:
        t.start()
    for t in threads:
        t.join(10)
    q.shut_down()  # consumers finish what is left, then see ShutDown
    for t in workers:
        t.join(10)
    assert not any(t.is_alive() for t in threads + workers)
    counts = replay(q.log)
    counts["overlap"] = overlap[0]
    counts["lost"], counts["checked"] = lost_adds(q.log, added)
    return counts


def test_fuzz_priority_queue_threads() -> None:
    provider = SnapshotMetricsProvider()
    for seed in range(3):
        q = LoggedPQ(name=f"fuzz-{seed}", metrics_provider=provider)
        counts = run_fuzz(q, producers=4, consumers=4, adds=2500, keys=32, seed=seed)
        assert counts["gets"] > 500
        assert counts["double"] == 0
        assert counts["priority"] == 0
        assert counts["phantom"] == 0
        assert counts["overlap"] == 0
        assert counts["lost"] == 0
        assert counts["checked"] > 1000
        assert q.probe.negative == 0
        # Everything was handed out and finished: every depth is back to 0, and len agrees.
        assert len(q) == 0
        assert set(q.depth_by_priority().values()) <= {0}
        snap = provider.snapshot()[f"fuzz-{seed}"]
        assert snap.depth == 0
        assert snap.adds == counts["gets"]  # a key is counted once each time it becomes ready


def test_fuzz_control_broken_fast_path_loses_adds() -> None:
    counts = run_fuzz(BrokenFastPathPQ(name="broken", metrics_provider=SnapshotMetricsProvider()),
                      producers=4, consumers=4, adds=2500, keys=32, seed=11)
    assert counts["lost"] > 0  # a raise of priority answered "dedup" is seen by the producers' check


def test_fuzz_control_naive_priority_queue_is_caught() -> None:
    counts = run_fuzz(NaivePQ(), producers=4, consumers=4, adds=2500, keys=32, seed=7)
    assert counts["phantom"] > 0  # duplicates handed out with no add in between
    assert counts["priority"] > 0  # a duplicate's own priority, not the key's highest
    assert counts["double"] > 0  # the same key handed to a second consumer before done
    assert counts["overlap"] > 0  # and the consumers' own detector saw two holders at once
