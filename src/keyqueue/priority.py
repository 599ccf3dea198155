"""controller-runtime's priority queue for threads: :class:`PriorityQueue` (the asyncio one is
:class:`keyqueue.aio.PriorityQueue`).

A :class:`PriorityQueue` is a :class:`~keyqueue.RateLimitingQueue` (same methods, same shell, same one-holder-per-key
guarantee) whose state machine is a :class:`~keyqueue._priority_core.PriorityCore`:

* keys are handed out highest priority first, FIFO within a priority;
* re-adding a queued key keeps the **highest** priority (a raised key goes to the back of its new priority's line)
  and the **earliest** ready time; a ready key stays ready (a delayed add never delays it); a delayed key joins its
  priority's line when it becomes due;
* ``add(key, rate_limited=True, after=d)`` waits the smaller of the limiter's delay and ``d`` (``d == 0``: unset);
* ``len()`` counts ready keys, including keys re-added while being processed (they are handed out only after their
  ``done``); keys waiting for a delay are not counted.

Where it differs from controller-runtime, on purpose: adds apply synchronously (``len()`` and ``num_requeues()`` are
exact as soon as ``add`` returns; there is no background flusher); ``shut_down()`` is idempotent; after shutdown
``get()`` still hands out the ready keys, then raises :class:`~keyqueue.ShutDown` (controller-runtime drops them).
The default rate limiter is controller-runtime's: per-key exponential 5 ms .. 1000 s, no token bucket.

Metrics (for a named queue with a provider): the queue's metrics under their usual names, with controller-runtime's
priority-queue meaning (adds and depth count a key when it becomes ready, so a waiting key is not in depth; queue
latency runs from becoming ready to hand-out; retries count adds whose effective delay is > 0, merged or not), plus
depth per priority label (:meth:`PriorityQueue.depth_by_priority`, labels capped at 25 distinct values, see
:class:`PriorityDepth`). A :class:`~keyqueue.metrics.SnapshotMetricsProvider` snapshot carries it as
``QueueMetrics.depth_by_priority``; a :class:`~keyqueue.metrics.PrometheusMetricsProvider` exports it as
``workqueue_depth{name, priority}`` only when built with ``priority_label=True`` (by default ``workqueue_depth``
keeps client-go's label set, ``name``, and reports the total).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, TypeVar, cast

from keyqueue._core import DEDUP, DELAYED, QUEUED, AddResult, MetricsRecorder, QueueCore, check_delay, check_hashable
from keyqueue._priority_core import CountingPriorityCore, PriorityCore, check_priority
from keyqueue._shell import ENTRY_CODES, HolderLock
from keyqueue.clock import Clock
from keyqueue.metrics import recorder_for
from keyqueue.metrics._recorders import PullRecorder, bind_core
from keyqueue.ratelimit import ItemExponentialFailureRateLimiter, RateLimiter
from keyqueue.threaded import RateLimitingQueue

__all__ = ["MAX_PRIORITY_LABELS", "OVERFLOW_LABEL", "PriorityDepth", "PriorityQueue", "default_priority_rate_limiter"]

T = TypeVar("T", bound=Hashable)

#: controller-runtime's cap on distinct ``priority`` label values of ``workqueue_depth`` (#3419).
MAX_PRIORITY_LABELS: Final = 25
#: The label value used for every priority beyond the first :data:`MAX_PRIORITY_LABELS` distinct ones.
OVERFLOW_LABEL: Final = "exceeded_cardinality_limit"


def default_priority_rate_limiter() -> ItemExponentialFailureRateLimiter[Hashable]:
    """controller-runtime's priority-queue default: per-key exponential backoff 5 ms .. 1000 s, no token bucket."""
    return ItemExponentialFailureRateLimiter(0.005, 1000.0)


