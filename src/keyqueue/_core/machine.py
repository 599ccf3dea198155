"""The queue's state machine: pure data, no locks, no sleeping, no threads, no event loop.

Both shells (:mod:`keyqueue.threaded` for threads, :mod:`keyqueue._aio` for asyncio) own one core and call it with
their lock held; they add only waiting and waking. Every decision a key goes through — dedup, requeue while
processing, delayed entries, shutdown, drain — is made here, once.

A key is always in exactly one of four states, given by its membership of ``dirty`` and ``processing``::

    state                 in dirty   in processing   in ordering
    absent                no         no              no
    waiting               yes        no              yes
    processing            no         yes             no
    processing + dirty    yes        yes             no      (done() appends it to the ordering, once)

:class:`QueueCore` follows client-go's rules: delayed entries live beside the four states and go through
:meth:`QueueCore.add` when they fall due. :class:`PriorityCore` follows controller-runtime's priority queue: the
same four states with a :class:`~keyqueue._core.ordering.PriorityOrdering`, and a delayed key is one that is not
dirty yet (an immediate add makes it ready; a delayed add of a ready key leaves it ready).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Final, Generic, Protocol, TypeVar

from keyqueue._core.checks import check_delay, check_hashable
from keyqueue._core.delays import Delays
from keyqueue._core.ordering import Ordering, PriorityDepth, PriorityOrdering
from keyqueue._core.outcomes import AddResult, Counts, QueueSnapshot, QueueStats
from keyqueue.clock import Clock

__all__ = ["EMPTY", "MetricsRecorder", "PriorityCore", "QueueCore"]

T = TypeVar("T", bound=Hashable)

DROPPED: Final = AddResult.DROPPED
DEDUP: Final = AddResult.DEDUP
MARKED: Final = AddResult.MARKED
QUEUED: Final = AddResult.QUEUED
DELAYED: Final = AddResult.DELAYED
DELAY_KEPT: Final = AddResult.DELAY_KEPT

# A delay this long (or infinite) means "never": 2**63 ns is ~292 years, Go's InfDuration. A positive delay is at
# least 1 ns (`round(...) or 1`): a tiny delay still waits.
_MAX_DELAY_NS: Final = 2**63 - 1
_MAX_DELAY_S: Final = _MAX_DELAY_NS / 1e9


class _Empty:
    __slots__ = ()

    def __repr__(self) -> str:
        return "EMPTY"


EMPTY: Final = _Empty()
"""What :meth:`QueueCore.pop` returns when nothing is ready (``None`` may be a key)."""


class MetricsRecorder(Protocol):
    """The hooks a core calls, with the queue's lock held, when the queue emits metrics.

    Times are the queue clock's integer nanoseconds. ``add``: a key became dirty (for a delayed entry, at the time it
    fell due; a priority queue: a key became ready). ``get``: handed out. ``done``: finished, with the time it was
    handed out. ``retry``: a delayed or rate-limited add. ``shut_down``: the queue began shutting down (once).
    Return values are ignored. The start times of the keys being processed are the values of the core's
    ``processing`` (a recorder that reports in-flight work reads them there, under the queue's lock).
    """

    def add(self, item: Any, t_ns: int, /) -> object: ...

    def get(self, item: Any, t_ns: int, /) -> object: ...

    def done(self, item: Any, started_ns: int, t_ns: int, /) -> object: ...

    def retry(self) -> object: ...

    def shut_down(self, t_ns: int, /) -> object: ...


class QueueCore(Generic[T]):
    """client-go's workqueue state machine (see the module docstring). Not thread-safe: callers hold a lock.

    A key's ``__hash__`` and ``__eq__`` must behave as for a ``dict`` key: not change while the queue holds the key
    and not raise. Each method orders its steps so that a key whose methods raise makes the call raise with the key
    still in one of the four states (an unhashable key changes nothing; a key that raises as it is handed out stays
    waiting, behind the others).
    """

    __slots__ = (
        "_now",
        "_on_add",
        "_on_done",
        "_on_get",
        "_pop",
        "_push",
        "_seq",
        "_touch",
        "clock",
        "counts",
        "delays",
        "dirty",
        "draining",
        "fast_dirty",
        "metrics",
        "ordering",
        "processing",
        "shutting_down",
    )

    def __init__(self, clock: Clock, *, ordering: Ordering[T] | None = None,
                 metrics: MetricsRecorder | None = None, stats: bool = False) -> None:
        self.clock = clock
        self._now: Callable[[], int] = clock.now_ns
        #: Every key that needs processing: the waiting ones and those re-added while being processed.
        self.dirty: set[T] = set()
        #: The keys handed out by :meth:`pop` and not yet :meth:`done`, each -> when it was handed out (clock ns;
        #: ``None`` for a queue without metrics). Never in ``ordering``, so no two callers can hold a key at once.
        self.processing: dict[T, int | None] = {}
        #: The waiting keys (``dirty - processing``), each once, in hand-out order.
        self.ordering: Ordering[T] = deque() if ordering is None else ordering
        self._push: Callable[[T], object] = self.ordering.append
        self._pop: Callable[[], T] = self.ordering.popleft
        self._touch: Callable[[T], object] | None = getattr(ordering, "touch", None)
        #: Pending delayed adds, at most one per key (the earliest). A :class:`QueueCore`'s are independent of the
        #: four states; a :class:`PriorityCore`'s keys are never dirty.
        self.delays: Delays[T] = Delays()
        self._seq = 0  # the last sequence number given to a delayed entry
        self.shutting_down = False  #: no add changes anything any more
        self.draining = False  #: a drain was asked for and not cancelled by a plain shutdown
        self.metrics = metrics
        # The three hooks of every key's round trip, looked up once (None: no metrics; with metrics every time in
        # ``processing`` is an int).
        self._on_add: Callable[[T, int], object] | None = None if metrics is None else metrics.add
        self._on_get: Callable[[T, Any], object] | None = None if metrics is None else metrics.get
        self._on_done: Callable[[T, Any, int], object] | None = None if metrics is None else metrics.done
        self.counts = Counts() if stats else None
        #: What a shell may probe without its lock to answer an add ``DEDUP`` (see the shells): ``dirty``, or an empty
        #: set for a core that must see every add (an ordering with ``touch``, or counting).
        self.fast_dirty: set[T] | frozenset[T] = self.dirty if self._touch is None and not stats else frozenset()

    # -- adds ----------------------------------------------------------------------------------------------

    def add(self, item: T, at_ns: int | None = None) -> AddResult:
        """Apply one add: ``DROPPED``, ``DEDUP``, ``MARKED`` or ``QUEUED``. ``at_ns``: when it happened (metrics)."""
        if self.shutting_down:
            check_hashable(item)
            outcome = DROPPED
        elif item in self.dirty:
            if self._touch is not None and item not in self.processing:
                self._touch(item)  # client-go's Queue.Touch: an add of a waiting key
            outcome = DEDUP
        else:
            held = item in self.processing
            self.dirty.add(item)
            if held:
                outcome = MARKED
            else:
                self._push(item)
                outcome = QUEUED
            on_add = self._on_add
            if on_add is not None:  # last: a hook that raises leaves the key added
                on_add(item, self._now() if at_ns is None else at_ns)
        if self.counts is not None:
            self.counts.add(outcome)
        return outcome

    def add_after(self, item: T, delay: float) -> AddResult:
        """Add ``item`` once ``delay`` seconds have passed on the clock: ``DELAYED`` (stored, or moved earlier) or
        ``DELAY_KEPT`` (an earlier entry exists); ``delay <= 0`` adds now (what :meth:`add` returns). A plain add
        does not cancel a delayed entry. ``TypeError``/``ValueError`` for a bad ``delay``, changing nothing."""
        if delay.__class__ is not float or delay != delay:
            delay = check_delay(delay)
        if self.shutting_down:
            check_hashable(item)
            outcome = DROPPED
        elif delay <= 0:
            outcome = self.add(item)
            if self.metrics is not None:
                self.metrics.retry()  # every delayed add counts a retry, as client-go's AddAfter
            return outcome
        else:
            ready = self._now() + (_MAX_DELAY_NS if delay >= _MAX_DELAY_S else (round(delay * 1e9) or 1))
            live = self.delays.live.get(item)
            if live is not None and live[0] <= ready:
                outcome = DELAY_KEPT
            else:
                self._seq += 1
                self.delays.put(item, ready, 0, self._seq)
                outcome = DELAYED
            if self.metrics is not None:
                self.metrics.retry()
        if self.counts is not None:
            self.counts.add(outcome)
        return outcome

    def add_rate_limited(self, item: T, when: Callable[[T], float]) -> AddResult:
        """``add_after(item, when(item))``; ``when`` (a rate limiter's) is called even after shutdown, as in
        client-go, and only after every lookup the add makes, so an unhashable key records no failure."""
        check_hashable(item)
        return self.add_after(item, when(item))

    def promote_due(self, now_ns: int) -> int:
        """Add every delayed entry due at ``now_ns``, earliest first. Returns how many fell due. If an add raises
        (a metrics hook), the entries not reached yet stay delayed."""
        due = self.delays.take_due(now_ns)
        if self.counts is not None:
            self.counts.fired += len(due)
        add = self.add
        for i, entry in enumerate(due):
            try:
                add(entry[3], entry[0])
            except BaseException:
                self.delays.restore(due[i + 1:])
                raise
        return len(due)

    def next_ready_ns(self) -> int | None:
        """When the earliest delayed entry falls due (clock ns), or ``None``."""
        return self.delays.next_ns()

    # -- hand-out and completion ---------------------------------------------------------------------------

    def has_ready(self) -> bool:
        """A key can be handed out now (without firing due entries)."""
        return bool(self.ordering)

    def pop(self) -> T | _Empty:
        """Hand out the next waiting key (after firing what is due): it moves from dirty to processing. Returns
        :data:`EMPTY` if none. If the key's own ``__eq__`` raises, it stays waiting, behind the others."""
        if self.delays.live:
            self.promote_due(self._now())
        if not self.ordering:
            return EMPTY
        item = self._pop()
        on_get = self._on_get
        t_ns = None if on_get is None else self._now()
        try:
            self.processing[item] = t_ns
        except BaseException:
            self._push(item)
            raise
        self.dirty.remove(item)
        if on_get is not None:
            on_get(item, t_ns)
        if self.counts is not None:
            self.counts.gets += 1
        return item

    def done(self, item: T) -> bool:
        """Finish ``item``. Returns ``True`` if it was re-added meanwhile and is waiting again (a redelivery).
        ``done`` of a key that is not being processed changes nothing and returns ``False``; of an unhashable one
        raises ``TypeError``."""
        requeue = item in self.dirty
        try:
            started_ns = self.processing.pop(item)
        except KeyError:
            check_hashable(item)  # (a set is looked up as a frozenset: it lands here)
            return False
        if requeue:
            self._push(item)
        on_done = self._on_done
        if on_done is not None:
            on_done(item, started_ns, self._now())
        if self.counts is not None:
            self.counts.dones += 1
            self.counts.redelivered += requeue
        return requeue

    def ready_len(self) -> int:
        """How many keys wait to be handed out (after firing what is due)."""
        if self.delays.live:
            self.promote_due(self._now())
        return len(self.ordering)

    # -- shutdown --------------------------------------------------------------------------------------------

    def shut_down(self, drain: bool) -> None:
        """Stop accepting adds and drop every delayed entry; waiting keys stay and are still handed out.
        ``drain=False`` also cancels a drain in progress."""
        if self.metrics is not None and not self.shutting_down:
            self.metrics.shut_down(self._now())
        self.shutting_down = True
        self.draining = drain
        self.delays.clear()

    def idle(self) -> bool:
        """Nothing waiting and nothing being processed (what a drain waits for)."""
        return not self.ordering and not self.processing

    # -- inspection -------------------------------------------------------------------------------------------

    def stats(self) -> QueueStats | None:
        """The decision counters, or ``None`` for a core built without ``stats``."""
        return None if self.counts is None else self.counts.snapshot()

    def snapshot(self) -> QueueSnapshot:
        return QueueSnapshot(len(self.dirty), len(self.ordering), len(self.processing), len(self.delays),
                             self.shutting_down)


class PriorityCore(QueueCore[T]):
    """controller-runtime's priority queue rules on the same four states (see the module docstring).

    * Keys are handed out highest priority first, and within one priority in the order they became ready.
    * Re-adding a ready key keeps the highest priority: a strictly higher one sends it to the back of its new
      priority's line (``QUEUED``, or ``MARKED`` while it is being processed); anything else is ``DEDUP``.
    * A delayed key is not dirty. Adds merge into its entry: the earliest time and the highest priority win; an
      immediate add makes it ready at once. When it falls due it joins its priority's line.
    * A ready key stays ready: a delayed add of it can only raise its priority.
    * :meth:`ready_len` counts the dirty keys (also those re-added while being processed).

    ``depth``: a :class:`PriorityDepth` to keep ready keys per priority in (for metrics), or ``None``.
    """

    __slots__ = ("handed", "order")

    def __init__(self, clock: Clock, *, metrics: MetricsRecorder | None = None, stats: bool = False,
                 depth: PriorityDepth | None = None) -> None:
        self.order: PriorityOrdering[T] = PriorityOrdering(depth)
        super().__init__(clock, ordering=self.order, metrics=metrics, stats=stats)
        self.fast_dirty = frozenset()  # a re-add may raise a priority: the priority shells probe the ranks instead
        #: The keys being processed -> the priority each was handed out at.
        self.handed: dict[T, int] = {}

    def add(self, item: T, at_ns: int | None = None, priority: int = 0) -> AddResult:
        """Make ``item`` ready now at ``priority`` (merging as the class says): ``QUEUED``, ``MARKED``, ``DEDUP``
        or ``DROPPED``."""
        if self.shutting_down:
            check_hashable(item)
            outcome = DROPPED
        else:
            if self.delays.live:
                self.promote_due(self._now())
                waiting = self.delays.remove(item)
                if waiting is not None:
                    priority = max(priority, -waiting[1])
            outcome = self._ready(item, priority, at_ns)
        if self.counts is not None:
            self.counts.add(outcome)
        return outcome

    def _ready(self, item: T, priority: int, at_ns: int | None) -> AddResult:
        held = item in self.processing
        if item in self.dirty:
            if not self.order.rerank(item, priority, not held):
                return DEDUP
        else:
            self.dirty.add(item)
            self.order.rank(item, priority, not held)
            on_add = self._on_add
            if on_add is not None:
                on_add(item, self._now() if at_ns is None else at_ns)
        return MARKED if held else QUEUED

    def add_after(self, item: T, delay: float, priority: int = 0) -> AddResult:
        """Add ``item`` at ``priority`` once ``delay`` seconds have passed (``<= 0``: now, as :meth:`add`).
        A ready key stays ready (``DEDUP``, or ``QUEUED``/``MARKED`` if its priority rose); a delayed one keeps the
        earlier time and the higher priority (``DELAYED`` if either changed, else ``DELAY_KEPT``)."""
        if delay.__class__ is not float or delay != delay:
            delay = check_delay(delay)
        if self.shutting_down or delay <= 0:
            return self.add(item, priority=priority)
        if self.metrics is not None:
            self.metrics.retry()  # every accepted add with a delay, merged or not (controller-runtime)
        now = self._now()
        if self.delays.live:
            self.promote_due(now)
        if item in self.dirty:
            outcome = self._ready(item, priority, None)
        else:
            ready = now + (_MAX_DELAY_NS if delay >= _MAX_DELAY_S else (round(delay * 1e9) or 1))
            live = self.delays.live.get(item)
            if live is None:
                self._seq += 1
                self.delays.put(item, ready, priority, self._seq)
                outcome = DELAYED
            elif priority <= -live[1] and ready >= live[0]:
                outcome = DELAY_KEPT
            else:
                raised = priority > -live[1]
                if raised:
                    self._seq += 1
                self.delays.put(item, min(ready, live[0]), max(priority, -live[1]), self._seq if raised else live[2])
                outcome = DELAYED
        if self.counts is not None:
            self.counts.add(outcome)
        return outcome

    def add_rate_limited(self, item: T, when: Callable[[T], float], priority: int = 0,
                         after: float = 0.0) -> AddResult:
        """controller-runtime's ``AddWithOpts{RateLimited: true, After: after}``: the limiter's delay ``r``, or
        ``after`` if it is set (non-zero) and smaller. Unlike :class:`QueueCore`, the limiter is not consulted
        once the queue is shut down."""
        check_hashable(item)
        if self.shutting_down:
            return self.add(item, priority=priority)
        r = when(item)
        return self.add_after(item, r if after == 0 or r < after else after, priority=priority)

    def promote_due(self, now_ns: int) -> int:
        """Make every delayed key due at ``now_ns`` ready at its priority, earliest first (it joins the back of its
        priority's line now). Returns how many fell due. If that raises, the keys not reached stay delayed."""
        due = self.delays.take_due(now_ns)
        counts = self.counts
        if counts is not None:
            counts.fired += len(due)
        for i, entry in enumerate(due):
            try:
                outcome = self._ready(entry[3], -entry[1], entry[0])
            except BaseException:
                self.delays.restore(due[i + 1:])
                raise
            if counts is not None:
                counts.add(outcome)
        return len(due)

    def has_ready(self) -> bool:
        return self.order.waiting > 0

    def idle(self) -> bool:
        return not self.order.waiting and not self.processing

    def pop(self) -> T | _Empty:
        """:meth:`QueueCore.pop`, also recording the priority the key is handed out at (in :attr:`handed`)."""
        if self.delays.live:
            self.promote_due(self._now())
        order = self.order
        if not order.waiting:
            return EMPTY
        item = order.popleft()
        on_get = self._on_get
        t_ns = None if on_get is None else self._now()
        try:
            self.processing[item] = t_ns
        except BaseException:
            order.append(item)  # stays ready, at the back of its priority's line
            raise
        self.dirty.remove(item)
        self.handed[item] = order.popped_priority
        if on_get is not None:
            on_get(item, t_ns)
        if self.counts is not None:
            self.counts.gets += 1
        return item

    def pop_with_priority(self) -> tuple[T, int] | _Empty:
        """:meth:`pop`, with the priority the key was handed out at."""
        item = self.pop()
        return item if item is EMPTY else (item, self.order.popped_priority)  # type: ignore[return-value]

    def done(self, item: T) -> bool:
        """:meth:`QueueCore.done`; a re-added key takes the place in its priority's line it got when re-added."""
        requeue = item in self.dirty
        try:
            started_ns = self.processing.pop(item)
        except KeyError:
            check_hashable(item)
            return False
        del self.handed[item]
        if requeue:
            self.order.append(item)
        on_done = self._on_done
        if on_done is not None:
            on_done(item, started_ns, self._now())
        if self.counts is not None:
            self.counts.dones += 1
            self.counts.redelivered += requeue
        return requeue

    def ready_len(self) -> int:
        """Ready keys (after making due keys ready), including keys re-added while being processed; keys waiting
        for their time are not counted (controller-runtime's ``Len``)."""
        if self.delays.live:
            self.promote_due(self._now())
        return len(self.dirty)

    def priority_of(self, item: T) -> int | None:
        """The priority of a queued key (ready or delayed), or ``None``."""
        rank = self.order.ranks.get(item)
        if rank is not None:
            return -rank[0]  # type: ignore[no-any-return]
        delayed = self.delays.get(item)
        return None if delayed is None else -delayed[1]
