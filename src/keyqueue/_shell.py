"""What the threading shell and the asyncio shell share: everything except waiting and waking.

A shell is one state machine (:mod:`keyqueue._core`) behind one lock. The adding side (``add`` with its lock-free
dedup probe, ``add_after``, ``add_rate_limited``, the priority queue's adds), ``done``, inspection and construction
are the same in both shells and live here; each shell supplies how a getter waits and is woken
(:meth:`Shell._wake_one`, :meth:`Shell._wake_drainers`, :meth:`Shell._on_clock_jump`) and its blocking or
awaitable methods.

**Calls from inside the queue's own calls.** A signal handler or a ``__del__`` can run in a thread between two
bytecodes of one of the queue's calls, with the lock held. The lock is a :class:`threading.RLock`, which knows its
owner: such a nested ``add``, ``add_after``, ``add_rate_limited`` or ``done`` is validated, queued and applied by a
helper thread once the lock is free (``AddResult.DEFERRED``); any other nested call raises ``RuntimeError`` (it
could neither wait for the lock nor run inside a half-made change).
"""

from __future__ import annotations

import _thread
import functools
import sys
import threading
from collections import deque
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar, cast

from keyqueue._core import (
    AddResult,
    Ordering,
    PriorityCore,
    QueueCore,
    QueueSnapshot,
    QueueStats,
    check_delay,
    check_hashable,
    check_ordering,
    check_priority,
)
from keyqueue._gil import GilHandOff
from keyqueue.clock import Clock, RealClock, check_clock
from keyqueue.metrics import recorder_for
from keyqueue.metrics._recorders import PullRecorder, bind_core
from keyqueue.priority import PriorityDepth, default_priority_rate_limiter
from keyqueue.ratelimit import RateLimiter, check_limiter, default_controller_rate_limiter

__all__ = ["DelayedAdds", "OwnedLock", "PriorityAdds", "RateLimitedAdds", "Shell"]

T = TypeVar("T", bound=Hashable)

DEDUP: Final = AddResult.DEDUP
DEFERRED: Final = AddResult.DEFERRED
DELAYED: Final = AddResult.DELAYED
QUEUED: Final = AddResult.QUEUED


