"""controller-runtime ``pkg/internal/controller/controller_test.go``, the workqueue-related cases translated one by
one: Describe("Reconciler") (panic recovery), Describe("Processing queue items from a Controller") (Result,
requeue, RequeueAfter, errors, terminal errors, priorities) and its metrics contexts (reconcile_total,
reconcile_errors, reconcile time). The cases about ReconciliationTimeout, sources, caches, Start, Warmup and
ReconcileID have no keyqueue counterpart (keyqueue's Controller has no sources, cache or per-reconcile timeout) and
are counted as left out in ``tests/peers/README.md``.

Every case runs on both controllers (:class:`keyqueue.Controller` and :class:`keyqueue.aio.Controller`, the
``cs`` fixture). Go's ``fakeReconciler`` hands results to a controller that was started; here the test mostly
drives one worker step at a time with ``process_next`` ("exactly as a worker does"), so each outcome is checked
right after its reconcile, with a ``FakeClock`` for the queue. Go's ``DelegatingQueue`` and ``fakePriorityQueue`` (which
count the queue calls the controller makes) are subclasses of the public queues here. A Go reconciler returns a
``Result`` *and* an ``error``; a Python one returns a :class:`~keyqueue.Result` or raises, so "an error,
regardless of RequeueAfter" is "it raised".
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from keyqueue import (
    AddResult,
    Controller,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    PriorityQueue,
    RateLimitingQueue,
    ReconcileError,
    Result,
    TerminalError,
    aio,
)
from tests.shells import wait_until

REQUEST = "foo/bar"  # controller-runtime's reconcile.Request{Namespace: "foo", Name: "bar"} as a namespace/name key


def scripted(results: list[Any], seen: list[Any] | None = None) -> Callable[[Any], Result | None]:
    """controller-runtime's fakeReconciler: each call records the key and returns (or raises) the next result."""

    def reconcile(key: Any) -> Result | None:
        if seen is not None:
            seen.append(key)
        result = results.pop(0)
        if isinstance(result, BaseException):
            raise result
        return result  # type: ignore[no-any-return]

    return reconcile


def _limiter() -> ItemExponentialFailureRateLimiter[Hashable]:
    return ItemExponentialFailureRateLimiter(0.005, 1000.0)


class Delegating:
    """controller-runtime's DelegatingQueue: counts add / add_after / add_rate_limited calls, and ``forget``
    decrements the add count ("Trying" = adds not yet forgotten). Calls the queue makes to itself (add_rate_limited
    goes through add_after) are not counted."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(_limiter(), clock=clock)  # type: ignore[call-arg]
        self._count_lock = threading.Lock()
        self._inner = 0
        self.trying = self.add_after_count = self.add_rate_limited_count = 0

    def add(self, item: Hashable) -> AddResult:
        with self._count_lock:
            self.trying += 1
        return super().add(item)  # type: ignore[misc, no-any-return]

    def add_after(self, item: Hashable, delay: float) -> AddResult:
        with self._count_lock:
            if not self._inner:
                self.add_after_count += 1
        return super().add_after(item, delay)  # type: ignore[misc, no-any-return]

    def add_rate_limited(self, item: Hashable) -> AddResult:
        with self._count_lock:
            self.add_rate_limited_count += 1
            self._inner += 1
        try:
            return super().add_rate_limited(item)  # type: ignore[misc, no-any-return]
        finally:
            with self._count_lock:
                self._inner -= 1

    def forget(self, item: Hashable) -> None:
        with self._count_lock:
            self.trying -= 1
        super().forget(item)  # type: ignore[misc]

    def counts(self) -> dict[str, int]:
        with self._count_lock:
            return {
                "trying": self.trying,
                "add_after": self.add_after_count,
                "add_rate_limited": self.add_rate_limited_count,
            }


class RecordingPriority:
    """controller-runtime's fakePriorityQueue: records every ``add`` with its options (``add_after`` and
    ``add_rate_limited`` are ``add`` with options on a priority queue) and then applies it."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)  # type: ignore[call-arg]
        self.added: list[tuple[Hashable, dict[str, Any]]] = []

    def add(self, item: Hashable, *, priority: int = 0, after: float = 0.0, rate_limited: bool = False) -> AddResult:
        self.added.append((item, {"priority": priority, "after": after, "rate_limited": rate_limited}))
        return super().add(item, priority=priority, after=after, rate_limited=rate_limited)  # type: ignore[misc, no-any-return]


