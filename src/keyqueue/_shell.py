"""What the threading shell and the asyncio shell share: everything except waiting and waking.

A shell is one :class:`~keyqueue._core.QueueCore` behind one :class:`threading.Lock`. The adding side (``add``,
``add_after``, ``add_rate_limited``), inspection and construction are identical in both shells and live here;
each shell supplies only how a getter waits and is woken (:meth:`ShellBase._init_waiting`,
:meth:`ShellBase._wake_one`, :meth:`ShellBase._on_clock_jump`) and its blocking or awaitable methods.
"""

from __future__ import annotations

import _thread
import functools
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from types import CodeType, FrameType, TracebackType
from typing import Any, ClassVar, Final, Generic, TypeVar, cast

from keyqueue._build import mypyc_attr
from keyqueue._core import (
    DEDUP,
    DEFERRED,
    DELAYED,
    DROPPED,
    QUEUED,
    AddResult,
    CoreBase,
    CountingCore,
    Ordering,
    QueueCore,
    QueueSnapshot,
    QueueStats,
    check_delay,
    check_hashable,
    check_ordering,
)
from keyqueue.clock import Clock, RealClock
from keyqueue.metrics import recorder_for
from keyqueue.metrics._recorders import PullRecorder, bind_core
from keyqueue.ratelimit import RateLimiter

__all__ = ["COMPILED", "ENTRY_CODES", "HolderLock", "ShellBase"]

T = TypeVar("T", bound=Hashable)

_sleep = time.sleep  # module attributes (not Final): the tests replace _sleep
_monotonic_ns = time.monotonic_ns
_active_count = threading.active_count


def _probe() -> None:
    """Only looked at: compiled by mypyc, a function has no ``__code__`` (see :data:`COMPILED`)."""


#: True when this module runs compiled (the optional mypyc build, see :mod:`keyqueue._build`). A compiled call has
#: no Python frame, so the frame walk of :meth:`ShellBase._acquire_unless_own` could not find it: the compiled build
#: guards every queue with a :class:`HolderLock` instead, which knows the thread that holds it.
COMPILED: Final = not hasattr(_probe, "__code__")

#: Every this many lock-free dedup adds and threading-shell ``get`` calls (one count per queue), the call lets go
#: of the GIL once before it does anything else (see :meth:`ShellBase._yield_gil`).
YIELD_EVERY: Final = 512 if COMPILED else 256

#: At most one GIL hand-off after a wake-up per this many ns per queue (see :meth:`ShellBase._hand_off`).
HANDOFF_GAP_NS: Final = 300_000 if COMPILED else 100_000

# Both pairs aim at about the same time between two yields. A compiled dedup add is 2-3x cheaper, so with the pure
# build's 256 and 100 µs the GIL changed hands too often: in interleaved runs of the 8-adder row the compiled build
# did 1.25-1.59 M adds/s and 524-547k keys/s with them, and 1.53-2.05 M adds/s and 585-673k keys/s with 512 and
# 300 µs (firehose 2.6 -> 4.3-4.9 M adds/s; the wake-up row 30-34 -> 32-35 µs). The pure build's wake-up row went
# from ~42 to 128-157 µs with 512 and 300 µs (a woken worker waits for the adder's next yield), so it keeps its pair.


