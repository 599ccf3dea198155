"""client-go ``util/workqueue/queue_test.go``, translated case by case (one test per Go test function).

Each case runs on both in-process shells (the ``make_queue`` fixture of ``tests/conftest.py`` over
``tests/shells.py``). Go's ``Get() (item, shutdown)`` is ``get()`` returning the key or raising ``ShutDown``; the
goroutines become threads; Go's ``WaitGroup.Wait`` becomes a bounded ``join`` (a deadlock guard, not a timing
assertion).
"""

from __future__ import annotations

import collections
import gc
import threading
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from keyqueue import ShutDown
from tests.shells import Key, wait_for_getters, wait_until

JOIN = 30.0  # seconds a thread may take before the test calls it stuck


def _shut_down(q: Any) -> None:
    q.shut_down()


def _shut_down_with_drain(q: Any) -> None:
    assert q.shut_down_with_drain() is True


SHUTDOWNS = pytest.mark.parametrize("shutdown", [_shut_down, _shut_down_with_drain], ids=["shut_down", "drain"])


def _join_all(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(JOIN)
        assert not t.is_alive(), f"{t.name} did not finish"


class Holders:
    """Who holds which key right now: fails the test if two workers ever hold one key at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: set[Any] = set()
        self.overlaps: list[Any] = []
        self.handed_out: collections.Counter[Any] = collections.Counter()

    def take(self, key: Any) -> None:
        with self.lock:
            if key in self.held:
                self.overlaps.append(key)
            self.held.add(key)
            self.handed_out[key] += 1

    def release(self, key: Any) -> None:
        with self.lock:
            self.held.discard(key)


@SHUTDOWNS
def test_basic(make_queue: Any, shutdown: Callable[[Any], None]) -> None:
    """client-go queue_test.go TestBasic (both table rows: ShutDown and ShutDownWithDrain).

    50 producers each add their own key 50 times while 10 consumers get/done until shutdown; a key added after the
    shutdown is never handed out and the queue ends empty. Added here: no key is ever held by two consumers at once
    and every producer's key was processed (client-go's doc.go promises both)."""
    q = make_queue()
    holders = Holders()
    late = "added after shutdown!"

    def produce(i: int) -> None:
        for _ in range(50):
            q.add(i)

    def consume() -> None:
        while True:
            try:
                key = q.get()
            except ShutDown:
                return
            holders.take(key)
            holders.release(key)
            q.done(key)

    producers = [threading.Thread(target=produce, args=(i,)) for i in range(50)]
    consumers = [threading.Thread(target=consume) for _ in range(10)]
    for t in producers + consumers:
        t.start()
    _join_all(producers)
    shutdown(q)
    q.add(late)
    _join_all(consumers)
    assert len(q) == 0
    assert late not in holders.handed_out
    assert holders.overlaps == []
    assert set(holders.handed_out) == set(range(50))


@SHUTDOWNS
def test_add_while_processing(make_queue: Any, shutdown: Callable[[Any], None]) -> None:
    """client-go queue_test.go TestAddWhileProcessing (both table rows).

    50 keys; 10 consumers each re-add every key they get until they have seen it twice (the dirty-while-processing
    path); after shutdown every consumer returns and the queue is empty. Added: no overlap of holders."""
    q = make_queue()
    holders = Holders()

    producers = [threading.Thread(target=q.add, args=(i,)) for i in range(50)]

    def consume() -> None:
        counters: collections.Counter[Any] = collections.Counter()
        while True:
            try:
                key = q.get()
            except ShutDown:
                return
            holders.take(key)
            counters[key] += 1
            if counters[key] < 2:
                q.add(key)
            holders.release(key)
            q.done(key)

    consumers = [threading.Thread(target=consume) for _ in range(10)]
    for t in producers + consumers:
        t.start()
    _join_all(producers)
    shutdown(q)
    _join_all(consumers)
    assert len(q) == 0
    assert holders.overlaps == []


def test_len(make_queue: Any) -> None:
    """client-go queue_test.go TestLen: two distinct adds give len 2; adding a waiting key again does not grow it."""
    q = make_queue()
    q.add("foo")
    assert len(q) == 1
    q.add("bar")
    assert len(q) == 2
    q.add("foo")
    assert len(q) == 2


def test_reinsert(make_queue: Any) -> None:
    """client-go queue_test.go TestReinsert: a key added back while it is processed is queued again by its
    ``done``, handed out again, and after that second ``done`` the queue is empty."""
    q = make_queue()
    q.add("foo")
    key = q.get(timeout=5)
    assert key == "foo"
    q.add(key)
    q.done(key)
    assert q.get(timeout=5) == "foo"
    q.done("foo")
    assert len(q) == 0


class TraceOrdering:
    """client-go's traceQueue: the default FIFO plus a record of every key ``touch`` was called for."""

    def __init__(self) -> None:
        self.fifo: collections.deque[Any] = collections.deque()
        self.touched: set[Any] = set()

    def append(self, key: Any) -> None:
        self.fifo.append(key)

    def popleft(self) -> Any:
        return self.fifo.popleft()

    def __len__(self) -> int:
        return len(self.fifo)

    def touch(self, key: Any) -> None:
        self.touched.add(key)