class Shell:
    """One controller shell: its Controller, the two recording queues on its queue classes, one worker step
    (``process_next``) and a way to run the started controller while a (blocking) body runs."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "threaded":
            self.controller: Any = Controller
            rlq, pq = RateLimitingQueue, PriorityQueue
        else:
            self.controller = aio.Controller
            rlq, pq = aio.RateLimitingQueue, aio.PriorityQueue
        self._delegating = type("DelegatingQueue", (Delegating, rlq), {})
        self._recording = type("RecordingPriorityQueue", (RecordingPriority, pq), {})

    def delegating(self, clock: FakeClock) -> Any:
        return self._delegating(clock)

    def recording_pq(self, clock: FakeClock) -> Any:
        return self._recording(clock)

    def step(self, c: Any) -> bool:
        """One worker step: take a ready key and reconcile it, in this thread (asyncio: in a fresh event loop)."""
        if self.name == "threaded":
            return bool(c.process_next(timeout=0))
        return bool(asyncio.run(c.process_next(timeout=0)))

    def running(self, c: Any, body: Callable[[], None]) -> None:
        """Start ``c``, run ``body()`` (blocking; in a thread beside the event loop for asyncio), stop ``c``."""
        if self.name == "threaded":
            with c:
                body()
            return

        async def main() -> None:
            async with c:
                await asyncio.get_running_loop().run_in_executor(None, body)

        asyncio.run(main())


@pytest.fixture(params=["threaded", "asyncio"])
def cs(request: pytest.FixtureRequest) -> Shell:
    """The controller shell under test: :class:`keyqueue.Controller` or :class:`keyqueue.aio.Controller`."""
    return Shell(str(request.param))


def _sample(reg: CollectorRegistry, name: str, **labels: str) -> float:
    value = reg.get_sample_value(name, labels)
    return 0.0 if value is None else value


# -- Describe("Reconciler") -------------------------------------------------------------------------------------


def test_should_call_the_reconciler_function(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should call the Reconciler function"): the controller calls the
    reconcile function with the key, and what it returns (``Result(requeue=True)``) is what the controller acts
    on (a rate-limited requeue)."""
    clock = FakeClock()
    q = cs.delegating(clock)
    seen: list[Any] = []
    c = cs.controller(scripted([Result(requeue=True)], seen), q, name="test")
    q.add(REQUEST)
    assert cs.step(c)
    assert seen == [REQUEST]
    assert q.counts()["add_rate_limited"] == 1


class NilDeref(Exception):
    """Go's nil-pointer dereference in the reconciler, as a Python exception that is not a ReconcileError."""


def _panicking(key: Any) -> Result | None:
    raise NilDeref("invalid memory address or nil pointer dereference")


