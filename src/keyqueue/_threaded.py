"""The threading shell's :class:`Queue`, re-exported by :mod:`keyqueue.threaded` (which documents the shell).

It lives in a module of its own so that the optional mypyc build can compile it (see :mod:`keyqueue._build`):
:mod:`keyqueue.threaded` adds ``DelayingQueue`` and ``RateLimitingQueue`` by multiple inheritance, which compiled
classes do not support, and stays interpreted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any, Final, Generic, TypeVar, cast

from keyqueue._build import mypyc_attr
from keyqueue._core import EMPTY, check_timeout
from keyqueue._shell import ShellBase
from keyqueue.errors import ShutDown

__all__ = ["KeyIterator", "Queue", "os_wait"]

T = TypeVar("T", bound=Hashable)

_TIMEOUT_MAX: Final = threading.TIMEOUT_MAX


def os_wait(seconds: float | None) -> float | None:
    """A wait the OS accepts: ``None`` stays ``None``; more than :data:`threading.TIMEOUT_MAX` (~292 years, or
    ``math.inf``) becomes that maximum (``Condition.wait`` and ``Thread.join`` raise ``OverflowError`` above it).
    Callers loop on their own deadline, so a maximal wait that ends is simply taken again."""
    if seconds is None or seconds <= _TIMEOUT_MAX:
        return seconds
    return _TIMEOUT_MAX


@mypyc_attr(allow_interpreted_subclasses=True)
class Queue(ShellBase[T]):
    """A work queue for threads with client-go's guarantees.

    * ``add(key)`` never blocks. A key already waiting is not added twice; a key being processed is marked and
      handed out once more after its ``done``; after shutdown adds are dropped.
    * ``get()`` blocks until a key is ready and hands keys out in FIFO order, each to one caller at a time.
    * ``done(key)`` must follow every ``get()``; use :meth:`lease` or iterate the queue to make it automatic.

    Keyword arguments: ``name`` (metrics are emitted only for a named queue), ``clock`` (default
    :class:`~keyqueue.RealClock`), ``metrics_provider`` (default: the process-wide provider), ``stats=True`` to
    count every decision (see :meth:`stats`; it turns off the lock-free dedup path, so adds get slower),
    ``ordering`` (default: FIFO, a :class:`collections.deque`): the order in which waiting keys are handed out, an
    empty :class:`~keyqueue.Ordering` owned by this queue (client-go's ``QueueConfig.Queue``, with its ``Touch``
    hook). Every guarantee above holds for any ordering; only "in FIFO order" becomes "in the ordering's order".
    """

    _yield_after_wake = True  # a woken getter thread needs the GIL (see ShellBase._yield_after_wake)

    def _init_waiting(self) -> None:
        lock = cast(threading.Lock, self._lock)  # a HolderLock in the compiled build: it has what Condition uses
        self._readable = threading.Condition(lock)  # getters wait here
        self._idle = threading.Condition(lock)  # shut_down_with_drain() callers wait here
        self._getters = 0  # threads waiting on _readable (so notify() is skipped when nobody waits)
        self._drainers = 0

    def _wake_one(self) -> None:
        self._readable.notify()

    def _lock_owners(self) -> list[object]:
        return [*super()._lock_owners(), self._readable, self._idle]  # Condition.wait/notify run with the lock

    def _wake_drainers(self) -> None:
        self._idle.notify_all()

    # -- handing out -------------------------------------------------------------------------------------

    def get(self, timeout: object = None) -> T:  # object: validated here (see check_timeout)
        """Take the next key, blocking while none is ready. The caller owns it until :meth:`done`.

        A key whose hash changed while it was queued is dropped and reported by raising
        :class:`~keyqueue.KeyMutatedError` (the next ``get`` goes on with the other keys); if the key's own
        ``__eq__`` raises, the exception propagates and the key stays queued, behind the others.
        After shutdown, keys still queued are handed out; once none is left, raises :class:`~keyqueue.ShutDown`
        (also in every ``get()`` that was blocked). With ``timeout`` (seconds, real time), raises
        ``TimeoutError`` if no key became ready in time (``None``, ``math.inf`` or anything above
        :data:`threading.TIMEOUT_MAX`: wait forever); a negative or NaN ``timeout``, or an ``int`` too large for a
        float, raises ``ValueError`` and a non-number ``TypeError``, before anything is taken.
        Once the queue has been seen used by several threads (see :attr:`~keyqueue._shell.ShellBase._contended`),
        every :data:`~keyqueue._shell.YIELD_EVERY`-th call (counted together with the lock-free dedup adds) first
        lets go of the GIL once, outside the lock: a worker that always finds a key ready would otherwise be
        preempted after a whole switch interval, most likely while it holds the queue's lock, and every other
        worker would then sleep on that lock (a lock convoy).
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        if self._contended:  # only a queue that other threads use pays for the countdown
            n = self._until_yield
            if n:
                self._until_yield = n - 1
            else:
                self._yield_gil()
        lock = self._lock
        lock.acquire()
        try:
            core = self._core
            try:
                item = core.pop()
            except BaseException:  # a mutated key, or a key's own __eq__ raised
                self._after_failed_pop()
                raise
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
            wait = self._wait_budget(None if deadline is None else deadline - time.monotonic(), timeout,
                                     self._getters > 0)
            self._getters += 1
            self._contended = True  # a getter waits: someone else is expected to add
            try:
                self._readable.wait(os_wait(wait))
            finally:
                self._getters -= 1
            try:
                item = core.pop()
            except BaseException:  # a mutated key, or a key's own __eq__ raised
                self._after_failed_pop()
                raise
            if item is not EMPTY:
                if self._getters and core.has_ready():
                    self._readable.notify()
                return item  # type: ignore[return-value]  # not EMPTY, so a T

    @contextmanager
    def lease(self, timeout: object = None) -> Iterator[T]:
        """``with q.lease() as key:`` — :meth:`get` a key and always call :meth:`done` when the block exits,
        normally or by an exception. Raises what :meth:`get` raises (``ShutDown``, ``TimeoutError``)."""
        item = self.get(timeout)
        try:
            yield item
        finally:
            self.done(item)

    def __iter__(self) -> KeyIterator[T]:
        """``for key in q:`` — keys until :class:`~keyqueue.ShutDown`, each ``done`` when the loop body ends.

        ``done(key)`` runs when the loop asks for the next key, or when the loop is left by ``break``,
        ``return`` or an exception (the :class:`KeyIterator` calls it as the loop's frame lets go of it).
        """
        return KeyIterator(self)

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

    def shut_down_with_drain(self, timeout: object = None) -> bool:
        """Shut down (as :meth:`shut_down`), then block until the FIFO is empty **and** no key is being
        processed: queued keys, and keys re-added during processing, are still handed out and finished.

        Returns ``True`` when drained; ``False`` if ``timeout`` (seconds; ``None`` or ``math.inf``: forever) passed
        first or :meth:`shut_down` was called meanwhile. Every caller waiting here returns when the queue drains.
        It blocks forever if workers stop calling ``done`` and no timeout is given.
        """
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            core = self._core
            core.shut_down(drain=True)
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

    def _on_clock_jump(self) -> None:
        # The clock moved (FakeClock.step): waiting getters re-check what is due.
        with self._lock:
            if self._getters:
                self._readable.notify_all()