class OwnedLock(Protocol):
    """A :class:`threading.RLock` as the shells use it: a plain lock that also knows whether this thread holds it."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...

    def _is_owned(self) -> bool: ...

    def __enter__(self) -> bool: ...

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None, /) -> None:
        ...


class Shell(Generic[T]):
    """Construction, ``add``, ``done``, ``len``, ``stats``, ``snapshot``, ``shutting_down`` (see the module)."""

    #: Truthy while a getter (or drain caller) waits: a count in the threading shell, futures in asyncio.
    _getters: Any
    _drainers: Any
    #: An add that woke a getter then hands the GIL over (threads; asyncio getters run on the loop's thread).
    _hand_off_after_wake: ClassVar[bool] = False

    def __init__(self, *, name: str = "", clock: Clock | None = None, metrics_provider: Any = None,
                 stats: bool = False, ordering: Ordering[T] | None = None) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}: {name!r}")
        if ordering is not None:
            check_ordering(ordering)
        self.name = name
        self.clock: Clock = RealClock() if clock is None else check_clock(clock)
        # Guards the core and the waiters. Held only for a core call and a wake-up, never while waiting.
        self._lock = cast(OwnedLock, threading.RLock())
        self._init_waiting()
        recorder = recorder_for(name, metrics_provider, self.clock, self._lock)
        self._core: QueueCore[T] = self._new_core(recorder, stats, ordering)
        if recorder is not None:
            bind_core(recorder, self._core.promote_due, self._core.processing)
        self._fast_dirty = self._core.fast_dirty
        self._gil = GilHandOff()
        self._deferred: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._helper = _thread.allocate_lock()  # held while a helper thread applies deferred calls
        self.clock.subscribe(self._on_clock_jump)

    # -- what each shell supplies ----------------------------------------------------------------------------

    def _init_waiting(self) -> None:
        """Create the waiter bookkeeping (``self._lock`` exists already)."""
        raise NotImplementedError

    def _wake_one(self) -> None:
        """Wake one waiting getter so that it looks again (lock held, only if ``_getters``)."""
        raise NotImplementedError

    def _wake_drainers(self) -> None:
        """Wake every drain caller (lock held, only if ``_drainers``)."""
        raise NotImplementedError

    def _on_clock_jump(self) -> None:
        """The clock jumped (``FakeClock.step``, from any thread): waiting getters look again."""
        raise NotImplementedError

    def _new_core(self, recorder: Any, stats: bool, ordering: Ordering[T] | None) -> QueueCore[T]:
        return QueueCore(self.clock, ordering=ordering, metrics=recorder, stats=stats)

    # -- adding and finishing --------------------------------------------------------------------------------

    def add(self, item: T) -> AddResult:
        """Mark ``item`` as needing work. Never blocks beyond the queue's short lock; callable from any thread.

        Returns :class:`~keyqueue.AddResult`: ``QUEUED``, ``DEDUP`` (already dirty), ``MARKED`` (being processed:
        handed out once more after ``done``) or ``DROPPED`` (shut down; an add of a key that is still dirty may
        answer ``DEDUP`` instead: both change nothing). ``TypeError`` for an unhashable item, changing nothing.
        """
        # Lock-free dedup: a key found dirty makes this add a no-op at the instant of the probe, whatever the state
        # (a waiting key stays waiting; a processing + dirty key will be redelivered; after shutdown every add is a
        # no-op). The probe is one read of a built-in set that is written only under the lock; such a read is atomic
        # with respect to its writers with or without a GIL (see the design docs).
        try:
            if item in self._fast_dirty:
                gil = self._gil
                n = gil.countdown  # GilHandOff.tick, inline: a method call would cost more than this add
                if n:
                    gil.countdown = n - 1
                else:
                    gil.yield_now()
                return DEDUP
        except TypeError:
            check_hashable(item)
            raise
        lock = self._lock
        if lock._is_owned():
            return self._defer(self.add, item)
        lock.acquire()
        try:
            outcome = self._core.add(item)
            if outcome is not QUEUED or not self._getters:
                return outcome
            self._wake_one()
        finally:
            lock.release()
        if self._hand_off_after_wake:
            self._gil.after_wake()
        return outcome

    def done(self, item: T) -> bool:
        """Finish processing ``item``: ``True`` if it was added again meanwhile and is queued again (once), else
        ``False``. Never blocks beyond the queue's short lock; callable from any thread, also after shutdown.
        ``done`` of a key that is not being processed changes nothing; ``TypeError`` for an unhashable item."""
        lock = self._lock
        if lock._is_owned():
            check_hashable(item)
            self._defer(self.done, item)
            return False
        lock.acquire()
        try:
            requeued = self._core.done(item)
            if requeued:
                if self._getters:
                    self._wake_one()
            elif self._drainers and self._core.idle():
                self._wake_drainers()
            return requeued
        finally:
            lock.release()

    def _apply(self, call: Callable[[T, Any], AddResult], item: T, arg: Any) -> AddResult:
        """Run the core's ``call(item, arg)`` under the lock and wake a getter if it queued a key or stored a
        delayed entry (which may be the earliest now); deferred when called inside one of the queue's calls."""
        lock = self._lock
        if lock._is_owned():
            check_hashable(item)
            return self._defer(self._apply, call, item, arg)
        lock.acquire()
        try:
            outcome = call(item, arg)
            woke = (outcome is QUEUED or outcome is DELAYED) and self._getters
            if woke:
                self._wake_one()
        except TypeError:
            check_hashable(item)  # an unhashable item: the clear message; nothing has changed
            raise
        finally:
            lock.release()
        if woke and outcome is QUEUED and self._hand_off_after_wake:
            self._gil.after_wake()  # a DELAYED entry only made a getter look again: nothing to hand over
        return outcome

    def _acquire(self, call: str) -> None:
        """Take the lock for ``call``, which cannot be deferred: ``RuntimeError`` inside one of the queue's calls."""
        lock = self._lock
        if lock._is_owned():
            raise self._reentered(call)
        lock.acquire()

    def _reentered(self, call: str) -> RuntimeError:
        return RuntimeError(
            f"{call} was called inside one of this queue's own calls (from a signal handler or a __del__ that "
            "interrupted it); only add, add_after, add_rate_limited and done can be made there (they are applied "
            "once the interrupted call returns)"
        )

    # -- calls made inside the queue's own calls -------------------------------------------------------------

    def _defer(self, call: Callable[..., Any], *args: Any) -> AddResult:
        """Queue ``call(*args)`` for a helper thread, starting one unless one runs; returns ``DEFERRED``.

        Nothing here blocks or takes a lock the interrupted call could hold: the deque's ``append`` is atomic, the
        helper token is only tried, and the helper is started with :func:`_thread.start_new_thread`. The helper
        waits for the queue's lock like any thread, so the calls take effect, in order, once it is free."""
        self._deferred.append((call, args))
        if self._helper.acquire(False):
            _thread.start_new_thread(self._run_deferred, ())
        return DEFERRED

    def _run_deferred(self) -> None:
        pending = self._deferred
        while True:
            try:
                while pending:
                    call, args = pending.popleft()
                    try:
                        call(*args)
                    except Exception as exc:  # validated before it was deferred: report it and go on
                        sys.unraisablehook(_Unraisable(exc, call))  # type: ignore[arg-type]
            finally:
                self._helper.release()
            # A call deferred after the loop found the deque empty, but before the release, found the token taken.
            if not pending or not self._helper.acquire(False):
                return

    # -- what a getter or drain caller decides under the lock -------------------------------------------------

    def _wait_budget(self, wait: float | None, timeout: object, others_waiting: bool) -> float | None:
        """For a getter that found nothing ready (lock held): how long it may wait now (``None``: until woken). It is
        ``wait`` (what is left of its timeout), shortened to the real time until the next delayed key is due.
        Raises ``TimeoutError`` once ``wait <= 0``, first passing the wake-up on to another getter if a delayed key
        exists (``add_after`` may have woken this one to take on an earlier deadline)."""
        core = self._core
        if wait is not None and wait <= 0:
            if others_waiting and core.next_ready_ns() is not None:
                self._wake_one()
            raise TimeoutError(f"get() timed out after {timeout} s with no key ready")
        due = core.next_ready_ns()
        if due is not None:
            until_due = self.clock.real_wait(due)
            if until_due is not None and (wait is None or until_due < wait):
                return until_due
        return wait

    def _drain_verdict(self, remaining: float | None) -> bool | None:
        """One look of ``shut_down_with_drain()`` (lock held): ``True`` drained, ``False`` cancelled by
        ``shut_down()`` or out of time, ``None`` wait on."""
        core = self._core
        if core.idle():
            return True
        if not core.draining or (remaining is not None and remaining <= 0):
            return False
        return None

    # -- inspection ----------------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys waiting to be handed out (not counted: keys being processed, keys re-added while being processed,
        delayed keys not yet due). Informational: it may change at once."""
        self._acquire("len()")
        try:
            return self._core.ready_len()
        finally:
            self._lock.release()

    def stats(self) -> QueueStats:
        """Counters of the queue's decisions. ``RuntimeError`` unless built with ``stats=True``."""
        self._acquire("stats()")
        try:
            counted = self._core.stats()
        finally:
            self._lock.release()
        if counted is None:
            raise RuntimeError("this queue does not count its decisions; build it with stats=True")
        return counted

    def snapshot(self) -> QueueSnapshot:
        """The sizes of the dirty set, the waiting keys, the processing set and the delayed entries, read together
        under the lock (O(1); nothing fired or changed). Informational: the queue may change right after."""
        self._acquire("snapshot()")
        try:
            return self._core.snapshot()
        finally:
            self._lock.release()

    @property
    def shutting_down(self) -> bool:
        """True once ``shut_down()`` or ``shut_down_with_drain()`` has been called."""
        return self._core.shutting_down

    def __repr__(self) -> str:
        s = self._core.snapshot()
        waiting = f"ready={s.dirty}" if isinstance(self._core, PriorityCore) else f"queued={s.fifo}"
        return (f"<{type(self).__name__} name={self.name!r} {waiting} processing={s.processing} "
                f"delayed={s.delayed} shutting_down={s.shutting_down}>")


