"""keyqueue for asyncio: :class:`Queue`, :class:`DelayingQueue`, :class:`RateLimitingQueue`, :class:`PriorityQueue`,
:class:`Controller` and :class:`Manager`.

The same state machine as :mod:`keyqueue.threaded` (so the same guarantees: one holder per key, dedup, one
redelivery per burst of adds during processing, nothing lost), with asyncio waiting::

    q = keyqueue.aio.RateLimitingQueue()
    async def worker():
        async for key in q:          # done(key) runs when the loop advances or is left, however it is left
            await reconcile(key)

**Which calls may come from which thread.** ``add``, ``add_after``, ``add_rate_limited``, ``done``, ``forget``,
``num_requeues``, ``len()``, ``stats``, ``shutting_down`` and ``shut_down`` are plain methods that never block
(beyond the queue's short lock, held only for the state machine's call) and may be called from **any thread**, with or
without a running event loop: an informer or callback thread feeding async workers is the normal case. A waiting
``get()`` is woken on its own event loop (directly when the caller runs in that loop, through
:meth:`asyncio.AbstractEventLoop.call_soon_threadsafe` otherwise). The coroutines ``get()`` and
``shut_down_with_drain()`` must be awaited in an event loop; coroutines of one queue may even wait in several
loops at once (each waiter is woken in its own loop).

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

from typing import TYPE_CHECKING

from keyqueue._aio import DelayingQueue, KeyIterator, Lease, PriorityQueue, Queue, RateLimitingQueue
from keyqueue.controller.aio import Controller

if TYPE_CHECKING:
    from keyqueue.manager.aio import Manager as Manager

__all__ = [
    "Controller",
    "DelayingQueue",
    "KeyIterator",
    "Lease",
    "Manager",
    "PriorityQueue",
    "Queue",
    "RateLimitingQueue",
]


def __getattr__(name: str) -> object:
    if name == "Manager":  # imported on first use: programs without a manager do not load informers and aiohttp
        from keyqueue.manager.aio import Manager

        return Manager
    raise AttributeError(f"module 'keyqueue.aio' has no attribute {name!r}")
