"""The core's metrics ledger (issue 18): a plain queue's core keeps its Prometheus/snapshot recorder's per-key times
and buffers the durations itself, folding them into the buckets later. A scrape must not be able to tell: the same
event sequence gives byte-for-byte the same exposition as the recorder's own event methods (the provider as it was
before the ledger), at every point, across folds, after shutdown and after the queue is garbage-collected."""

from __future__ import annotations

import gc
import random
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import keyqueue
import keyqueue.aio
from keyqueue import FakeClock
from keyqueue.metrics import PrometheusMetricsProvider
from keyqueue.metrics._recorders import FOLD_AT, PullRecorder

# Clock steps spread over every bucket of client-go's histograms (1e-8 s ... 10 s and +Inf).
STEPS = [0.0, 3e-9, 4e-8, 7e-7, 2e-6, 5e-5, 3e-4, 2e-3, 0.05, 0.4, 3.0, 40.0]


class Pair:
    """Two queues fed the same calls: ``new`` uses the ledger (the default), ``old`` has it detached, so its core
    calls the recorder's ``get``/``done`` (the provider's event methods, unchanged by the ledger)."""

    def __init__(self, make: Any) -> None:
        self.clocks = [FakeClock(), FakeClock()]
        self.registries = [CollectorRegistry(), CollectorRegistry()]
        self.queues = [make(clock=c, name="ctl", metrics_provider=PrometheusMetricsProvider(r))
                       for c, r in zip(self.clocks, self.registries, strict=True)]
        new, old = (q._core for q in self.queues)
        assert type(new.metrics) is PullRecorder and new._ledger is new.metrics  # the ledger is what is tested
        old._ledger = None

    def call(self, method: str, *args: Any) -> list[Any]:
        return [getattr(q, method)(*args) for q in self.queues]

    def step(self, seconds: float) -> None:
        for c in self.clocks:
            c.step(seconds)

    def scrapes(self) -> tuple[bytes, bytes]:
        new, old = (generate_latest(r) for r in self.registries)
        return new, old


def drive(pair: Pair, rng: random.Random, events: int, asyncio_get: Any = None) -> int:
    """Random adds, hand-outs, dones, delayed adds and clock steps on both queues; compares a scrape now and then.
    Returns how many keys were handed out."""
    held: list[str] = []
    handed = 0
    for i in range(events):
        op = rng.random()
        key = f"k{rng.randrange(12)}"
        if op < 0.35:
            assert len(set(map(int, pair.call("add", key)))) == 1
        elif op < 0.6 and min(pair.call("__len__")) > 0:  # len() fires due delayed keys: in both queues
            got = pair.call("get") if asyncio_get is None else [asyncio_get(q) for q in pair.queues]
            assert got[0] == got[1]
            held.append(got[0])
            handed += 1
        elif op < 0.8 and held:
            key = held.pop(rng.randrange(len(held)))
            assert len(set(pair.call("done", key))) == 1
        elif op < 0.87:
            pair.call("add_after", key, rng.choice(STEPS))
        else:
            pair.step(rng.choice(STEPS))
        if i % 97 == 0:
            new, old = pair.scrapes()
            assert new == old
    new, old = pair.scrapes()
    assert new == old
    return handed


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_scrape_is_the_same_as_with_the_recorders_own_methods(seed: int) -> None:
    pair = Pair(keyqueue.DelayingQueue)
    handed = drive(pair, random.Random(seed), 4_000)
    assert handed > 3 * FOLD_AT  # the buffers were folded several times, and scraped in between
    new, _ = pair.scrapes()
    assert b'workqueue_queue_duration_seconds_bucket{le="+Inf",name="ctl"}' in new
    # Shutdown freezes the in-flight gauges the same way; the dones after it still count.
    pair.call("shut_down")
    pair.step(5.0)
    for key in list(pair.queues[0]._core.processing):
        pair.call("done", key)
    assert pair.scrapes()[0] == pair.scrapes()[1]


def test_a_dead_queue_keeps_its_unfolded_durations() -> None:
    pair = Pair(keyqueue.Queue)

    def cycles(n: int) -> None:
        for i in range(n):
            pair.call("add", f"k{i}")
            pair.step(STEPS[i % len(STEPS)])
            pair.call("done", pair.call("get")[0])

    cycles(FOLD_AT // 4)
    before = pair.scrapes()  # folds what the ledger buffered so far
    assert before[0] == before[1]
    cycles(FOLD_AT // 4 * 3)  # fewer than one fold: these stay buffered until the queue dies
    assert len(pair.queues[0]._core.metrics.work_obs) == FOLD_AT // 4 * 3
    pair.queues.clear()
    gc.collect()
    after = pair.scrapes()
    assert after[0] == after[1]
    assert b'workqueue_work_duration_seconds_count{name="ctl"} 256.0' in after[0]


def test_asyncio_shell_uses_the_ledger_too() -> None:
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        pair = Pair(keyqueue.aio.DelayingQueue)
        drive(pair, random.Random(7), 1_500, asyncio_get=lambda q: loop.run_until_complete(q.get()))
    finally:
        loop.close()