class PriorityDepth:
    """Ready keys per priority label, with controller-runtime's cardinality cap. Not thread-safe (the queue's
    lock guards it).

    The first :data:`MAX_PRIORITY_LABELS` distinct priorities seen get their decimal string as label; every later
    one is counted under :data:`OVERFLOW_LABEL`. A label, once given, stays (its count may drop to 0).
    """

    __slots__ = ("_depth", "_labels")

    def __init__(self) -> None:
        self._labels: dict[int, str] = {}
        self._depth: dict[str, int] = {}

    def label(self, priority: int) -> str:
        """The label ``priority`` is counted under (assigning one if it is new)."""
        label = self._labels.get(priority)
        if label is None:
            label = str(priority) if len(self._labels) < MAX_PRIORITY_LABELS else OVERFLOW_LABEL
            self._labels[priority] = label
        return label

    def inc(self, priority: int) -> None:
        label = self.label(priority)
        self._depth[label] = self._depth.get(label, 0) + 1

    def dec(self, priority: int) -> None:
        label = self.label(priority)
        self._depth[label] = self._depth.get(label, 0) - 1

    def snapshot(self) -> dict[str, int]:
        """label → ready keys at that priority (labels that ever had a key; counts may be 0)."""
        return dict(self._depth)


class PriorityRecorder:
    """Adapts the queue's metrics recorder (:class:`~keyqueue._core.MetricsRecorder`) to the priority core's
    hooks and keeps :class:`PriorityDepth`. When ``inner`` is a snapshot provider's recorder, the depth is attached
    to it (``PullRecorder.priority_depth``) so that snapshots and scrapes read it under the queue's lock."""

    __slots__ = ("depth", "inner")

    def __init__(self, inner: MetricsRecorder) -> None:
        self.inner = inner
        self.depth = PriorityDepth()
        if isinstance(inner, PullRecorder):
            inner.priority_depth = self.depth

    def add(self, item: Hashable, t_ns: int, priority: int) -> None:
        self.depth.inc(priority)
        self.inner.add(item, t_ns)

    def get(self, item: Hashable, t_ns: int, priority: int) -> None:
        self.depth.dec(priority)
        self.inner.get(item, t_ns)

    def done(self, item: Hashable, t_ns: int) -> None:
        self.inner.done(item, t_ns)

    def reprioritize(self, item: Hashable, old_priority: int, new_priority: int) -> None:
        depth = self.depth
        depth.dec(old_priority)
        depth.inc(new_priority)

    def retry(self) -> None:
        self.inner.retry()

    def shut_down(self, t_ns: int) -> None:
        self.inner.shut_down(t_ns)

    def lost(self, item: Hashable, ready_priority: int | None) -> None:
        if ready_priority is not None:
            self.depth.dec(ready_priority)
        self.inner.lost(item)


def new_priority_core(
    name: str, metrics_provider: Any, stats: bool, clock: Clock, lock: HolderLock
) -> tuple[PriorityCore[Any], PriorityRecorder | None]:
    """Build the priority core (counting if ``stats``) with its recorder, which also keeps the per-priority depth.
    A queue that emits no metrics (empty name, no-op provider) gets no recorder at all."""
    inner = recorder_for(name, metrics_provider, clock, lock)
    recorder = PriorityRecorder(inner) if inner is not None else None
    core: PriorityCore[Any] = (CountingPriorityCore if stats else PriorityCore)(clock, recorder)
    if recorder is not None:
        bind_core(recorder, core.promote_due)
    return core, recorder


