"""aiok8s ``aiok8s/workqueue/test_rate_limiting_queue.py``, translated onto :class:`keyqueue.aio.RateLimitingQueue`
with a ``FakeClock``, natively in asyncio."""

from __future__ import annotations

import asyncio

from keyqueue import FakeClock, ItemExponentialFailureRateLimiter
from keyqueue.aio import RateLimitingQueue

NS = 1e-9


def test_rate_limiting_queue() -> None:
    """aiok8s test_rate_limiting_queue.py TestRateLimitingQueue.test: with an exponential limiter (1 ms, 1 s) each
    ``add_rate_limited`` waits that key's delay at call time — 1 ms then 2 ms for "one" (``num_requeues`` 2), the
    same for "two" independently, and 1 ms for "one" again after ``forget``.

    aiok8s patches the waiting loop out and reads each entry's ``ready_at`` off its private channel; here each
    entry's ready time is observed through the queue (not ready 1 ns before, ready at it), one entry at a time,
    since the queue keeps only the earliest entry per key."""

    async def main() -> None:
        clock = FakeClock(1_700_000_000.0)
        q: RateLimitingQueue[str] = RateLimitingQueue(ItemExponentialFailureRateLimiter(0.001, 1.0), clock=clock)

        async def ready_after(key: str, delay: float) -> None:
            clock.step(delay - NS)
            assert len(q) == 0
            clock.step(NS)
            assert len(q) == 1
            assert await q.get(timeout=5) == key
            q.done(key)

        q.add_rate_limited("one")
        await ready_after("one", 0.001)
        q.add_rate_limited("one")
        await ready_after("one", 0.002)
        assert q.num_requeues("one") == 2
        q.add_rate_limited("two")
        await ready_after("two", 0.001)
        q.add_rate_limited("two")
        await ready_after("two", 0.002)
        q.forget("one")
        assert q.num_requeues("one") == 0
        q.add_rate_limited("one")
        await ready_after("one", 0.001)

    asyncio.run(main())