_NOTHING: Final[Any] = object()


@mypyc_attr(allow_interpreted_subclasses=True)
class KeyIterator(Generic[T]):
    """The iterator of ``for key in queue`` (:meth:`Queue.__iter__`). It owns the key it returned last until it is
    asked for the next one, is closed (:meth:`close`) or is let go of; then it calls ``done`` on it. At
    :class:`~keyqueue.ShutDown` it ends (``StopIteration``, and at every later call).

    A plain object, not a generator, so that it finishes its key when it is let go of in both builds (a compiled
    generator is not closed when it is freed). Each worker needs its own (``for`` makes one): two threads sharing
    one would finish each other's keys. A ``KeyMutatedError`` (or an exception from a key's own methods) raised by
    the ``get`` inside propagates to the loop; the key finished before it stays finished."""

    def __init__(self, queue: Queue[T]) -> None:
        self._queue = queue
        self._lock = queue._lock
        self._core = queue._core
        self._current: Any = _NOTHING
        self._ended = False

    def __iter__(self) -> KeyIterator[T]:
        return self

    def __next__(self) -> T:
        previous = self._current
        if previous is _NOTHING:
            if self._ended:
                raise StopIteration
            try:
                item = self._queue.get()
            except ShutDown:
                self._ended = True
                raise StopIteration from None
            self._current = item
            return item
        # done(previous) and the next get() under one acquisition of the lock; done has taken effect before this
        # waits or ends the iteration at ShutDown.
        self._current = _NOTHING  # finished below, even if what follows raises
        q = self._queue
        if q._contended:  # as in Queue.get
            n = q._until_yield
            if n:
                q._until_yield = n - 1
            else:
                q._yield_gil()
        core = self._core
        lock = self._lock
        lock.acquire()
        try:
            if not core.done(previous) and q._drainers and core.idle():
                q._wake_drainers()
            popped = core.pop()
            if popped is EMPTY:
                item = q._wait_and_pop(None)
            else:
                item = popped  # type: ignore[assignment]  # not EMPTY, so a T
                if q._getters and core.has_ready():
                    q._readable.notify()  # the finished key was queued again, or delayed keys fell due
        except ShutDown:
            self._ended = True
            raise StopIteration from None
        finally:
            lock.release()
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
