"""The asyncio shell: :class:`Queue`, :class:`DelayingQueue`, :class:`RateLimitingQueue` and
:class:`PriorityQueue` for asyncio workers (exported by :mod:`keyqueue.aio`, which documents the thread rules and
cancellation).

The state machine and the adding side are the threading shell's (:mod:`keyqueue._shell`); only waiting differs: a
getter that finds nothing ready parks an :class:`asyncio.Future` in ``_getters`` and a waker resolves it in the
getter's own loop (directly from that loop's thread, through ``call_soon_threadsafe`` from any other thread).
"""

from __future__ import annotations

import asyncio
import contextlib
from asyncio import AbstractEventLoop, Future
from collections import deque
from collections.abc import Hashable
from types import TracebackType
from typing import Any, Final, Generic, TypeVar

from keyqueue._core import EMPTY, check_timeout
from keyqueue._core.machine import _Empty
from keyqueue._shell import DelayedAdds, PriorityAdds, RateLimitedAdds, Shell
from keyqueue.errors import ShutDown

__all__ = ["DelayingQueue", "KeyIterator", "Lease", "PriorityQueue", "Queue", "RateLimitingQueue"]

T = TypeVar("T", bound=Hashable)

_running_loop = asyncio._get_running_loop  # public in asyncio.__all__; None outside a running loop

# A waiter's result says who woke it: _BY_QUEUE, a waker that took it out of ``_getters`` (a key may be ready);
# _BY_TIMER, its own timer, with the future still in ``_getters`` (it must take itself out).
_BY_QUEUE: Final = True
_BY_TIMER: Final = False


def _resolve(fut: Future[bool], value: bool) -> None:
    # In the future's loop. It may have been cancelled or resolved by the other kind of wake-up meanwhile.
    if not fut.done():
        fut.set_result(value)


def _wake(fut: Future[bool], running: AbstractEventLoop | None) -> bool:
    """Resolve a waiter with ``_BY_QUEUE`` in its own loop (``running``: the caller's loop, or ``None``).
    ``False`` if that loop is closed: the waiter can never run."""
    loop = fut.get_loop()
    if loop is running:
        if not fut.done():
            fut.set_result(_BY_QUEUE)
        return True
    try:
        loop.call_soon_threadsafe(_resolve, fut, _BY_QUEUE)
    except RuntimeError:  # the loop is closed
        return False
    return True


