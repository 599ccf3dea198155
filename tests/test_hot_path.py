"""The hot path's scheduling and fused operations: what they do, never how fast (speed lives in ``benchmarks/``)."""

from __future__ import annotations

from typing import Any

import pytest

import keyqueue
import keyqueue._gil as gil
from keyqueue import PriorityQueue, Queue

needs_gil = pytest.mark.skipif(not gil.GIL, reason="the GIL hand-off is off where the interpreter has no GIL")


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the GIL hand-overs (``time.sleep(0)`` calls) of the hot path, as if other threads were alive."""
    calls: list[float] = []
    monkeypatch.setattr(gil, "_sleep", calls.append)
    monkeypatch.setattr(gil, "_active_count", lambda: 2)
    return calls


@needs_gil
def test_lock_free_dedup_adds_hand_the_gil_over_once_per_yield_every(sleeps: list[float]) -> None:
    q: Queue[str] = Queue()
    q.add("a")
    for _ in range(3 * gil.YIELD_EVERY):
        assert q.add("a") is keyqueue.AddResult.DEDUP
    assert sleeps == [0, 0]  # the countdown starts at YIELD_EVERY, then each yield resets it
    assert q.get() == "a"  # the adds changed nothing else


def _share(q: Queue[Any]) -> None:
    """Make ``q`` seen as used by several threads: another thread waits in ``get()`` until a key arrives."""
    import threading

    t = threading.Thread(target=lambda: q.done(q.get()))
    t.start()
    _wait_until(lambda: q._getters == 1, "the other thread to wait in get()")
    q.add("wake")
    t.join()


@needs_gil
def test_gets_of_a_queue_used_by_one_thread_do_not_count(sleeps: list[float]) -> None:
    q: Queue[int] = Queue()
    for _ in range(3 * gil.YIELD_EVERY):
        q.add(1)
        q.done(q.get())
    assert not sleeps
    assert not q._gil.contended


@needs_gil
def test_gets_count_too_and_yield_before_taking_the_lock(sleeps: list[float]) -> None:
    q: Queue[Any] = Queue()
    _share(q)
    assert q._gil.contended and sleeps == [0]  # the add that woke the other thread's get handed the GIL over
    sleeps.clear()
    for i in range(gil.YIELD_EVERY + 1):
        q.add(i)
    assert not sleeps  # adds of new keys take the lock and are not counted
    order = []
    for _ in range(gil.YIELD_EVERY + 1):
        k = q.get()
        order.append(k)
        q.done(k)
    assert sleeps == [0]
    assert order == list(range(gil.YIELD_EVERY + 1))


@needs_gil
def test_priority_queue_dedup_adds_yield_too(sleeps: list[float]) -> None:
    q: PriorityQueue[str] = PriorityQueue()
    q.add("a", priority=3)
    for _ in range(gil.YIELD_EVERY + 1):
        assert q.add("a", priority=1) is keyqueue.AddResult.DEDUP
    assert len(sleeps) == 1


@needs_gil
def test_no_yield_without_other_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(gil, "_sleep", calls.append)
    monkeypatch.setattr(gil, "_active_count", lambda: 1)
    q: Queue[str] = Queue()
    q.add("a")
    for _ in range(2 * gil.YIELD_EVERY + 2):
        q.add("a")
    assert calls == []


def _blocked_getter(q: Any) -> tuple[Any, list[Any]]:
    """A thread blocked in ``q.get()`` (it records what it got)."""
    import threading

    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    _wait_until(lambda: q._getters == 1, "the other thread to wait in get()")
    return t, got


@needs_gil
def test_an_add_that_wakes_a_blocked_getter_hands_the_gil_over_once(sleeps: list[float]) -> None:
    q: Queue[str] = Queue()
    q.add("before")  # nobody waits: no hand-off
    assert q.get() == "before"
    assert sleeps == []
    t, got = _blocked_getter(q)
    assert q.add("a") is keyqueue.AddResult.QUEUED
    assert sleeps == [0]  # once, after the wake-up (and after the lock was released: see the next test)
    t.join()
    assert got == ["a"]
    q.add("a")  # processing: MARKED, nobody woken
    q.add("b")  # queued, nobody waits
    assert sleeps == [0]


@needs_gil
def test_hand_offs_are_at_least_handoff_gap_apart(sleeps: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    now = [10**12]
    monkeypatch.setattr(gil, "_monotonic_ns", lambda: now[0])
    q: Queue[str] = Queue()
    for key, step, expected in (("a", 0, [0]), ("b", gil.HANDOFF_GAP_NS - 1, [0]), ("c", 1, [0, 0])):
        now[0] += step
        t, got = _blocked_getter(q)
        assert q.add(key) is keyqueue.AddResult.QUEUED
        t.join()
        assert got == [key] and sleeps == expected, key  # "b" woke its getter within the gap: no hand-off
        q.done(key)


@needs_gil
def test_the_hand_off_comes_after_the_lock_is_released(monkeypatch: pytest.MonkeyPatch) -> None:
    q: Queue[str] = Queue()
    held: list[bool] = []
    monkeypatch.setattr(gil, "_sleep", lambda s: held.append(q._lock._is_owned()))
    t, got = _blocked_getter(q)
    q.add("a")
    t.join()
    assert got == ["a"]
    assert held and not held[0]  # the hand-off never holds the lock


@needs_gil
def test_priority_queue_hands_over_after_waking_for_a_ready_key_only(sleeps: list[float]) -> None:
    q: PriorityQueue[str] = PriorityQueue()
    t, got = _blocked_getter(q)
    q.add("later", after=3600)  # DELAYED: the getter is woken to re-compute its wait, no hand-off
    assert sleeps == []
    q.add("now", priority=2)
    assert sleeps == [0]
    t.join()
    assert got == ["now"]


def test_asyncio_queue_adds_do_not_hand_over() -> None:
    import asyncio

    import keyqueue.aio

    async def main() -> list[float]:
        q: keyqueue.aio.Queue[str] = keyqueue.aio.Queue()
        getter = asyncio.ensure_future(q.get())
        while not q._getters:
            await asyncio.sleep(0)
        calls: list[float] = []
        saved = gil._sleep
        gil._sleep = calls.append  # type: ignore[assignment]
        try:
            q.add("a")  # wakes the getter on this loop: nothing to hand over
        finally:
            gil._sleep = saved
        assert await getter == "a"
        return calls

    assert asyncio.run(main()) == []


# -- `for key in q`: done(previous) and the next get under one lock ------------------------------------------------


def _wait_until(cond: Any, what: str) -> None:
    import threading
    import time

    deadline = time.monotonic() + 10
    pause = threading.Event()
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        pause.wait(0.001)


def test_iteration_finishes_each_key_before_the_next_and_redelivers_a_readded_key() -> None:
    q: Queue[str] = Queue()
    for k in "abc":
        q.add(k)
    seen = []
    for k in q:
        seen.append(k)
        if k == "a" and seen.count("a") == 1:
            assert q.add("a") is keyqueue.AddResult.MARKED  # being processed: handed out again after its done
        if len(seen) == 4:
            q.shut_down()
    assert seen == ["a", "b", "c", "a"]
    assert repr(q).count("processing=0") == 1  # every key was finished, the last one by the loop's exit


def test_iteration_wakes_a_drain_when_it_finishes_the_last_key() -> None:
    import threading

    q: Queue[str] = Queue()
    q.add("a")
    it = iter(q)
    assert next(it) == "a"
    result: list[bool] = []
    drainer = threading.Thread(target=lambda: result.append(q.shut_down_with_drain(10)))
    drainer.start()
    _wait_until(lambda: q._drainers == 1, "the drain to wait")
    # The fused done+get finishes "a" (the drain may now return), then finds the queue shut down and ends.
    assert list(it) == []
    drainer.join(10)
    assert result == [True]


def test_iteration_passes_a_wake_up_on_when_more_keys_are_ready() -> None:
    import threading

    q: Queue[str] = Queue()
    q.add("a")
    it = iter(q)
    assert next(it) == "a"
    got: list[str] = []
    other = threading.Thread(target=lambda: got.append(q.get(10)))
    other.start()
    _wait_until(lambda: q._getters == 1, "the other getter to wait")
    q.add("a")  # MARKED: "a" is being processed, so the waiting getter is not woken
    q.add("b")  # QUEUED: wakes the other getter, which may take "b" before the iterator
    nxt = next(it)  # done("a") re-queues it; this takes whatever is first, the other getter gets the other one
    other.join(10)
    assert sorted([nxt, *got]) == ["a", "b"]
    q.shut_down()


# -- delayed entries: due entries fire in time order -----------------------------------------------------------


def test_a_drain_of_due_entries_fires_them_in_time_order() -> None:
    from keyqueue import FakeClock
    from keyqueue._core import QueueCore

    clock = FakeClock()
    core: QueueCore[str] = QueueCore(clock)
    delays = {"a": 3.0, "b": 1.0, "c": 2.0, "d": 1.0}
    for k, d in delays.items():
        assert core.add_after(k, d) is keyqueue.AddResult.DELAYED
    assert core.add_after("a", 0.5) is keyqueue.AddResult.DELAYED  # supersedes a's entry at 3.0
    clock.step(10)  # every entry is due
    assert core.promote_due(clock.now_ns()) == 4
    assert list(core.ordering) == ["a", "b", "d", "c"]
    assert len(core.delays) == 0 and core.next_ready_ns() is None


def test_an_exception_while_firing_keeps_what_was_not_reached_delayed() -> None:
    from keyqueue import FakeClock
    from keyqueue._core import QueueCore

    class Boom(Exception):
        pass

    class Recorder:
        def __init__(self) -> None:
            self.fail_on = "b"

        def add(self, item: Any, t_ns: int) -> None:
            if item == self.fail_on:
                self.fail_on = ""
                raise Boom

        def get(self, item: Any, t_ns: int) -> None: ...
        def done(self, item: Any, t_ns: int) -> None: ...
        def retry(self) -> None: ...

    clock = FakeClock()
    core: QueueCore[str] = QueueCore(clock, metrics=Recorder())
    for i, k in enumerate("abcd"):
        core.add_after(k, 1.0 + i)
    clock.step(10)
    with pytest.raises(Boom):
        core.promote_due(clock.now_ns())
    assert list(core.ordering) == ["a", "b"]  # "b" was queued when its recorder hook raised (the hook runs last)
    assert len(core.delays) == 2  # c and d were not reached: still delayed, and fire next time
    assert core.promote_due(clock.now_ns()) == 2
    assert list(core.ordering) == ["a", "b", "c", "d"]


# -- calls from a signal handler or __del__ while this thread holds the lock ---------------------------------------


class _ReentrantKey:
    """A key whose hash, the n-th time it is computed, calls ``action()``: user code that runs inside the queue's
    critical section on the queue's own thread, as a signal handler or a ``__del__`` would."""

    def __init__(self, name: str, action: Any, on_call: int) -> None:
        self.name, self.action, self.on_call, self.calls = name, action, on_call, 0

    def __hash__(self) -> int:
        self.calls += 1
        if self.calls == self.on_call:
            self.action()
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ReentrantKey) and other.name == self.name


