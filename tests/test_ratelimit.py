"""Every rate limiter's exact sequence (client-go default_rate_limiters.go, golang.org/x/time/rate)."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from keyqueue import (
    AddResult,
    BucketRateLimiter,
    Clock,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    RateLimitingQueue,
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
        ItemExponentialFailureRateLimiter("5ms", 1.0)


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
        BucketRateLimiter(1, 1.5)


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


def test_exponential_never_negative_at_client_gos_2_pow_63_corner() -> None:
    # client-go: base 1 ns, max MaxInt64 ns → call #64 computes exactly 2**63 ns, passes the "> 2**63" guard and
    # converts to a negative Duration. Here every delay is >= 0 and the sequence never decreases.
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1e-9, (2**63 - 1) / 1e9)
    delays = [rl.when("k") for _ in range(70)]
    assert all(d >= 0 for d in delays)
    assert delays == sorted(delays)
    assert delays[63] == rl.max_delay  # 2**63 ns is past the cap: capped, not wrapped
    assert delays[62] == pytest.approx(2**62 / 1e9)


def test_bucket_partial_refill_is_exact_rate_arithmetic() -> None:
    # x/time/rate: tokens += elapsed * qps (capped at burst), then -1; a negative balance is a debt that delays.
    clock = FakeClock()
    rl: BucketRateLimiter[str] = BucketRateLimiter(10, 2, clock=clock)
    assert [rl.when("a"), rl.when("a")] == [0.0, 0.0]  # the bucket starts full
    assert rl.when("a") == pytest.approx(0.1)  # -1 token
    clock.step(0.05)  # +0.5 token → -0.5, then -1 → -1.5
    assert rl.when("a") == pytest.approx(0.15)
    clock.step(0.25)  # +2.5 → 1.0 (under the burst of 2), then -1 → 0
    assert rl.when("a") == 0.0
    assert rl.when("a") == pytest.approx(0.1)


def test_bucket_wait_beyond_go_inf_duration_is_never_but_still_takes_its_token() -> None:
    # x/time/rate caps such a wait at InfDuration (2**63-1 ns, ~9.2e9 s) and grants the reservation (ok whenever
    # burst >= 1), so the debt is recorded; we report the capped wait as math.inf ("never").
    clock = FakeClock()
    rl: BucketRateLimiter[str] = BucketRateLimiter(1e-10, 1, clock=clock)  # one token per 1e10 s
    assert rl.when("a") == 0.0
    assert rl.when("a") == math.inf  # 1e10 s > InfDuration: never; tokens -1
    assert rl.when("a") == math.inf  # tokens -2
    clock.step(2.5e10)  # +2.5 tokens → 0.5, then -1 → -0.5: 5e9 s (had nothing been taken: 0 s)
    assert rl.when("a") == pytest.approx(5e9)


def test_composite_limiters_reject_non_limiters() -> None:
    with pytest.raises(TypeError, match="limiter #2"):
        MaxOfRateLimiter(default_item_based_rate_limiter(), 0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rate limiter"):
        WithMaxWaitRateLimiter("fast", 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_delay"):
        WithMaxWaitRateLimiter(default_item_based_rate_limiter(), -1.0)


def test_fast_slow_validation() -> None:
    with pytest.raises(ValueError, match="fast_delay"):
        ItemFastSlowRateLimiter(-0.1, 1.0, 1)
    with pytest.raises(ValueError, match="slow_delay"):
        ItemFastSlowRateLimiter(0.1, math.nan, 1)
    with pytest.raises(TypeError, match="max_fast_attempts"):
        ItemFastSlowRateLimiter(0.1, 1.0, 1.5)


def test_limiters_are_safe_under_concurrent_when() -> None:
    # Every limiter guards its bookkeeping with a lock: N threads × M failures of one key count N*M exactly, and
    # the shared bucket hands out exactly `burst` free tokens.
    exp: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.001, 1.0)
    bucket: BucketRateLimiter[str] = BucketRateLimiter(1, 500, clock=FakeClock())
    zeros: list[int] = []
    lock = threading.Lock()
    gate = threading.Barrier(8)

    def hammer() -> None:
        gate.wait(5)
        free = 0
        for _ in range(250):
            exp.when("k")
            if bucket.when("k") == 0.0:
                free += 1
        with lock:
            zeros.append(free)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert exp.num_requeues("k") == 8 * 250
    assert sum(zeros) == 500


# -- the errors and values limiters give ---------------------------------------------------------------------
# mypyc converts an argument typed float/int as the call enters compiled code (True -> 1.0; 1.5 for an int raises
# its own TypeError) and a value typed float as it leaves; these tests run on both builds (scripts/test.sh).


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda v: ItemExponentialFailureRateLimiter(v, 1.0), "base_delay"),
        (lambda v: ItemExponentialFailureRateLimiter(0.0, v), "max_delay"),
        (lambda v: ItemFastSlowRateLimiter(v, 1.0, 1), "fast_delay"),
        (lambda v: ItemFastSlowRateLimiter(0.1, v, 1), "slow_delay"),
        (lambda v: ItemFastSlowRateLimiter(0.1, 1.0, v), "max_fast_attempts"),
        (lambda v: BucketRateLimiter(v, 1), "qps"),
        (lambda v: BucketRateLimiter(1, v), "burst"),
        (lambda v: WithMaxWaitRateLimiter(default_item_based_rate_limiter(), v), "max_delay"),
    ],
)
@pytest.mark.parametrize("value", [True, False, "1", None, 1j])
def test_every_number_argument_refuses_bools_and_non_numbers_with_keyqueues_error(
    make: Any, name: str, value: object
) -> None:
    with pytest.raises(TypeError, match=rf"^{name} must be (a number|an int)") as info:
        make(value)
    assert type(value).__name__ in str(info.value)


@pytest.mark.parametrize("value", [1.5, 2.0, math.nan])
def test_int_arguments_refuse_floats_naming_the_argument(value: float) -> None:
    with pytest.raises(TypeError, match=r"^burst must be an int, got float"):
        BucketRateLimiter(1, value)
    with pytest.raises(TypeError, match=r"^max_fast_attempts must be an int, got float"):
        ItemFastSlowRateLimiter(0.1, 1.0, value)


def test_number_arguments_accept_ints_and_keep_them_as_floats_or_ints() -> None:
    exp: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1, 8)
    assert (exp.base_delay, exp.max_delay) == (1.0, 8.0) and type(exp.base_delay) is float
    assert [exp.when("a") for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    bucket: BucketRateLimiter[str] = BucketRateLimiter(2, 3, clock=FakeClock())
    assert (bucket.qps, bucket.burst) == (2.0, 3) and type(bucket.qps) is float and type(bucket.burst) is int
    fast: ItemFastSlowRateLimiter[str] = ItemFastSlowRateLimiter(0, 1, 2)
    assert (fast.fast_delay, fast.slow_delay, fast.max_fast_attempts) == (0.0, 1.0, 2)
    assert WithMaxWaitRateLimiter(exp, 3).max_delay == 3.0


@pytest.mark.parametrize("clock", ["now", 0.0, object()])
def test_a_bucket_clock_that_is_not_a_clock_is_refused_naming_clock(clock: object) -> None:
    with pytest.raises(TypeError, match=r"^clock must be a keyqueue.Clock"):
        BucketRateLimiter(1, 1, clock=clock)
    with pytest.raises(TypeError, match=r"^clock must be a keyqueue.Clock"):
        default_controller_rate_limiter(clock=clock)


class _Child:
    """A rate limiter (duck-typed) that answers whatever it is given."""

    def __init__(self, delay: object, count: object = 0) -> None:
        self.delay, self.count, self.forgotten = delay, count, 0

    def when(self, item: object) -> Any:
        return self.delay

    def forget(self, item: object) -> Any:
        self.forgotten += 1
        return "ignored"  # a forget that returns something: ignored

    def num_requeues(self, item: object) -> Any:
        return self.count


def test_composites_take_int_answers_and_ignore_a_nan_one() -> None:
    assert MaxOfRateLimiter(_Child(2), _Child(1.5)).when("a") == 2.0
    assert MaxOfRateLimiter(_Child(math.nan), _Child(0.25)).when("a") == 0.25  # NaN is never the largest
    assert WithMaxWaitRateLimiter(_Child(7), 5).when("a") == 5.0
    assert WithMaxWaitRateLimiter(_Child(2), 5.0).when("a") == 2.0


@pytest.mark.parametrize(("answer", "exc"), [(True, TypeError), (10**400, ValueError)])
def test_the_queue_refuses_an_answer_that_is_no_delay(answer: object, exc: type[Exception]) -> None:
    for limiter in (MaxOfRateLimiter(_Child(answer)), WithMaxWaitRateLimiter(_Child(answer), math.inf), _Child(answer)):
        q: RateLimitingQueue[str] = RateLimitingQueue(limiter, clock=FakeClock())
        with pytest.raises(exc, match=r"^delay (must be a number of seconds, got bool|is too large)"):
            q.add_rate_limited("a")
        assert len(q) == 0 and q.snapshot().delayed == 0


@pytest.mark.parametrize("answer", ["1", None])
def test_composites_compare_answers_as_python_does(answer: object) -> None:
    with pytest.raises(TypeError, match="not supported between instances"):
        MaxOfRateLimiter(_Child(answer)).when("a")
    with pytest.raises(TypeError, match="not supported between instances"):
        WithMaxWaitRateLimiter(_Child(answer), 1.0).when("a")


def test_composites_pass_forget_on_and_check_num_requeues() -> None:
    a, b = _Child(0.0, 3), _Child(0.0, True)
    rl: MaxOfRateLimiter[str] = MaxOfRateLimiter(a, b)
    rl.forget("k")
    WithMaxWaitRateLimiter(a, 1.0).forget("k")
    assert (a.forgotten, b.forgotten) == (2, 1)
    assert rl.num_requeues("k") == 3
    assert WithMaxWaitRateLimiter(b, 1.0).num_requeues("k") == 1


def test_limiters_can_be_subclassed_in_python() -> None:
    class Halved(ItemExponentialFailureRateLimiter[str]):
        def when(self, item: str) -> float:
            self.calls = getattr(self, "calls", 0) + 1  # a subclass instance takes new attributes
            return super().when(item) / 2

    class Counting(BucketRateLimiter[str]):
        def __init__(self) -> None:
            super().__init__(1, 1, clock=FakeClock())
            self.asked: list[str] = []

        def when(self, item: str) -> float:
            self.asked.append(item)
            return super().when(item)

    halved, counting = Halved(0.5, 10.0), Counting()
    rl = MaxOfRateLimiter(halved, counting)
    assert [rl.when("a"), rl.when("a")] == [0.25, 1.0]
    assert halved.calls == 2 and counting.asked == ["a", "a"]
    assert isinstance(halved, ItemExponentialFailureRateLimiter)

    class Capped(WithMaxWaitRateLimiter[str]):
        pass

    class Maxed(MaxOfRateLimiter[str]):
        pass

    class FastSlow(ItemFastSlowRateLimiter[str]):
        pass

    assert Capped(Maxed(FastSlow(0.1, 5.0, 1)), 2.0).when("a") == 0.1


def test_a_bucket_reads_a_python_clock_subclass() -> None:
    class Manual(Clock):
        def __init__(self) -> None:
            super().__init__()
            self.ns = 0

        def now_ns(self) -> int:
            return self.ns

    clock = Manual()
    rl: BucketRateLimiter[str] = BucketRateLimiter(10, 1, clock=clock)
    assert [rl.when("a"), rl.when("a")] == [0.0, pytest.approx(0.1)]
    clock.ns += 200_000_000  # +2 tokens, capped at the burst of 1
    assert rl.when("a") == 0.0


def test_the_rate_limiter_protocol_can_be_subclassed_in_python() -> None:
    class Every(RateLimiter[str]):
        def __init__(self) -> None:
            self.failures = 0

        def when(self, item: str) -> float:
            self.failures += 1
            return 0.5

        def forget(self, item: str) -> None:
            self.failures = 0

        def num_requeues(self, item: str) -> int:
            return self.failures

    every = Every()
    rl = MaxOfRateLimiter(every, ItemExponentialFailureRateLimiter(0.001, 1.0))
    assert [rl.when("a"), rl.num_requeues("a")] == [0.5, 1]
    assert WithMaxWaitRateLimiter(every, 0.25).when("a") == 0.25
    q: RateLimitingQueue[str] = RateLimitingQueue(every, clock=FakeClock())
    assert q.add_rate_limited("a") == AddResult.DELAYED and q.num_requeues("a") == 3
    assert RateLimiter.__module__ == "keyqueue.ratelimit"
    assert RateLimiter in BucketRateLimiter.__mro__  # the limiters still inherit it