def test_should_not_recover_panic_if_recover_panic_is_false(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should not recover panic if RecoverPanic is false"): with
    ``recover_panic=False`` an unexpected exception from reconcile propagates to the caller."""
    q = cs.delegating(FakeClock())
    c = cs.controller(_panicking, q, name="test", recover_panic=False)
    q.add(REQUEST)
    with pytest.raises(NilDeref):
        cs.step(c)
    assert q.counts()["add_rate_limited"] == 0


def _recovered(cs: Shell, recover_panic: bool | None) -> None:
    q = cs.delegating(FakeClock())
    reg = CollectorRegistry()
    kwargs: dict[str, Any] = {} if recover_panic is None else {"recover_panic": recover_panic}
    c = cs.controller(_panicking, q, name="test", registry=reg, **kwargs)
    q.add(REQUEST)
    assert cs.step(c)  # returned: the panic was recovered
    # Go: Reconcile returns an error mentioning "[recovered]"; here the recovered panic is an error outcome,
    # retried with backoff and counted as a panic.
    assert q.counts()["add_rate_limited"] == 1
    assert _sample(reg, "controller_runtime_reconcile_panics_total", controller="test") == 1
    assert _sample(reg, "controller_runtime_reconcile_total", controller="test", result="error") == 1


def test_should_recover_panic_if_recover_panic_is_true_by_default(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should recover panic if RecoverPanic is true by default"): without
    ``recover_panic`` an unexpected exception does not propagate; it becomes an error outcome (requeued, counted
    as a panic)."""
    _recovered(cs, None)


def test_should_recover_panic_if_recover_panic_is_true(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should recover panic if RecoverPanic is true"): the same with
    ``recover_panic=True`` given explicitly."""
    _recovered(cs, True)


# -- Describe("Processing queue items from a Controller") -------------------------------------------------------


def test_should_call_reconciler_if_an_item_is_enqueued(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should call Reconciler if an item is enqueued"): a started
    controller's worker reconciles an added key; afterwards the queue is empty and the key has no requeues."""
    q = cs.delegating(FakeClock())
    reconciled = threading.Event()
    seen: list[Any] = []

    def reconcile(key: Any) -> None:
        seen.append(key)
        reconciled.set()

    def body() -> None:
        q.add(REQUEST)
        assert reconciled.wait(30)

    cs.running(cs.controller(reconcile, q, name="test"), body)
    assert seen == [REQUEST]
    assert len(q) == 0
    assert q.num_requeues(REQUEST) == 0


def test_should_requeue_a_request_if_there_is_an_error_and_continue_processing_items(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should requeue a Request if there is an error and continue
    processing items"): a failing reconcile is requeued with ``add_rate_limited``; the retry succeeds; then the
    queue is empty and the backoff forgotten."""
    clock = FakeClock()
    q = cs.delegating(clock)
    seen: list[Any] = []
    c = cs.controller(scripted([ReconcileError("expected error: reconcile"), None], seen), q, name="test")
    q.add(REQUEST)
    assert cs.step(c)
    assert q.counts()["add_rate_limited"] == 1
    clock.step(0.005)
    assert cs.step(c)
    assert seen == [REQUEST, REQUEST]
    assert len(q) == 0
    assert q.num_requeues(REQUEST) == 0


def test_should_not_requeue_a_request_if_there_is_a_terminal_error(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should not requeue a Request if there is a terminal error"): a
    ``TerminalError`` is not requeued (no ``add_rate_limited``) and the queue is empty."""
    q = cs.delegating(FakeClock())
    c = cs.controller(scripted([TerminalError("expected error: reconcile")]), q, name="test")
    q.add(REQUEST)
    assert cs.step(c)
    assert q.counts()["add_rate_limited"] == 0
    assert len(q) == 0


def test_should_not_reset_backoff_until_theres_a_non_error_result(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should not reset backoff until there's a non-error result"): two
    errors are two rate-limited requeues and no ``forget`` (Trying stays 1); the success forgets (Trying 0); then
    the queue is empty and the key has no requeues."""
    clock = FakeClock()
    q = cs.delegating(clock)
    c = cs.controller(
        scripted([ReconcileError("something's wrong"), ReconcileError("another thing's wrong"), None]), q, name="test"
    )
    q.add(REQUEST)
    assert q.counts() == {"trying": 1, "add_after": 0, "add_rate_limited": 0}
    assert cs.step(c)
    assert q.counts() == {"trying": 1, "add_after": 0, "add_rate_limited": 1}
    clock.step(0.005)
    assert cs.step(c)
    assert q.counts() == {"trying": 1, "add_after": 0, "add_rate_limited": 2}
    clock.step(0.010)
    assert cs.step(c)
    assert q.counts() == {"trying": 0, "add_after": 0, "add_rate_limited": 2}
    assert len(q) == 0
    assert q.num_requeues(REQUEST) == 0


def test_should_requeue_a_request_with_rate_limiting_if_the_result_sets_requeue_true(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should requeue a Request with rate limiting if the Result sets
    Requeue:true and continue processing items"): ``Result(requeue=True)`` is a rate-limited requeue without
    ``forget``; the next plain result forgets; then the queue is empty with no requeues."""
    clock = FakeClock()
    q = cs.delegating(clock)
    c = cs.controller(scripted([Result(requeue=True), Result(requeue=False)]), q, name="test")
    q.add(REQUEST)
    assert q.counts() == {"trying": 1, "add_after": 0, "add_rate_limited": 0}
    assert cs.step(c)
    assert q.counts() == {"trying": 1, "add_after": 0, "add_rate_limited": 1}
    clock.step(0.005)
    assert cs.step(c)
    assert q.counts() == {"trying": 0, "add_after": 0, "add_rate_limited": 1}
    assert len(q) == 0
    assert q.num_requeues(REQUEST) == 0


def _priority_requeue(cs: Shell, outcome: Any) -> list[tuple[Hashable, dict[str, Any]]]:
    """Add REQUEST at priority 10 to a recording priority queue, reconcile it once with ``outcome``, and return the
    adds the controller made (the test's own first add left out)."""
    q = cs.recording_pq(FakeClock())
    c = cs.controller(scripted([outcome]), q, name="test")
    q.add(REQUEST, priority=10)
    assert cs.step(c)
    return q.added[1:]


def test_should_retain_the_priority_when_the_reconciler_requests_a_requeue(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should retain the priority when the reconciler requests a
    requeue"): ``Result(requeue=True)`` for a key handed out at 10 is one rate-limited add at priority 10."""
    assert _priority_requeue(cs, Result(requeue=True)) == [
        (REQUEST, {"priority": 10, "after": 0.0, "rate_limited": True})
    ]


def test_should_use_the_priority_from_result_when_the_reconciler_requests_a_requeue(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should use the priority from Result when the reconciler requests a
    requeue"): ``Result(requeue=True, priority=99)`` is a rate-limited add at 99."""
    assert _priority_requeue(cs, Result(requeue=True, priority=99)) == [
        (REQUEST, {"priority": 99, "after": 0.0, "rate_limited": True})
    ]


def test_should_requeue_a_request_after_a_duration_if_the_result_sets_requeue_after(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should requeue a Request after a duration (but not rate-limited)
    if the Result sets RequeueAfter (regardless of Requeue)"): ``requeue_after=0.1`` with ``requeue=True`` is an
    ``add_after`` (not rate limited) and a ``forget``; again with ``requeue_after`` only; then the queue is empty
    and the key has no requeues."""
    clock = FakeClock()
    q = cs.delegating(clock)
    c = cs.controller(scripted([Result(requeue_after=0.1, requeue=True), Result(requeue_after=0.1)]), q, name="test")
    q.add(REQUEST)
    assert q.counts() == {"trying": 1, "add_after": 0, "add_rate_limited": 0}
    assert cs.step(c)
    assert q.counts() == {"trying": 0, "add_after": 1, "add_rate_limited": 0}
    clock.step(0.1)
    assert cs.step(c)
    assert q.counts() == {"trying": -1, "add_after": 2, "add_rate_limited": 0}  # Go: add_after does not count
    assert len(q) == 0
    assert q.num_requeues(REQUEST) == 0


def test_should_retain_the_priority_with_requeue_after(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should retain the priority with RequeueAfter"): ``requeue_after``
    for a key handed out at 10 is one delayed add (0.1 s) at 10, not rate limited."""
    assert _priority_requeue(cs, Result(requeue_after=0.1)) == [
        (REQUEST, {"priority": 10, "after": 0.1, "rate_limited": False})
    ]


def test_should_use_the_priority_from_result_with_requeue_after(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should use the priority from Result with RequeueAfter"):
    ``Result(requeue_after=0.1, priority=99)`` is a delayed add at 99."""
    assert _priority_requeue(cs, Result(requeue_after=0.1, priority=99)) == [
        (REQUEST, {"priority": 99, "after": 0.1, "rate_limited": False})
    ]


def test_should_perform_error_behavior_if_error_is_not_nil_regardless_of_requeue_after(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should perform error behavior if error is not nil, regardless of
    RequeueAfter"): a reconcile that fails is a rate-limited requeue (no ``add_after``, no ``forget``); the next,
    returning ``requeue_after`` without an error, is an ``add_after`` with ``forget``."""
    clock = FakeClock()
    q = cs.delegating(clock)
    c = cs.controller(
        scripted([ReconcileError("expected error: reconcile"), Result(requeue_after=0.1)]), q, name="test"
    )
    q.add(REQUEST)
    assert cs.step(c)
    assert q.counts() == {"trying": 1, "add_after": 0, "add_rate_limited": 1}
    clock.step(0.005)
    assert cs.step(c)
    assert q.counts() == {"trying": 0, "add_after": 1, "add_rate_limited": 1}
    assert len(q) == 0
    assert q.num_requeues(REQUEST) == 0


def test_should_retain_the_priority_when_there_was_an_error(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should retain the priority when there was an error"): the retry of
    a failed key handed out at 10 is a rate-limited add at 10."""
    assert _priority_requeue(cs, ReconcileError("oups, I did it again")) == [
        (REQUEST, {"priority": 10, "after": 0.0, "rate_limited": True})
    ]


def test_should_use_the_priority_from_result_when_there_was_an_error(cs: Shell) -> None:
    """controller-runtime controller_test.go It("should use the priority from Result when there was an error"): Go
    returns ``Result{Priority: 99}`` with the error; keyqueue's reconcile raises ``ReconcileError(priority=99)``;
    the retry is a rate-limited add at 99."""
    assert _priority_requeue(cs, ReconcileError("oups, I did it again", priority=99)) == [
        (REQUEST, {"priority": 99, "after": 0.0, "rate_limited": True})
    ]


# -- Context("prometheus metric reconcile_total") and Context("should update prometheus metrics") -----------------


@pytest.mark.parametrize(
    ("outcome", "label"),
    [
        (None, "success"),
        (ReconcileError("expected error: reconcile"), "error"),
        (Result(requeue=True), "requeue"),
        (Result(requeue_after=5 * 3600.0), "requeue_after"),
    ],
    ids=[
        "should get updated on successful reconciliation",
        "should get updated on reconcile errors",
        "should get updated when reconcile returns with retry enabled",
        "should get updated when reconcile returns with retryAfter enabled",
    ],
)
def test_prometheus_metric_reconcile_total(cs: Shell, outcome: Any, label: str) -> None:
    """controller-runtime controller_test.go Context("prometheus metric reconcile_total"), its four It blocks (one
    parameter each): ``controller_runtime_reconcile_total{result}`` starts at 0 and counts one reconcile under the
    outcome's label (success / error / requeue / requeue_after)."""
    reg = CollectorRegistry()
    q = cs.delegating(FakeClock())  # a requeue never fires: the fake clock does not move
    total = {
        o: (lambda o=o: _sample(reg, "controller_runtime_reconcile_total", controller="test", result=o))
        for o in ("success", "error", "requeue", "requeue_after")
    }

    def body() -> None:
        assert reg.get_sample_value("controller_runtime_reconcile_total", {"controller": "test", "result": label}) == 0
        q.add(REQUEST)
        wait_until(lambda: total[label]() == 1, what=f"reconcile_total{{result={label!r}}} == 1")

    cs.running(cs.controller(scripted([outcome]), q, name="test", registry=reg), body)
    assert {o: read() for o, read in total.items()} == {o: (1 if o == label else 0) for o in total}


def test_should_update_prometheus_metrics_requeue_on_error(cs: Shell) -> None:
    """controller-runtime controller_test.go Context("should update prometheus metrics") It("should requeue a
    Request if there is an error and continue processing items"): ``controller_runtime_reconcile_errors_total``
    goes 0 → 1 on the failing reconcile; the retry succeeds; the queue is empty, no requeues."""
    reg = CollectorRegistry()
    clock = FakeClock()
    q = cs.delegating(clock)
    c = cs.controller(scripted([ReconcileError("expected error: reconcile"), None]), q, name="test", registry=reg)
    q.add(REQUEST)
    assert _sample(reg, "controller_runtime_reconcile_errors_total", controller="test") == 0
    assert cs.step(c)
    assert _sample(reg, "controller_runtime_reconcile_errors_total", controller="test") == 1
    clock.step(0.005)
    assert cs.step(c)
    assert len(q) == 0
    assert q.num_requeues(REQUEST) == 0


def test_should_add_a_reconcile_time_to_the_reconcile_time_histogram(cs: Shell) -> None:
    """controller-runtime controller_test.go Context("should update prometheus metrics") It("should add a reconcile
    time to the reconcile time histogram"): ``controller_runtime_reconcile_time_seconds`` has no sample before and
    one after a reconcile; the queue is empty, no requeues."""
    reg = CollectorRegistry()
    q = cs.delegating(FakeClock())
    c = cs.controller(scripted([None]), q, name="test", registry=reg)
    q.add(REQUEST)
    assert _sample(reg, "controller_runtime_reconcile_time_seconds_count", controller="test") == 0
    assert cs.step(c)
    assert len(q) == 0
    assert q.num_requeues(REQUEST) == 0
    assert _sample(reg, "controller_runtime_reconcile_time_seconds_count", controller="test") == 1