@pytest.mark.parametrize("kind", ["queue", "delaying", "ratelimiting", "priority", "aio"])
def test_calls_from_inside_a_critical_section_are_deferred_and_take_effect(kind: str) -> None:
    import keyqueue.aio

    cls: Any = {"queue": Queue, "delaying": keyqueue.DelayingQueue, "ratelimiting": keyqueue.RateLimitingQueue,
                "priority": PriorityQueue, "aio": keyqueue.aio.Queue}[kind]
    q = cls()
    results: list[Any] = []
    q.add("busy")
    if kind == "aio":
        assert q._core.pop() == "busy"  # taken without an event loop: it is now being processed
    else:
        assert q.get(timeout=5) == "busy"

    def inner() -> None:
        results.append(q.add("from-inside"))  # the lock is held by this very thread: must not deadlock
        results.append(q.done("busy"))
        if hasattr(q, "add_after"):
            results.append(q.add_after("later", 0.0))

    key = _ReentrantKey("k", inner, on_call=2)  # call 1: the lock-free probe; call 2: inside the core, locked
    assert q.add(key) is keyqueue.AddResult.QUEUED
    assert results[0] is keyqueue.AddResult.DEFERRED
    assert results[1] is False
    assert all(r is keyqueue.AddResult.DEFERRED for r in results[2:])
    # The helper thread applies the deferred calls once the lock is free; wait for their effect.
    expected = {"k", "from-inside"} | ({"later"} if hasattr(q, "add_after") else set())
    _wait_until(lambda: len(q) == len(expected), "the deferred calls to take effect")
    assert not q._core.processing  # "busy" was done
    got = set()
    for _ in expected:
        item = q._core.pop()
        got.add(item.name if isinstance(item, _ReentrantKey) else item)
    assert got == expected


