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
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import IntEnum
from operator import itemgetter
from typing import Any, Final, Generic, TypeAlias, TypeVar

from keyqueue._build import mypyc_attr
from keyqueue._protocols import MetricsLedger as MetricsLedger
from keyqueue._protocols import MetricsRecorder as MetricsRecorder
from keyqueue._protocols import Ordering as Ordering
from keyqueue.clock import Clock
from keyqueue.errors import KeyMutatedError

__all__ = [
    "EMPTY",
    "LEDGER_FOLD_AT",
    "AddResult",
    "CoreBase",
    "CountingCore",
    "DecisionCounts",
    "KeySet",
    "MetricsLedger",
    "MetricsRecorder",
    "Ordering",
    "QueueCore",
    "QueueSnapshot",
    "QueueStats",
    "check_delay",
    "check_hashable",
    "check_ordering",
    "check_timeout",
    "discard_identity",
    "holds",
    "purge_stale",
]

T = TypeVar("T", bound=Hashable)

#: The core's ``dirty`` and ``processing`` containers: sets, or with a metrics ledger dicts of key -> a clock time
#: in ns (an ``int``; see :meth:`QueueCore.keep_ledger`). Both answer ``in``, ``len`` and iteration alike. The
#: times are typed ``Any`` on purpose, as is :attr:`QueueCore._now`: the compiled build then stores and subtracts the
#: clock's int objects as they are, instead of unboxing and re-boxing each one (~40 ns per cycle).
KeySet: TypeAlias = "set[T] | dict[T, Any]"


class AddResult(IntEnum):
    """What an add did, as decided by the queue (returned by ``add``, ``add_after``, ``add_rate_limited``)."""

    DROPPED = 0  #: the queue is shutting down; nothing changed
    DEDUP = 1  #: the key was already dirty (waiting, or being processed and marked); nothing changed
    MARKED = 2  #: the key is being processed; it is now dirty and ``done()`` will queue it again, once
    QUEUED = 3  #: the key joined the FIFO tail
    DELAYED = 4  #: a delayed entry was stored, or an existing one moved earlier
    DELAY_KEPT = 5  #: an earlier delayed entry of this key already exists; nothing changed
    #: called while this thread may be inside one of the queue's own calls holding its lock (a signal handler or
    #: ``__del__`` that interrupted it): the call is applied by a helper thread as soon as the lock is free. On a
    #: loop-owned asyncio queue (``keyqueue.aio.LoopQueue``), also an add made in another thread than its loop's:
    #: applied later, on the owning loop, in call order
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


def _as_seconds(value: int | float, name: str) -> float:
    # An int too large for a float (10**400) is a caller's mistake, not "forever": say so, naming the parameter.
    try:
        return float(value)
    except OverflowError:
        bits = value.bit_length() if isinstance(value, int) else 0
        raise ValueError(
            f"{name} is too large to be a number of seconds (an int of {bits} bits); "
            "use math.inf for 'never' / 'forever'"
        ) from None


def check_delay(delay: object, name: str = "delay") -> float:
    """Validate a delay named ``name``: a real number of seconds (<= 0 means now, ``math.inf`` means never).

    Raises ``TypeError`` for a non-number (``bool`` included) and ``ValueError`` for NaN or an ``int`` too large to
    be a float (``10**400``), naming ``name``."""
    if not isinstance(delay, (int, float)) or isinstance(delay, bool):
        raise TypeError(f"{name} must be a number of seconds, got {type(delay).__name__}: {delay!r:.80}")
    if delay != delay:
        raise ValueError(f"{name} must be a number of seconds, got NaN")
    return _as_seconds(delay, name)


def check_timeout(timeout: object, name: str = "timeout") -> float | None:
    """Validate a timeout named ``name``: ``None`` or ``math.inf`` (wait forever; any value above
    ``threading.TIMEOUT_MAX`` is as good as forever) or a number of seconds >= 0.

    Raises ``TypeError`` for a non-number and ``ValueError`` for a negative value, NaN or an ``int`` too large to
    be a float (``10**400``), naming ``name``."""
    if timeout is None:
        return None
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        raise TypeError(f"{name} must be None or seconds, got {type(timeout).__name__}: {timeout!r:.80}")
    if not timeout >= 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {timeout!r}")
    return _as_seconds(timeout, name)


