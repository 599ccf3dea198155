"""Conformance: the rate-limiting queue (client-go rate_limiting_queue.go)."""

from __future__ import annotations

from typing import Any

import pytest

from keyqueue import AddResult, FakeClock, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter


def test_default_limiter_follows_the_queue_clock(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("ratelimiting", clock=clock)
    assert q.add_rate_limited("a") == AddResult.DELAYED
    assert q.num_requeues("a") == 1
    clock.step(0.004)
    assert len(q) == 0
    clock.step(0.001)  # 5 ms: the first failure's backoff
    assert len(q) == 1
    assert q.get(timeout=1) == "a"
    q.add_rate_limited("a")  # second failure: 10 ms
    q.done("a")
    clock.step(0.009)
    assert len(q) == 0
    clock.step(0.001)
    assert len(q) == 1


def test_forget_resets_backoff(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("ratelimiting", ItemExponentialFailureRateLimiter(1.0, 100.0), clock=clock)
    for _ in range(3):
        q.add_rate_limited("a")
    assert q.num_requeues("a") == 3
    q.forget("a")
    assert q.num_requeues("a") == 0
    clock.step(1.0)  # the entry scheduled by the 1st call (1 s) fires: earliest wins
    assert len(q) == 1


def test_custom_limiter(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("ratelimiting", ItemFastSlowRateLimiter(0.1, 10.0, 2), clock=clock)
    q.add_rate_limited("a")
    clock.step(0.1)
    assert q.get(timeout=1) == "a"
    q.done("a")
    q.add_rate_limited("a")
    q.add_rate_limited("a")  # third attempt: slow, but the second (fast) entry is earlier and kept
    clock.step(0.1)
    assert len(q) == 1


def test_limiter_is_consulted_after_shutdown(make_queue: Any) -> None:
    # client-go: When() runs even when the queue is shut down, so the count still grows.
    q = make_queue("ratelimiting", clock=FakeClock())
    q.shut_down()
    assert q.add_rate_limited("a") == AddResult.DROPPED
    assert q.add_rate_limited("a") == AddResult.DROPPED
    assert q.num_requeues("a") == 2


def test_unhashable_is_rejected_before_the_limiter_sees_it(make_queue: Any) -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1.0)
    q = make_queue("ratelimiting", limiter, clock=FakeClock())
    with pytest.raises(TypeError, match="list"):
        q.add_rate_limited(["a"])
    assert len(q) == 0


def test_a_non_limiter_is_rejected_at_construction(make_queue: Any) -> None:
    with pytest.raises(TypeError, match="rate_limiter"):
        make_queue("ratelimiting", 0.5)
