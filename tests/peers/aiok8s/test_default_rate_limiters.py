"""aiok8s ``aiok8s/workqueue/test_default_rate_limiters.py``, translated case by case onto keyqueue's limiters."""

from __future__ import annotations

import pytest

from keyqueue import BucketRateLimiter, FakeClock, ItemExponentialFailureRateLimiter


def test_bucket_rate_limiter() -> None:
    """aiok8s test_default_rate_limiters.py TestDefaultRateLimiters.test_bucket_rate_limiter: a (10/s, burst 2)
    bucket starts full, each call takes a token whether or not one is there (2 → 1 → 0 → -1 → -2), and 300 ms
    later the debt of 2 has become 1 token again (-2 + 3).

    aiok8s sets the private token count and calls ``_advance`` between steps; here the same states are reached
    by ``when()`` calls on the queue's ``FakeClock`` and observed as the delays they give: 0 while a token is
    there, then the time until the debt is paid."""
    clock = FakeClock(1_700_000_000.0)
    limiter: BucketRateLimiter[str] = BucketRateLimiter(10, 2, clock=clock)
    assert limiter.when("x") == 0  # 2 tokens -> 1
    assert limiter.when("x") == 0  # 1 -> 0
    assert limiter.when("x") == pytest.approx(0.1)  # 0 -> -1
    assert limiter.when("x") == pytest.approx(0.2)  # -1 -> -2
    clock.step(0.3)  # -2 + 0.3 s x 10/s = 1
    assert limiter.when("x") == 0  # 1 -> 0
    assert limiter.when("x") == pytest.approx(0.1)  # 0 -> -1: no more tokens at this instant


def test_item_exponential_failure_rate_limiter() -> None:
    """aiok8s test_default_rate_limiters.py TestDefaultRateLimiters.test_item_exponential_failure_rate_limiter:
    (1 ms, 1 s) gives 1, 2, 4, 8, 16 ms for one key (5 requeues), 1, 2 ms for another, and 1 ms after ``forget``."""
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.001, 1)
    assert [limiter.when("one") for _ in range(5)] == [0.001, 0.002, 0.004, 0.008, 0.016]
    assert limiter.num_requeues("one") == 5
    assert [limiter.when("two") for _ in range(2)] == [0.001, 0.002]
    assert limiter.num_requeues("two") == 2
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.when("one") == 0.001


def test_item_exponential_failure_rate_limiter_overflow() -> None:
    """aiok8s test_default_rate_limiters.py TestDefaultRateLimiters.test_item_exponential_failure_rate_limiter_overflow:
    the 6th failure of a 1 ms base is 32 ms; after 1000 failures the delay is the 1000 s cap; with a 60 s base and a
    1000 h cap the 3rd failure is 240 s and the 1001st the cap (no float overflow)."""
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.001, 1000)
    for _ in range(5):
        limiter.when("one")
    assert limiter.when("one") == 0.032
    for _ in range(1000):
        limiter.when("overflow1")
    assert limiter.when("overflow1") == 1000
    limiter = ItemExponentialFailureRateLimiter(60, 1000 * 3600)
    for _ in range(2):
        limiter.when("two")
    assert limiter.when("two") == 4 * 60
    for _ in range(1000):
        limiter.when("overflow2")
    assert limiter.when("overflow2") == 1000 * 3600
