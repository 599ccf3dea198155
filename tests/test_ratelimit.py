"""Every rate limiter's exact sequence (client-go default_rate_limiters.go, golang.org/x/time/rate)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from keyqueue import (
    BucketRateLimiter,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    WithMaxWaitRateLimiter,
    default_controller_rate_limiter,
    default_item_based_rate_limiter,
)


def test_exponential_sequence_and_cap() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [rl.when("k") for _ in range(25)]
    assert delays[:5] == [0.005, 0.01, 0.02, 0.04, 0.08]
    assert delays[17] == pytest.approx(655.36)  # 18th failure
    assert delays[18:] == [1000.0] * 7  # capped from the 19th
    assert rl.num_requeues("k") == 25
    assert rl.num_requeues("other") == 0
    rl.forget("k")
    assert rl.num_requeues("k") == 0
    assert rl.when("k") == 0.005


def test_exponential_keys_are_independent_and_huge_counts_stay_capped() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.001, 1.0)
    assert [rl.when("a") for _ in range(3)] == [0.001, 0.002, 0.004]
    assert rl.when("b") == 0.001
    for _ in range(2000):  # past 2**1024: no overflow, never negative (client-go's 2**63 corner)
        d = rl.when("a")
    assert d == 1.0


def test_exponential_zero_base_and_validation() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0, 10)
    assert [rl.when("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="base_delay"):
        ItemExponentialFailureRateLimiter(2.0, 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        ItemExponentialFailureRateLimiter(-1.0, 1.0)
    with pytest.raises(ValueError):
        ItemExponentialFailureRateLimiter(math.nan, 1.0)
    with pytest.raises(TypeError, match="str"):
        ItemExponentialFailureRateLimiter("5ms", 1.0)  # type: ignore[arg-type]


def test_default_item_based() -> None:
    rl = default_item_based_rate_limiter()
    assert [rl.when("a") for _ in range(4)] == [0.001, 0.002, 0.004, 0.008]


def test_fast_slow() -> None:
    rl: ItemFastSlowRateLimiter[str] = ItemFastSlowRateLimiter(0.005, 10.0, 3)
    assert [rl.when("a") for _ in range(5)] == [0.005, 0.005, 0.005, 10.0, 10.0]
    assert rl.num_requeues("a") == 5
    rl.forget("a")
    assert rl.when("a") == 0.005
    always_slow: ItemFastSlowRateLimiter[str] = ItemFastSlowRateLimiter(0.005, 10.0, 0)
    assert always_slow.when("a") == 10.0
    with pytest.raises(ValueError):
        ItemFastSlowRateLimiter(0.1, 1.0, -1)


def test_bucket_sequence_on_a_fake_clock() -> None:
    clock = FakeClock()
    rl: BucketRateLimiter[Any] = BucketRateLimiter(10, 100, clock=clock)
    delays = [rl.when(i) for i in range(103)]
    assert delays[:100] == [0.0] * 100
    assert delays[100:] == pytest.approx([0.1, 0.2, 0.3])
    assert rl.num_requeues(0) == 0
    rl.forget(0)  # no-op
    clock.step(1.0)  # debt of 3 tokens, 10 refilled → 7 left
    assert [rl.when(i) for i in range(7)] == [0.0] * 7
    assert rl.when("x") == pytest.approx(0.1)


def test_bucket_refills_up_to_burst_only() -> None:
    clock = FakeClock()
    rl: BucketRateLimiter[str] = BucketRateLimiter(1, 2, clock=clock)
    assert [rl.when("a") for _ in range(3)] == pytest.approx([0.0, 0.0, 1.0])
    clock.step(100.0)
    assert [rl.when("a") for _ in range(3)] == pytest.approx([0.0, 0.0, 1.0])


def test_bucket_edge_cases() -> None:
    clock = FakeClock()
    assert BucketRateLimiter(10, 0, clock=clock).when("a") == math.inf  # burst 0 means never
    assert BucketRateLimiter(math.inf, 0, clock=clock).when("a") == 0.0
    zero_rate: BucketRateLimiter[str] = BucketRateLimiter(0, 2, clock=clock)
    assert [zero_rate.when("a") for _ in range(3)] == [0.0, 0.0, math.inf]
    assert zero_rate.when("a") == math.inf  # a refused reservation consumes nothing
    with pytest.raises(ValueError, match="qps"):
        BucketRateLimiter(-1, 10)
    with pytest.raises(ValueError, match="burst"):
        BucketRateLimiter(1, -1)
    with pytest.raises(ValueError, match="qps"):
        BucketRateLimiter(math.nan, 1)
    with pytest.raises(TypeError, match="burst"):
        BucketRateLimiter(1, 1.5)  # type: ignore[arg-type]


def test_max_of_calls_every_child() -> None:
    clock = FakeClock()
    bucket: BucketRateLimiter[str] = BucketRateLimiter(1, 1, clock=clock)
    exp: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.01, 100.0)
    fast: ItemFastSlowRateLimiter[str] = ItemFastSlowRateLimiter(0.0, 5.0, 1)
    rl = MaxOfRateLimiter(exp, bucket, fast)
    assert rl.when("a") == 0.01  # bucket had a token; exp 10 ms wins
    assert rl.when("a") == 5.0  # fast-slow switched to slow; bucket owes 1 s
    assert exp.num_requeues("a") == 2 and fast.num_requeues("a") == 2
    assert rl.num_requeues("a") == 2
    rl.forget("a")
    assert rl.num_requeues("a") == 0
    assert MaxOfRateLimiter().when("a") == 0.0
    assert MaxOfRateLimiter().num_requeues("a") == 0


def test_with_max_wait() -> None:
    rl = WithMaxWaitRateLimiter(ItemExponentialFailureRateLimiter(1.0, 1000.0), 3.0)
    assert [rl.when("a") for _ in range(4)] == [1.0, 2.0, 3.0, 3.0]
    assert rl.num_requeues("a") == 4
    rl.forget("a")
    assert rl.when("a") == 1.0


def test_default_controller_rate_limiter() -> None:
    clock = FakeClock()
    rl = default_controller_rate_limiter(clock=clock)
    assert [rl.when("a") for _ in range(5)] == [0.005, 0.01, 0.02, 0.04, 0.08]
    rl.forget("a")
    assert rl.when("a") == 0.005
    # The shared bucket: 6 tokens spent above; 94 more keys still get their own 5 ms; then the bucket rules.
    assert {rl.when(f"k{i}") for i in range(94)} == {0.005}
    assert [rl.when(f"x{i}") for i in range(3)] == pytest.approx([0.1, 0.2, 0.3])