def test_signal_handler_adds_while_the_main_thread_works_the_queue() -> None:
    """A real signal handler calling add/done many times while the main thread runs add/get/done in a loop; in a
    subprocess, so that a deadlock fails the test instead of hanging it."""
    import subprocess
    import sys
    import textwrap

    # The FIFO is a deque subclass with methods written in Python, which the core calls with the lock held: more
    # points where a handler can interrupt the queue's own call.
    script = textwrap.dedent("""
        import collections, signal, keyqueue
        class Fifo(collections.deque):
            def append(self, key):
                super().append(key)
            def popleft(self):
                return super().popleft()
        q = keyqueue.RateLimitingQueue(keyqueue.ItemExponentialFailureRateLimiter(0.001, 0.01), ordering=Fifo())
        sent, results = [], []
        def handler(signum, frame):
            # SIGALRM blocked while this handler runs: on a starved machine a 1 ms timer would otherwise nest
            # handlers inside handlers until RecursionError (the interrupted frame below still holds the lock)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            try:
                k = f"sig-{len(sent)}"
                sent.append(k)
                results.append(q.add(k))
                results.append(q.add_rate_limited(k + "-rl"))
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
        seen = set()
        for i in range(100_000):
            q.add("work"); k = q.get(); seen.add(k); q.done(k)
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        want = {k for s in sent for k in (s, s + "-rl")} | {"work"}
        while seen != want:  # every key a handler added arrives (a lost one: TimeoutError, exit 1)
            k = q.get(timeout=30)
            seen.add(k)
            q.done(k)
        print(len(sent), sum(r is keyqueue.AddResult.DEFERRED for r in results), "ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    signals, deferred, ok = out.stdout.split()
    assert ok == "ok" and int(signals) > 0
    assert int(deferred) > 0  # some handlers did interrupt the queue with its lock held (~2/3 of them here)
