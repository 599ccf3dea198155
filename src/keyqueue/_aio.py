"""The asyncio shell's :class:`Queue` and :class:`LoopQueue` (with their :class:`Lease` and :class:`KeyIterator`),
re-exported by :mod:`keyqueue.aio`, which documents the shell.

They live in a module of their own so that the optional mypyc build can compile them (see :mod:`keyqueue._build`):
:mod:`keyqueue.aio` adds the delaying and rate-limiting queues by multiple inheritance, which compiled classes do
not support, and stays interpreted.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import sys
import threading
from asyncio import AbstractEventLoop, Future
from collections import deque
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import Any, Final, Generic, Protocol, TypeVar, cast

from keyqueue._build import mypyc_attr
from keyqueue._core import (
    DROPPED,
    EMPTY,
    QUEUED,
    AddResult,
    CoreBase,
    QueueSnapshot,
    QueueStats,
    _Empty,
    check_hashable,
    check_timeout,
)
from keyqueue._shell import HolderLock, ShellBase
from keyqueue.errors import ShutDown
from keyqueue.metrics import NoopMetricsProvider, get_provider

__all__ = ["KeyIterator", "Lease", "LoopQueue", "Queue"]

T = TypeVar("T", bound=Hashable)

_get_running_loop = asyncio._get_running_loop  # public in asyncio.__all__; returns None outside a loop


class _Owned(Protocol):
    # _thread.RLock's _is_owned() (what threading.Condition uses; typeshed does not declare it): True exactly in
    # the thread that holds the lock. It reads two fields and returns a bool singleton.
    def _is_owned(self) -> bool: ...


# The loop-owned queues' owner check (see LoopQueue). The benchmark rows base.owner.* time the candidates on CPython
# 3.11, x86-64 Linux (net of the timing loop): `rlock._is_owned()` of an RLock the owner holds ~15 ns;
# `threading.get_ident() != owner` ~45 ns (a builtin call that is not specialised, and a new int);
# `asyncio._get_running_loop() is loop` ~215 ns (its C code calls getpid(), a system call, every time, to notice a
# fork). With the busy marker (a load, two stores; see LoopQueue) the check costs the pure build a sixth to a fifth of
# the add/get/done cycle. Measured against it in one process (issue 18) and not kept: the marker slot holding the
# bound `_is_owned` instead of the RLock (3.11 does not specialise calls of bound builtins, so it is no faster);
# `__slots__` for the marker and the core (3.11 already specialises instance attributes); the entry points as
# per-queue closures over the core and a cell (2-6% less with pre-bound methods, nothing for `q.add(...)`, 8%
# more for `async for`: an instance attribute shadowing a method stops 3.11 specialising the method's lookup); a
# `get` that returns a finished Future when a key is ready (1.5x asyncio.Queue, and asyncio.create_task(q.get())
# would refuse it).
_BUSY: Final = cast(_Owned, _thread.RLock())  # never acquired: _is_owned() is False in every thread

# A waiter future's result says who woke it: _BY_QUEUE means "removed from the waiter deque by a waker" (it may
# now find a key); _BY_TIMER means its own timer fired and it is still in the deque (it must remove itself).
_BY_QUEUE: Final = True
_BY_TIMER: Final = False


def _resolve(fut: Future[bool], value: bool) -> None:
    # Runs in the future's loop. The future may have been cancelled (its task was) or resolved by the other kind
    # of wake-up meanwhile; the first one wins.
    if not fut.done():
        fut.set_result(value)


def _wake(fut: Future[bool], running: AbstractEventLoop | None) -> bool:
    """Resolve a waiter with _BY_QUEUE in its own loop. False if that loop is closed (the waiter can never run).

    ``running`` is the caller's running loop (or None); it is compared with the waiter's loop to decide between a
    direct ``set_result`` (same loop, hence same thread) and ``call_soon_threadsafe`` (any other thread).
    """
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


@mypyc_attr(allow_interpreted_subclasses=True)
class Queue(ShellBase[T]):
    """A work queue for asyncio tasks with client-go's guarantees (see the module docstring for threads).

    * ``add(key)`` never blocks and may be called from any thread. A key already waiting is not added twice; a key
      being processed is marked and handed out once more after its ``done``; after shutdown adds are dropped.
    * ``await get()`` waits until a key is ready and hands keys out in FIFO order, each to one caller at a time.
    * ``done(key)`` must follow every ``get()``; use :meth:`lease` or ``async for`` to make it automatic.

    Keyword arguments as :class:`keyqueue.Queue`: ``name`` (metrics are emitted only for a named queue), ``clock``
    (default :class:`~keyqueue.RealClock`), ``metrics_provider``, ``stats=True`` to count every decision (see
    :meth:`stats`; it turns off the lock-free dedup path, so adds get slower), ``ordering`` (as
    :class:`keyqueue.Queue`: an empty :class:`~keyqueue.Ordering`; default FIFO). Constructing a queue needs no
    event loop.
    """

    def _init_waiting(self) -> None:
        # Getters waiting for a key, oldest first. A waker removes a future from here and resolves it
        # (_BY_QUEUE); a future resolved by its own timer (_BY_TIMER) or cancelled removes itself.
        # (Typed Any, as in ShellBase: the threading shell keeps counts in the same two attributes.)
        self._getters = deque()  # deque[Future[bool]]
        self._drainers = []  # list[Future[bool]]: shut_down_with_drain() callers waiting

    # -- waking (lock held) -------------------------------------------------------------------------------

    def _wake_one(self) -> None:
        """Wake the oldest live getter (lock held). Skips waiters already resolved, cancelled or in a dead loop."""
        getters = self._getters
        running = self._waking_loop()
        while getters:
            fut = getters.popleft()
            if not fut.done() and _wake(fut, running):
                return

    def _wake_drainers(self) -> None:
        self._wake_all(self._drainers)

    def _waking_loop(self) -> AbstractEventLoop | None:
        """The loop whose waiters a wake-up may resolve directly (lock held): the caller's running loop, if any
        (any other loop's waiters are woken through ``call_soon_threadsafe``)."""
        return _get_running_loop()

    def _wake_all(self, waiters: deque[Future[bool]] | list[Future[bool]]) -> None:
        running = self._waking_loop()
        for fut in waiters:
            if not fut.done():
                _wake(fut, running)
        waiters.clear()

    # -- handing out -------------------------------------------------------------------------------------

    async def get(self, timeout: object = None) -> T:
        """Take the next key, waiting while none is ready. The caller owns it until :meth:`done`.

        Returns at once (without suspending) when a key is ready. After shutdown, keys still queued are handed
        out; once none is left, raises :class:`~keyqueue.ShutDown` (also in every ``get()`` that was waiting).
        With ``timeout`` (seconds, real time; ``None`` or ``math.inf``: forever), raises ``TimeoutError`` if no key
        became ready in time (a negative or NaN ``timeout`` or an ``int`` too large for a float: ``ValueError``; a
        non-number: ``TypeError``; nothing is taken). Cancelled while waiting, it takes nothing out of the queue
        (see the module docstring). A key whose hash changed while it was queued is dropped and reported by
        raising :class:`~keyqueue.KeyMutatedError` (the next ``get`` goes on with the other keys); if the key's own
        ``__eq__`` raises, the exception propagates and the key stays queued, behind the others.
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        lock = self._lock
        lock.acquire()
        try:
            item = self._core.pop() if not self._getters else self._pop_ready()  # see _pop_ready
        finally:
            lock.release()
        if item is not EMPTY:
            return item  # type: ignore[return-value]  # not EMPTY, so a T
        return await self._wait_and_pop(timeout)

    def _pop_ready(self) -> T | _Empty:
        """Take the next ready key, :data:`~keyqueue._core.EMPTY` if none (lock held). If more keys are ready (the
        finished key was queued again, several delayed keys fell due at once), the wake-up is passed on; so is it
        when the pop raises. With no getter waiting this is exactly ``core.pop()``, which the hot paths call
        directly (``_getters`` cannot change while the lock is held)."""
        core = self._core
        try:
            item = core.pop()
        except BaseException:  # a mutated key, or a key's own __eq__ raised
            self._after_failed_pop()
            raise
        if item is not EMPTY and self._getters and core.has_ready():
            self._wake_one()
        return item

    def _done_and_pop(self, previous: T) -> T | _Empty:
        """``done(previous)``, then take the next key if one is ready (:data:`~keyqueue._core.EMPTY` if none),
        under one acquisition of the lock. For :class:`KeyIterator`; the caller awaits ``get()`` on EMPTY."""
        lock = self._lock
        lock.acquire()
        try:
            return self._done_then_pop(previous)
        finally:
            lock.release()

    def _done_then_pop(self, previous: T) -> T | _Empty:
        # The body of _done_and_pop (lock held).
        core = self._core
        if not core.done(previous) and self._drainers and core.idle():
            self._wake_drainers()
        return core.pop() if not self._getters else self._pop_ready()

    def _done_anywhere(self, item: T) -> None:
        """``done(item)`` for :class:`KeyIterator`, which may be let go of in any thread (a garbage collection)."""
        self.done(item)

    async def _wait_and_pop(self, timeout: float | None) -> T:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        lock = self._lock
        core = self._core
        getters = self._getters
        while True:
            lock.acquire()
            try:
                # The pop happens here, after the await below; nothing between it and the return awaits.
                item = self._pop_ready()
                if item is not EMPTY:
                    return item  # type: ignore[return-value]  # not EMPTY, so a T
                if core.shutting_down:
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
                        getters.remove(fut)  # still waiting: nothing was meant for us
                    except ValueError:
                        # A waker had already chosen this getter (its wake-up may still be in flight): pass it on.
                        if getters:
                            self._wake_one()
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            if woken_by is _BY_TIMER:
                # Still in the deque, unless a waker popped it, saw it resolved and woke the next getter instead.
                with lock, contextlib.suppress(ValueError):
                    getters.remove(fut)

    def lease(self, timeout: object = None) -> Lease[T]:
        """``async with q.lease() as key:`` — ``await get(timeout)`` on entry and always :meth:`done` on exit:
        normally, by an exception, or by cancellation. Raises what :meth:`get` raises (``ShutDown``,
        ``TimeoutError``); if entry is cancelled while waiting, nothing was taken and nothing is done."""
        return Lease(self, timeout)

    def __aiter__(self) -> KeyIterator[T]:
        """``async for key in q:`` — keys until :class:`~keyqueue.ShutDown`, each ``done`` when the body ends.

        ``done(key)`` runs when the loop asks for the next key, and when the loop is left by ``break``,
        ``return``, an exception or a cancellation (the iterator calls it as the loop lets go of it; CPython does
        that at once). Holding the iterator yourself, call :meth:`KeyIterator.aclose` to finish the current key.
        """
        return KeyIterator(self)

    # -- shutdown ----------------------------------------------------------------------------------------

    def shut_down(self) -> None:
        """Stop accepting adds and return at once (it never waits for keys in flight). Idempotent; callable
        from any thread.

        Delayed keys not yet due are dropped. Keys already queued are still handed out by ``get()``, which then
        raises :class:`~keyqueue.ShutDown`. A concurrent :meth:`shut_down_with_drain` returns ``False`` at once.
        """
        with self._lock:
            self._core.shut_down(drain=False)
            self._wake_all(self._getters)
            self._wake_all(self._drainers)

    async def shut_down_with_drain(self, timeout: object = None) -> bool:
        """Shut down (as :meth:`shut_down`), then wait until the FIFO is empty **and** no key is being
        processed: queued keys, and keys re-added during processing, are still handed out and finished.

        Returns ``True`` when drained; ``False`` if ``timeout`` (seconds; ``None`` or ``math.inf``: forever) passed
        first or :meth:`shut_down` was called meanwhile. Every caller waiting here returns when the queue drains.
        It waits forever if workers stop calling ``done`` and no timeout is given. Cancelling it only stops the
        waiting: the queue stays shut down and draining.
        """
        timeout = check_timeout(timeout)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        lock = self._lock
        core = self._core
        drainers = self._drainers
        with lock:
            core.shut_down(drain=True)
            self._wake_all(self._getters)
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

    def _on_clock_jump(self) -> None:
        # The clock moved (FakeClock.step, in any thread): waiting getters re-check what is due.
        with self._lock:
            if self._getters:
                self._wake_all(self._getters)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]} waiting_getters={len(self._getters)}>"


@mypyc_attr(allow_interpreted_subclasses=True)
class Lease(Generic[T]):
    """The async context manager returned by :meth:`Queue.lease`: ``get`` on entry, ``done`` on every exit."""

    __slots__ = ("_item", "_queue", "_timeout")

    def __init__(self, queue: Queue[T], timeout: object) -> None:
        self._queue = queue
        self._timeout = timeout

    async def __aenter__(self) -> T:
        # No await between get() returning and the caller's `async with` body starting, so a key taken here
        # always reaches __aexit__.
        self._item = item = await self._queue.get(self._timeout)
        return item

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._queue.done(self._item)


_NOTHING: Final[Any] = object()


@mypyc_attr(allow_interpreted_subclasses=True)
class KeyIterator(Generic[T]):
    """The async iterator of ``async for key in queue``. It owns the key it last returned until it asks for the
    next one, is closed (:meth:`aclose`) or is let go of; then it calls ``done`` on it. Ends at ``ShutDown``.

    Each worker needs its own iterator (``async for`` makes one): two tasks sharing one would finish each other's
    keys."""

    __slots__ = ("_current", "_queue")

    def __init__(self, queue: Queue[T]) -> None:
        self._queue = queue
        self._current: Any = _NOTHING

    def __aiter__(self) -> KeyIterator[T]:
        return self

    async def __anext__(self) -> T:
        previous = self._current
        if previous is not _NOTHING:
            # done(previous) and, when a key is ready, taking it: one acquisition of the lock, no suspension.
            self._current = _NOTHING
            item = self._queue._done_and_pop(previous)
            if item is not EMPTY:
                self._current = item
                return item  # type: ignore[return-value]  # not EMPTY, so a T
        try:
            item = await self._queue.get()
        except ShutDown:
            raise StopAsyncIteration from None
        self._current = item
        return item

    def _finish(self) -> None:
        item = self._current
        if item is not _NOTHING:
            self._current = _NOTHING
            self._queue._done_anywhere(item)

    async def aclose(self) -> None:
        """Call ``done`` on the key handed out last, if any (idempotent)."""
        self._finish()

    def __del__(self) -> None:
        # `async for` drops its iterator when the loop is left (break, return, exception, cancellation); an async
        # generator would only be finalised later by the event loop, so a plain object does it at once.
        self._finish()


@mypyc_attr(allow_interpreted_subclasses=True)
class LoopQueue(Queue[T]):
    """A :class:`Queue` owned by one event loop: the same state machine and guarantees, with no lock.

    Built inside a coroutine or callback of a running loop (else ``RuntimeError``), it binds to that loop and its
    thread. Calls made in that thread (the loop's tasks and callbacks, and plain code of that thread) touch the
    core directly: nothing else ever does, so no check-then-act can race and no lock is needed. Each call first
    checks that it runs in the owner thread (``_is_owned()`` of an RLock that thread holds for the queue's life),
    which is all the cross-thread support costs there.

    **Other threads.** ``add``, ``add_after``, ``add_rate_limited`` and ``shut_down`` never block and may be called
    from any thread: an add of a key already waiting returns ``DEDUP`` at once (the lock-free probe of
    :class:`Queue`); anything else is validated (a bad key or delay raises at once), queued and applied later, on
    the owning loop, in the order the calls were made, and returns :attr:`~keyqueue.AddResult.DEFERRED`. One
    ``call_soon_threadsafe`` carries every call queued until the loop gets to them, and each loop iteration applies
    at most the calls queued when it began, so a thread adding in a loop cannot hold the loop up. Once the loop is
    closed such an add returns ``DROPPED`` (a call queued just before the loop closed is never applied, like any
    callback of a closed loop). ``forget`` and ``num_requeues`` (the limiter's own lock), ``shutting_down`` and
    ``repr`` work from any thread. Everything that hands out or reads the queue's state (``get``, ``done``,
    ``lease``, ``async for``, ``len()``, ``stats``, ``snapshot``, ``shut_down_with_drain``) raises
    ``RuntimeError`` in another thread, naming the call and this rule: use :meth:`asyncio.loop.call_soon_threadsafe`
    or :func:`asyncio.run_coroutine_threadsafe` to run them on the loop, or use :class:`Queue`.

    The same goes for a call that runs on the owner thread while one of the queue's calls is still running there
    (a signal handler, a ``__del__`` run by a garbage collection, a limiter or ordering that calls back): adds,
    ``done`` and ``shut_down`` are deferred to the loop as above (``done`` then returns ``False``), the other calls
    raise.

    Choose it when every ``get``/``done`` runs on one loop and speed matters (an ``add``/``await get()``/``done``
    cycle costs a quarter to a third less than :class:`Queue`'s; benchmark row ``aio.loop_cycle``); keep :class:`Queue`
    when other threads need exact :class:`~keyqueue.AddResult` values, call ``done`` or ``len``, or the queue must
    emit metrics. A loop-owned queue emits none (a scrape runs in another thread): a ``name`` with a metrics
    provider other than :class:`~keyqueue.metrics.NoopMetricsProvider` (also the process-wide one) raises
    ``ValueError``. The loop must keep running in the thread it was bound in.

    Waiting, wake-ups, timeouts, cancellation, ``lease``/``async for``, shutdown and drain are :class:`Queue`'s own
    code; only the entry points differ, where :class:`Queue` takes its lock.
    """

    # The core is touched by the owner thread only. _here is an RLock the owner thread acquired at construction and
    # never releases. _free is _here while no call of this queue runs and _BUSY while one does: a call proceeds
    # only if _free._is_owned(), which is true exactly in the owner thread outside another call of the queue (a
    # check and two stores; no atomicity is needed: only the owner thread ever writes _free, and only after the
    # check passed). Every other call is handed to the loop or refused, so the core never sees two threads.
    _loop: AbstractEventLoop
    _here: _Owned
    _free: _Owned
    _owner: int  # the owner's thread id, for error messages

    _deferred_what = "Exception in a keyqueue call handed to the queue's event loop"

    def _new_lock(self) -> HolderLock:
        loop = _get_running_loop()
        if loop is None:
            raise RuntimeError(
                f"{type(self).__name__} binds to the event loop it is built in: construct it in a coroutine or "
                "callback running on that loop (or use keyqueue.aio.Queue, which needs no loop)"
            )
        self._loop = loop
        here = _thread.RLock()
        here.acquire()
        self._here = self._free = cast(_Owned, here)
        self._owner = threading.get_ident()
        return _OwnerCheck(self)  # the shared code uses only the four operations it overrides

    def _new_core(self, name: str, metrics_provider: Any, stats: bool) -> CoreBase[T]:
        chosen = get_provider() if metrics_provider is None else metrics_provider
        if name and not isinstance(chosen, NoopMetricsProvider):
            raise ValueError(
                f"{type(self).__name__} cannot emit metrics (a scrape reads the queue from another thread, and only "
                f"its loop's thread may): got name={name!r} with metrics provider {type(chosen).__name__}; pass "
                "metrics_provider=keyqueue.metrics.NoopMetricsProvider(), no name, or use keyqueue.aio.Queue"
            )
        return super()._new_core(name, metrics_provider, stats)

    def _misplaced(self, call: str) -> RuntimeError:
        """The error for ``call``, made where it may not touch the core."""
        if self._here._is_owned():
            return RuntimeError(
                f"{call} was called on {type(self).__name__}'s own thread while another of its calls is still "
                "running there (a signal handler, a __del__ or a callback of the queue); from there only add, "
                "add_after, add_rate_limited, done and shut_down can be made (they are deferred to the loop)"
            )
        return RuntimeError(
            f"{call} of a {type(self).__name__} must be called on the thread of its event loop (thread "
            f"{self._owner}), not thread {threading.get_ident()}; other threads may only call add, add_after, "
            "add_rate_limited, forget, num_requeues and shut_down (applied later, on the owning loop): run the call "
            "on the loop (loop.call_soon_threadsafe, asyncio.run_coroutine_threadsafe) or use keyqueue.aio.Queue"
        )

    # -- the entry points: the owner check where Queue takes its lock --------------------------------------

    def add(self, item: T) -> AddResult:
        """As :meth:`Queue.add` on the loop's thread. From another thread: ``DEDUP`` for a key already waiting,
        else validated and applied later on the loop: ``DEFERRED`` (``DROPPED`` once the loop is closed)."""
        free = self._free
        if not free._is_owned():
            return super().add(item)  # the probe, then (the check says "busy") _acquire_unless_own -> _defer
        self._free = _BUSY
        try:
            outcome = self._core.add(item, None)  # the default passed: a cheaper call
            if outcome is QUEUED:
                if self._getters:
                    self._wake_one()
            elif outcome is DROPPED:
                check_hashable(item)  # a shut-down core answers before it looks at the key: refuse a bad one
        except TypeError:
            check_hashable(item)  # the same clear error as Queue.add for an unhashable key
            raise
        finally:
            self._free = free
        return outcome

    def done(self, item: T) -> bool:
        """As :meth:`Queue.done`; only on the loop's thread (``RuntimeError`` elsewhere, see the class)."""
        free = self._free
        if not free._is_owned():
            if not self._here._is_owned():
                raise self._misplaced("done()")
            return super().done(item)  # nested in another call of this queue: deferred, right after it, on the loop
        self._free = _BUSY
        try:
            requeued = self._core.done(item)
            if requeued or self._drainers:
                self._after_done(requeued)
            return requeued
        finally:
            self._free = free

    async def get(self, timeout: object = None) -> T:
        """As :meth:`Queue.get`, awaited on the loop's thread (``RuntimeError`` elsewhere, nothing taken)."""
        if timeout is not None:
            timeout = check_timeout(timeout)
        free = self._free
        if not free._is_owned():
            raise self._misplaced("get()")
        self._free = _BUSY
        try:
            item = self._core.pop() if not self._getters else self._pop_ready()  # see _pop_ready
        finally:
            self._free = free
        if item is not EMPTY:
            return item  # type: ignore[return-value]  # not EMPTY, so a T
        return await self._wait_and_pop(timeout)

    # The reads the shared code makes under the lock: checked here so that the error names the call (the shared
    # code may be compiled, and then _OwnerCheck finds no frame of it to take the name from).
    def __len__(self) -> int:
        """As :meth:`Queue.__len__`; only on the loop's thread (``RuntimeError`` elsewhere, see the class)."""
        self._check_here("len()")
        return super().__len__()

    def stats(self) -> QueueStats:
        """As :meth:`Queue.stats`; only on the loop's thread (``RuntimeError`` elsewhere, see the class)."""
        self._check_here("stats()")
        return super().stats()

    def snapshot(self) -> QueueSnapshot:
        """As :meth:`Queue.snapshot`; only on the loop's thread (``RuntimeError`` elsewhere, see the class)."""
        self._check_here("snapshot()")
        return super().snapshot()

    async def shut_down_with_drain(self, timeout: object = None) -> bool:
        """As :meth:`Queue.shut_down_with_drain`; only on the loop's thread (``RuntimeError`` elsewhere)."""
        self._check_here("shut_down_with_drain()")
        return await super().shut_down_with_drain(timeout)

    def _check_here(self, call: str) -> None:
        if not self._free._is_owned():
            raise self._misplaced(call)

    def _done_and_pop(self, previous: T) -> T | _Empty:
        free = self._free
        if not free._is_owned():
            self._done_anywhere(previous)  # the iterator has let go of it: finished on the loop, not left processing
            raise self._misplaced("async for")
        self._free = _BUSY
        try:
            return self._done_then_pop(previous)
        finally:
            self._free = free

    def _done_anywhere(self, item: T) -> None:
        if self._free._is_owned():
            self.done(item)
        else:
            self._defer(self.done, item)  # let go of in another thread, or inside another call of the queue

    def shut_down(self) -> None:
        """As :meth:`Queue.shut_down`; from another thread it is applied later, on the owning loop."""
        if not self._free._is_owned():
            self._defer(self.shut_down)
            return
        super().shut_down()

    def _on_clock_jump(self) -> None:
        if not self._free._is_owned():
            self._defer(self._on_clock_jump)  # FakeClock.step in another thread: the getters re-check on the loop
            return
        super()._on_clock_jump()

    def _waking_loop(self) -> AbstractEventLoop | None:
        return self._loop  # wake-ups run on the loop's thread only, so its waiters are resolved directly

    # -- handing calls to the loop -----------------------------------------------------------------------

    def _acquire_unless_own(self) -> bool:
        # Reached from the shared add paths when the owner check failed: never wait, hand the call to the loop.
        return False

    def _defer(self, call: Callable[..., Any], *args: Any) -> AddResult:
        if self._loop.is_closed():
            return DROPPED
        return super()._defer(call, *args)

    def _start_runner(self) -> bool:
        try:
            self._loop.call_soon_threadsafe(self._run_deferred)
        except RuntimeError:  # the loop is closed
            return False
        return True

    def _run_deferred(self) -> None:
        # On the loop (the helper token is held): the calls queued so far, then the loop goes on; calls queued
        # meanwhile get the next iteration, so a thread adding without pause cannot keep the loop in here.
        if not self._here._is_owned():
            raise RuntimeError(f"the event loop of {self!r} now runs in another thread than the one it was bound "
                               "in; calls handed to it can no longer be applied")
        pending = self._deferred
        token = self._helper_token
        try:
            self._apply_deferred(len(pending))
        finally:
            token.release()
        # A call queued after the count above found the token taken and relies on this check (as in ShellBase).
        if pending and token.acquire(False):
            self._loop.call_soon(self._run_deferred)


@mypyc_attr(allow_interpreted_subclasses=True)
class _OwnerCheck(HolderLock):
    """:class:`LoopQueue`'s stand-in for a lock in the code it shares with :class:`Queue` (waiting, cancellation,
    shutdown, drain, ``len``, ``stats``, ``snapshot``, the delayed and rate-limited adds): ``acquire`` raises
    ``RuntimeError`` (naming the caller) unless the owner check passes, and marks the queue busy until
    ``release``; ``locked()`` is true where the check fails (another thread, or inside another call of the queue),
    so the shared adds hand the call to the loop instead of waiting."""

    def __init__(self, queue: LoopQueue[Any]) -> None:
        super().__init__()  # a HolderLock only so that the shared code accepts it; its own lock is never used
        self._queue = queue

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        q = self._queue
        if not q._free._is_owned():
            name = sys._getframe(1).f_code.co_name
            raise q._misplaced(f"{name.strip('_')}()")
        q._free = _BUSY
        return True

    def release(self) -> None:
        q = self._queue
        q._free = q._here

    def locked(self) -> bool:
        return not self._queue._free._is_owned()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
                 /) -> None:
        self.release()
