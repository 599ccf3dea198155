"""The queue's state machine: pure data, no locking, no sleeping, no threads, no event loop.

Both shells (:mod:`keyqueue.threaded` for threads, :mod:`keyqueue.aio` for asyncio) own one :class:`QueueCore` and
call it with their lock held; they add only waiting and waking. Everything a key can go through — dedup,
requeue-while-processing, delayed entries, shutdown, drain — is decided here, once.

A key is always in exactly one of four states, given by two set memberships::

    state                       in dirty   in processing   in fifo
    absent                      no         no              no
    waiting                     yes        no              yes
    processing                  no         yes             no
    processing + dirty          yes        yes             no      (done() puts it back in the fifo, once)

Delayed entries (``add_after``) live beside this, in a heap; when one falls due it goes through :meth:`add` like
any other add. A delayed entry does not make its key "known" to the four-state machine until it fires.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from enum import IntEnum
from operator import itemgetter
from typing import Any, Final, Generic, Protocol, TypeVar

from keyqueue.clock import Clock

__all__ = [
    "EMPTY",
    "AddResult",
    "CountingCore",
    "DecisionCounts",
    "MetricsRecorder",
    "QueueCore",
    "QueueStats",
    "check_delay",
    "check_hashable",
    "check_timeout",
]

T = TypeVar("T", bound=Hashable)

class AddResult(IntEnum):
    """What an add did, as decided by the queue (returned by ``add``, ``add_after``, ``add_rate_limited``)."""

    DROPPED = 0  #: the queue is shutting down; nothing changed
    DEDUP = 1  #: the key was already dirty (waiting, or being processed and marked); nothing changed
    MARKED = 2  #: the key is being processed; it is now dirty and ``done()`` will queue it again, once
    QUEUED = 3  #: the key joined the FIFO tail
    DELAYED = 4  #: a delayed entry was stored, or an existing one moved earlier
    DELAY_KEPT = 5  #: an earlier delayed entry of this key already exists; nothing changed
    #: called while this thread may be inside one of the queue's own calls holding its lock (a signal handler or
    #: ``__del__`` that interrupted it): the call is applied by a helper thread as soon as the lock is free
    DEFERRED = 6


# Module-level aliases: a global lookup is cheaper than an enum attribute on the hot path.
DROPPED: Final = AddResult.DROPPED
DEDUP: Final = AddResult.DEDUP
MARKED: Final = AddResult.MARKED
QUEUED: Final = AddResult.QUEUED
DELAYED: Final = AddResult.DELAYED
DELAY_KEPT: Final = AddResult.DELAY_KEPT
DEFERRED: Final = AddResult.DEFERRED

# A delay this long (or infinite) means "never" in practice: 2**63 ns is ~292 years, Go's InfDuration.
_MAX_DELAY_NS: Final = 2**63 - 1
_MAX_DELAY_S: Final = _MAX_DELAY_NS / 1e9
_NO_TIME: Final = -(2**63)  # below any clock time: "no delayed entry"
_ready_ns: Final = itemgetter(0)  # a heap entry's time


def check_hashable(item: object) -> None:
    """Raise ``TypeError`` naming the type if ``item`` cannot be a queue key. Called before any state changes."""
    try:
        hash(item)
    except TypeError:
        raise TypeError(
            f"queue keys must be hashable; got an unhashable {type(item).__name__}: {item!r:.80}"
        ) from None


def check_delay(delay: object) -> float:
    """Validate an ``add_after`` delay: a real number of seconds (<= 0 means now, ``math.inf`` means never)."""
    if not isinstance(delay, (int, float)) or isinstance(delay, bool):
        raise TypeError(f"delay must be a number of seconds, got {type(delay).__name__}: {delay!r:.80}")
    if delay != delay:
        raise ValueError("delay must be a number of seconds, got NaN")
    return float(delay)


def check_timeout(timeout: float | None) -> float | None:
    """Validate a ``timeout=`` argument: ``None`` (wait forever) or a number of seconds >= 0."""
    if timeout is None:
        return None
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        raise TypeError(f"timeout must be None or seconds, got {type(timeout).__name__}: {timeout!r:.80}")
    if not timeout >= 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
    return float(timeout)


class _Empty:
    __slots__ = ()

    def __repr__(self) -> str:
        return "EMPTY"


EMPTY: Final = _Empty()
"""Returned by :meth:`QueueCore.pop` when nothing is ready (keys may be ``None``, so ``None`` cannot say it)."""

# Stands in for the key in a superseded delayed entry: never a key of the queue, so the entry is skipped.
_SUPERSEDED: Final = object()


class MetricsRecorder(Protocol):
    """Per-queue hooks the core calls, with the shell's lock held, when metrics are enabled.

    Timestamps are the queue clock's integer nanoseconds. ``add`` is called only for adds that make a key dirty
    (not for dedup no-ops); for a delayed entry the timestamp is the moment it fell due.
    """

    def add(self, item: Hashable, t_ns: int) -> None: ...

    def get(self, item: Hashable, t_ns: int) -> None: ...

    def done(self, item: Hashable, t_ns: int) -> None: ...

    def retry(self) -> None: ...


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts of the queue's own decisions, from a queue built with ``stats=True``.

    ``adds`` counts every add the queue evaluated (plain adds, and delayed entries when they fell due), split
    into ``queued`` + ``deduplicated`` + ``marked`` + ``dropped``. ``redelivered``: ``done`` calls that put a
    re-added key back in the FIFO; ``gets``/``dones``: keys handed out / finished; ``delayed``: delayed adds that
    stored or moved an entry (``DELAYED``) or found an earlier one (``DELAY_KEPT``); ``fired``: delayed entries
    that fell due (each also counted in ``adds``).
    """

    adds: int = 0
    queued: int = 0
    deduplicated: int = 0
    marked: int = 0
    dropped: int = 0
    redelivered: int = 0
    gets: int = 0
    dones: int = 0
    delayed: int = 0
    fired: int = 0


