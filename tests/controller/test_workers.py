"""The threaded controller's worker pool: survival, stopping, draining, signals, and one reconcile per key at once.

Synchronisation is by events with bounded waits; nothing relies on timing except the deliberate short holds that
give a broken pool the chance to overlap two reconciles of one key.
"""

from __future__ import annotations

import os
import queue as stdlib_queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from keyqueue import Controller, FakeClock, PriorityQueue, RateLimitingQueue


class ObservedPQ(PriorityQueue[str]):
    """Reports every done() and the shutdown, so a test can wait for them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dones: stdlib_queue.Queue[str] = stdlib_queue.Queue()
        self.shut = threading.Event()

    def done(self, item: str) -> bool:
        requeued = super().done(item)
        self.dones.put(item)
        return requeued

    def shut_down(self) -> None:
        super().shut_down()
        self.shut.set()


def wait_done(q: ObservedPQ, n: int = 1) -> list[str]:
    return [q.dones.get(timeout=5) for _ in range(n)]


@pytest.mark.parametrize("exc", [ValueError("boom"), SystemExit(3), KeyboardInterrupt(), GeneratorExit()])
def test_an_exception_does_not_kill_the_worker(exc: BaseException) -> None:
    threads: dict[str, int] = {}

    def reconcile(key: str) -> None:
        threads[key] = threading.get_ident()
        if key == "bad":
            raise exc

    q = ObservedPQ(clock=FakeClock())  # the rate-limited requeue of "bad" never falls due
    with Controller(reconcile, q, workers=1, stop_timeout=5):
        q.add("bad")
        assert wait_done(q) == ["bad"]
        q.add("good")
        assert wait_done(q) == ["good"]
    assert threads["bad"] == threads["good"]  # the same (only) worker thread handled both
    assert q.num_requeues("bad") == 1


def test_stop_waits_for_in_flight_reconciles() -> None:
    inside = threading.Event()
    release = threading.Event()
    finished = threading.Event()

    def reconcile(key: str) -> None:
        inside.set()
        assert release.wait(5)
        finished.set()

    q = ObservedPQ()
    c = Controller(reconcile, q, workers=2)
    c.start()
    q.add("a")
    assert inside.wait(5)
    stopped: list[bool] = []
    stopper = threading.Thread(target=lambda: stopped.append(c.stop(timeout=5)))
    stopper.start()
    assert q.shut.wait(5)  # stop() is under way ...
    assert c.stopping
    assert not stopped  # ... and has not returned while "a" is still being reconciled
    release.set()
    stopper.join(5)
    assert stopped == [True]
    assert finished.is_set()
    assert q.dones.get_nowait() == "a"  # its done() ran before stop returned


def test_stop_timeout_returns_false_and_the_worker_exits_later() -> None:
    inside = threading.Event()
    release = threading.Event()

    def reconcile(key: str) -> None:
        inside.set()
        assert release.wait(5)

    q = ObservedPQ()
    c = Controller(reconcile, q, workers=1, drain=True)
    c.start()
    q.add("a")
    q.add("b")
    assert inside.wait(5)
    assert c.stop(timeout=0.05) is False
    release.set()
    assert wait_done(q) == ["a"]
    for t in c._threads:
        t.join(5)
        assert not t.is_alive()
    assert q.dones.empty()  # after a timed-out stop the worker takes no further key, even in drain mode


@pytest.mark.parametrize("drain", [False, True])
def test_backlog_dropped_or_drained(drain: bool) -> None:
    inside = threading.Event()
    release = threading.Event()
    seen: list[str] = []

    def reconcile(key: str) -> None:
        seen.append(key)
        if key == "first":
            inside.set()
            assert release.wait(5)

    q = ObservedPQ()
    c = Controller(reconcile, q, workers=1, drain=drain)
    c.start()
    q.add("first")
    assert inside.wait(5)
    q.add("b")
    q.add("c", priority=1)
    stopper = threading.Thread(target=c.stop, kwargs={"timeout": 5})
    stopper.start()
    assert q.shut.wait(5)
    release.set()
    stopper.join(5)
    assert not stopper.is_alive()
    assert seen == (["first", "c", "b"] if drain else ["first"])


def test_requeues_while_stopping_are_dropped() -> None:
    inside = threading.Event()
    release = threading.Event()

    def reconcile(key: str) -> None:
        inside.set()
        assert release.wait(5)
        raise ValueError("fails during shutdown")

    q = ObservedPQ()
    c = Controller(reconcile, q, workers=1)
    c.start()
    q.add("a")
    assert inside.wait(5)
    stopper = threading.Thread(target=c.stop, kwargs={"timeout": 5})
    stopper.start()
    assert q.shut.wait(5)
    release.set()
    stopper.join(5)
    assert len(q) == 0 and len(q._core.delays) == 0


def test_start_twice_and_stop_before_start() -> None:
    c: Controller[str] = Controller(lambda key: None)
    assert c.stop(timeout=1) is True  # only shuts the queue down
    assert c.queue.shutting_down
    c2: Controller[str] = Controller(lambda key: None)
    c2.start()
    with pytest.raises(RuntimeError, match="already started"):
        c2.start()
    assert c2.stop(timeout=5)
    assert c2.stop(timeout=5)  # idempotent


def test_run_stops_on_sigterm_and_restores_the_handler() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    before = signal.getsignal(signal.SIGTERM)
    processed = threading.Event()

    def reconcile(key: str) -> None:
        processed.set()

    q = ObservedPQ()
    c = Controller(reconcile, q, workers=2, stop_timeout=5)

    def send() -> None:
        # run() installs its handlers before it starts the workers, so once a key was reconciled they are in place.
        if processed.wait(5):
            os.kill(os.getpid(), signal.SIGTERM)

    q.add("a")
    sender = threading.Thread(target=send)
    sender.start()
    assert c.run() is True
    sender.join(5)
    assert c.stopping and q.shutting_down
    assert signal.getsignal(signal.SIGTERM) is before


def test_run_returns_when_the_queue_is_shut_down_elsewhere() -> None:
    q = ObservedPQ()
    c = Controller(lambda key: None, q, workers=2)
    q.add("a")
    def close() -> None:
        wait_done(q)
        q.shut_down()

    closer = threading.Thread(target=close)
    closer.start()
    assert c.run(handle_signals=False) is True
    closer.join(5)


def test_stop_from_inside_reconcile() -> None:
    result: list[bool] = []

    def reconcile(key: str) -> None:
        result.append(c.stop(timeout=5))

    q = ObservedPQ()
    c = Controller(reconcile, q, workers=2)
    c.start()
    q.add("a")
    wait_done(q)
    for t in c._threads:
        t.join(5)
    assert result == [True]  # the calling worker does not wait for itself


# -- never two reconciles of one key at once, and a control that shows the detector works ------------------------


class Detector:
    """Counts reconciles that start while another reconcile of the same key is running."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight: set[str] = set()
        self.violations = 0
        self.calls = 0

    def enter(self, key: str) -> None:
        with self.lock:
            self.calls += 1
            if key in self.in_flight:
                self.violations += 1
            self.in_flight.add(key)

    def leave(self, key: str) -> None:
        with self.lock:
            self.in_flight.discard(key)