def holds(container: set[Any] | dict[Any, Any], item: object) -> bool:
    """Whether ``container`` holds the very object ``item`` (an identity scan: O(len), for error paths only; a
    function of its own so that the hot methods calling it on their miss path need no closure)."""
    return any(k is item for k in container)


def purge_stale(container: set[Any] | dict[Any, Any], item: object) -> int:
    """Remove the entries of the very object ``item`` that its current hash can no longer find (stored under the
    hash it had before it was mutated), rebuilding ``container`` in place. Returns how many were removed.

    O(len(container)); only called once a mutation has been detected. An entry ``item`` can still find (it was
    added again after the mutation) is kept, and so are entries of other, equal objects."""
    try:
        findable = item in container
    except Exception:
        findable = False
    same = [k for k in container if k is item]
    stale = len(same) - findable
    if stale <= 0:
        return 0
    if isinstance(container, dict):
        kept = [(k, v) for k, v in container.items() if k is not item]
        value = container.get(item) if findable else None
        container.clear()
        container.update(kept)
        if findable:
            container[item] = value
    else:
        kept_keys = [k for k in container if k is not item]
        container.clear()
        container.update(kept_keys)
        if findable:
            container.add(item)
    return stale


def discard_identity(container: set[Any] | dict[Any, Any], item: object) -> None:
    """Remove the very object ``item`` from ``container`` without calling any method of ``item`` (its ``__hash__``
    or ``__eq__`` may be what just raised): the container is rebuilt from its other entries. O(len(container));
    only the undo of a change that a later failure of the same call must take back uses it."""
    if isinstance(container, dict):
        kept = [(k, v) for k, v in container.items() if k is not item]
        container.clear()
        container.update(kept)
    else:
        kept_keys = [k for k in container if k is not item]
        container.clear()
        container.update(kept_keys)


class _Empty:
    __slots__ = ()

    def __repr__(self) -> str:
        return "EMPTY"


EMPTY: Final = _Empty()
"""Returned by :meth:`QueueCore.pop` when nothing is ready (keys may be ``None``, so ``None`` cannot say it)."""

# Stands in for the key in a superseded delayed entry: never a key of the queue, so the entry is skipped.
_SUPERSEDED: Final = object()


#: A ledger's buffer of durations is folded when it holds this many (see :class:`MetricsLedger`).
LEDGER_FOLD_AT: Final = 256


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


def check_ordering(ordering: object) -> None:
    """Raise ``TypeError`` (naming ``ordering``) unless ``ordering`` is an empty :class:`Ordering`."""
    missing = [m for m in ("append", "popleft", "__len__") if not callable(getattr(ordering, m, None))]
    touch = getattr(ordering, "touch", None)
    if touch is not None and not callable(touch):
        missing.append("touch (not callable)")
    if missing:
        raise TypeError(f"ordering must have append(key), popleft() and __len__() (and optionally touch(key)); "
                        f"{type(ordering).__name__} lacks {', '.join(missing)}")
    if len(ordering) != 0:  # type: ignore[arg-type]
        raise ValueError(f"ordering must start empty, got one holding {len(ordering)} keys")  # type: ignore[arg-type]


