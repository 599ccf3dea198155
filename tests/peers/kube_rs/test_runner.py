"""kube-rs ``kube-runtime/src/controller/runner.rs`` (``mod tests``) and ``controller/mod.rs``'s
``applier_must_not_deadlock_if_reschedule_buffer_fills``, translated onto :class:`keyqueue.Controller` (and, for
the waking case, :class:`keyqueue.aio.Queue`).

kube-rs's ``Runner`` runs a future per scheduled message, never two for one message at once, at most
``max_concurrent_executions`` at a time, and not before a readiness future resolves (``delay_tasks_until``, used
to wait for the reflector's store). Here the runner is a ``Controller`` (``workers`` is the concurrency limit) and
its readiness gate is ``start()``: keys added before it wait in the queue. ``runner_should_report_readiness_errors``
(a readiness future that fails) has no counterpart — nothing can make ``start()`` fail that way — and is left out
(``tests/peers/README.md``). Reconciles block on events, never on sleeps.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Any

from keyqueue import Controller, FakeClock, RateLimitingQueue
from keyqueue.aio import Queue as AioQueue
from tests.shells import wait_until, waiting_getters

JOIN = 30.0


class Runs:
    """What reconciles ran, how many at once at most, and whether one key ever ran twice at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count: collections.Counter[Any] = collections.Counter()
        self.running: collections.Counter[Any] = collections.Counter()
        self.overlap = False
        self.now = 0
        self.most = 0

    def enter(self, key: Any) -> None:
        with self.lock:
            self.count[key] += 1
            self.running[key] += 1
            self.overlap |= self.running[key] > 1
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self, key: Any) -> None:
        with self.lock:
            self.running[key] -= 1
            self.now -= 1

    def total(self) -> int:
        with self.lock:
            return sum(self.count.values())


def _queue() -> RateLimitingQueue[Any]:
    return RateLimitingQueue(clock=FakeClock())


def test_runner_should_never_run_two_instances_at_once() -> None:
    """kube-rs runner.rs runner_should_never_run_two_instances_at_once: a message scheduled again while its run is
    in progress is run again afterwards (2 runs) but never concurrently with itself, even with a free second
    worker."""
    runs = Runs()
    release = threading.Event()

    def reconcile(key: Any) -> None:
        runs.enter(key)
        try:
            if runs.count[key] == 1:
                assert release.wait(JOIN)
        finally:
            runs.leave(key)

    q = _queue()
    with Controller(reconcile, q, workers=2, name="runner"):
        q.add(())
        wait_until(lambda: runs.total() == 1, what="the first run")
        q.add(())  # while the first run is in progress
        release.set()
        wait_until(lambda: runs.total() == 2, what="the second run")
    assert runs.count[()] == 2
    assert not runs.overlap


def test_runner_should_wake_when_scheduling_messages() -> None:
    """kube-rs runner.rs runner_should_wake_when_scheduling_messages: a task that started waiting for the next
    message before it was scheduled is woken by the schedule and gets it (single-threaded: one event loop)."""

    async def main() -> Any:
        q: AioQueue[int] = AioQueue()
        waiter = asyncio.ensure_future(q.get())
        await asyncio.sleep(0)  # the waiter really waits inside the queue first
        assert waiting_getters(q) == 1
        q.add(8)
        return await asyncio.wait_for(waiter, JOIN)

    assert asyncio.run(main()) == 8


def test_runner_should_wait_for_readiness() -> None:
    """kube-rs runner.rs runner_should_wait_for_readiness: a message scheduled before the runner is ready is not run
    until it is (here: until ``start()``), and then it is."""
    ready = threading.Event()
    seen: list[Any] = []
    done = threading.Event()

    def reconcile(key: Any) -> None:
        assert ready.is_set(), "ran before the runner was ready"
        seen.append(key)
        done.set()

    q = _queue()
    c = Controller(reconcile, q, name="runner")
    q.add(1)
    assert len(q) == 1 and seen == []  # waiting for readiness, not lost
    ready.set()
    with c:
        assert done.wait(JOIN)
    assert seen == [1]


def test_runner_should_dedupe_while_waiting_for_readiness() -> None:
    """kube-rs runner.rs runner_should_dedupe_while_waiting_for_readiness: messages a, b, a scheduled before the
    runner is ready run once each when it becomes ready."""
    runs = Runs()

    def reconcile(key: Any) -> None:
        runs.enter(key)
        runs.leave(key)

    q = _queue()
    c = Controller(reconcile, q, name="runner")
    for key in ("a", "b", "a"):
        q.add(key)
    with c:
        wait_until(lambda: runs.total() >= 2 and len(q) == 0, what="a and b to run")
    assert dict(runs.count) == {"a": 1, "b": 1}


def test_runner_should_respect_max_concurrent_executions() -> None:
    """kube-rs runner.rs runner_should_respect_max_concurrent_executions: with a limit of 2, of three messages only
    two run at once; the third runs as soon as one finishes; the third scheduled again runs again (4 runs)."""
    runs = Runs()
    gates = {k: threading.Event() for k in (1, 2, 3)}

    def reconcile(key: Any) -> None:
        runs.enter(key)
        try:
            if runs.count[key] == 1:
                assert gates[key].wait(JOIN)
        finally:
            runs.leave(key)

    q = _queue()
    with Controller(reconcile, q, workers=2, name="runner"):
        for key in (1, 2, 3):
            q.add(key)
        wait_until(lambda: runs.total() == 2, what="two runs")
        assert runs.now == 2 and runs.count[3] == 0  # only two of the three run
        gates[1].set()
        gates[2].set()
        wait_until(lambda: runs.count[3] == 1, what="the third run")
        gates[3].set()
        wait_until(lambda: runs.now == 0, what="all runs to finish")
        q.add(3)
        wait_until(lambda: runs.total() == 4, what="the third message to run again")
    assert runs.most <= 2
    assert not runs.overlap


def test_applier_must_not_deadlock_if_reschedule_buffer_fills() -> None:
    """kube-rs controller/mod.rs applier_must_not_deadlock_if_reschedule_buffer_fills (kube#926): reconciles that
    all requeue their object at once ("``Action::requeue(Duration::ZERO)``": here the reconcile adds its own key
    back) flood the queue; the controller still completes 3 reconciles per object on average, and then stops
    cleanly with no reconcile stuck. (kube-rs: 5000 objects; 1000 here.)"""
    items = 1000
    reconciles = items * 3
    count = [0]
    lock = threading.Lock()
    q = _queue()

    def reconcile(key: Any) -> None:
        with lock:
            count[0] += 1
        q.add(key)  # requeue at once

    c = Controller(reconcile, q, workers=4, name="applier")
    for i in range(items):
        q.add(f"default/cm-{i}")
    c.start()
    wait_until(lambda: count[0] >= reconciles, timeout=JOIN, what=f"{reconciles} reconciles")
    assert c.stop(JOIN) is True  # every worker exited: none is stuck