class QueueCore(Generic[T]):
    """The client-go state machine (see the module docstring). Not thread-safe: callers hold a lock.

    ``clock`` is read only when something needs the time (delayed entries, metrics).
    """

    __slots__ = (
        "_heap",
        "_latest_ns",
        "_seq",
        "_sorted",
        "_waiting",
        "clock",
        "dirty",
        "draining",
        "fast_dirty",
        "fifo",
        "metrics",
        "processing",
        "shutting_down",
    )

    def __init__(self, clock: Clock, metrics: MetricsRecorder | None = None) -> None:
        self.clock = clock
        self.metrics = metrics
        # fifo is the order in which keys will be handed out. Every key in fifo is in dirty and not in
        # processing, and appears in fifo once.
        self.fifo: deque[T] = deque()
        # dirty holds every key that needs processing: the waiting ones (in fifo) and the ones re-added while
        # being processed (not in fifo until done()).
        self.dirty: set[T] = set()
        # processing holds the keys handed out by pop() and not yet done(). A key in processing is never in
        # fifo, so no two callers can hold it at once. When done() removes a key that is also dirty, it is
        # appended to fifo exactly once.
        self.processing: set[T] = set()
        # Delayed entries: a heap of [ready_ns, seq, key] and, per key, the one live entry (the earliest).
        # Superseded heap entries stay in the heap and are skipped when popped (identity check); their key slot
        # is overwritten with _SUPERSEDED so that they keep no reference to the key.
        self._heap: list[list[Any]] = []
        self._waiting: dict[T, list[Any]] = {}
        self._seq = 0
        self._latest_ns = _NO_TIME  # >= the time of every entry in the heap (an upper bound; see promote_due)
        # True while the heap list is sorted (a sorted list is a valid heap): entries pushed in time order, the
        # usual case, keep it so, and promote_due then cuts off the due prefix in one slice.
        self._sorted = True
        self.shutting_down = False
        self.draining = False
        # The set a shell may probe without its lock for the dedup fast path (see the shells). A core that must
        # see every add (CountingCore) exposes an empty set here, which turns the fast path off.
        self.fast_dirty: set[T] | frozenset[T] = self.dirty

    # -- adds ---------------------------------------------------------------------------------------------

    def add(self, item: T, at_ns: int | None = None) -> AddResult:
        """Apply one add. Returns DROPPED, DEDUP, MARKED or QUEUED. ``at_ns``: when it happened (for metrics)."""
        if self.shutting_down:
            return DROPPED
        dirty = self.dirty
        if item in dirty:
            return DEDUP
        if self.metrics is not None:
            self.metrics.add(item, self.clock.now_ns() if at_ns is None else at_ns)
        dirty.add(item)
        if item in self.processing:
            return MARKED
        self.fifo.append(item)
        return QUEUED

    def add_after(self, item: T, delay: float) -> AddResult:
        """Add ``item`` once ``delay`` seconds have passed on the clock.

        ``delay <= 0`` adds now (returns what :meth:`add` returns). Otherwise returns DELAYED or DELAY_KEPT: of
        several delayed entries of one key the earliest is kept. After DELAYED, a shell whose waiters sleep until
        :meth:`next_ready_ns` must let one of them re-compute its timeout. A plain add does not cancel a
        delayed entry. Raises ``ValueError`` for NaN and ``TypeError`` for an unhashable item, changing nothing.
        """
        if delay.__class__ is not float or delay != delay:
            delay = check_delay(delay)  # raises for a non-number and NaN; converts an int
        if self.shutting_down or delay <= 0:
            check_hashable(item)
            if self.shutting_down:
                return DROPPED
            if self.metrics is not None:
                self.metrics.retry()
            return self.add(item)
        waiting = self._waiting
        try:
            live = waiting.get(item)
        except TypeError:
            check_hashable(item)  # an unhashable item: the clear message; nothing has changed
            raise
        if self.metrics is not None:
            self.metrics.retry()
        # round(...) or 1: a positive delay below half a nanosecond still waits (and never means "now").
        delay_ns = _MAX_DELAY_NS if delay >= _MAX_DELAY_S else (round(delay * 1_000_000_000) or 1)
        ready = self.clock.now_ns() + delay_ns
        if live is not None:
            if live[0] <= ready:
                return DELAY_KEPT
            live[2] = _SUPERSEDED  # its heap slot stays until popped or rebuilt, but lets go of the key
        self._seq = seq = self._seq + 1
        entry = [ready, seq, item]
        if ready > self._latest_ns:
            self._latest_ns = ready
        heap = self._heap
        if self._sorted and (not heap or ready >= heap[-1][0]):
            heap.append(entry)  # (ready, seq) is the largest: the list stays sorted, hence a heap
        else:
            heapq.heappush(heap, entry)
            self._sorted = False
        waiting[item] = entry
        if len(heap) > 64 and len(heap) > 2 * len(waiting):
            # Too many superseded entries: rebuild from the live ones.
            self._heap = heap = list(waiting.values())
            heap.sort()
            self._sorted = True
        return DELAYED

    def promote_due(self, now_ns: int) -> int:
        """Add every delayed entry whose time is <= ``now_ns``, earliest first. Returns how many fired."""
        heap = self._heap
        if not heap or heap[0][0] > now_ns:
            return 0
        if not self._sorted and self._latest_ns <= now_ns:
            # Every entry is due (a worker draining a batch of delayed keys): one sort, linear for entries pushed
            # in time order, makes the heap a sorted list (still a valid heap).
            heap.sort()
            self._sorted = True
        if self._sorted:
            due = bisect_right(heap, now_ns, key=_ready_ns)
            if 8 * due >= len(heap):
                # A large due prefix of a sorted heap: fire it in order and cut it off in one slice, instead of a
                # heappop (~17 list comparisons at 100,000 entries) per entry. The rest stays sorted.
                return self._fire_sorted_prefix(heap, due)
            self._sorted = False  # heappop below reorders the list (it stays a valid heap)
        waiting = self._waiting
        fire = self._fire
        fired = 0
        while heap and heap[0][0] <= now_ns:
            entry = heapq.heappop(heap)
            item = entry[2]
            if waiting.get(item) is entry:
                del waiting[item]
                fire(item, entry[0])
                fired += 1
        return fired

    def _fire_sorted_prefix(self, heap: list[list[Any]], due: int) -> int:
        batch = heap[:due]
        del heap[:due]
        waiting = self._waiting
        fire = self._fire
        fired = 0
        i = 0  # batch[i:] is still delayed (or superseded)
        try:
            for entry in batch:
                item = entry[2]
                if waiting.get(item) is entry:
                    del waiting[item]
                    i += 1  # taken out of the delayed entries: fired now, even if firing raises
                    fire(item, entry[0])
                    fired += 1
                else:
                    i += 1
        except BaseException:
            heap[0:0] = batch[i:]  # what was not reached stays delayed, in order (the list stays sorted)
            raise
        return fired

    def _fire(self, item: T, ready_ns: int) -> None:
        self.add(item, ready_ns)

    def next_ready_ns(self) -> int | None:
        """The clock time of the earliest live delayed entry, or ``None`` if there is none."""
        heap = self._heap
        waiting = self._waiting
        while heap and waiting.get(heap[0][2]) is not heap[0]:
            if self._sorted:
                del heap[0]  # superseded entry at the head: drop it now (a sorted list stays sorted)
            else:
                heapq.heappop(heap)  # superseded entry at the head: drop it now
        return heap[0][0] if heap else None

    @property
    def delayed_count(self) -> int:
        """How many keys have a delayed entry that has not fired yet."""
        return len(self._waiting)

    # -- hand-out and completion -----------------------------------------------------------------------------

    def has_ready(self) -> bool:
        """True if the fifo is non-empty (without firing due entries)."""
        return bool(self.fifo)

    def pop(self) -> T | _Empty:
        """Hand out the fifo head (first firing whatever is due): it moves from dirty to processing.

        Returns :data:`EMPTY` if nothing is ready.
        """
        if self._heap:
            self.promote_due(self.clock.now_ns())
        fifo = self.fifo
        if not fifo:
            return EMPTY
        item = fifo.popleft()
        self.dirty.remove(item)
        self.processing.add(item)
        if self.metrics is not None:
            self.metrics.get(item, self.clock.now_ns())
        return item

    def done(self, item: T) -> bool:
        """Finish processing ``item``. Returns True if it was re-added meanwhile and is now back in the fifo.

        ``done`` of a key that is not being processed changes nothing (client-go would push a duplicate).
        """
        try:
            self.processing.remove(item)
        except KeyError:
            return False
        if self.metrics is not None:
            self.metrics.done(item, self.clock.now_ns())
        if item in self.dirty:
            self.fifo.append(item)
            return True
        return False

    def ready_len(self) -> int:
        """Keys waiting in the fifo (after firing what is due): not processing, not delayed."""
        if self._heap:
            self.promote_due(self.clock.now_ns())
        return len(self.fifo)

    # -- shutdown ------------------------------------------------------------------------------------------

    def shut_down(self, drain: bool) -> None:
        """Stop accepting adds; drop every delayed entry. Queued keys stay and are still handed out.

        ``drain=False`` also cancels a drain in progress.
        """
        self.shutting_down = True
        self.draining = drain
        self._heap.clear()
        self._waiting.clear()
        self._latest_ns = _NO_TIME
        self._sorted = True

    def idle(self) -> bool:
        """Nothing queued and nothing being processed (what a drain waits for)."""
        return not self.fifo and not self.processing

    def stats(self) -> QueueStats | None:
        """Decision counters, or ``None`` for a core that does not count."""
        return None