class Queue(Shell[T]):
    """A work queue for asyncio tasks with client-go's guarantees (see :mod:`keyqueue.aio` for threads).

    * ``add(key)`` never blocks and may be called from any thread. A key already waiting is not added twice; a key
      being processed is marked and handed out once more after its ``done``; after shutdown adds are dropped.
    * ``await get()`` waits until a key is ready and hands keys out in FIFO order, each to one caller at a time.
    * ``done(key)`` must follow every ``get()``; :meth:`lease` and ``async for`` make it automatic.

    Keyword arguments as :class:`keyqueue.Queue`. Constructing a queue needs no event loop.
    """

    def _init_waiting(self) -> None:
        self._getters: deque[Future[bool]] = deque()  # waiting getters, oldest first
        self._drainers: list[Future[bool]] = []  # waiting shut_down_with_drain() callers

    def _wake_one(self) -> None:
        getters = self._getters
        running = _running_loop()
        while getters:
            fut = getters.popleft()
            if not fut.done() and _wake(fut, running):
                return

    def _wake_drainers(self) -> None:
        self._wake_all(self._drainers)

    def _wake_all(self, waiters: deque[Future[bool]] | list[Future[bool]]) -> None:
        running = _running_loop()
        for fut in waiters:
            if not fut.done():
                _wake(fut, running)
        waiters.clear()

    def _on_clock_jump(self) -> None:
        self._acquire("the clock's step()")
        try:
            self._wake_all(self._getters)
        finally:
            self._lock.release()

    # -- handing out -------------------------------------------------------------------------------------------

    async def get(self, timeout: float | None = None) -> T:
        """Take the next key, waiting while none is ready. The caller owns it until :meth:`done`.

        Returns without suspending when a key is ready. After shutdown, keys still queued are handed out; once none
        is left, raises :class:`~keyqueue.ShutDown` (also in every waiting ``get()``). With ``timeout`` (seconds,
        real time; ``None``, ``math.inf``: forever), raises ``TimeoutError`` if no key became ready in time (a
        negative or NaN ``timeout``: ``ValueError``; a non-number: ``TypeError``; nothing is taken). Cancelled while
        waiting, it takes nothing; once it has taken a key, nothing awaits before it returns it.
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        lock = self._lock
        if lock._is_owned():
            raise self._reentered("get()")
        lock.acquire()
        try:
            item = self._core.pop() if not self._getters else self._pop()
        finally:
            lock.release()
        if item is not EMPTY:
            return item  # type: ignore[return-value]  # not EMPTY, so a T
        return await self._wait_and_pop(timeout)

    def _pop(self) -> T | _Empty:
        """The next ready key, or :data:`EMPTY`, while other getters wait (lock held): passes the wake-up on if more
        keys are ready, or if the pop raised (the keys behind a key whose ``__eq__`` raised may be ready)."""
        core = self._core
        try:
            item = core.pop()
        except BaseException:
            if self._getters and core.has_ready():
                self._wake_one()
            raise
        if item is not EMPTY and self._getters and core.has_ready():
            self._wake_one()
        return item

    async def _wait_and_pop(self, timeout: float | None) -> T:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        lock = self._lock
        getters = self._getters
        while True:
            self._acquire("get()")
            try:
                # The key is taken here, after the await below, and nothing awaits between this and the return.
                item = self._pop() if getters else self._core.pop()
                if item is not EMPTY:
                    return item  # type: ignore[return-value]  # not EMPTY, so a T
                if self._core.shutting_down:
                    raise ShutDown
                wait = self._wait_budget(None if deadline is None else deadline - loop.time(), timeout, bool(getters))
                fut: Future[bool] = loop.create_future()
                getters.append(fut)
            finally:
                lock.release()
            timer = None if wait is None else loop.call_later(wait, _resolve, fut, _BY_TIMER)
            try:
                woken_by = await fut
            except asyncio.CancelledError:
                with lock:
                    try:
                        getters.remove(fut)  # still waiting: nothing was meant for this getter
                    except ValueError:
                        if getters:  # a waker had chosen it (its wake-up may be in flight): pass it on
                            self._wake_one()
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            if woken_by is _BY_TIMER:
                with lock, contextlib.suppress(ValueError):
                    getters.remove(fut)

    def lease(self, timeout: float | None = None) -> Lease[T]:
        """``async with q.lease() as key:`` — ``await get(timeout)`` on entry and :meth:`done` on every exit
        (normal, exception, cancellation). If entry is cancelled while waiting, nothing was taken."""
        return Lease(self, timeout)

    def __aiter__(self) -> KeyIterator[T]:
        """``async for key in q:`` — keys until :class:`~keyqueue.ShutDown`, each ``done`` when the loop asks for the
        next one or is left (``break``, ``return``, an exception, a cancellation)."""
        return KeyIterator(self)

    # -- shutdown -----------------------------------------------------------------------------------------------

    def shut_down(self) -> None:
        """Stop accepting adds and return at once. Idempotent; callable from any thread.

        Delayed keys not yet due are dropped. Keys already queued are still handed out by ``get()``, which then
        raises :class:`~keyqueue.ShutDown`. A concurrent :meth:`shut_down_with_drain` returns ``False`` at once.
        """
        self._acquire("shut_down()")
        try:
            self._core.shut_down(drain=False)
            self._wake_all(self._getters)
            self._wake_all(self._drainers)
        finally:
            self._lock.release()

    async def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        """Shut down (as :meth:`shut_down`), then wait until nothing is queued **and** nothing is being processed.

        Returns ``True`` when drained; ``False`` if ``timeout`` (seconds; ``None`` or ``math.inf``: forever) passed
        first or :meth:`shut_down` was called meanwhile. Cancelling it only stops the waiting: the queue stays shut
        down and draining.
        """
        timeout = check_timeout(timeout)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        lock = self._lock
        drainers = self._drainers
        self._acquire("shut_down_with_drain()")
        try:
            self._core.shut_down(drain=True)
            self._wake_all(self._getters)
        finally:
            lock.release()
        while True:
            with lock:
                wait = None if deadline is None else deadline - loop.time()
                verdict = self._drain_verdict(wait)
                if verdict is not None:
                    return verdict
                fut: Future[bool] = loop.create_future()
                drainers.append(fut)
            timer = None if wait is None else loop.call_later(wait, _resolve, fut, _BY_TIMER)
            try:
                await fut
            finally:
                if timer is not None:
                    timer.cancel()
                with lock:
                    if fut in drainers:
                        drainers.remove(fut)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]} waiting_getters={len(self._getters)}>"


class DelayingQueue(Queue[T], DelayedAdds[T]):
    """A :class:`Queue` with ``add_after(item, delay)`` (a plain method, callable from any thread)."""


class RateLimitingQueue(DelayingQueue[T], RateLimitedAdds[T]):
    """A :class:`DelayingQueue` whose failed keys come back after a delay chosen by a rate limiter (as
    :class:`keyqueue.RateLimitingQueue`; ``add_rate_limited``, ``forget``, ``num_requeues`` are plain methods)."""


class PriorityQueue(PriorityAdds[T], RateLimitingQueue[T]):
    """controller-runtime's priority queue for asyncio tasks, with the rules of :class:`keyqueue.PriorityQueue`:
    everything :class:`RateLimitingQueue` has, ``add(item, *, priority=0, after=0.0, rate_limited=False)`` (any
    thread) and ``await get_with_priority()``."""

    async def get_with_priority(self, timeout: float | None = None) -> tuple[T, int]:
        """Like :meth:`get`, returning ``(key, priority it was handed out at)``; nothing awaits between taking the
        key and reading its priority."""
        item = await self.get(timeout)
        return item, self._core.handed[item]


class Lease(Generic[T]):
    """What :meth:`Queue.lease` returns: ``get`` on entry, ``done`` on every exit."""

    __slots__ = ("_item", "_queue", "_timeout")

    def __init__(self, queue: Queue[T], timeout: float | None) -> None:
        self._queue = queue
        self._timeout = timeout

    async def __aenter__(self) -> T:
        # Nothing awaits between get() returning and the block starting, so a key taken here reaches __aexit__.
        self._item: T = await self._queue.get(self._timeout)
        return self._item

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._queue.done(self._item)


_NOTHING: Final[Any] = object()


class KeyIterator(Generic[T]):
    """The iterator of ``async for key in queue``: it owns the key it returned last until it asks for the next one,
    is closed (:meth:`aclose`) or is let go of; then it calls ``done`` on it. Ends at ``ShutDown``. Each worker
    needs its own (``async for`` makes one)."""

    __slots__ = ("_current", "_queue")

    def __init__(self, queue: Queue[T]) -> None:
        self._queue = queue
        self._current: Any = _NOTHING

    def __aiter__(self) -> KeyIterator[T]:
        return self

    async def __anext__(self) -> T:
        q = self._queue
        previous = self._current
        if previous is not _NOTHING:
            # done(previous) and, when a key is ready, taking it: one acquisition of the lock, no suspension.
            self._current = _NOTHING
            lock = q._lock
            if lock._is_owned():
                raise q._reentered("async for")
            lock.acquire()
            try:
                core = q._core
                if not core.done(previous) and q._drainers and core.idle():
                    q._wake_drainers()
                item = core.pop() if not q._getters else q._pop()
            finally:
                lock.release()
            if item is not EMPTY:
                self._current = item
                return item  # type: ignore[return-value]  # not EMPTY, so a T
        try:
            got = await q.get()
        except ShutDown:
            raise StopAsyncIteration from None
        self._current = got
        return got

    def _finish(self) -> None:
        item = self._current
        if item is not _NOTHING:
            self._current = _NOTHING
            self._queue.done(item)

    async def aclose(self) -> None:
        """Call ``done`` on the key handed out last, if any (idempotent)."""
        self._finish()

    def __del__(self) -> None:
        # `async for` drops its iterator when the loop is left (break, return, exception, cancellation); an async
        # generator would be finalised only later by the event loop, so a plain object does it at once.
        self._finish()
