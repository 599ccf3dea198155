"""Serial per key across async workers: 4 producer threads add into one aio queue, 16 async workers process it,
and a detector counts any moment two workers hold the same key. The same harness around asyncio.Queue (the
control) must show violations, or the detector's zero would prove nothing.

Each producer adds every key twice in a row (an informer often reports one object several times in a burst). In
the control those two adds are two neighbouring entries, which two idle workers take at once, so the control's
violations do not depend on how the producer threads happen to interleave: with one add per key the control
reported as few as 1 violation in a few runs out of a hundred, i.e. it could have reported 0. With the repeat it
reports ~2,000 per run. For keyqueue the second add is a dedup (or marks a key being processed)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from keyqueue import aio
from tests.aio.helpers import run

PRODUCERS = 4
WORKERS = 16
KEYS = 64
ADDS_PER_PRODUCER = 1000
REPEAT = 2  # consecutive adds of the same key by one producer
BATCH = 50  # a producer pauses briefly after each batch so its adds overlap the workers' processing
HOLD = 0.001  # an await, so the holding task yields and other workers run meanwhile


@dataclass
class Run:
    adds: int = 0
    processed: int = 0
    violations: int = 0
    max_in_flight: int = 0
    holding: dict[str, int] = field(default_factory=dict)
    last_add_seq: dict[str, int] = field(default_factory=dict)
    last_start_seq: dict[str, int] = field(default_factory=dict)


class Ticks:
    """One global order of events for the producers' threads and the loop's thread: ``next()`` under a lock, since a
    shared ``itertools.count`` is not guaranteed atomic without the GIL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = itertools.count()

    def __next__(self) -> int:
        with self._lock:
            return next(self._next)


def _produce(add: Callable[[str], Any], r: Run, seq: Ticks, lock: threading.Lock) -> None:
    for i in range(ADDS_PER_PRODUCER):
        key = f"default/obj-{(i // REPEAT) % KEYS}"
        with lock:
            r.last_add_seq[key] = next(seq)
            r.adds += 1
        add(key)
        if i % BATCH == BATCH - 1:
            time.sleep(0.001)


async def _process(key: str, r: Run, seq: Ticks) -> None:
    # All workers run in the loop's thread: the detector needs no lock.
    r.last_start_seq[key] = next(seq)
    if r.holding.get(key, 0):
        r.violations += 1
    r.holding[key] = r.holding.get(key, 0) + 1
    r.max_in_flight = max(r.max_in_flight, sum(1 for v in r.holding.values() if v))
    try:
        await asyncio.sleep(HOLD)
    finally:
        r.holding[key] -= 1
        r.processed += 1


async def _harness(
    add: Callable[[str], Any], worker: Callable[[Run, Ticks], Coroutine[Any, Any, None]], finish: Any
) -> Run:
    r = Run()
    seq = Ticks()
    lock = threading.Lock()
    workers = [asyncio.create_task(worker(r, seq)) for _ in range(WORKERS)]
    producers = [threading.Thread(target=_produce, args=(add, r, seq, lock)) for _ in range(PRODUCERS)]
    for p in producers:
        p.start()
    def join_all() -> None:
        for p in producers:
            p.join(10)

    await asyncio.to_thread(join_all)
    await finish()
    await asyncio.gather(*workers)
    return r


def test_keyqueue_aio_has_no_same_key_violations() -> None:
    q: aio.Queue[str] = aio.Queue()

    async def worker(r: Run, seq: Ticks) -> None:
        async for key in q:
            await _process(key, r, seq)

    async def finish() -> None:
        assert await q.shut_down_with_drain(timeout=10) is True

    r = run(_harness(q.add, worker, finish), timeout=30)
    assert r.adds == PRODUCERS * ADDS_PER_PRODUCER
    assert r.violations == 0
    assert 0 < r.processed <= r.adds
    # Nothing lost: every key was processed, and its last processing started after its last add.
    assert set(r.last_start_seq) == set(r.last_add_seq)
    for key, added in r.last_add_seq.items():
        assert r.last_start_seq[key] > added, key
    assert r.max_in_flight > 1  # the workers really ran in parallel


def test_control_asyncio_queue_shows_violations() -> None:
    async def main() -> Run:
        loop = asyncio.get_running_loop()
        aq: asyncio.Queue[str | None] = asyncio.Queue()

        def add(key: str) -> None:
            loop.call_soon_threadsafe(aq.put_nowait, key)

        async def worker(r: Run, seq: Ticks) -> None:
            while (key := await aq.get()) is not None:
                await _process(key, r, seq)

        async def finish() -> None:
            await asyncio.sleep(0)  # let the producers' last call_soon_threadsafe puts land first
            for _ in range(WORKERS):
                aq.put_nowait(None)

        return await _harness(add, worker, finish)

    r = run(main(), timeout=30)
    assert r.processed == r.adds  # no collapse: every add is one processing
    # The detector can see a violation. Each producer's repeated adds sit next to each other in the control's
    # FIFO, so nearly every pair collides (~2,000 of 4,000 adds); 100 leaves a wide margin under any load.
    assert r.violations > 100
