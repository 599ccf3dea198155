"""controller-runtime's priority queue for asyncio: :class:`keyqueue.aio.PriorityQueue` (import it from there).

Kept out of :mod:`keyqueue.priority` so that ``import keyqueue`` does not import :mod:`asyncio`. The rules are
those of :class:`keyqueue.PriorityQueue` (see :mod:`keyqueue.priority`); waiting, waking, cancellation and the
any-thread guarantees are those of :class:`keyqueue.aio.RateLimitingQueue`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from keyqueue.aio import RateLimitingQueue
from keyqueue.priority import PriorityAdds

__all__ = ["PriorityQueue"]

T = TypeVar("T", bound=Hashable)


class PriorityQueue(PriorityAdds[T], RateLimitingQueue[T]):  # type: ignore[misc]  # PriorityAdds' adds win
    """controller-runtime's priority queue for asyncio tasks.

    Everything :class:`keyqueue.aio.RateLimitingQueue` has (``await get()``, ``done``, ``async with lease()``,
    ``async for``, ``shut_down``, ``await shut_down_with_drain()``, ``forget``, ``num_requeues``), with the ordering
    and merging rules of :class:`keyqueue.PriorityQueue`, plus ``add(item, *, priority=0, after=0.0,
    rate_limited=False)`` (a plain method, callable from any thread) and ``await get_with_priority()``.
    ``rate_limiter`` defaults to controller-runtime's (per-key exponential 5 ms .. 1000 s, no token bucket).
    """

    async def get_with_priority(self, timeout: float | None = None) -> tuple[T, int]:
        """Like :meth:`get`: take the next key (waiting while none is ready), returning ``(key, priority)`` — the
        priority it was handed out at. Raises what :meth:`get` raises (``ShutDown``, ``TimeoutError``). Nothing
        awaits between taking the key and returning it, so a cancellation cannot lose a key taken here."""
        item = await self.get(timeout)
        return item, self._handed_out_priority(item)