class DecisionCounts:
    """The counters behind :class:`QueueStats`, shared by the counting cores (plain and priority)."""

    __slots__ = ("adds", "dedup", "delayed", "dones", "dropped", "fired", "gets", "marked", "queued", "redelivered")

    def __init__(self) -> None:
        self.adds = self.queued = self.dedup = self.marked = self.dropped = 0
        self.redelivered = self.gets = self.dones = self.delayed = self.fired = 0

    def add(self, outcome: AddResult) -> AddResult:
        """Count one add's outcome (immediate outcomes count in ``adds``; delayed ones in ``delayed``)."""
        if outcome is QUEUED:
            self.queued += 1
        elif outcome is DEDUP:
            self.dedup += 1
        elif outcome is MARKED:
            self.marked += 1
        elif outcome is DROPPED:
            self.dropped += 1
        else:  # DELAYED, DELAY_KEPT
            self.delayed += 1
            return outcome
        self.adds += 1
        return outcome

    def done(self, was_processing: bool, requeued: bool) -> None:
        self.dones += was_processing
        self.redelivered += requeued

    def snapshot(self) -> QueueStats:
        return QueueStats(
            self.adds, self.queued, self.dedup, self.marked, self.dropped,
            self.redelivered, self.gets, self.dones, self.delayed, self.fired,
        )


