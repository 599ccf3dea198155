"""The threading shell: :class:`Queue`, :class:`DelayingQueue`, :class:`RateLimitingQueue` and
:class:`PriorityQueue` for worker threads.

Each queue is one state machine behind one :class:`threading.RLock`, with two :class:`threading.Condition` objects
on it: getters wait on one, drain callers on the other. Every method may be called from any thread. No background
thread is started: a ``get()`` that waits while a delayed key is pending sleeps until that key is due (on a
:class:`~keyqueue.FakeClock`, until the clock is stepped) and fires it itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any, Final, Generic, TypeVar, cast

from keyqueue._core import EMPTY, check_timeout
from keyqueue._core.machine import _Empty
from keyqueue._shell import DelayedAdds, PriorityAdds, RateLimitedAdds, Shell
from keyqueue.errors import ShutDown

__all__ = ["DelayingQueue", "KeyIterator", "PriorityQueue", "Queue", "RateLimitingQueue", "os_wait"]

T = TypeVar("T", bound=Hashable)

_TIMEOUT_MAX: Final = threading.TIMEOUT_MAX


def os_wait(seconds: float | None) -> float | None:
    """A wait the OS accepts: more than :data:`threading.TIMEOUT_MAX` (~292 years, or ``math.inf``) becomes that
    maximum (``Condition.wait`` raises ``OverflowError`` above it). Callers loop on their own deadline."""
    if seconds is None or seconds <= _TIMEOUT_MAX:
        return seconds
    return _TIMEOUT_MAX


class Queue(Shell[T]):
    """A work queue for threads with client-go's guarantees.

    * ``add(key)`` never blocks. A key already waiting is not added twice; a key being processed is marked and
      handed out once more after its ``done``; after shutdown adds are dropped.
    * ``get()`` blocks until a key is ready and hands keys out in FIFO order, each to one caller at a time.
    * ``done(key)`` must follow every ``get()``; :meth:`lease` and iterating the queue make it automatic.

    Keyword arguments: ``name`` (metrics are emitted only for a named queue), ``clock`` (default
    :class:`~keyqueue.RealClock`), ``metrics_provider`` (default: the process-wide provider), ``stats=True`` to
    count every decision (see :meth:`stats`; every add then takes the lock), ``ordering``: the order in which
    waiting keys are handed out, an empty :class:`~keyqueue.Ordering` owned by this queue (default FIFO, a
    :class:`collections.deque`). Every guarantee holds for any ordering; only "FIFO" becomes "the ordering's order".
    """

    _hand_off_after_wake = True  # a woken getter thread needs the GIL (see keyqueue._gil)

    def _init_waiting(self) -> None:
        lock = cast(threading.Lock, self._lock)  # an RLock, which Condition accepts as well
        self._readable = threading.Condition(lock)  # getters wait here
        self._idle = threading.Condition(lock)  # shut_down_with_drain() callers wait here
        self._getters = 0  # threads waiting on _readable (so notify() is skipped when nobody waits)
        self._drainers = 0

    def _wake_one(self) -> None:
        self._readable.notify()

    def _wake_drainers(self) -> None:
        self._idle.notify_all()

    def _on_clock_jump(self) -> None:
        self._acquire("the clock's step()")
        try:
            if self._getters:
                self._readable.notify_all()
        finally:
            self._lock.release()

    # -- handing out -------------------------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> T:
        """Take the next key, blocking while none is ready. The caller owns it until :meth:`done`.

        After shutdown, keys still queued are handed out; once none is left, raises :class:`~keyqueue.ShutDown`
        (also in every ``get()`` that was blocked). With ``timeout`` (seconds, real time; ``None``, ``math.inf``:
        forever), raises ``TimeoutError`` if no key became ready in time. A negative or NaN ``timeout`` raises
        ``ValueError``, a non-number ``TypeError``, before anything is taken.
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        gil = self._gil
        if gil.contended:
            gil.tick()
        lock = self._lock
        if lock._is_owned():
            raise self._reentered("get()")
        lock.acquire()
        try:
            item = self._core.pop() if not self._getters else self._pop_passing_on()
            return item if item is not EMPTY else self._wait_and_pop(timeout)  # type: ignore[return-value]
        finally:
            lock.release()

    def _pop_passing_on(self) -> T | _Empty:
        """``core.pop()`` while other getters wait (lock held): if more keys are ready (several fell due at once, or a
        key's own ``__eq__`` raised and it went behind the others), one of them is woken for the next."""
        core = self._core
        try:
            item = core.pop()
        except BaseException:
            if core.has_ready():
                self._readable.notify()
            raise
        if core.has_ready():
            self._readable.notify()
        return item

    def _wait_and_pop(self, timeout: float | None) -> T:
        # Lock held, nothing ready: wait for a key (or the timeout, or shutdown).
        core = self._core
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if core.shutting_down:
                raise ShutDown
            wait = self._wait_budget(None if deadline is None else deadline - time.monotonic(), timeout,
                                     self._getters > 0)
            self._getters += 1
            self._gil.contended = True  # a getter waits: another thread is expected to add
            try:
                self._readable.wait(os_wait(wait))
            finally:
                self._getters -= 1
            item = self._pop_passing_on() if self._getters else core.pop()
            if item is not EMPTY:
                return item  # type: ignore[return-value]  # not EMPTY, so a T

    @contextmanager
    def lease(self, timeout: float | None = None) -> Iterator[T]:
        """``with q.lease() as key:`` — :meth:`get` a key and call :meth:`done` when the block exits, however it
        exits. Raises what :meth:`get` raises."""
        item = self.get(timeout)
        try:
            yield item
        finally:
            self.done(item)

    def __iter__(self) -> KeyIterator[T]:
        """``for key in q:`` — keys until :class:`~keyqueue.ShutDown`, each ``done`` when the loop asks for the next
        one or is left (``break``, ``return``, an exception)."""
        return KeyIterator(self)

    # -- shutdown ------------------------------------------------------------------------------------------------

    def shut_down(self) -> None:
        """Stop accepting adds and return at once (it never waits for keys in flight). Idempotent.

        Delayed keys not yet due are dropped. Keys already queued are still handed out by ``get()``, which then
        raises :class:`~keyqueue.ShutDown`. A concurrent :meth:`shut_down_with_drain` returns ``False`` at once.
        """
        self._acquire("shut_down()")
        try:
            self._core.shut_down(drain=False)
            self._readable.notify_all()
            self._idle.notify_all()
        finally:
            self._lock.release()

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        """Shut down (as :meth:`shut_down`), then block until nothing is queued **and** nothing is being processed:
        queued keys, and keys re-added while being processed, are still handed out and finished.

        Returns ``True`` when drained; ``False`` if ``timeout`` (seconds; ``None`` or ``math.inf``: forever) passed
        first or :meth:`shut_down` was called meanwhile. It blocks forever if workers stop calling ``done`` and no
        timeout is given.
        """
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._acquire("shut_down_with_drain()")
        try:
            self._core.shut_down(drain=True)
            self._readable.notify_all()
            while True:
                wait = None if deadline is None else deadline - time.monotonic()
                verdict = self._drain_verdict(wait)
                if verdict is not None:
                    return verdict
                self._drainers += 1
                try:
                    self._idle.wait(os_wait(wait))
                finally:
                    self._drainers -= 1
        finally:
            self._lock.release()