@mypyc_attr(allow_interpreted_subclasses=True)
class CoreBase(Generic[T]):
    """What the shells drive: the state machine's operations that the shared shell code calls, implemented by
    :class:`QueueCore` and by the priority core (``keyqueue._priority_core.PriorityCore``, over its heaps). A base
    class and not a Protocol so that the compiled build's shells call these methods through the method table;
    here each raises ``NotImplementedError``. Not thread-safe: callers hold the queue's lock.

    ``shutting_down`` and ``draining`` are the shutdown flags (see :meth:`shut_down`); ``fast_dirty`` is the set a
    shell may probe without its lock for the dedup fast path (empty for a core that must see every add).
    """

    __slots__ = ("draining", "fast_dirty", "shutting_down")

    shutting_down: bool
    draining: bool
    fast_dirty: KeySet[T] | frozenset[T]

    def add(self, item: T, at_ns: int | None = None) -> AddResult:
        """Apply one add (see :meth:`QueueCore.add`)."""
        raise NotImplementedError

    def add_after(self, item: T, delay: object) -> AddResult:
        """Apply one delayed add (see :meth:`QueueCore.add_after`); validates ``delay``."""
        raise NotImplementedError

    def add_rate_limited(self, item: T, limiter: Callable[[T], float]) -> AddResult:
        """Apply one rate-limited add (see :meth:`QueueCore.add_rate_limited`)."""
        raise NotImplementedError

    def pop(self) -> T | _Empty:
        """Hand out the next ready key, or :data:`EMPTY`."""
        raise NotImplementedError

    def done(self, item: T) -> bool:
        """Finish ``item``; ``True`` if it was queued again (a redelivery)."""
        raise NotImplementedError

    def has_ready(self) -> bool:
        """True if a key is ready (without firing due entries)."""
        raise NotImplementedError

    def next_ready_ns(self) -> int | None:
        """When the earliest delayed entry falls due (clock ns), or ``None``."""
        raise NotImplementedError

    def ready_len(self) -> int:
        """Keys waiting to be handed out (what ``len()`` reports)."""
        raise NotImplementedError

    def idle(self) -> bool:
        """True if nothing is ready and nothing is being processed."""
        raise NotImplementedError

    def shut_down(self, drain: bool) -> None:
        """Stop accepting adds (``drain``: a drain was asked for)."""
        raise NotImplementedError

    def stats(self) -> QueueStats | None:
        """The decision counters, or ``None`` for a core that does not count."""
        raise NotImplementedError


