"""The threading shell: :class:`Queue`, :class:`DelayingQueue`, :class:`RateLimitingQueue` for worker threads.

Each queue is one :class:`~keyqueue._core.QueueCore` behind one :class:`threading.Lock`, with two
:class:`threading.Condition` objects on that lock (getters wait on one, drain callers on the other). Every method
may be called from any thread. No background thread is started: a ``get()`` that waits while a delayed key is
pending sleeps until that key is due (on a :class:`~keyqueue.FakeClock`, until the clock is stepped) and fires
it itself.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from keyqueue._delayed import DelayedAdds, RateLimitedAdds
from keyqueue._threaded import Queue, os_wait

__all__ = ["DelayingQueue", "Queue", "RateLimitingQueue", "os_wait"]

T = TypeVar("T", bound=Hashable)


class DelayingQueue(Queue[T], DelayedAdds[T]):
    """A :class:`Queue` with ``add_after(item, delay)`` (from :class:`~keyqueue._delayed.DelayedAdds`)."""


class RateLimitingQueue(DelayingQueue[T], RateLimitedAdds[T]):
    """A :class:`DelayingQueue` whose failed keys come back after a delay chosen by a :class:`RateLimiter`.

    ``RateLimitingQueue(rate_limiter=None, *, name="", clock=None, metrics_provider=None, stats=False)``. The
    worker pattern: on failure ``add_rate_limited(key)``, on success ``forget(key)``, always ``done(key)``. The
    default limiter is :func:`~keyqueue.default_controller_rate_limiter` on the queue's clock.
    ``add_rate_limited``, ``forget`` and ``num_requeues`` come from :class:`~keyqueue._delayed.RateLimitedAdds`
    (shared with the asyncio shell).
    """