def naive_pool(reconcile: Callable[[str], None], workers: int) -> tuple[stdlib_queue.Queue[str | None], list[Any]]:
    """The control: worker threads over a stdlib queue.Queue (no dedup, no processing set)."""
    q: stdlib_queue.Queue[str | None] = stdlib_queue.Queue()

    def work() -> None:
        while (key := q.get()) is not None:
            reconcile(key)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    return q, threads


def rendezvous_reconcile(
    det: Detector, arrived: dict[str, threading.Barrier], entered: threading.Event
) -> Callable[[str], None]:
    """Holds each reconcile until a second reconcile of the same key arrives (or the barrier times out): a pool that
    can run one key twice at once is then caught deterministically; a correct one just waits out the timeout."""

    def reconcile(key: str) -> None:
        det.enter(key)
        entered.set()
        try:
            arrived[key].wait()
        except threading.BrokenBarrierError:
            arrived[key].reset()
        finally:
            det.leave(key)

    return reconcile


def test_same_key_never_reconciled_twice_at_once_deterministic() -> None:
    det = Detector()
    entered = threading.Event()
    arrived = {"k": threading.Barrier(2, timeout=0.2)}
    q = ObservedPQ()
    c = Controller(rendezvous_reconcile(det, arrived, entered), q, workers=2)
    c.start()
    q.add("k")
    assert entered.wait(5)  # "k" is being reconciled by one worker; the other worker is idle
    q.add("k")  # must wait for done: the second reconcile cannot meet the first at the barrier
    assert wait_done(q, 2) == ["k", "k"]
    assert c.stop(timeout=5)
    assert det.calls == 2
    assert det.violations == 0


def test_control_naive_pool_is_caught_deterministically() -> None:
    det = Detector()
    entered = threading.Event()
    arrived = {"k": threading.Barrier(2, timeout=5)}
    q, threads = naive_pool(rendezvous_reconcile(det, arrived, entered), workers=2)
    q.put("k")
    assert entered.wait(5)
    q.put("k")  # the idle worker takes it at once and meets the first at the barrier
    for _ in threads:
        q.put(None)
    for t in threads:
        t.join(10)
    assert det.calls == 2
    assert det.violations == 1  # both workers held "k" at the same time


def stress(det: Detector) -> Callable[[str], None]:
    def reconcile(key: str) -> None:
        det.enter(key)
        time.sleep(0.00005)  # a short hold so that a broken pool can overlap (the seed's harness holds 20 µs)
        det.leave(key)

    return reconcile


def produce(add: Callable[[str], Any], producers: int = 4, adds: int = 1500, keys: int = 16) -> None:
    def run(i: int) -> None:
        for n in range(adds):
            add(f"k{(n * 7 + i) % keys}")
            if n % 50 == 0:
                time.sleep(0)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)


@pytest.mark.parametrize("queue_kind", ["priority", "client-go"])
def test_same_key_never_reconciled_twice_at_once_stress(queue_kind: str) -> None:
    det = Detector()
    q: RateLimitingQueue[str] = PriorityQueue() if queue_kind == "priority" else RateLimitingQueue()
    c = Controller(stress(det), q, workers=8, drain=True)
    c.start()
    produce(q.add)
    assert c.stop(timeout=10)
    assert det.calls >= 16  # every key at least once (drained), plus redeliveries
    assert det.violations == 0


def test_control_naive_pool_stress_shows_violations() -> None:
    det = Detector()
    q, threads = naive_pool(stress(det), workers=8)
    produce(q.put)
    for _ in threads:
        q.put(None)
    for t in threads:
        t.join(10)
    assert det.calls == 4 * 1500
    assert det.violations > 0