@mypyc_attr(allow_interpreted_subclasses=True)
class QueueCore(CoreBase[T]):
    """The client-go state machine (see the module docstring). Not thread-safe: callers hold a lock.

    ``clock`` is read only when something needs the time (delayed entries, metrics).
    """

    __slots__ = (
        "_heap",
        "_kept",
        "_latest_ns",
        "_now",
        "_push",
        "_queue_obs",
        "_seq",
        "_sorted",
        "_take",
        "_touch",
        "_waiting",
        "_work_obs",
        "clock",
        "dirty",
        "fifo",
        "metrics",
        "processing",
    )

    def __init__(self, clock: Clock, metrics: MetricsRecorder | None = None,
                 ordering: Ordering[T] | None = None) -> None:
        self.clock = clock
        # Read on every metrics event (RealClock: the C function itself); Any: see KeySet.
        self._now: Callable[[], Any] = clock.now_ns
        self.metrics = metrics
        self._kept: MetricsLedger | None = None  # see keep_ledger(); with it, the ledger's two buffers:
        self._queue_obs: list[Any] = []  # ints (Any: see KeySet)
        self._work_obs: list[Any] = []
        # fifo is the order in which keys will be handed out (a deque, or the queue's own Ordering). Every key in
        # fifo is in dirty and not in processing, and appears in fifo once.
        self.fifo: Ordering[T] = deque() if ordering is None else ordering
        # Its append and popleft, bound once: the compiled build would otherwise look each method up by name on
        # every call (the fifo is only known to be an Ordering). The fifo object is never replaced.
        self._push: Callable[[T], object] = self.fifo.append
        self._take: Callable[[], T] = self.fifo.popleft
        # The ordering's Touch hook (None for the FIFO): called for an add of a key that is waiting.
        self._touch: Callable[[T], object] | None = getattr(ordering, "touch", None)
        # dirty holds every key that needs processing: the waiting ones (in fifo) and the ones re-added while
        # being processed (not in fifo until done()). A set, or with a ledger (keep_ledger) a dict: key -> the
        # clock time it became dirty.
        self.dirty: KeySet[T] = set()
        # processing holds the keys handed out by pop() and not yet done(). A key in processing is never in
        # fifo, so no two callers can hold it at once. When done() removes a key that is also dirty, it is
        # appended to fifo exactly once. A set, or with a ledger a dict: key -> the clock time it was handed out.
        self.processing: KeySet[T] = set()
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
        self.fast_dirty = self.dirty if self._touch is None else frozenset()

    def keep_ledger(self, ledger: MetricsLedger) -> None:
        """Record the metrics events of :attr:`metrics` (which must be ``ledger``'s recorder) in ``ledger``'s
        structures directly instead of calling the recorder's ``add``/``get``/``done``: the same bookkeeping (the
        time a key became dirty, its processing start at get, the queue duration from the first add, the work
        duration at done), with each duration buffered until the ledger folds it.

        The ledger's ``added`` and ``started`` dicts become :attr:`dirty` and :attr:`processing` (key -> that
        time), so the times cost no dict operation of their own. Call it on a fresh core, with both dicts empty:
        raises ``ValueError`` otherwise (and for a core without metrics), changing nothing. Assigning ``None`` to
        :attr:`_ledger` detaches it again (see there)."""
        if self.metrics is None or self.dirty or self.processing or ledger.added or ledger.started:
            raise ValueError("keep_ledger() needs a fresh core with metrics and a ledger with empty added/started")
        if self.fast_dirty is self.dirty:
            self.fast_dirty = ledger.added
        self.dirty = ledger.added
        self.processing = ledger.started
        self._queue_obs = ledger.queue_obs
        self._work_obs = ledger.work_obs
        self._kept = ledger

    @property
    def _ledger(self) -> MetricsLedger | None:
        """The ledger kept by :meth:`keep_ledger`, or ``None``. Assigning ``None`` detaches it (the A/B of the tests
        and benchmarks): :attr:`dirty` and :attr:`processing` become sets of the same keys, and the core calls the
        recorder's own ``add``/``get``/``done`` from then on, which go on with the ledger's dicts (they still hold
        every dirty key's add time and every processing key's start time). A shell that copied :attr:`fast_dirty`
        then probes the ledger's ``added``, whose keys the recorder's ``add``/``get`` keep equal to the dirty keys.
        Assigning a ledger is :meth:`keep_ledger`."""
        return self._kept

    @_ledger.setter
    def _ledger(self, ledger: MetricsLedger | None) -> None:
        if ledger is not None:
            self.keep_ledger(ledger)
            return
        if self._kept is None:
            return
        dirty: set[T] = set(self.dirty)
        if self.fast_dirty is self.dirty:
            self.fast_dirty = dirty
        self.dirty = dirty
        self.processing = set(self.processing)
        self._kept = None

    # -- adds ---------------------------------------------------------------------------------------------

    def add(self, item: T, at_ns: int | None = None) -> AddResult:
        """Apply one add. Returns DROPPED, DEDUP, MARKED or QUEUED. ``at_ns``: when it happened (for metrics)."""
        if self.shutting_down:
            return DROPPED
        dirty = self.dirty
        if item in dirty:
            touch = self._touch
            if touch is not None and item not in self.processing:
                touch(item)  # client-go's Queue.Touch: an add of a waiting key (e.g. to re-prioritise it)
            return DEDUP
        # Every lookup (each may call the key's own __hash__/__eq__, which may raise) comes before the first
        # change, and the one change that calls them again (dirty.add) comes first: if it raises, nothing changed;
        # if a later step raises, it is undone by identity. The call is all-or-nothing.
        marked = item in self.processing
        metrics = self.metrics
        if metrics is None or self._kept is None:
            keys: set[T] = dirty  # type: ignore[assignment]  # no ledger: a set
            keys.add(item)
        else:  # the ledger's dict carries the time (see keep_ledger): no hook to call
            times: dict[T, Any] = dirty  # type: ignore[assignment]
            if at_ns is None:
                now = self._now  # (see pop)
                at_ns = now()
            times[item] = at_ns
            metrics = None
        try:
            if metrics is not None:
                metrics.add(item, self._now() if at_ns is None else at_ns)
            if marked:
                return MARKED
            self._push(item)
        except BaseException:
            discard_identity(dirty, item)
            raise
        return QUEUED

    def add_after(self, item: T, delay: object) -> AddResult:
        """Add ``item`` once ``delay`` seconds have passed on the clock.

        ``delay <= 0`` adds now (returns what :meth:`add` returns). Otherwise returns DELAYED or DELAY_KEPT: of
        several delayed entries of one key the earliest is kept. After DELAYED, a shell whose waiters sleep until
        :meth:`next_ready_ns` must let one of them re-compute its timeout. A plain add does not cancel a
        delayed entry. Raises ``ValueError`` for NaN and ``TypeError`` for an unhashable item, changing nothing.
        """
        # (`delay: object`, checked here: a shell passes the caller's value on as it is.)
        if type(delay) is not float or delay != delay:
            delay = check_delay(delay)  # raises for a non-number and NaN; converts an int
        if self.shutting_down or delay <= 0:
            check_hashable(item)
            if self.shutting_down:
                return DROPPED
            outcome = self.add(item)  # first: if the key's __eq__ raises, not even the retry is counted
            if self.metrics is not None:
                self.metrics.retry()
            return outcome
        waiting = self._waiting
        try:
            live = waiting.get(item)  # before any change (the key's __eq__ may raise)
        except TypeError:
            check_hashable(item)  # an unhashable item: the clear message; nothing has changed
            raise
        # round(...) or 1: a positive delay below half a nanosecond still waits (and never means "now").
        delay_ns = _MAX_DELAY_NS if delay >= _MAX_DELAY_S else (round(delay * 1_000_000_000) or 1)
        ready = self.clock.now_ns() + delay_ns
        if live is not None and live[0] <= ready:
            if self.metrics is not None:
                self.metrics.retry()  # every delayed add counts a retry, as client-go's AddAfter
            return DELAY_KEPT
        self._seq = seq = self._seq + 1
        entry = [ready, seq, item]
        waiting[item] = entry  # the one step that calls the key's methods again: first, so that a raise changes nothing
        if self.metrics is not None:
            self.metrics.retry()
        if live is not None:
            live[2] = _SUPERSEDED  # its heap slot stays until popped or rebuilt, but lets go of the key
        if ready > self._latest_ns:
            self._latest_ns = ready
        heap = self._heap
        if self._sorted and (not heap or ready >= heap[-1][0]):
            heap.append(entry)  # (ready, seq) is the largest: the list stays sorted, hence a heap
        else:
            heapq.heappush(heap, entry)
            self._sorted = False
        if len(heap) > 64 and len(heap) > 2 * len(waiting):
            # Too many superseded entries: rebuild from the live ones.
            self._heap = heap = list(waiting.values())
            heap.sort()
            self._sorted = True
        return DELAYED

    def add_rate_limited(self, item: T, limiter: Callable[[T], float]) -> AddResult:
        """``add_after(item, limiter(item))`` (``limiter`` is a rate limiter's ``when``), all-or-nothing as far as
        the key's own methods go: every lookup the add can make (dirty, processing, delayed entries) is made
        first, so a key whose ``__hash__``/``__eq__`` raises against what the queue holds raises before the
        limiter records a failure. After shutdown the limiter is still consulted and the add is ``DROPPED``
        (client-go). What cannot be undone: a limiter that records and then raises, or a key whose methods raise
        only on a later call (after ``when`` returned) — the limiter has no undo, so that failure stays counted."""
        if not self.shutting_down:
            try:
                # The lookups the add may make, for their exceptions only (each may call the key's methods).
                _ = (item in self.dirty, item in self.processing, item in self._waiting)
            except TypeError:
                check_hashable(item)  # an unhashable item: the clear message; nothing has changed
                raise
        return self.add_after(item, limiter(item))

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
            if item is _SUPERSEDED:
                continue
            if self._take_due(item, entry):
                fire(item, entry[0])  # all-or-nothing; if it raises, the key is dropped (see _take_due)
                fired += 1
            else:
                # A live entry its key's hash cannot find: the key was mutated while delayed. Forget the entry and
                # put the key in the fifo without marking it dirty: the pop that reaches it raises KeyMutatedError.
                purge_stale(waiting, item)
                self._push(item)
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
                i += 1  # taken out of the delayed entries: fired now, even if firing raises
                if item is _SUPERSEDED:
                    continue
                if self._take_due(item, entry):
                    fire(item, entry[0])
                    fired += 1
                else:  # mutated while delayed: as in the heappop loop of promote_due
                    purge_stale(waiting, item)
                    self._push(item)
        except BaseException:
            heap[0:0] = batch[i:]  # what was not reached stays delayed, in order (the list stays sorted)
            raise
        return fired

    def _take_due(self, item: T, entry: list[Any]) -> bool:
        """Take the due ``entry`` (already out of the heap) out of the delayed entries: ``True`` if it was the
        key's live entry, ``False`` if the key's hash no longer finds it (mutated while delayed). If the key's own
        methods raise here, its entry is dropped by identity (it is then in neither the heap nor the map) and the
        exception propagates: a delayed key whose methods raise as it falls due is dropped, so that it cannot
        block the keys behind it; the same holds when its add (``_fire``) raises."""
        waiting = self._waiting
        try:
            if waiting.get(item) is not entry:
                return False
            del waiting[item]
        except BaseException:
            discard_identity(waiting, item)
            raise
        return True

    def _fire(self, item: T, ready_ns: int) -> None:
        self.add(item, ready_ns)

    def next_ready_ns(self) -> int | None:
        """The clock time of the earliest live delayed entry, or ``None`` if there is none."""
        heap = self._heap
        while heap and heap[0][2] is _SUPERSEDED:  # no lookup: a key's own methods are not called here
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

        Returns :data:`EMPTY` if nothing is ready. If the head's own ``__hash__``/``__eq__`` raises, the exception
        propagates and the key stays waiting (dirty, in the fifo, once) but at the back, so that it cannot block
        the keys behind it. If a delayed key's own methods raise as it falls due, it is dropped and the exception
        propagates (see :meth:`_take_due`). A mutated key raises :class:`~keyqueue.KeyMutatedError`.
        """
        if self._heap:
            self.promote_due(self.clock.now_ns())
        fifo = self.fifo
        if not fifo:
            return EMPTY
        item = self._take()
        # The rule for a key whose own __hash__/__eq__ raises here: it stays waiting (dirty, in the fifo, once),
        # but behind the others, so that one such key cannot block every key queued after it; the exception
        # propagates. Adding it to processing comes first: undoing that needs no call of the key's methods
        # (identity), undoing the removal from dirty would.
        # (The checks are ordered so that a queue without metrics makes one test more than it needs, on a local.)
        metrics = self.metrics
        try:
            if metrics is None or self._kept is None:
                handed: set[T] = self.processing  # type: ignore[assignment]  # no ledger: sets
                handed.add(item)
                waiting: set[T] = self.dirty  # type: ignore[assignment]
                waiting.remove(item)
            else:  # the ledger's dicts carry the times (see keep_ledger)
                now = self._now  # (a call of self._now() is an unspecialised LOAD_METHOD of a slot: ~8 ns more)
                t = now()
                started: dict[T, Any] = self.processing  # type: ignore[assignment]
                started[item] = t
                added: dict[T, Any] = self.dirty  # type: ignore[assignment]
                t0 = added[item]  # (a lookup and a del: the compiled build has no primitive for dict.pop)
                del added[item]
        except BaseException as exc:
            if holds(self.processing, item):  # it got there: leaving dirty raised
                discard_identity(self.processing, item)
                if isinstance(exc, KeyError) and not self._findable(item):
                    raise self._mutated(item, "waiting in the queue") from None
            self._push(item)
            raise
        if metrics is None:
            return item
        kept = self._kept
        try:
            if kept is not None:
                obs = self._queue_obs
                obs.append(t - t0)
                if len(obs) >= LEDGER_FOLD_AT:
                    kept.fold()  # both buffers: done() appends at most one per get (+ keys in flight)
            else:
                metrics.get(item, self._now())
        except BaseException:
            self._unpop(item, t0 if kept is not None else 0)
            raise
        return item

    def _findable(self, item: T) -> bool:
        return self._found_in(self.dirty, item)

    @staticmethod
    def _found_in(container: KeySet[T], item: T) -> bool:
        """Whether ``item``'s current hash finds it in ``container`` (a lookup that raises counts as found: the
        exception is the key's own, not a sign that it was mutated)."""
        try:
            return item in container
        except Exception:
            return True

    def _unpop(self, item: T, added_ns: int) -> None:
        # A hand-out failed after the key left dirty (a metrics hook raised): waiting again, at the back (with a
        # ledger, dirty since ``added_ns`` again). If even making it dirty raises, the key is dropped (then in no
        # container and not in the fifo: consistent).
        discard_identity(self.processing, item)
        dirty = self.dirty
        try:
            if isinstance(dirty, dict):
                dirty[item] = added_ns
            else:
                dirty.add(item)
        except BaseException:
            return
        self._push(item)

    def _mutated(self, item: T, where: str) -> KeyMutatedError:
        """Forget ``item`` everywhere by identity (its hash changed, so lookups cannot find it) and return the
        error to raise."""
        purge_stale(self.dirty, item)
        purge_stale(self.processing, item)
        if self.metrics is not None:
            self.metrics.lost(item)
        return KeyMutatedError(item, where)

    def done(self, item: T) -> bool:
        """Finish processing ``item``. Returns True if it was re-added meanwhile and is now back in the fifo.

        ``done`` of a key that is not being processed changes nothing (client-go would push a duplicate); of a key
        being processed under the hash it had before it was mutated, raises KeyMutatedError (forgetting it).
        """
        metrics = self.metrics
        try:
            # Looked up before any change: the key's own __eq__ may raise, and then nothing has changed.
            requeue = item in self.dirty
            if metrics is None or self._kept is None:
                handed: set[T] = self.processing  # type: ignore[assignment]  # no ledger: a set
                handed.remove(item)
            else:  # the ledger's dict: key -> when it was handed out (see keep_ledger)
                started: dict[T, Any] = self.processing  # type: ignore[assignment]
                t0 = started[item]
                del started[item]
        except KeyError:
            # Not being processed: a spurious done, changing nothing. (A set argument lands here too, not in the
            # TypeError branch: set.remove looks a set up as a frozenset.)
            check_hashable(item)
            if holds(self.processing, item):
                if self._found_in(self.processing, item):
                    raise  # the KeyError came from the key's own __eq__: nothing changed
                raise self._mutated(item, "being processed") from None  # under the hash it had: mutated
            return False
        except TypeError:
            check_hashable(item)  # an unhashable item: the same clear TypeError as add() (nothing changed)
            raise
        if requeue:
            self._push(item)
        # Last: a hook that raises (the key's own methods, called inside it) leaves the queue consistent (the key
        # finished, and queued again if it was re-added); only the metric misses this done.
        if metrics is not None:
            if self._kept is not None:
                now = self._now
                self._work_obs.append(now() - t0)  # folded by pop(): a done follows a get
            else:
                metrics.done(item, self._now())
        return requeue

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
        if self.metrics is not None and not self.shutting_down:
            self.metrics.shut_down(self.clock.now_ns())
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