class CountingCore(QueueCore[T]):
    """A :class:`QueueCore` that counts its decisions (for the lab's funnel statistics).

    It turns off the shells' lock-free dedup probe (``fast_dirty`` is empty), so every add reaches
    :meth:`add` and is counted under the shell's lock.
    """

    __slots__ = ("_counts",)

    def __init__(self, clock: Clock, metrics: MetricsRecorder | None = None) -> None:
        super().__init__(clock, metrics)
        self.fast_dirty = frozenset()
        self._counts = DecisionCounts()

    def add(self, item: T, at_ns: int | None = None) -> AddResult:
        return self._counts.add(super().add(item, at_ns))

    def add_after(self, item: T, delay: float) -> AddResult:
        outcome = super().add_after(item, delay)
        if outcome is DELAYED or outcome is DELAY_KEPT:  # an immediate outcome was counted by add()
            self._counts.add(outcome)
        return outcome

    def _fire(self, item: T, ready_ns: int) -> None:
        self._counts.fired += 1
        super()._fire(item, ready_ns)

    def pop(self) -> T | _Empty:
        item = super().pop()
        if item is not EMPTY:
            self._counts.gets += 1
        return item

    def done(self, item: T) -> bool:
        was_processing = item in self.processing
        requeued = super().done(item)
        self._counts.done(was_processing, requeued)
        return requeued

    def stats(self) -> QueueStats:
        return self._counts.snapshot()