@mypyc_attr(allow_interpreted_subclasses=True)
class HolderLock:
    """The compiled build's queue lock: a lock that knows whether the calling thread holds it.

    It is an :class:`_thread.RLock`, which records its owner as part of each acquisition (in C, so with no gap),
    used as a plain lock: ``acquire`` by the thread that already holds it does not nest. A blocking one raises
    ``RuntimeError`` (a call that cannot be deferred, such as ``get``, ``len`` or ``shut_down``, made by a signal
    handler or ``__del__`` that interrupted one of the queue's own calls; with a plain lock, as in the pure build,
    it would deadlock), a non-blocking one returns ``False``. A compiled call of the queue can only be interrupted
    where it calls Python code or frees an object, and the pure build's frame walk cannot see compiled calls, so
    :meth:`ShellBase._acquire_unless_own` asks :meth:`_is_owned` instead. The pure build keeps a bare
    :class:`threading.Lock` (cheaper there) and the frame walk.

    It offers what the shells, :class:`threading.Condition` and the metrics recorders use: ``acquire``
    (``blocking``, ``timeout`` as in :meth:`threading.Lock.acquire`), ``release`` (only by the holder),
    ``locked``, ``with``, and ``_is_owned`` (True exactly in the thread that holds it; :class:`threading.Condition`
    uses it to check that ``wait`` and ``notify`` are called with the lock held).

    Invariant: ``_held`` is True from right after an acquisition to right before its release. It is only a hint
    for ``locked()`` (a thread that finds it wrong still ends up waiting for the lock or deferring its call
    correctly, because that choice is made by ``_is_owned``); only the holder writes it.
    """

    def __init__(self) -> None:
        raw = _thread.RLock()
        # The bound C methods, taken once: a call by name would look the method up every time.
        self._raw_acquire: Callable[..., bool] = raw.acquire
        self._raw_release: Callable[[], None] = raw.release
        self._raw_owned: Callable[[], bool] = cast(Any, raw)._is_owned
        self._held = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._raw_owned():
            if blocking and timeout == -1:
                raise RuntimeError(
                    "this thread already holds the queue's lock: a call other than add, add_after, add_rate_limited "
                    "or done was made inside one of the queue's own calls (from a signal handler or a __del__); "
                    "only those can be deferred until the interrupted call returns"
                )
            return False
        if blocking and timeout == -1:
            self._raw_acquire()  # no arguments: parsing them (and a timeout's clock read) costs more than the rest
        elif not self._raw_acquire(blocking, timeout):
            return False
        self._held = True
        return True

    def release(self) -> None:
        self._held = False
        self._raw_release()

    def locked(self) -> bool:
        return self._held

    def _is_owned(self) -> bool:
        return self._raw_owned()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
                 /) -> None:
        self.release()


def _clock_jumped(queue: ShellBase[Any]) -> None:
    queue._on_clock_jump()

# Code of the public entry points that may be called from a signal handler or __del__ (add, add_after,
# add_rate_limited, done, and the priority queue's add): frames of these directly above a busy-lock check belong to
# the call being made, not to an interrupted one (add_rate_limited -> add_after). keyqueue.priority adds its own.
ENTRY_CODES: set[CodeType] = set()


