"""controller-runtime parity: ``Result(requeue=True)``, the retry priority of a raised error,
``recover_panic=False``. Both controllers; the queue effects are checked with a FakeClock after each reconcile."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import keyqueue
from keyqueue import (
    Controller,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    PriorityQueue,
    RateLimitingQueue,
    ReconcileError,
    Result,
    TerminalError,
)


def _total(reg: CollectorRegistry, name: str, **labels: str) -> float:
    value = reg.get_sample_value(name, labels)
    return 0.0 if value is None else value


def scripted(actions: list[Any]) -> Callable[[str], Result | None]:
    def reconcile(key: str) -> Result | None:
        action = actions.pop(0)
        if isinstance(action, BaseException):
            raise action
        return action  # type: ignore[no-any-return]

    return reconcile


def _queue(priority: bool, clock: FakeClock) -> Any:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1.0, 1000.0)
    return PriorityQueue(limiter, clock=clock) if priority else RateLimitingQueue(limiter, clock=clock)


# -- Result(requeue=True) -------------------------------------------------------------------------------


@pytest.mark.parametrize("priority", [True, False], ids=["priority", "plain"])
def test_requeue_true_is_a_rate_limited_requeue_that_keeps_the_backoff(priority: bool) -> None:
    clock = FakeClock()
    q = _queue(priority, clock)
    reg = CollectorRegistry()
    c = Controller(scripted([Result(requeue=True), Result(requeue=True), None]), q, name="c", registry=reg)
    q.add("k")
    assert c.process_next(timeout=0)
    assert q.num_requeues("k") == 1  # the limiter recorded it, nothing forgot it
    assert len(q) == 0
    clock.step(1)  # the first backoff step
    assert len(q) == 1
    assert c.process_next(timeout=0)
    assert q.num_requeues("k") == 2
    clock.step(1)
    assert len(q) == 0  # the second step is 2 s: the backoff grew
    clock.step(1)
    assert c.process_next(timeout=0)  # success: forgotten
    assert q.num_requeues("k") == 0
    assert _total(reg, "controller_runtime_reconcile_total", controller="c", result="requeue") == 2
    assert _total(reg, "controller_runtime_reconcile_total", controller="c", result="success") == 1
    assert _total(reg, "controller_runtime_reconcile_errors_total", controller="c") == 0


def test_requeue_after_wins_over_requeue_and_requeue_takes_the_results_priority() -> None:
    clock = FakeClock()
    q = _queue(True, clock)
    q.rate_limiter.when("k")  # a remembered failure: requeue_after forgets it, requeue does not
    c = Controller(scripted([Result(requeue_after=5, requeue=True), Result(requeue=True, priority=7)]), q)
    q.add("k")
    assert c.process_next(timeout=0)
    assert q.num_requeues("k") == 0  # requeue_after: forget, then add_after(5)
    clock.step(5)
    assert q.get_with_priority(timeout=0) == ("k", 0)
    q.done("k")
    q.add("k")
    assert c.process_next(timeout=0)
    clock.step(1)
    assert q.get_with_priority(timeout=0) == ("k", 7)
    q.done("k")


def test_result_requeue_must_be_a_bool_and_requeue_after_a_float() -> None:
    with pytest.raises(TypeError, match="requeue"):
        Result(requeue=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="requeue_after"):
        Result(requeue_after=10**400)
    assert Result(requeue=True).requeue_after == 0


def test_aio_controller_requeue_true() -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1.0, 1000.0)
        q: keyqueue.aio.PriorityQueue[str] = keyqueue.aio.PriorityQueue(limiter, clock=clock)
        reg = CollectorRegistry()

        async def reconcile(key: str) -> Result:
            return Result(requeue=True, priority=3)

        c = keyqueue.aio.Controller(reconcile, q, name="a", registry=reg)
        q.add("k")
        assert await c.process_next(timeout=0)
        assert q.num_requeues("k") == 1
        clock.step(1)
        assert await q.get_with_priority(timeout=0) == ("k", 3)
        q.done("k")
        assert _total(reg, "controller_runtime_reconcile_total", controller="a", result="requeue") == 1

    asyncio.run(main())


# -- the priority of an error's retry -------------------------------------------------------------------


def test_a_raised_reconcile_error_chooses_the_priority_of_its_retry() -> None:
    clock = FakeClock()
    q = _queue(True, clock)
    c = Controller(scripted([ReconcileError("boom", priority=9), ValueError("plain"), None]), q)
    q.add("k", priority=-4)
    assert c.process_next(timeout=0)
    clock.step(1)
    assert q.get_with_priority(timeout=0) == ("k", 9)  # the error's choice
    q.done("k")
    q.add("k", priority=2)
    assert c.process_next(timeout=0)
    clock.step(2)
    assert q.get_with_priority(timeout=0) == ("k", 2)  # no choice: the priority it was handed out at
    q.done("k")


def test_aio_controller_error_priority_and_plain_queue_ignores_it() -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1.0, 1000.0)
        q: keyqueue.aio.PriorityQueue[str] = keyqueue.aio.PriorityQueue(limiter, clock=clock)

        async def reconcile(key: str) -> None:
            raise ReconcileError("x", priority=-7)

        c = keyqueue.aio.Controller(reconcile, q)
        q.add("k")
        assert await c.process_next(timeout=0)
        clock.step(1)
        assert await q.get_with_priority(timeout=0) == ("k", -7)
        q.done("k")

        plain: keyqueue.aio.RateLimitingQueue[str] = keyqueue.aio.RateLimitingQueue(limiter, clock=clock)
        c2 = keyqueue.aio.Controller(reconcile, plain)
        plain.add("p")
        assert await c2.process_next(timeout=0)
        clock.step(1)
        assert await plain.get(timeout=0) == "p"  # a plain queue has no priorities: retried all the same
        plain.done("p")

    asyncio.run(main())


def test_reconcile_error_priority_must_be_an_int() -> None:
    with pytest.raises(TypeError, match="priority"):
        ReconcileError("x", priority=1.5)  # type: ignore[arg-type]
    assert ReconcileError("x").priority is None
    assert TerminalError("y", priority=3).priority == 3


# -- recover_panic=False -------------------------------------------------------------------------------


def test_recover_panic_false_crashes_the_worker_and_stops_the_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    crashed: list[BaseException | None] = []
    reported = threading.Event()

    def hook(args: Any) -> None:
        crashed.append(args.exc_value)
        reported.set()

    monkeypatch.setattr(threading, "excepthook", hook)
    reg = CollectorRegistry()
    bug = ValueError("a bug")
    calls: list[str] = []

    def reconcile(key: str) -> None:
        calls.append(key)
        if key == "bad":
            raise bug

    c: Controller[str] = Controller(reconcile, name="ff", workers=2, recover_panic=False, registry=reg)
    c.start()
    c.queue.add("bad")
    assert reported.wait(5)
    assert c.stopping  # the crash asked the controller to stop
    assert c.stop(5)  # waits for the other worker; the crashed one has exited
    assert c.failure is bug
    assert crashed == [bug]  # the worker thread ended with it, reported by threading.excepthook
    assert c.queue.num_requeues("bad") == 0  # not retried
    assert len(c.queue) == 0 and not c.queue._core.processing  # done() ran
    assert _total(reg, "controller_runtime_reconcile_panics_total", controller="ff") == 1


def test_recover_panic_false_run_raises_and_expected_errors_are_still_retried() -> None:
    clock = FakeClock()
    q = _queue(True, clock)
    c = Controller(scripted([ReconcileError("expected"), TerminalError("t"), KeyError("bug")]), q, recover_panic=False)
    q.add("k")
    assert c.process_next(timeout=0)  # a ReconcileError is not a panic: retried
    clock.step(1)
    assert c.process_next(timeout=0)  # terminal: not retried, not raised
    q.add("k")
    with pytest.raises(KeyError, match="bug"):
        c.process_next(timeout=0)
    assert c.stopping and isinstance(c.failure, KeyError)
    assert not q._core.processing
    with pytest.raises(KeyError, match="bug"):
        c.run(handle_signals=False)


def test_recover_panic_default_is_true_and_checked() -> None:
    c = Controller(scripted([ValueError("x")]), _queue(True, FakeClock()))
    assert c.recover_panic is True
    with pytest.raises(TypeError, match="recover_panic"):
        Controller(lambda key: None, recover_panic="no")  # type: ignore[arg-type]


def test_aio_recover_panic_false_run_raises() -> None:
    async def main() -> keyqueue.aio.Controller[str]:
        async def reconcile(key: str) -> None:
            raise ZeroDivisionError("bug")

        c: keyqueue.aio.Controller[str] = keyqueue.aio.Controller(reconcile, recover_panic=False, workers=2)
        c.start()
        c.queue.add("k")
        with pytest.raises(ZeroDivisionError):
            await c.run(handle_signals=False)
        return c

    c = asyncio.run(main())
    assert isinstance(c.failure, ZeroDivisionError)
    assert c.queue.num_requeues("k") == 0
