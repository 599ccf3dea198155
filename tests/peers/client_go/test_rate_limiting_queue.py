"""client-go ``util/workqueue/rate_limiting_queue_test.go``, translated, on both in-process shells."""

from __future__ import annotations

from typing import Any

from keyqueue import FakeClock, ItemExponentialFailureRateLimiter

NS = 1e-9


def _ready_after(q: Any, clock: FakeClock, key: str, delay: float) -> None:
    """``key`` is not ready a nanosecond before ``delay`` has passed and is ready at ``delay`` exactly; then hand it
    out and finish it (so the next rate-limited add gets an entry of its own)."""
    clock.step(delay - NS)
    assert len(q) == 0
    clock.step(NS)
    assert len(q) == 1
    assert q.get(timeout=5) == key
    q.done(key)


def test_rate_limiting_queue(make_queue: Any) -> None:
    """client-go rate_limiting_queue_test.go TestRateLimitingQueue: with an exponential limiter (1 ms, 1 s) each
    ``add_rate_limited`` waits the limiter's delay for that key at call time — 1 ms, then 2 ms for "one"
    (``num_requeues`` 2), 1 ms and 2 ms for "two" independently, and 1 ms again for "one" after ``forget``.

    Go reads each waiting entry's ``readyAt`` off the delaying queue's private channel; here each entry's ready
    time is observed through the queue (not ready 1 ns before, ready at it), one entry at a time, because keyqueue
    (as client-go's waiting loop) keeps only the earliest entry per key."""
    clock = FakeClock(1_700_000_000.0)
    q = make_queue("ratelimiting", ItemExponentialFailureRateLimiter(0.001, 1.0), clock=clock)
    q.add_rate_limited("one")
    _ready_after(q, clock, "one", 0.001)
    q.add_rate_limited("one")
    _ready_after(q, clock, "one", 0.002)
    assert q.num_requeues("one") == 2

    q.add_rate_limited("two")
    _ready_after(q, clock, "two", 0.001)
    q.add_rate_limited("two")
    _ready_after(q, clock, "two", 0.002)

    q.forget("one")
    assert q.num_requeues("one") == 0
    q.add_rate_limited("one")
    _ready_after(q, clock, "one", 0.001)