@mypyc_attr(allow_interpreted_subclasses=True)
class ShellBase(Generic[T]):
    """Construction, ``add`` (with the lock-free dedup path), ``len``, ``stats``, ``shutting_down``."""

    # Truthy while at least one getter (or drain caller) waits: a count in the threading shell, a collection of
    # futures in asyncio. Adds and dones skip waking when nobody waits.
    _getters: Any
    _drainers: Any
    #: The rate-limited queues' limiter (set by ``keyqueue._delayed.RateLimitedAdds``; other queues have none).
    rate_limiter: RateLimiter[T]

    #: An ``add`` that woke a blocked getter then lets go of the GIL once (``time.sleep(0)``, after releasing the
    #: lock; at most once per :data:`HANDOFF_GAP_NS` per queue, see :meth:`_hand_off`). A getter thread woken by
    #: ``notify`` still needs the GIL to return, and the adding thread (an informer, an HTTP server's loop)
    #: usually goes on running Python code: without the hand-off the woken getter waits until the adder blocks or
    #: a switch interval (5 ms) runs out, or loses the GIL to a third thread. The threading shell sets it;
    #: asyncio getters run on the loop's thread, so the asyncio shell does not.
    _yield_after_wake: ClassVar[bool] = False

    #: How :func:`sys.unraisablehook` introduces an exception raised by a deferred call (see :meth:`_defer`).
    _deferred_what: ClassVar[str] = "Exception in a keyqueue call deferred from a signal handler or __del__"

    def __init__(
        self,
        *,
        name: object = "",  # object: validated here, with an error naming it (compiled, a str check would not)
        clock: Clock | None = None,
        metrics_provider: Any = None,
        stats: bool = False,
        ordering: Ordering[T] | None = None,
    ) -> None:
        if ordering is not None:
            check_ordering(ordering)
        self._ordering = ordering
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}: {name!r}")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(
                f"clock must be a keyqueue.Clock (RealClock, FakeClock or a subclass), got {type(clock).__name__}: "
                f"{clock!r:.80}"
            )
        self.name = name
        self.clock: Clock = clock if clock is not None else RealClock()
        # Guards the core and the shell's waiter bookkeeping. Held only for a core call, never while waiting.
        self._lock = self._new_lock()
        self._init_waiting()
        self._core: CoreBase[T] = self._new_core(name, metrics_provider, stats)
        self._fast_dirty = self._core.fast_dirty
        self._until_yield = YIELD_EVERY
        self._next_handoff_ns = 0  # see _hand_off
        # Set (never cleared) once more than one thread is seen using the queue: a busy lock found by add/done, a
        # getter that waits, or a countdown of lock-free dedup adds run out. Until then get() skips its GIL
        # hand-off countdown, so a queue used by one thread (or one at a time) pays one attribute test for it.
        # Written without the lock: a lost or late write only delays the first hand-off.
        self._contended = False
        self._deferred: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._helper_token = _thread.allocate_lock()  # held while a helper thread applies deferred calls
        # The clock keeps a weak reference to its listener: this partial, which the queue keeps alive (a cycle, freed
        # with the queue). A bound method would need a weak reference to the queue itself, which a compiled
        # (native) instance does not support.
        self._clock_listener = functools.partial(_clock_jumped, self)
        self.clock.subscribe(self._clock_listener)

    # -- what each shell supplies -------------------------------------------------------------------------

    def _new_lock(self) -> HolderLock:
        """The lock that guards the core (called once, right after ``name`` and ``clock`` are set): a
        :class:`threading.Lock`, in the compiled build a :class:`HolderLock` (typed as one in both builds, so that
        compiled code calls its methods directly). The shared code uses only its ``acquire``, ``release``,
        ``locked`` and ``with``; the loop-owned asyncio queues return an owner check with those four instead (see
        :class:`keyqueue.aio.LoopQueue`)."""
        return HolderLock() if COMPILED else cast(HolderLock, threading.Lock())

    def _init_waiting(self) -> None:
        """Create the waiter bookkeeping (``self._lock`` exists already)."""
        raise NotImplementedError

    def _wake_one(self) -> None:
        """Wake one waiting getter so it re-checks the queue. Called with the lock held, only if ``_getters``."""
        raise NotImplementedError

    def _wake_drainers(self) -> None:
        """Wake every ``shut_down_with_drain()`` caller (the queue may have drained). Called with the lock held,
        only if ``_drainers``."""
        raise NotImplementedError

    def _on_clock_jump(self) -> None:
        """The clock jumped (``FakeClock.step``, from any thread): waiting getters re-check what is due."""
        raise NotImplementedError

    def _new_core(self, name: str, metrics_provider: Any, stats: bool) -> CoreBase[T]:
        # Hook: build the state machine and its metrics recorder (keyqueue.priority swaps in a PriorityCore).
        recorder = recorder_for(name, metrics_provider, self.clock, self._lock)
        core: QueueCore[T] = (CountingCore if stats else QueueCore)(self.clock, recorder, self._ordering)
        if recorder is not None:
            bind_core(recorder, core.promote_due)
            if type(recorder) is PullRecorder:  # exactly keyqueue's own: the core keeps its ledger (no calls)
                core.keep_ledger(recorder)
        return core

    # -- adding ------------------------------------------------------------------------------------------

    def add(self, item: T) -> AddResult:
        """Mark ``item`` as needing work. Never blocks (beyond the queue's short lock); callable from any thread.
        Every :data:`YIELD_EVERY`-th lock-free dedup add lets go of the GIL once, so that a thread adding in a loop
        does not starve the workers (see :meth:`_yield_gil`); in the threading shell an add that woke a blocked
        getter also lets go of it once (at most once per :data:`HANDOFF_GAP_NS` per queue), after releasing the
        lock, so that the getter runs promptly (see :attr:`_yield_after_wake`).

        Returns what the queue did (:class:`~keyqueue.AddResult`): ``QUEUED``, ``DEDUP`` (already dirty),
        ``MARKED`` (being processed: it will be handed out once more after ``done``) or ``DROPPED`` (shut down).
        After shutdown an add never changes anything; for a key that is still dirty it may report ``DEDUP``
        rather than ``DROPPED`` (both are no-ops). Raises ``TypeError`` (naming the type) for an unhashable item;
        the queue is unchanged.
        """
        # Lock-free dedup. If the probe sees item in dirty, this add is linearised at the probe: at that instant
        # the locked algorithm would also have returned without a change (a dirty key is a no-op whether it is
        # waiting or being processed, and after shutdown every add is a no-op). Being dirty at that instant
        # guarantees a hand-out that starts after it (the key is in the fifo, or done() will re-queue it), which
        # is all an add promises. The probe is one read of a built-in set that is written only under the lock;
        # such reads are atomic with respect to the set's writers in CPython with or without the GIL, so it sees
        # a state the set really had. If the probe misses (or fast_dirty is the empty set of a core that must
        # see every add), the add runs under the lock.
        try:
            if item in self._fast_dirty:
                n = self._until_yield
                if n:
                    self._until_yield = n - 1
                else:
                    self._yield_gil()
                return DEDUP
        except TypeError:
            check_hashable(item)
            raise
        lock = self._lock
        if not lock.locked():
            lock.acquire()
        elif not self._acquire_unless_own():
            return self._defer(self.add, item)
        try:
            outcome = self._core.add(item)
            if outcome is not QUEUED or not self._getters:  # `is`: enum members are singletons
                return outcome
            self._wake_one()
        finally:
            lock.release()
        if self._yield_after_wake:
            self._hand_off()  # outside the lock: the getter just woken can take the GIL now
        return outcome

    def _hand_off(self) -> None:
        """After an add woke a blocked getter (threading shell, lock released): let go of the GIL once
        (``time.sleep(0)``), unless this queue did so less than :data:`HANDOFF_GAP_NS` ago.

        The gap bounds what the hand-off can cost: adders that wake getters at a high rate (producers outpacing the
        workers) would otherwise switch the GIL at every add, and every switch leaves the GIL idle until the woken
        thread is on a core (a convoy: in the 8-adder benchmark 28k keys/s and 0.03-0.1 M adds/s without the gap,
        519k keys/s and 1.4-1.5 M adds/s with a gap of 100 µs). The time check and the write are not atomic; a lost
        update only moves one hand-off."""
        now = _monotonic_ns()
        if now >= self._next_handoff_ns:
            self._next_handoff_ns = now + HANDOFF_GAP_NS
            _sleep(0)

    def _yield_gil(self) -> None:
        """Called by every :data:`YIELD_EVERY`-th lock-free dedup add or threading-shell ``get``, never with the
        lock held: let go of the GIL once (``time.sleep(0)``) if other threads exist.

        A lock-free add never blocks, so a thread that adds in a loop (an informer, a firehose) would otherwise
        keep the GIL for whole switch intervals (5 ms) while a worker woken by an add waits for it (~3 ms
        median from add to ``get``). A worker that always finds a key ready never blocks either; CPython then
        preempts it after a switch interval at any bytecode, most often while it holds the queue's lock, and every
        thread that needs the lock next sleeps on it (a lock convoy). Handing the GIL over every few microseconds,
        at a point where the lock is free, avoids both. The countdown is a plain attribute shared by all threads;
        a lost update under concurrency only moves one yield, so it needs no lock. With no other thread alive the
        call only resets the count.
        """
        self._until_yield = YIELD_EVERY
        self._contended = True
        if _active_count() > 1:
            _sleep(0)

    # -- the delaying and rate-limited adds (keyqueue._delayed gives them their public names) ---------------

    def _add_after(self, item: T, delay: object) -> AddResult:
        """Add ``item`` after ``delay`` seconds on the queue's clock; ``delay <= 0`` adds now, ``math.inf`` never.
        Never blocks; callable from any thread.

        Of several delayed adds of one key the earliest time wins. A plain ``add`` does not cancel a delayed
        entry (the key is processed now and again when the entry fires). Dropped after shutdown; delayed entries
        are discarded at shutdown. Raises ``TypeError`` for an unhashable item or a non-number delay and
        ``ValueError`` for NaN; the queue is unchanged. Returns :class:`~keyqueue.AddResult` (``DELAYED`` or
        ``DELAY_KEPT`` for a delayed entry, else what ``add`` returns). No background thread or task exists:
        the entry is fired by a waiting ``get()``, or by the next ``get()``/``len()`` after it is due.
        (``DelayingQueue.add_after``; ``delay`` is typed ``object`` because it is validated here.)
        """
        lock = self._lock
        if not lock.locked():
            lock.acquire()
        elif not self._acquire_unless_own():
            delay = check_delay(delay)
            check_hashable(item)
            return self._defer(self._add_after, item, delay)
        try:
            outcome = self._core.add_after(item, delay)  # validates delay and item before any change
            if (outcome is QUEUED or outcome is DELAYED) and self._getters:
                # DELAYED: the entry may now be the earliest; a waiter re-computes how long to sleep.
                self._wake_one()
            return outcome
        finally:
            lock.release()

    def _add_rate_limited(self, item: T) -> AddResult:
        """``add_after(item, rate_limiter.when(item))``: records a failure of ``item`` and schedules it.

        Never blocks (the limiter computes a delay, it does not sleep; it is called with the queue's lock held,
        as the priority queue always did, so it must not call back into the queue). As in client-go the limiter
        is consulted even after shutdown (the add itself is then dropped). All-or-nothing: an unhashable item
        (``TypeError``) or a key whose own ``__hash__``/``__eq__`` raises against what the queue holds raises
        before the limiter records anything, and the queue is unchanged. What cannot be undone, because a
        limiter has no undo: a limiter that records a failure and then raises, or a key whose methods raise only
        on a later call, after ``when`` returned (the queue is still unchanged, the failure stays counted).
        (``RateLimitingQueue.add_rate_limited``.)
        """
        check_hashable(item)
        lock = self._lock
        if not lock.locked():
            lock.acquire()
        elif not self._acquire_unless_own():
            return self._defer(self._add_rate_limited, item)
        try:
            outcome = self._core.add_rate_limited(item, self.rate_limiter.when)
            if (outcome is QUEUED or outcome is DELAYED) and self._getters:
                self._wake_one()  # as in add_after
            return outcome
        finally:
            lock.release()

    def _forget(self, item: T) -> None:
        """Clear the limiter's memory of ``item`` (its backoff starts over). Does not touch the queue itself.
        (``RateLimitingQueue.forget``.)"""
        self.rate_limiter.forget(item)

    def _num_requeues(self, item: T) -> int:
        """How many failures of ``item`` the limiter remembers. (``RateLimitingQueue.num_requeues``.)"""
        return self.rate_limiter.num_requeues(item)

    # -- calls from a signal handler or __del__ (issue 16) ------------------------------------------------

    def _acquire_unless_own(self) -> bool:
        """The lock is busy (``locked()`` was true just now). Returns ``False`` at once if a frame of this very
        thread may be inside one of this queue's calls, i.e. may hold the lock: the call was made from a signal
        handler or a ``__del__`` that interrupted it, and waiting would deadlock. Otherwise another thread holds
        the lock: block until it is free, acquire it and return ``True``.

        Only this slow path looks at frames; the uncontended path costs one ``locked()`` call before its usual
        blocking ``acquire()`` (a non-blocking ``acquire(False)`` parses its argument and costs more). The lock
        may be taken by another thread between the two: the blocking acquire then waits as it always did; it
        cannot be taken by this thread, whose calls all release it before returning. A frame counts
        if its ``self`` is the queue, its core, its metrics recorder or one of its conditions (that covers the
        waits inside :mod:`threading`); a false alarm (this thread is inside the queue without the lock while
        another thread holds it) only defers the call, which is still applied."""
        self._contended = True
        lock = self._lock
        if COMPILED:  # the HolderLock knows its holder, with no gap (see HolderLock)
            if lock._is_owned():
                return False
            lock.acquire()
            return True
        owners = self._lock_owners()
        f: FrameType | None = sys._getframe(2)  # skip this method and the entry point that called it
        while f is not None and f.f_code in ENTRY_CODES:
            f = f.f_back  # the entry points of the call being made (add_rate_limited -> add_after)
        while f is not None:
            if f.f_globals.get("__name__", "").startswith(("keyqueue", "threading")):
                me = f.f_locals.get("self")
                if me is not None and any(me is o for o in owners):
                    return False
            f = f.f_back
        lock.acquire()
        return True

    def _lock_owners(self) -> list[object]:
        """Objects whose methods run with this queue's lock held (see :meth:`_acquire_unless_own`)."""
        core = self._core
        owners: list[object] = [self, core]
        metrics = getattr(core, "metrics", None)  # both cores have one; CoreBase does not declare it
        if metrics is not None:
            owners += [metrics, getattr(metrics, "inner", metrics)]
        return owners

    def _defer(self, call: Callable[..., Any], *args: Any) -> AddResult:
        """Queue ``call(*args)`` for the helper thread and make sure one runs; returns ``DEFERRED`` (``DROPPED``
        if no runner can be started: see :meth:`_start_runner`).

        Nothing here blocks or takes a lock that the interrupted frame could hold: the deque's ``append`` is
        atomic, the helper token is only tried (never waited for), and the helper is started with
        :func:`_thread.start_new_thread` (no :mod:`threading` locks). The helper waits for the queue's lock like
        any other thread, so the call takes effect as soon as the interrupted call releases it, in the order the
        calls were deferred."""
        self._deferred.append((call, args))
        if self._helper_token.acquire(False) and not self._start_runner():
            # Nothing can apply the calls any more (a loop-owned queue's event loop is closed).
            self._helper_token.release()
            self._deferred.clear()
            return DROPPED
        return DEFERRED

    def _start_runner(self) -> bool:
        """Start :meth:`_run_deferred` (the helper token is held); ``False`` if it cannot run. Here: a helper
        thread; the loop-owned asyncio queues hand it to their event loop instead."""
        _thread.start_new_thread(self._run_deferred, ())
        return True

    def _run_deferred(self) -> None:
        pending = self._deferred
        token = self._helper_token
        while True:
            try:
                while pending:
                    self._apply_deferred(len(pending))
            finally:
                token.release()
            # A call deferred after the loop saw the deque empty, but before the release, found the token taken.
            if not pending or not token.acquire(False):
                return

    def _apply_deferred(self, n: int) -> None:
        """Apply the ``n`` oldest deferred calls, in order (the helper token is held)."""
        pending = self._deferred
        for _ in range(n):
            call, args = pending.popleft()
            try:
                call(*args)
            except Exception as e:  # the call was validated before it was deferred; report, go on
                sys.unraisablehook(cast(Any, _Unraisable(e, call, self._deferred_what)))

    # -- completing --------------------------------------------------------------------------------------

    def done(self, item: T) -> bool:
        """Finish processing ``item``. If it was added again meanwhile, it is queued again (once) and ``True``
        is returned (a redelivery); otherwise ``False``. Never blocks (beyond the queue's short lock); callable
        from any thread.

        ``done`` of a key that is not being processed changes nothing. Works after shutdown too (a re-added key
        is still queued and handed out, so a drain can finish it). Raises ``TypeError`` for an unhashable item and
        :class:`~keyqueue.KeyMutatedError` for a key whose hash changed while it was being processed (it is then
        dropped, and so is a re-add of it made meanwhile); an exception from the key's own ``__eq__`` propagates
        with nothing changed.
        """
        lock = self._lock
        if not lock.locked():
            lock.acquire()
        elif not self._acquire_unless_own():
            check_hashable(item)
            self._defer(self.done, item)
            return False
        try:
            requeued = self._core.done(item)
            if requeued or self._drainers:
                self._after_done(requeued)
            return requeued
        finally:
            lock.release()

    def _after_done(self, requeued: bool) -> None:
        """After a ``done`` (lock held) that re-queued its key or may have left the queue idle with drain callers
        waiting: a re-queued key wakes a getter; an idle queue wakes every drain caller."""
        if requeued:
            if self._getters:
                self._wake_one()
        elif self._drainers and self._core.idle():
            self._wake_drainers()

    def _wait_budget(self, wait: float | None, timeout: object, others_waiting: bool) -> float | None:
        """For a getter that found nothing ready (lock held): how long it may wait now, in seconds (``None``: until
        woken). ``wait`` is what is left of its timeout (``None``: no timeout); the result is that, shortened to
        the real time until the next delayed key falls due. Raises ``TimeoutError`` once ``wait <= 0``, after
        passing the wake-up on to another getter (``others_waiting``) if a delayed key exists: ``add_after`` may
        have woken this one to take on a new, earlier deadline."""
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

    def _after_failed_pop(self) -> None:
        """``pop()`` raised (lock held): the keys behind the failed one may be ready, and this getter may have been
        the one woken for them, so pass the wake-up on."""
        if self._getters and self._core.has_ready():
            self._wake_one()

    def _drain_verdict(self, remaining: float | None) -> bool | None:
        """One check of ``shut_down_with_drain()`` (lock held): ``True`` drained (FIFO empty, nothing being
        processed), ``False`` cancelled by ``shut_down()`` or out of time (``remaining`` <= 0), ``None`` wait on."""
        core = self._core
        if core.idle():
            return True
        if not core.draining or (remaining is not None and remaining <= 0):
            return False
        return None

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
        """True once ``shut_down()`` or ``shut_down_with_drain()`` has been called."""
        return self._core.shutting_down

    def __repr__(self) -> str:
        core: Any = self._core  # a QueueCore's fields (a priority queue has its own repr)
        return (
            f"<{type(self).__name__} name={self.name!r} queued={len(core.fifo)} "
            f"processing={len(core.processing)} delayed={core.delayed_count} "
            f"shutting_down={core.shutting_down}>"
        )

    def snapshot(self) -> QueueSnapshot:
        """The sizes of the dirty set, the FIFO, the processing set and the delayed entries, read together under
        the queue's lock (a consistent instant; O(1): four ``len`` calls, nothing copied, nothing fired or
        changed, no clock read). Never blocks beyond the lock; callable from any thread, also after shutdown.
        Informational: the queue may change right after. A priority queue has no separate dirty set: there
        ``dirty`` and ``fifo`` both count its ready keys (including keys re-added while being processed).
        """
        with self._lock:
            core = self._core
            if isinstance(core, QueueCore):
                return QueueSnapshot(len(core.dirty), len(core.fifo), len(core.processing), core.delayed_count,
                                     core.shutting_down)
            pcore: Any = core  # the priority core (keyqueue.priority swaps it in)
            ready = pcore.ready_count
            return QueueSnapshot(ready, ready, len(pcore.processing), pcore.delayed_count, core.shutting_down)


class _Unraisable:
    """The argument :func:`sys.unraisablehook` expects, for an exception raised by a deferred call."""

    def __init__(self, exc: Exception, call: object, what: str) -> None:
        self.exc_type = type(exc)
        self.exc_value = exc
        self.exc_traceback = exc.__traceback__
        self.err_msg = what
        self.object = call


if not COMPILED:  # compiled functions have no code objects (and the compiled build needs no frame walk)
    ENTRY_CODES.update(
        f.__code__ for f in (ShellBase.add, ShellBase.done, ShellBase._add_after, ShellBase._add_rate_limited)
    )