class DelayedAdds(Shell[T]):
    """``add_after``: both shells' ``DelayingQueue``."""

    def add_after(self, item: T, delay: float) -> AddResult:
        """Add ``item`` after ``delay`` seconds on the queue's clock (``<= 0``: now; ``math.inf``: never). Never
        blocks; callable from any thread.

        Of several delayed adds of one key the earliest time wins; a plain ``add`` does not cancel a delayed entry
        (the key is processed now and again when it falls due). Delayed entries are dropped at shutdown. Returns
        ``DELAYED`` or ``DELAY_KEPT`` for a delayed entry, else what ``add`` returns. ``TypeError`` for an unhashable
        item or a non-number delay, ``ValueError`` for NaN; nothing changes then. No background thread exists: a
        waiting ``get()`` fires the entry when it is due, or the next ``get()``/``len()`` after that.
        """
        if delay.__class__ is not float or delay != delay:
            delay = check_delay(delay)
        return self._apply(self._core.add_after, item, delay)


class RateLimitedAdds(DelayedAdds[T]):
    """``add_rate_limited``, ``forget``, ``num_requeues`` and the ``rate_limiter`` argument: both shells'
    ``RateLimitingQueue``."""

    def __init__(self, rate_limiter: RateLimiter[T] | None = None, *, name: str = "", clock: Clock | None = None,
                 metrics_provider: Any = None, stats: bool = False, ordering: Ordering[T] | None = None) -> None:
        if rate_limiter is not None:
            check_limiter("rate_limiter", rate_limiter)
        super().__init__(name=name, clock=clock, metrics_provider=metrics_provider, stats=stats, ordering=ordering)
        self.rate_limiter: RateLimiter[T] = (
            rate_limiter if rate_limiter is not None else self._default_limiter()
        )

    def _default_limiter(self) -> RateLimiter[T]:
        return default_controller_rate_limiter(clock=self.clock)

    def add_rate_limited(self, item: T) -> AddResult:
        """``add_after(item, rate_limiter.when(item))``: records a failure of ``item`` and schedules it. Never
        blocks (the limiter computes a delay; it is called with the queue's lock held, so it must not call back
        into the queue). As in client-go the limiter is consulted even after shutdown (the add is then dropped).
        An unhashable item raises ``TypeError`` before the limiter records anything."""
        return self._apply(self._core.add_rate_limited, item, self.rate_limiter.when)

    def forget(self, item: T) -> None:
        """Clear the limiter's memory of ``item`` (its backoff starts over). Does not touch the queue."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """How many failures of ``item`` the limiter remembers."""
        return self.rate_limiter.num_requeues(item)


class PriorityAdds(RateLimitedAdds[T]):
    """controller-runtime's priority queue, for both shells (the rules are
    :class:`~keyqueue._core.PriorityCore`'s). ``rate_limiter`` defaults to controller-runtime's: per-key
    exponential 5 ms .. 1000 s, no token bucket."""

    _core: PriorityCore[T]

    def __init__(self, rate_limiter: RateLimiter[T] | None = None, *, name: str = "", clock: Clock | None = None,
                 metrics_provider: Any = None, stats: bool = False) -> None:
        super().__init__(rate_limiter, name=name, clock=clock, metrics_provider=metrics_provider, stats=stats)

    def _default_limiter(self) -> RateLimiter[T]:
        return default_priority_rate_limiter()

    def _new_core(self, recorder: Any, stats: bool, ordering: Ordering[T] | None) -> QueueCore[T]:
        self._depth = None if recorder is None else PriorityDepth()
        if isinstance(recorder, PullRecorder):
            recorder.priority_depth = self._depth
        core: PriorityCore[T] = PriorityCore(self.clock, metrics=recorder, stats=stats, depth=self._depth)
        self._ranks = core.order.ranks
        return core

    def add(self, item: T, *, priority: int = 0, after: float = 0.0,
            rate_limited: bool = False) -> AddResult:
        """Add ``item`` at ``priority`` (an int, higher first; default 0), now or after ``after`` seconds, or
        rate limited. Never blocks beyond the queue's short lock; callable from any thread.

        * ``after <= 0``: ready now; ``after > 0``: ready then (``math.inf``: never).
        * ``rate_limited=True``: the limiter records a failure and its delay ``r`` is used, or ``after`` if that is
          set (non-zero) and smaller. The limiter is not consulted once the queue is shut down.
        * Merging into a queued key: the highest priority wins (a strictly higher one sends the key to the back of
          its new priority's line); the earliest ready time wins; a ready key stays ready.

        Returns :class:`~keyqueue.AddResult`: ``QUEUED``, ``MARKED`` (being processed; ready again after ``done``),
        ``DEDUP`` (ready at this priority or higher), ``DELAYED`` / ``DELAY_KEPT`` (waiting; its time or priority
        changed / nothing changed), ``DROPPED``. ``TypeError`` for an unhashable item, a non-int priority or a
        non-number ``after``, ``ValueError`` for a NaN ``after``; nothing changes then.
        """
        if priority.__class__ is not int:
            check_priority(priority)
        if after.__class__ is not float or after != after:
            after = check_delay(after, "after")
        core = self._core
        if after <= 0 and not rate_limited:
            # Lock-free dedup: a key ready at this priority or higher makes this add a no-op (as in Shell.add); the
            # rank read is one dict lookup and one read of a list item, each atomic with respect to the writers.
            try:
                rank = self._ranks.get(item)
            except TypeError:
                check_hashable(item)
                raise
            if rank is not None and -rank[0] >= priority and core.counts is None:
                self._gil.tick()
                return DEDUP
        lock = self._lock
        if lock._is_owned():
            check_hashable(item)
            return self._defer(functools.partial(self.add, item, priority=priority, after=after,
                                                 rate_limited=rate_limited))
        lock.acquire()
        try:
            if rate_limited:
                outcome = core.add_rate_limited(item, self.rate_limiter.when, priority, after)
            elif after > 0:
                outcome = core.add_after(item, after, priority)
            else:
                outcome = core.add(item, None, priority)
            woke = (outcome is QUEUED or outcome is DELAYED) and self._getters
            if woke:
                self._wake_one()
        except TypeError:
            check_hashable(item)
            raise
        finally:
            lock.release()
        if woke and outcome is QUEUED and self._hand_off_after_wake:
            self._gil.after_wake()
        return outcome

    def add_after(self, item: T, delay: float, *, priority: int = 0) -> AddResult:
        """``add(item, priority=priority, after=delay)``: unlike client-go's delaying queue, a delayed add merges
        into the key's entry (the earliest time wins), so it never causes a second hand-out."""
        return self.add(item, priority=priority, after=check_delay(delay))

    def add_rate_limited(self, item: T, *, priority: int = 0) -> AddResult:
        """``add(item, priority=priority, rate_limited=True)``."""
        return self.add(item, priority=priority, rate_limited=True)

    def __len__(self) -> int:
        """Ready keys, including keys re-added while being processed (handed out after their ``done``); keys
        waiting for a delay are not counted (controller-runtime's ``Len``)."""
        return super().__len__()

    def depth_by_priority(self) -> dict[str, int]:
        """Ready keys per priority label (controller-runtime's ``workqueue_depth{priority}``; at most 25 labels,
        then ``exceeded_cardinality_limit``). Empty for a queue that emits no metrics."""
        if self._depth is None:
            return {}
        self._acquire("depth_by_priority()")
        try:
            return self._depth.snapshot()
        finally:
            self._lock.release()


class _Unraisable:
    """The argument :func:`sys.unraisablehook` expects, for an exception raised by a deferred call."""

    def __init__(self, exc: Exception, call: object) -> None:
        self.exc_type = type(exc)
        self.exc_value = exc
        self.exc_traceback = exc.__traceback__
        self.err_msg = "Exception in a keyqueue call deferred from a signal handler or __del__"
        self.object = call