@mypyc_attr(allow_interpreted_subclasses=True)
class CountingCore(QueueCore[T]):
    """A :class:`QueueCore` that counts its decisions (for the lab's funnel statistics).

    It turns off the shells' lock-free dedup probe (``fast_dirty`` is empty), so every add reaches
    :meth:`add` and is counted under the shell's lock.
    """

    __slots__ = ("_counts",)

    def __init__(self, clock: Clock, metrics: MetricsRecorder | None = None,
                 ordering: Ordering[T] | None = None) -> None:
        super().__init__(clock, metrics, ordering)
        self.fast_dirty = frozenset()
        self._counts = DecisionCounts()

    def add(self, item: T, at_ns: int | None = None) -> AddResult:
        return self._counts.add(super().add(item, at_ns))

    def add_after(self, item: T, delay: object) -> AddResult:
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


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """The sizes of a queue's structures at one instant (``snapshot()`` of either shell, taken under its lock).

    ``dirty``: keys that need work (waiting in the FIFO, or re-added while a worker holds them); ``fifo``: keys
    waiting to be handed out (client-go's ``queue`` slice; ``len(q)`` without firing due entries); ``processing``:
    keys handed out and not yet done; ``delayed``: keys with a pending ``add_after``/``add_rate_limited`` entry not
    yet due. ``held_dirty`` (= ``dirty - fifo``) counts keys that ``done()`` will put back in the FIFO.
    """

    dirty: int
    fifo: int
    processing: int
    delayed: int
    shutting_down: bool = False

    @property
    def held_dirty(self) -> int:
        """Keys being processed that were added again meanwhile: each is redelivered once at its ``done()``."""
        return self.dirty - self.fifo