class PriorityAdds(Generic[T]):
    """The priority-aware adds both priority queue shells share. A shell provides ``_lock``, ``_pcore``,
    ``rate_limiter``, ``_getters`` and ``_wake_one()`` (see :class:`keyqueue._shell.ShellBase`; called with the
    lock held when a getter may now find a key or must re-compute how long to sleep)."""

    _lock: HolderLock
    _pcore: PriorityCore[T]
    _precorder: PriorityRecorder | None
    _fast_items: dict[T, Any] | None
    rate_limiter: RateLimiter[T]
    clock: Clock
    name: str
    _until_yield: int
    _yield_gil: Callable[[], None]  # ShellBase._yield_gil
    _acquire_unless_own: Callable[[], bool]  # ShellBase._acquire_unless_own
    _defer: Callable[..., AddResult]  # ShellBase._defer

    def __init__(
        self,
        rate_limiter: RateLimiter[T] | None = None,
        *,
        name: str = "",
        clock: Clock | None = None,
        metrics_provider: Any = None,
        stats: bool = False,
    ) -> None:
        # The shell's RateLimitingQueue comes next in the MRO; only the default limiter differs.
        super().__init__(  # type: ignore[call-arg]
            rate_limiter if rate_limiter is not None else default_priority_rate_limiter(),
            name=name,
            clock=clock,
            metrics_provider=metrics_provider,
            stats=stats,
        )

    _getters: Any
    _yield_after_wake: ClassVar[bool]  # the shell's (True for threads, False for asyncio)
    if TYPE_CHECKING:

        def _wake_one(self) -> None: ...

        def _hand_off(self) -> None: ...

    def _new_core(self, name: str, metrics_provider: Any, stats: bool) -> QueueCore[T]:
        # The shells' construction hook: called once from their __init__, with self.clock and self._lock set.
        core, self._precorder = self._new_priority_core(name, metrics_provider, stats)
        self._pcore = core
        self._fast_items = core.fast_items
        # The shell drives the core only through the QueueCore methods PriorityCore also offers.
        return cast(QueueCore[T], core)

    def _new_priority_core(
        self, name: str, metrics_provider: Any, stats: bool
    ) -> tuple[PriorityCore[T], PriorityRecorder | None]:
        """Build the state machine and its recorder (a subclass may wrap or replace them, e.g. to log)."""
        return new_priority_core(name, metrics_provider, stats, self.clock, self._lock)

    def _handed_out_priority(self, item: T) -> int:
        with self._lock:
            return self._pcore.processing[item]

    def add(self, item: T, *, priority: int = 0, after: float = 0.0, rate_limited: bool = False) -> AddResult:
        """Add ``item`` at ``priority`` (an int; higher is served first; default 0), now or after ``after``
        seconds, optionally rate limited. Never blocks beyond the queue's short lock; never waits (the threading
        queue's add that makes a key ready for a blocked getter then lets go of the GIL once, ``time.sleep(0)``, at
        most once per :data:`keyqueue._shell.HANDOFF_GAP_NS`, see
        :attr:`keyqueue._shell.ShellBase._yield_after_wake`); callable from any thread (also on the asyncio queue).

        * ``after <= 0``: ready now. ``after > 0``: ready then (``math.inf``: never, in practice).
        * ``rate_limited=True``: the limiter records a failure of ``item`` and its delay ``r`` is used, or
          ``after`` if ``after`` is set (non-zero) and smaller than ``r``.
        * Merging into a queued key: the highest priority wins (a strictly higher one sends the key to the back of
          its new priority's line); the earliest ready time wins; a ready key stays ready.

        Returns :class:`~keyqueue.AddResult`: ``QUEUED`` (joined a ready line), ``MARKED`` (being processed; ready
        again after ``done``), ``DEDUP`` (already ready at this priority or higher), ``DELAYED`` / ``DELAY_KEPT``
        (waiting; its time or priority changed / nothing changed), ``DROPPED`` (shut down: nothing happens, the
        limiter is not consulted; an immediate add of a key that is still ready may answer ``DEDUP`` instead, as
        the plain queues do). Raises ``TypeError`` for an unhashable item, a non-int priority or a non-number
        ``after``, ``ValueError`` for a NaN ``after``; then nothing changed (the limiter recorded nothing).
        """
        if priority.__class__ is not int:
            check_priority(priority)  # raises (bool and int subclasses too)
        if after.__class__ is not float or after != after:
            after = check_delay(after, "after")
        limiter: RateLimiter[T] | None = None
        if rate_limited:
            check_hashable(item)  # before the limiter records anything
            limiter = self.rate_limiter
        elif after <= 0:
            # Lock-free dedup. If the probe finds a live *ready* entry of item at a priority >= the new one, this add
            # is linearised at the probe: at that instant the locked algorithm would also return without a change
            # (a ready key stays ready and keeps the higher priority, whether or not it is being processed; after
            # shutdown every add is a no-op), and a hand-out of the key at that priority or higher is already
            # guaranteed. The probe is one dict lookup plus reads of an immutable tuple; the dict is written only
            # under the lock and such reads are atomic in CPython with or without the GIL. Anything else (a miss, a
            # waiting entry, a lower priority, a counting core's None) takes the lock.
            items = self._fast_items
            if items is not None:
                try:
                    entry = items.get(item)
                except TypeError:
                    check_hashable(item)
                    raise
                if entry is not None and len(entry) == 3 and -entry[0] >= priority:
                    n = self._until_yield
                    if n:
                        self._until_yield = n - 1
                    else:
                        self._yield_gil()  # see ShellBase._yield_gil
                    return DEDUP
        lock = self._lock
        if not lock.locked():
            lock.acquire()
        elif not self._acquire_unless_own():
            # Called from a signal handler or __del__ inside one of this queue's calls: applied by a helper thread.
            check_hashable(item)
            return self._defer(functools.partial(self.add, item, priority=priority, after=after,
                                                 rate_limited=rate_limited))
        try:
            outcome = self._pcore.add_checked(item, priority, after, limiter)
            if outcome not in (QUEUED, DELAYED) or not self._getters:
                return outcome
            self._wake_one()
        except TypeError:
            check_hashable(item)  # an unhashable item: raise the clear message (nothing changed)
            raise
        finally:
            lock.release()
        if outcome is QUEUED and self._yield_after_wake:
            self._hand_off()  # outside the lock: the getter just woken can take the GIL (ShellBase._hand_off)
        return outcome

    def add_after(self, item: T, delay: float, *, priority: int = 0) -> AddResult:
        """``add(item, priority=priority, after=delay)``. Unlike client-go's delaying queue, a delayed add merges
        into the key's queue entry (earliest time wins), so it can never cause a second hand-out."""
        return self.add(item, priority=priority, after=check_delay(delay))

    def add_rate_limited(self, item: T, *, priority: int = 0) -> AddResult:
        """``add(item, priority=priority, rate_limited=True)``: records a failure of ``item`` with the limiter and
        makes it ready after the limiter's delay. Unlike the client-go queues, the limiter is not consulted once
        the queue is shut down."""
        return self.add(item, priority=priority, rate_limited=True)

    def __len__(self) -> int:
        """Ready keys, including keys re-added while being processed (handed out after their ``done``); keys
        waiting for a delay are not counted (controller-runtime's ``Len``). Informational: it may change at once."""
        with self._lock:
            return self._pcore.ready_len()

    def __repr__(self) -> str:
        core = self._pcore
        return (
            f"<{type(self).__name__} name={self.name!r} ready={core.ready_count} "
            f"processing={len(core.processing)} delayed={core.delayed_count} "
            f"shutting_down={core.shutting_down}>"
        )

    def depth_by_priority(self) -> dict[str, int]:
        """Ready keys per priority label (controller-runtime's ``workqueue_depth{priority}``; at most 25 labels,
        then ``exceeded_cardinality_limit``). Empty for a queue that emits no metrics (no name or no provider)."""
        recorder = self._precorder
        if recorder is None:
            return {}
        with self._lock:
            return recorder.depth.snapshot()


ENTRY_CODES.update(f.__code__ for f in (PriorityAdds.add, PriorityAdds.add_after, PriorityAdds.add_rate_limited))


class PriorityQueue(PriorityAdds[T], RateLimitingQueue[T]):  # type: ignore[misc]  # PriorityAdds' adds win
    """controller-runtime's priority queue for threads (see the module docstring for its rules).

    Everything :class:`~keyqueue.RateLimitingQueue` has (``get``/``done``/``lease``/iteration/``shut_down``/
    ``shut_down_with_drain``/``forget``/``num_requeues`` behave as there), plus ``add(item, *, priority=0,
    after=0.0, rate_limited=False)`` and :meth:`get_with_priority`. ``rate_limiter`` defaults to
    :func:`default_priority_rate_limiter`. ``stats=True`` counts decisions (:class:`~keyqueue.QueueStats`).
    """

    def get_with_priority(self, timeout: float | None = None) -> tuple[T, int]:
        """Like :meth:`get`: take the next key (blocking while none is ready), returning ``(key, priority)`` —
        the priority it was handed out at. Raises what :meth:`get` raises (``ShutDown``, ``TimeoutError``)."""
        item = self.get(timeout)
        return item, self._handed_out_priority(item)
