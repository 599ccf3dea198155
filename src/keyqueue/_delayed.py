"""The delayed and rate-limited adds both shells share: :class:`DelayedAdds` (``add_after``) and
:class:`RateLimitedAdds` (``add_rate_limited``, ``forget``, ``num_requeues``).

Each shell combines them with its own ``Queue`` by multiple inheritance (``DelayingQueue(Queue, DelayedAdds)``),
which compiled (native) classes do not support, so this module stays interpreted in every build, while
:mod:`keyqueue._shell`, which they build on, is compiled in the optional mypyc build (see :mod:`keyqueue._build`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, TypeVar, cast

from keyqueue._core import DELAYED, QUEUED, AddResult, Ordering, QueueCore, check_delay, check_hashable
from keyqueue._shell import ENTRY_CODES, ShellBase
from keyqueue.clock import Clock
from keyqueue.ratelimit import RateLimiter, check_limiter, default_controller_rate_limiter

__all__ = ["DelayedAdds", "RateLimitedAdds"]

T = TypeVar("T", bound=Hashable)


class DelayedAdds(ShellBase[T]):
    """``add_after``, for both shells' ``DelayingQueue``."""

    def add_after(self, item: T, delay: float) -> AddResult:
        """Add ``item`` after ``delay`` seconds on the queue's clock; ``delay <= 0`` adds now, ``math.inf`` never.
        Never blocks; callable from any thread.

        Of several delayed adds of one key the earliest time wins. A plain ``add`` does not cancel a delayed
        entry (the key is processed now and again when the entry fires). Dropped after shutdown; delayed entries
        are discarded at shutdown. Raises ``TypeError`` for an unhashable item or a non-number delay and
        ``ValueError`` for NaN; the queue is unchanged. Returns :class:`~keyqueue.AddResult` (``DELAYED`` or
        ``DELAY_KEPT`` for a delayed entry, else what ``add`` returns). No background thread or task exists:
        the entry is fired by a waiting ``get()``, or by the next ``get()``/``len()`` after it is due.
        """
        lock = self._lock
        if not lock.locked():
            lock.acquire()
        elif not self._acquire_unless_own():
            delay = check_delay(delay)
            check_hashable(item)
            return self._defer(self.add_after, item, delay)
        try:
            # A QueueCore: the priority queues have add_after of their own.
            outcome = cast(QueueCore[T], self._core).add_after(item, delay)  # validates delay, item before any change
            if (outcome is QUEUED or outcome is DELAYED) and self._getters:
                # DELAYED: the entry may now be the earliest; a waiter re-computes how long to sleep.
                self._wake_one()
            return outcome
        finally:
            lock.release()


class RateLimitedAdds(DelayedAdds[T]):
    """``add_rate_limited`` / ``forget`` / ``num_requeues`` and the ``rate_limiter`` constructor argument, for
    both shells' ``RateLimitingQueue``."""

    def __init__(
        self,
        rate_limiter: RateLimiter[T] | None = None,
        *,
        name: str = "",
        clock: Clock | None = None,
        metrics_provider: Any = None,
        stats: bool = False,
        ordering: Ordering[T] | None = None,
    ) -> None:
        if rate_limiter is not None:
            check_limiter("rate_limiter", rate_limiter)  # a TypeError now, not an AttributeError at the first failure
        super().__init__(name=name, clock=clock, metrics_provider=metrics_provider, stats=stats, ordering=ordering)
        self.rate_limiter: RateLimiter[T] = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(clock=self.clock)
        )

    def add_rate_limited(self, item: T) -> AddResult:
        """``add_after(item, rate_limiter.when(item))``: records a failure of ``item`` and schedules it.

        Never blocks (the limiter computes a delay, it does not sleep; it is called with the queue's lock held,
        as the priority queue always did, so it must not call back into the queue). As in client-go the limiter
        is consulted even after shutdown (the add itself is then dropped). All-or-nothing: an unhashable item
        (``TypeError``) or a key whose own ``__hash__``/``__eq__`` raises against what the queue holds raises
        before the limiter records anything, and the queue is unchanged. What cannot be undone, because a
        limiter has no undo: a limiter that records a failure and then raises, or a key whose methods raise only
        on a later call, after ``when`` returned (the queue is still unchanged, the failure stays counted).
        """
        check_hashable(item)
        lock = self._lock
        if not lock.locked():
            lock.acquire()
        elif not self._acquire_unless_own():
            return self._defer(self.add_rate_limited, item)
        try:
            outcome = cast(QueueCore[T], self._core).add_rate_limited(item, self.rate_limiter.when)  # as in add_after
            if (outcome is QUEUED or outcome is DELAYED) and self._getters:
                self._wake_one()  # as in add_after
            return outcome
        finally:
            lock.release()

    def forget(self, item: T) -> None:
        """Clear the limiter's memory of ``item`` (its backoff starts over). Does not touch the queue itself."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """How many failures of ``item`` the limiter remembers."""
        return self.rate_limiter.num_requeues(item)


# Frames of these entry points directly above a busy-lock check belong to the call being made (see ENTRY_CODES).
ENTRY_CODES.update(f.__code__ for f in (DelayedAdds.add_after, RateLimitedAdds.add_rate_limited))
