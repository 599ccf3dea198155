"""Each reconcile outcome drives the queue as specified (controller-runtime.md §3.2), with FakeClock.

The controller is driven one key at a time with ``process_next`` (exactly the workers' code path, in the test's
thread), so every queue effect can be checked right after the reconcile that caused it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from keyqueue import (
    Controller,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    PriorityQueue,
    RateLimitingQueue,
    ReconcileError,
    Result,
    TerminalError,
)

Script = dict[str, list[Any]]


def scripted(script: Script) -> tuple[Callable[[str], Result | None], list[str]]:
    """A reconcile that, for each call on a key, pops the next action: an exception to raise or a value to return."""
    calls: list[str] = []

    def reconcile(key: str) -> Result | None:
        calls.append(key)
        action = script[key].pop(0)
        if isinstance(action, BaseException):
            raise action
        return action  # type: ignore[no-any-return]

    return reconcile, calls


def setup(script: Script, **kw: Any) -> tuple[Controller[str], PriorityQueue[str], FakeClock]:
    clock = FakeClock()
    # 1 s, 2 s, 4 s ...: readable backoff steps.
    q: PriorityQueue[str] = PriorityQueue(ItemExponentialFailureRateLimiter(1.0, 1000.0), clock=clock)
    reconcile, _ = scripted(script)
    return Controller(reconcile, q, **kw), q, clock


def test_success_forgets() -> None:
    c, q, clock = setup({"k": [None, Result()]})
    q.rate_limiter.when("k")
    q.rate_limiter.when("k")
    q.add("k")
    assert c.process_next(timeout=0)
    assert q.num_requeues("k") == 0
    clock.step(1000)
    assert len(q) == 0  # nothing requeued
    q.add("k")
    assert c.process_next(timeout=0)  # Result() is a success too
    assert len(q) == 0


def test_error_requeues_rate_limited() -> None:
    c, q, clock = setup({"k": [ValueError("boom"), ReconcileError("again"), None]})
    q.add("k")
    assert c.process_next(timeout=0)
    assert q.num_requeues("k") == 1
    assert len(q) == 0  # waiting 1 s
    clock.step(0.999)
    assert len(q) == 0
    clock.step(0.001)
    assert len(q) == 1
    assert c.process_next(timeout=0)
    assert q.num_requeues("k") == 2
    clock.step(1.999)
    assert len(q) == 0
    clock.step(0.001)
    assert c.process_next(timeout=0)  # succeeds
    assert q.num_requeues("k") == 0


def test_terminal_error_neither_requeues_nor_forgets() -> None:
    wrapped = RuntimeError("wrapper")
    wrapped.__cause__ = TerminalError("bad spec")
    c, q, clock = setup({"k": [TerminalError("bad spec"), wrapped]})
    q.rate_limiter.when("k")
    q.rate_limiter.when("k")
    for _ in range(2):
        q.add("k")
        assert c.process_next(timeout=0)
        assert q.num_requeues("k") == 2  # not forgotten
        clock.step(10_000)
        assert len(q) == 0  # not requeued


def test_requeue_after_forgets_then_adds_after() -> None:
    c, q, clock = setup({"k": [Result(requeue_after=5)]})
    q.rate_limiter.when("k")
    q.rate_limiter.when("k")
    q.add("k")
    assert c.process_next(timeout=0)
    assert q.num_requeues("k") == 0
    clock.step(4.999)
    assert len(q) == 0
    clock.step(0.001)
    assert len(q) == 1


def test_requeues_keep_the_dequeued_priority_or_take_the_results() -> None:
    c, q, clock = setup(
        {
            "e": [ValueError("x")],
            "r": [Result(requeue_after=1)],
            "p": [Result(requeue_after=1, priority=-5)],
        }
    )
    q.add("e", priority=3)
    q.add("r", priority=2)
    q.add("p", priority=1)
    for _ in range(3):
        assert c.process_next(timeout=0)
    clock.step(1)
    got = [q.get_with_priority(timeout=0) for _ in range(3)]
    assert got == [("e", 3), ("r", 2), ("p", -5)]


def test_backoff_resets_only_on_success_or_requeue_after() -> None:
    c, q, clock = setup(
        {"k": [ValueError("1"), ValueError("2"), TerminalError("3"), Result(requeue_after=1), ValueError("4"), None]}
    )
    history = []
    for _ in range(6):
        q.add("k")  # (re)add by hand: a terminal error does not requeue
        assert c.process_next(timeout=0)
        history.append(q.num_requeues("k"))
        clock.step(100)
        while len(q):
            q.done(q.get(timeout=0))  # discard the automatic requeues; the next add drives the next reconcile
    assert history == [1, 2, 2, 0, 1, 0]


def test_done_always_runs() -> None:
    def reconcile(key: str) -> None:
        q.add(key)  # re-added while being processed: ready again only after done
        if key == "fail":
            raise ValueError("boom")

    q: PriorityQueue[str] = PriorityQueue(clock=FakeClock())
    c = Controller(reconcile, q)
    for key in ("ok", "fail"):
        q.add(key)
        assert c.process_next(timeout=0)
        assert not q._core.processing
        assert q.get(timeout=0) == key  # handed out again: done() was called
        q.done(key)


def test_bad_return_value_is_an_unexpected_error() -> None:
    c, q, _ = setup({"k": [42]})
    q.add("k")
    assert c.process_next(timeout=0)
    assert q.num_requeues("k") == 1


def test_plain_rate_limiting_queue() -> None:
    clock = FakeClock()
    q: RateLimitingQueue[str] = RateLimitingQueue(ItemExponentialFailureRateLimiter(1.0, 1000.0), clock=clock)
    reconcile, calls = scripted({"e": [ValueError("x"), None], "r": [Result(requeue_after=3, priority=9), None]})
    c = Controller(reconcile, q)
    q.add("e")
    q.add("r")
    assert c.process_next(timeout=0)
    assert c.process_next(timeout=0)
    assert q.num_requeues("e") == 1
    clock.step(1)
    assert len(q) == 1
    clock.step(2)
    assert len(q) == 2
    assert c.process_next(timeout=0)
    assert c.process_next(timeout=0)
    assert calls == ["e", "r", "e", "r"]
    q.shut_down()
    assert c.process_next(timeout=0) is False


def test_errors_are_logged_with_key_and_attempt(caplog: pytest.LogCaptureFixture) -> None:
    c, q, clock = setup({"k": [ValueError("boom"), ReconcileError("expected"), TerminalError("final")]})
    caplog.set_level(logging.ERROR, logger="keyqueue.controller")
    for _ in range(3):
        q.add("k")
        c.process_next(timeout=0)
        clock.step(100)
        while len(q):
            q.done(q.get(timeout=0))
    r1, r2, r3 = caplog.records
    assert "'k'" in r1.getMessage() and "attempt 1" in r1.getMessage() and "boom" in r1.getMessage()
    assert r1.exc_info is not None  # unexpected: with traceback
    assert "attempt 2" in r2.getMessage() and "expected" in r2.getMessage()
    assert r2.exc_info is None  # a ReconcileError is expected: no traceback
    assert "terminal" in r3.getMessage() and "final" in r3.getMessage()


def test_default_queues() -> None:
    def my_reconciler(key: str) -> None:
        return None

    c = Controller(my_reconciler)
    assert c.name == "my_reconciler"
    assert isinstance(c.queue, PriorityQueue)
    assert c.queue.name == "my_reconciler"
    assert isinstance(c.queue.rate_limiter, ItemExponentialFailureRateLimiter)  # controller-runtime's PQ default
    c2 = Controller(my_reconciler, name="other", use_priority_queue=False)
    assert type(c2.queue) is RateLimitingQueue
    assert isinstance(c2.queue.rate_limiter, MaxOfRateLimiter)  # client-go's default controller limiter
    assert c2.queue.name == "other"


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"workers": 0}, ValueError),
        ({"workers": 1.5}, TypeError),
        ({"name": ""}, TypeError),
        ({"stop_timeout": -1}, ValueError),
        ({"queue": object()}, TypeError),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], exc: type[Exception]) -> None:
    with pytest.raises(exc):
        Controller(lambda key: None, **kwargs)


def test_bad_results() -> None:
    with pytest.raises(ValueError):
        Result(requeue_after=-1)
    with pytest.raises(ValueError):
        Result(requeue_after=float("nan"))
    with pytest.raises(TypeError):
        Result(requeue_after="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Result(priority=1.5)  # type: ignore[arg-type]


def test_coroutine_reconcile_is_refused_by_the_threaded_controller() -> None:
    async def reconcile(key: str) -> None:
        return None

    class AsyncCallable:
        async def __call__(self, key: str) -> None:
            return None

    for fn in (reconcile, AsyncCallable()):
        with pytest.raises(TypeError, match=r"coroutine function.*keyqueue\.aio\.Controller"):
            Controller(fn)  # type: ignore[arg-type]


def test_bad_arguments_are_refused_before_a_default_queue_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []
    monkeypatch.setattr(Controller, "_priority_queue_class", staticmethod(lambda **kw: built.append(kw)))
    for kwargs in ({"workers": 0}, {"name": ""}, {"stop_timeout": -1}):
        with pytest.raises((TypeError, ValueError)):
            Controller(lambda key: None, **kwargs)
    assert built == []
