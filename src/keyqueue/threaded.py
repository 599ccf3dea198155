"""The threading shell: :class:`Queue`, :class:`DelayingQueue`, :class:`RateLimitingQueue` for worker threads.

Each queue is one :class:`~keyqueue._core.QueueCore` behind one :class:`threading.Lock`, with two
:class:`threading.Condition` objects on that lock (getters wait on one, drain callers on the other). Every method
may be called from any thread. No background thread is started: a ``get()`` that waits while a delayed key is
pending sleeps until that key is due (on a :class:`~keyqueue.FakeClock`, until the clock is stepped) and fires
it itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from keyqueue._core import (
    DEDUP,
    DELAYED,
    EMPTY,
    QUEUED,
    AddResult,
    CountingCore,
    QueueCore,
    QueueStats,
    RateLimitedAdds,
    check_delay,
    check_hashable,
    check_timeout,
)
from keyqueue.clock import Clock, RealClock
from keyqueue.errors import ShutDown
from keyqueue.metrics import recorder_for
from keyqueue.ratelimit import RateLimiter

__all__ = ["DelayingQueue", "Queue", "RateLimitingQueue"]

T = TypeVar("T", bound=Hashable)


class Queue(Generic[T]):
    """A work queue for threads with client-go's guarantees.

    * ``add(key)`` never blocks. A key already waiting is not added twice; a key being processed is marked and
      handed out once more after its ``done``; after shutdown adds are dropped.
    * ``get()`` blocks until a key is ready and hands keys out in FIFO order, each to one caller at a time.
    * ``done(key)`` must follow every ``get()``; use :meth:`lease` or iterate the queue to make it automatic.

    Keyword arguments: ``name`` (metrics are emitted only for a named queue), ``clock`` (default
    :class:`~keyqueue.RealClock`), ``metrics_provider`` (default: the process-wide provider), ``stats=True`` to
    count every decision (see :meth:`stats`; it turns off the lock-free dedup path, so adds get slower).
    """

    def __init__(
        self,
        *,
        name: str = "",
        clock: Clock | None = None,
        metrics_provider: Any = None,
        stats: bool = False,
    ) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}: {name!r}")
        self.name = name
        self.clock: Clock = clock if clock is not None else RealClock()
        self._lock = threading.Lock()
        self._readable = threading.Condition(self._lock)  # getters wait here
        self._idle = threading.Condition(self._lock)  # shut_down_with_drain() callers wait here
        self._getters = 0  # threads waiting on _readable (so notify() is skipped when nobody waits)
        self._drainers = 0
        self._core: QueueCore[T] = self._new_core(name, metrics_provider, stats)
        self._fast_dirty = self._core.fast_dirty
        self.clock.subscribe(self._on_clock_jump)

    def _new_core(self, name: str, metrics_provider: Any, stats: bool) -> QueueCore[T]:
        # Hook: build the state machine and its metrics recorder (keyqueue.priority swaps in a PriorityCore).
        recorder = recorder_for(name, metrics_provider, self.clock, self._lock)
        return (CountingCore if stats else QueueCore)(self.clock, recorder)

    # -- adding ------------------------------------------------------------------------------------------

    def add(self, item: T) -> AddResult:
        """Mark ``item`` as needing work. Never blocks (beyond the queue's short lock).

        Returns what the queue did (:class:`~keyqueue.AddResult`): ``QUEUED``, ``DEDUP`` (already dirty),
        ``MARKED`` (being processed: it will be handed out once more after ``done``) or ``DROPPED`` (shut down).
        Raises ``TypeError`` (naming the type) for an unhashable item; the queue is unchanged.
        """
        # Lock-free dedup. If the probe sees item in dirty, this add is linearised at the probe: at that instant
        # the locked algorithm would also have returned without a change (a dirty key is a no-op whether it is
        # waiting or being processed, and after shutdown every add is a no-op). Being dirty at that instant
        # guarantees a hand-out that starts after it (the key is in the fifo, or done() will re-queue it), which
        # is all an add promises. The probe is one read of a built-in set; such reads are atomic with respect to
        # the set's writers in CPython with or without the GIL, so it sees a state the set really had. If the
        # probe misses (or fast_dirty is the empty set of a counting core), the add runs under the lock.
        try:
            if item in self._fast_dirty:
                return DEDUP
        except TypeError:
            check_hashable(item)
            raise
        lock = self._lock
        lock.acquire()
        try:
            outcome = self._core.add(item)
            if outcome == QUEUED and self._getters:
                self._readable.notify()
            return outcome
        finally:
            lock.release()

    # -- handing out -------------------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> T:
        """Take the next key, blocking while none is ready. The caller owns it until :meth:`done`.

        After shutdown, keys still queued are handed out; once none is left, raises :class:`~keyqueue.ShutDown`
        (also in every ``get()`` that was blocked). With ``timeout`` (seconds, real time), raises
        ``TimeoutError`` if no key became ready in time.
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        lock = self._lock
        lock.acquire()
        try:
            core = self._core
            item = core.pop()
            if item is EMPTY:
                return self._wait_and_pop(timeout)
            if self._getters and core.has_ready():
                self._readable.notify()  # several delayed keys fell due at once: pass the wake-up on
            return item  # type: ignore[return-value]  # not EMPTY, so a T
        finally:
            lock.release()

    def _wait_and_pop(self, timeout: float | None) -> T:
        # Called with the lock held and nothing ready.
        core = self._core
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if core.shutting_down:
                raise ShutDown
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise TimeoutError(f"get() timed out after {timeout} s with no key ready")
            due = core.next_ready_ns()
            if due is not None:
                until_due = self.clock.real_wait(due)
                if until_due is not None and (wait is None or until_due < wait):
                    wait = until_due
            self._getters += 1
            try:
                self._readable.wait(wait)
            finally:
                self._getters -= 1
            item = core.pop()
            if item is not EMPTY:
                if self._getters and core.has_ready():
                    self._readable.notify()
                return item  # type: ignore[return-value]  # not EMPTY, so a T

    def done(self, item: T) -> bool:
        """Finish processing ``item``. If it was added again meanwhile, it is queued again (once) and ``True``
        is returned (a redelivery); otherwise ``False``.

        ``done`` of a key that is not being processed changes nothing. Works after shutdown too (a re-added key
        is still queued and handed out, so a drain can finish it).
        """
        lock = self._lock
        lock.acquire()
        try:
            core = self._core
            if core.done(item):
                if self._getters:
                    self._readable.notify()
                return True
            if self._drainers and core.idle():
                self._idle.notify_all()
            return False
        finally:
            lock.release()

    @contextmanager
    def lease(self, timeout: float | None = None) -> Iterator[T]:
        """``with q.lease() as key:`` — :meth:`get` a key and always call :meth:`done` when the block exits,
        normally or by an exception. Raises what :meth:`get` raises (``ShutDown``, ``TimeoutError``)."""
        item = self.get(timeout)
        try:
            yield item
        finally:
            self.done(item)

    def __iter__(self) -> Iterator[T]:
        """``for key in q:`` — keys until :class:`~keyqueue.ShutDown`, each ``done`` when the loop body ends.

        ``done(key)`` runs when the loop asks for the next key, or when the loop is left by ``break``,
        ``return`` or an exception (the generator is closed as the loop's frame lets go of it).
        """
        while True:
            try:
                item = self.get()
            except ShutDown:
                return
            try:
                yield item
            finally:
                self.done(item)

    # -- inspection --------------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys waiting to be handed out. Not counted: keys being processed, keys re-added while being
        processed (until their ``done``), delayed keys not yet due. Informational: it may change at once."""
        with self._lock:
            return self._core.ready_len()

    def stats(self) -> QueueStats:
        """Counters of the queue's decisions. Raises ``RuntimeError`` unless built with ``stats=True``."""
        with self._lock:
            snapshot = self._core.stats()
        if snapshot is None:
            raise RuntimeError("this queue does not count its decisions; build it with stats=True")
        return snapshot

    @property
    def shutting_down(self) -> bool:
        """True once :meth:`shut_down` or :meth:`shut_down_with_drain` has been called."""
        return self._core.shutting_down

    # -- shutdown ----------------------------------------------------------------------------------------

    def shut_down(self) -> None:
        """Stop accepting adds and return at once (it never waits for keys in flight). Idempotent.

        Delayed keys not yet due are dropped. Keys already queued are still handed out by ``get()``, which then
        raises :class:`~keyqueue.ShutDown`. A concurrent :meth:`shut_down_with_drain` returns ``False`` at once.
        """
        with self._lock:
            self._core.shut_down(drain=False)
            self._readable.notify_all()
            self._idle.notify_all()

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        """Shut down (as :meth:`shut_down`), then block until the FIFO is empty **and** no key is being
        processed: queued keys, and keys re-added during processing, are still handed out and finished.

        Returns ``True`` when drained; ``False`` if ``timeout`` (seconds) passed first or :meth:`shut_down` was
        called meanwhile. Every caller waiting here returns when the queue drains. It blocks forever if workers
        stop calling ``done`` and no timeout is given.
        """
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            core = self._core
            core.shut_down(drain=True)
            self._readable.notify_all()
            while True:
                if core.idle():
                    return True
                if not core.draining:
                    return False
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return False
                self._drainers += 1
                try:
                    self._idle.wait(wait)
                finally:
                    self._drainers -= 1

    def _on_clock_jump(self) -> None:
        # The clock moved (FakeClock.step): waiting getters re-check what is due.
        with self._lock:
            if self._getters:
                self._readable.notify_all()

    def __repr__(self) -> str:
        core = self._core
        return (
            f"<{type(self).__name__} name={self.name!r} queued={len(core.fifo)} "
            f"processing={len(core.processing)} delayed={core.delayed_count} "
            f"shutting_down={core.shutting_down}>"
        )


class DelayingQueue(Queue[T]):
    """A :class:`Queue` with :meth:`add_after`."""

    def add_after(self, item: T, delay: float) -> AddResult:
        """Add ``item`` after ``delay`` seconds on the queue's clock; ``delay <= 0`` adds now, ``math.inf`` never.

        Of several delayed adds of one key the earliest time wins. A plain :meth:`add` does not cancel a delayed
        entry (the key is processed now and again when the entry fires). Dropped after shutdown; delayed entries
        are discarded at shutdown. Raises ``TypeError`` for an unhashable item or a non-number delay and
        ``ValueError`` for NaN; the queue is unchanged. Returns :class:`~keyqueue.AddResult` (``DELAYED`` or
        ``DELAY_KEPT`` for a delayed entry, else what :meth:`add` returns).
        """
        delay = check_delay(delay)
        lock = self._lock
        lock.acquire()
        try:
            outcome = self._core.add_after(item, delay)
            if outcome in (QUEUED, DELAYED) and self._getters:
                # DELAYED: the entry may now be the earliest; a waiter re-computes how long to sleep.
                self._readable.notify()
            return outcome
        finally:
            lock.release()


class RateLimitingQueue(DelayingQueue[T], RateLimitedAdds[T]):
    """A :class:`DelayingQueue` whose failed keys come back after a delay chosen by a :class:`RateLimiter`.

    The worker pattern: on failure ``add_rate_limited(key)``, on success ``forget(key)``, always ``done(key)``.
    The default limiter is :func:`~keyqueue.default_controller_rate_limiter` on the queue's clock.
    ``add_rate_limited``, ``forget`` and ``num_requeues`` come from :class:`~keyqueue._core.RateLimitedAdds`
    (shared with the asyncio shell).
    """

    def __init__(
        self,
        rate_limiter: RateLimiter[T] | None = None,
        *,
        name: str = "",
        clock: Clock | None = None,
        metrics_provider: Any = None,
        stats: bool = False,
    ) -> None:
        super().__init__(name=name, clock=clock, metrics_provider=metrics_provider, stats=stats)
        self._init_rate_limiter(rate_limiter)
