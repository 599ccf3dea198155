"""The asyncio shell: :class:`Queue`, :class:`DelayingQueue`, :class:`RateLimitingQueue` for asyncio workers.

The same state machine as :mod:`keyqueue.threaded` (one :class:`~keyqueue._core.QueueCore`, so the same
guarantees: one holder per key, dedup, one redelivery per burst of adds during processing, nothing lost), with
asyncio waiting::

    q = keyqueue.aio.RateLimitingQueue()
    async def worker():
        async for key in q:          # done(key) runs when the loop advances or is left, however it is left
            await reconcile(key)

**Which calls may come from which thread.** ``add``, ``add_after``, ``add_rate_limited``, ``done``, ``forget``,
``num_requeues``, ``len()``, ``stats``, ``shutting_down`` and ``shut_down`` are plain methods that never block
(beyond a short :class:`threading.Lock` held only for the core call) and may be called from **any thread**, with or
without a running event loop: an informer or callback thread feeding async workers is the normal case. A waiting
``get()`` is woken on its own event loop (directly when the caller runs in that loop, through
:meth:`asyncio.AbstractEventLoop.call_soon_threadsafe` otherwise). The coroutines ``get()`` and
``shut_down_with_drain()`` must be awaited in an event loop; coroutines of one queue may even wait in several
loops at once (each waiter is woken in its own loop).

**Loop-owned queues.** :class:`LoopQueue`, :class:`LoopDelayingQueue` and :class:`LoopRateLimitingQueue` are the
same queues bound to the event loop they are built in: calls on that loop's thread take no lock (only that thread
touches the core); other threads may only add (handed to the loop: ``AddResult.DEFERRED``) and shut down, and
every other call raises ``RuntimeError`` there. See :class:`LoopQueue` for when to choose them.

No background task or thread is started. A ``get()`` that waits while a delayed key is pending sleeps until that
key is due (a ``loop.call_later`` timer; on a :class:`~keyqueue.FakeClock`, until the clock is stepped, from any
thread) and fires it itself.

**Cancellation.** A ``get()`` cancelled while it waits takes nothing out of the queue; if it had already been
chosen to take a key, the wake-up is passed on to another waiter, so no key sits in the queue while a getter
sleeps. ``get()`` removes a key from the queue only after its last ``await``, with none between taking the key
and returning it, so a cancellation can never land between the two: once ``get()`` has taken a key, the awaiting
coroutine receives it. From then on the caller owns the key like any other: if its task is cancelled later, the
key stays "processing" (its re-adds wait for it) until ``done(key)`` is called. ``async with q.lease()`` and
``async for key in q`` call ``done`` on every exit, including cancellation. ``get(timeout=...)``,
:func:`asyncio.timeout` and :func:`asyncio.wait_for` around ``get()`` are all safe for the same reason (a cancelled
``get()`` cannot complete with a key). The one way to lose track of a key is to run ``get()`` in a task whose
result is never read (e.g. a task cancelled after it finished, or abandoned by :func:`asyncio.wait`): that
task's key stays "processing" until someone calls ``done`` on it.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, TypeVar

from keyqueue._aio import KeyIterator as KeyIterator  # what `async for` uses; importable from here, as before
from keyqueue._aio import Lease as Lease  # what q.lease() returns
from keyqueue._aio import LoopQueue, Queue
from keyqueue._delayed import DelayedAdds, RateLimitedAdds

__all__ = ["DelayingQueue", "LoopDelayingQueue", "LoopQueue", "LoopRateLimitingQueue", "Queue", "RateLimitingQueue"]

T = TypeVar("T", bound=Hashable)


class DelayingQueue(Queue[T], DelayedAdds[T]):
    """A :class:`Queue` with ``add_after(item, delay)`` (a plain method, callable from any thread; from
    :class:`~keyqueue._delayed.DelayedAdds`, shared with the threading shell)."""


class RateLimitingQueue(DelayingQueue[T], RateLimitedAdds[T]):
    """A :class:`DelayingQueue` whose failed keys come back after a delay chosen by a :class:`RateLimiter`.

    ``RateLimitingQueue(rate_limiter=None, *, name="", clock=None, metrics_provider=None, stats=False)``. The
    worker pattern: on failure ``add_rate_limited(key)``, on success ``forget(key)``; ``done(key)`` always
    (``async for``/``lease`` do it). The default limiter is :func:`~keyqueue.default_controller_rate_limiter` on
    the queue's clock. ``add_rate_limited``, ``forget``, ``num_requeues`` are plain methods (any thread), shared
    with the threading shell (:class:`~keyqueue._delayed.RateLimitedAdds`).
    """


class LoopDelayingQueue(LoopQueue[T], DelayingQueue[T]):
    """A :class:`LoopQueue` with ``add_after(item, delay)`` (from another thread: applied later, on the loop)."""


class LoopRateLimitingQueue(LoopDelayingQueue[T], RateLimitingQueue[T]):
    """A :class:`LoopDelayingQueue` with :class:`RateLimitingQueue`'s ``add_rate_limited``, ``forget`` and
    ``num_requeues`` (``add_rate_limited`` from another thread is applied later, on the loop, where the limiter
    is consulted). ``LoopRateLimitingQueue(rate_limiter=None, *, name="", clock=None, metrics_provider=None,
    stats=False, ordering=None)``."""


# The asyncio priority queue and controller loop live in their own modules (so `import keyqueue` stays
# asyncio-free) and build on the classes above. They are re-exported lazily (PEP 562): an eager import here would
# be circular when one of those modules is imported first.
if TYPE_CHECKING:
    from keyqueue._aio_controller import Controller as Controller
    from keyqueue._aio_priority import PriorityQueue as PriorityQueue


def __getattr__(name: str) -> Any:
    if name == "PriorityQueue":
        from keyqueue._aio_priority import PriorityQueue

        return PriorityQueue
    if name == "Controller":
        from keyqueue._aio_controller import Controller

        return Controller
    raise AttributeError(f"module 'keyqueue.aio' has no attribute {name!r}")