class DelayingQueue(Queue[T], DelayedAdds[T]):
    """A :class:`Queue` with ``add_after(item, delay)``."""


class RateLimitingQueue(DelayingQueue[T], RateLimitedAdds[T]):
    """A :class:`DelayingQueue` whose failed keys come back after a delay chosen by a rate limiter.

    ``RateLimitingQueue(rate_limiter=None, *, name="", clock=None, metrics_provider=None, stats=False,
    ordering=None)``. The worker pattern: on failure ``add_rate_limited(key)``, on success ``forget(key)``, always
    ``done(key)``. The default limiter is :func:`~keyqueue.default_controller_rate_limiter` on the queue's clock.
    """


class PriorityQueue(PriorityAdds[T], RateLimitingQueue[T]):
    """controller-runtime's priority queue for threads.

    Everything :class:`RateLimitingQueue` has, with ``add(item, *, priority=0, after=0.0, rate_limited=False)``
    and :meth:`get_with_priority`. Keys are handed out highest priority first, FIFO within a priority; re-adding a
    queued key keeps the highest priority and the earliest ready time; ``len()`` counts ready keys, including those
    re-added while being processed. Where it differs from controller-runtime, on purpose: adds apply at once (no
    background flusher), ``shut_down()`` is idempotent, and after shutdown ``get()`` still hands out the ready keys.
    """

    def get_with_priority(self, timeout: float | None = None) -> tuple[T, int]:
        """Like :meth:`get`, returning ``(key, priority it was handed out at)``."""
        if timeout is not None:
            timeout = check_timeout(timeout)
        item = self.get(timeout)
        return item, self._core.handed[item]  # read without the lock: only this caller may finish this key


_NOTHING: Final[Any] = object()


class KeyIterator(Generic[T]):
    """The iterator of ``for key in queue`` (:meth:`Queue.__iter__`). It owns the key it returned last until it is
    asked for the next one, closed (:meth:`close`) or let go of; then it calls ``done`` on it. It ends at
    :class:`~keyqueue.ShutDown`.

    A plain object, not a generator, so that it finishes its key as soon as it is let go of. Each worker needs its
    own (``for`` makes one): two threads sharing one would finish each other's keys."""

    def __init__(self, queue: Queue[T]) -> None:
        self._queue = queue
        self._current: Any = _NOTHING
        self._ended = False

    def __iter__(self) -> KeyIterator[T]:
        return self

    def __next__(self) -> T:
        if self._ended:
            raise StopIteration
        q = self._queue
        previous = self._current
        self._current = _NOTHING  # finished below, even if what follows raises
        try:
            if previous is _NOTHING:
                item = q.get()
            else:
                # done(previous) and the next get() under one acquisition of the lock.
                gil = q._gil
                if gil.contended:
                    gil.tick()
                lock = q._lock
                if lock._is_owned():
                    raise q._reentered("for key in queue")
                lock.acquire()
                try:
                    core = q._core
                    if not core.done(previous) and q._drainers and core.idle():
                        q._wake_drainers()
                    popped = core.pop() if not q._getters else q._pop_passing_on()
                    item = q._wait_and_pop(None) if popped is EMPTY else popped  # type: ignore[assignment]
                finally:
                    lock.release()
        except ShutDown:
            self._ended = True
            raise StopIteration from None
        self._current = item
        return item

    def close(self) -> None:
        """Call ``done`` on the key returned last, if any, and end the iteration. Idempotent."""
        self._ended = True
        item = self._current
        if item is not _NOTHING:
            self._current = _NOTHING
            self._queue.done(item)

    def __del__(self) -> None:
        self.close()
