"""client-go ``util/workqueue/default_rate_limiters_test.go``, translated case by case.

Go's ``time.Duration`` results are float seconds in keyqueue (``when`` returns seconds).
"""

from __future__ import annotations

from collections.abc import Hashable

from keyqueue import (
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    WithMaxWaitRateLimiter,
)

MS = 0.001


def _check_sequence(limiter: RateLimiter[str], expected_one: list[float], expected_two: list[float]) -> None:
    """The shape all three per-item cases share: a sequence for "one", an independent one for "two", counts, and
    "one" starting over after ``forget``."""
    assert [limiter.when("one") for _ in expected_one] == expected_one
    assert limiter.num_requeues("one") == len(expected_one)
    assert [limiter.when("two") for _ in expected_two] == expected_two
    assert limiter.num_requeues("two") == len(expected_two)
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.when("one") == expected_one[0]


def test_item_exponential_failure_rate_limiter() -> None:
    """client-go default_rate_limiters_test.go TestItemExponentialFailureRateLimiter: base 1 ms, max 1 s gives
    1, 2, 4, 8, 16 ms per failure of one key (5 requeues), an independent 1, 2 ms for another, and 1 ms again
    after ``forget``."""
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(MS, 1.0)
    _check_sequence(limiter, [1 * MS, 2 * MS, 4 * MS, 8 * MS, 16 * MS], [1 * MS, 2 * MS])


def test_item_exponential_failure_rate_limiter_over_flow() -> None:
    """client-go default_rate_limiters_test.go TestItemExponentialFailureRateLimiterOverFlow: the 6th failure of a
    1 ms base is 32 ms; after 1000 failures the delay is the cap (1000 s), not an overflowed value; the same with
    a 1 min base and a 1000 h cap (3rd failure: 4 min)."""
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(MS, 1000.0)
    for _ in range(5):
        limiter.when("one")
    assert limiter.when("one") == 32 * MS
    for _ in range(1000):
        limiter.when("overflow1")
    assert limiter.when("overflow1") == 1000.0

    limiter = ItemExponentialFailureRateLimiter(60.0, 1000 * 3600.0)
    for _ in range(2):
        limiter.when("two")
    assert limiter.when("two") == 4 * 60.0
    for _ in range(1000):
        limiter.when("overflow2")
    assert limiter.when("overflow2") == 1000 * 3600.0


def test_item_fast_slow_rate_limiter() -> None:
    """client-go default_rate_limiters_test.go TestItemFastSlowRateLimiter: (5 ms, 10 s, 3 fast attempts) gives
    5, 5, 5 ms then 10 s, 10 s per key, counted per key, and fast again after ``forget``."""
    limiter: ItemFastSlowRateLimiter[str] = ItemFastSlowRateLimiter(5 * MS, 10.0, 3)
    _check_sequence(limiter, [5 * MS, 5 * MS, 5 * MS, 10.0, 10.0], [5 * MS, 5 * MS])


def test_max_of_rate_limiter() -> None:
    """client-go default_rate_limiters_test.go TestMaxOfRateLimiter: the maximum of fast/slow (5 ms, 3 s, 3) and
    exponential (1 ms, 1 s) — 5, 5, 5 ms then 3 s, 3 s; counts are the children's maximum; ``forget`` forgets in
    every child."""
    limiter: MaxOfRateLimiter[str] = MaxOfRateLimiter(
        ItemFastSlowRateLimiter(5 * MS, 3.0, 3),
        ItemExponentialFailureRateLimiter(MS, 1.0),
    )
    _check_sequence(limiter, [5 * MS, 5 * MS, 5 * MS, 3.0, 3.0], [5 * MS, 5 * MS])


class StepRateLimiter:
    """client-go's test-only StepRateLimiter: ``base`` for the first ``threshold`` calls (any key), then ``max``."""

    def __init__(self, base: float, max_delay: float, threshold: int) -> None:
        self.count = 0
        self.base, self.max_delay, self.threshold = base, max_delay, threshold

    def when(self, item: Hashable) -> float:
        self.count += 1
        return self.base if self.count <= self.threshold else self.max_delay

    def forget(self, item: Hashable) -> None:
        pass

    def num_requeues(self, item: Hashable) -> int:
        return 0


def test_with_max_wait_rate_limiter() -> None:
    """client-go default_rate_limiters_test.go TestWithMaxWaitRateLimiter: wrapping a limiter that answers 5 ms
    100 times and then 1000 s with a 500 s maximum wait gives 5 ms, then 500 s (the cap, not 1000 s)."""
    limiter: WithMaxWaitRateLimiter[Hashable] = WithMaxWaitRateLimiter(StepRateLimiter(5 * MS, 1000.0, 100), 500.0)
    assert [limiter.when(i) for i in range(100)] == [5 * MS] * 100
    assert [limiter.when(i) for i in range(100, 200)] == [500.0] * 100