def test_collapse(make_queue: Any) -> None:
    """client-go queue_test.go TestCollapse: two adds of a new key collapse into one hand-out, the queue is empty
    after its ``done``, and the second add reached the ordering's ``Touch`` hook (``touch``)."""
    trace = TraceOrdering()
    q = make_queue(ordering=trace)
    q.add("bar")
    q.add("bar")
    assert q.get(timeout=5) == "bar"
    q.done("bar")
    assert len(q) == 0
    assert "bar" in trace.touched


def test_collapse_while_processing(make_queue: Any) -> None:
    """client-go queue_test.go TestCollapseWhileProcessing: two adds of a key being processed collapse into one
    redelivery; a second worker waiting for it gets it only after the first worker's ``done``; the queue is then
    empty and ``touch`` was never called (the key was processing, not waiting)."""
    trace = TraceOrdering()
    q = make_queue(ordering=trace)
    q.add("foo")
    assert q.get(timeout=5) == "foo"
    q.add("foo")
    q.add("foo")
    got: list[Any] = []

    def other_worker() -> None:
        key = q.get(timeout=JOIN)
        got.append(key)
        q.done(key)

    t = threading.Thread(target=other_worker)
    t.start()
    wait_for_getters(q)  # the other worker really waits (Go: a 100 ms head start and a select)
    assert got == [] and t.is_alive()  # blocked until the first worker is done
    q.done("foo")
    t.join(JOIN)
    assert got == ["foo"]
    assert len(q) == 0
    assert "foo" not in trace.touched


def _get_until_shutdown(q: Any) -> None:
    """Go's ``for !shuttingDown { _, shuttingDown = q.Get() }`` on an empty queue: wait until get raises."""
    with pytest.raises(ShutDown):
        while True:
            q.get(timeout=JOIN)


def test_queue_drainage_using_shut_down_with_drain(make_queue: Any) -> None:
    """client-go queue_test.go TestQueueDrainageUsingShutDownWithDrain: with two keys in flight a
    ``shut_down_with_drain`` blocks; ``get`` then reports shutdown (nothing queued); the drain returns once both
    keys are done."""
    q = make_queue()
    q.add("foo")
    q.add("bar")
    first, second = q.get(timeout=5), q.get(timeout=5)
    result: list[bool] = []
    drainer = threading.Thread(target=lambda: result.append(q.shut_down_with_drain()))
    drainer.start()
    wait_until(lambda: q.shutting_down, what="the drain to start")
    _get_until_shutdown(q)
    assert drainer.is_alive()  # still waiting for the two keys in flight
    q.done(first)
    q.done(second)
    drainer.join(JOIN)
    assert result == [True]


def test_no_queue_drainage_using_shut_down(make_queue: Any) -> None:
    """client-go queue_test.go TestNoQueueDrainageUsingShutDown: ``shut_down`` returns at once even though two keys
    are still being processed (it does not wait for them)."""
    q = make_queue()
    q.add("foo")
    q.add("bar")
    q.get(timeout=5)
    q.get(timeout=5)
    t = threading.Thread(target=q.shut_down)
    t.start()
    t.join(JOIN)
    assert not t.is_alive()


def test_force_queue_shutdown_using_shut_down(make_queue: Any) -> None:
    """client-go queue_test.go TestForceQueueShutdownUsingShutDown: a ``shut_down_with_drain`` waiting for keys in
    flight is released by a later ``shut_down`` (a second SIGTERM), though no key was ever done."""
    q = make_queue()
    q.add("foo")
    q.add("bar")
    q.get(timeout=5)
    q.get(timeout=5)
    result: list[bool] = []
    drainer = threading.Thread(target=lambda: result.append(q.shut_down_with_drain()))
    drainer.start()
    wait_until(lambda: q.shutting_down, what="the drain to start")
    _get_until_shutdown(q)
    q.shut_down()
    drainer.join(JOIN)
    assert not drainer.is_alive()
    assert result == [False]  # keyqueue says whether it drained: it did not


def test_queue_drainage_using_shut_down_with_drain_with_dirty_item(make_queue: Any) -> None:
    """client-go queue_test.go TestQueueDrainageUsingShutDownWithDrainWithDirtyItem: a key re-added while in flight
    when the drain starts is handed out again after its ``done`` (``get`` reports shutdown before that, since
    nothing is queued); once that second hand-out is done, ``get`` reports shutdown and the drain returns."""
    q = make_queue()
    q.add("foo")
    gotten = q.get(timeout=5)
    q.add("foo")
    result: list[bool] = []
    drainer = threading.Thread(target=lambda: result.append(q.shut_down_with_drain()))
    drainer.start()
    wait_until(lambda: q.shutting_down, what="the drain to start")
    _get_until_shutdown(q)
    q.done(gotten)
    again = q.get(timeout=5)  # back in the queue: not shut down for this worker yet
    assert again == "foo"
    q.done(again)
    _get_until_shutdown(q)
    drainer.join(JOIN)
    assert result == [True]


def test_garbage_collection(make_queue: Any) -> None:
    """client-go queue_test.go TestGarbageCollection: an object added, handed out and done can be garbage
    collected (the queue keeps no reference to it)."""
    q = make_queue()
    obj = Key("hello")
    ref = weakref.ref(obj)
    q.add(obj)
    got = q.get(timeout=5)
    q.done(got)
    del obj, got
    gc.collect()
    assert ref() is None
