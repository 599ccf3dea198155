"""The priority queue's state machine (controller-runtime's ``priorityqueue``): pure data, no locks, no sleeping.

:class:`PriorityCore` offers the interface the shells use from :class:`~keyqueue._core.QueueCore` (``add``,
``add_after``, ``pop``, ``done``, ``ready_len``, ``has_ready``, ``next_ready_ns``, ``promote_due``, ``shut_down``,
``idle``, ``stats`` and the attributes ``shutting_down``, ``draining``, ``fast_dirty``, ``metrics``, ``clock``,
``processing``), so the threading and asyncio shells drive it unchanged; the priority queue classes add
priority-aware adds and :meth:`PriorityCore.pop_with_priority` on top.

Model. ``_items`` maps every *queued* key to its one live entry, which is a tuple that also sits in one of two heaps:

* ready:    ``(-priority, counter, key)`` in ``_ready`` — served highest priority first, FIFO (counter) within one;
* waiting:  ``(ready_ns, -priority, counter, key)`` in ``_waiting`` — a delayed key, not yet due.

``counter`` is one global, strictly increasing sequence, so it also breaks every tie (keys are never compared).
Replacing a key's entry leaves the old tuple in its heap; a heap entry is live only if ``_items[key] is entry``
(lazy invalidation, rebuilt when more than half of a heap is stale).

A key being processed (handed out, no ``done`` yet) is in ``processing`` (key → the priority it was handed out
with) and **not** in ``_items``. Re-adding it creates a new entry: a ready one counts in ``len`` (as in
controller-runtime) but is not pushed onto the ready heap until ``done`` — so the heap never holds a live entry of
a key being processed, a key is never handed out twice at once, and ``done`` puts it back at its FIFO position.

Merging an add into a queued key (controller-runtime's rules):

* priority: the highest wins; a strictly higher priority gives the key a fresh counter (the back of its new
  priority's line); an equal or lower one changes nothing (the key keeps its place);
* readiness: a ready key stays ready (a delayed add never delays it); a waiting key takes the earlier ready time;
  an immediate add makes it ready at once.
* a key that becomes ready (new, promoted when due, or made ready by an immediate add) gets a fresh counter: it
  joins its priority's FIFO at that moment. Every add, hand-out and ``ready_len`` first promotes the keys that have
  fallen due (in ready-time order), so a delayed key is always ahead of the keys added after its ready time.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Any, Final, Protocol, TypeVar

from keyqueue._core import (
    _MAX_DELAY_NS,
    _MAX_DELAY_S,
    DEDUP,
    DELAY_KEPT,
    DELAYED,
    DROPPED,
    EMPTY,
    MARKED,
    QUEUED,
    AddResult,
    CoreBase,
    DecisionCounts,
    QueueStats,
    _Empty,
    check_delay,
    check_hashable,
    discard_identity,
    holds,
    purge_stale,
)
from keyqueue.clock import Clock, seconds_to_ns
from keyqueue.errors import KeyMutatedError
from keyqueue.ratelimit import RateLimiter

__all__ = ["CountingPriorityCore", "PriorityCore", "PriorityMetricsRecorder", "check_priority", "effective_delay"]

T = TypeVar("T", bound=Hashable)
E = TypeVar("E", bound=tuple[Any, ...])

_COMPACT_MIN: Final = 64  # heaps smaller than this are never rebuilt


def check_priority(priority: object) -> int:
    """Validate a priority: an ``int`` (not a ``bool``), any sign. Higher is served first; the default is 0."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, got {type(priority).__name__}: {priority!r:.80}")
    return priority


def effective_delay(item: T, after: float, rate_limiter: RateLimiter[T] | None) -> float:
    """controller-runtime's delay for ``AddOpts{After: after, RateLimited: rate_limiter is not None}``.

    With a limiter, ``r = rate_limiter.when(item)`` is always called (so the failure count grows) and the delay is
    ``r`` when ``after == 0`` (unset) or ``r < after``; otherwise ``after``. In effect the smaller of the two, with
    0 meaning "unset" (a negative ``after`` stays: the key is ready now).
    """
    if rate_limiter is None:
        return after
    r = rate_limiter.when(item)
    return r if after == 0 or r < after else after


def _compacted(heap: list[E], stale: set[int]) -> list[E]:
    """``heap`` without its superseded entries (those whose id is in ``stale``, which is then emptied), as a new
    heap. Entries that are not live but not superseded either (a mutated key's) stay, for a pop to report them. A
    function of its own so that the push methods calling it need no closure cell on every call."""
    kept = [e for e in heap if id(e) not in stale]
    stale.clear()
    heapq.heapify(kept)
    return kept


class PriorityMetricsRecorder(Protocol):
    """Hooks :class:`PriorityCore` calls, with the shell's lock held, when metrics are enabled.

    Timestamps are the queue clock's integer nanoseconds. ``add`` is called when a key becomes *ready* (a merely
    waiting key is not in depth), with the priority it is ready at; ``get`` when it is handed out, with that
    priority; ``reprioritize`` when a ready key's priority is raised (depth moves from one label to the other);
    ``retry`` for every accepted add whose effective delay is > 0.
    """

    def add(self, item: Hashable, t_ns: int, priority: int) -> None: ...

    def get(self, item: Hashable, t_ns: int, priority: int) -> None: ...

    def done(self, item: Hashable, t_ns: int) -> None: ...

    def reprioritize(self, item: Hashable, old_priority: int, new_priority: int) -> None: ...

    def retry(self) -> None: ...

    def shut_down(self, t_ns: int) -> None: ...

    def lost(self, item: Hashable, ready_priority: int | None) -> None:
        """The queue dropped ``item`` because it was mutated: forget it (by identity); ``ready_priority`` is the
        priority it was counted in depth at, or ``None`` if it was not counted there."""
        ...


class PriorityCore(CoreBase[T]):
    """The priority-queue state machine (see the module docstring). Not thread-safe: callers hold a lock.

    ``clock`` is read only when something needs the time (delayed keys, metrics). ``fast_dirty`` is always an
    empty set: a re-add of a queued key can raise its priority, so the plain shells' lock-free dedup probe must not
    short-circuit any add (the priority shells probe ``fast_items`` instead, comparing priorities).
    """

    __slots__ = (
        "_counter",
        "_items",
        "_ready",
        "_ready_n",
        "_stale_ready",
        "_stale_waiting",
        "_waiting",
        "_waiting_n",
        "clock",
        "fast_items",
        "metrics",
        "processing",
    )

    def __init__(self, clock: Clock, metrics: PriorityMetricsRecorder | None = None) -> None:
        self.clock = clock
        self.metrics = metrics
        # Every queued key → its live entry: (-prio, counter, key) if ready, (ready_ns, -prio, counter, key) if
        # waiting. Keys being processed are not here unless re-added meanwhile.
        self._items: dict[T, tuple[int, int, T] | tuple[int, int, int, T]] = {}
        self._ready: list[tuple[int, int, T]] = []  # heap; never holds a live entry of a key being processed
        self._waiting: list[tuple[int, int, int, T]] = []  # heap
        self._ready_n = 0  # live ready entries, including those of keys being processed (what len reports)
        self._waiting_n = 0  # live waiting entries
        # id() of every superseded entry still in a heap (so still alive: its id is not reused). A heap entry that
        # is neither live nor here belongs to a key whose hash changed after it was added (see KeyMutatedError).
        self._stale_ready: set[int] = set()
        self._stale_waiting: set[int] = set()
        self._counter = 0
        # Keys handed out and not yet done → the priority they were handed out with.
        self.processing: dict[T, int] = {}
        self.shutting_down = False
        self.draining = False
        self.fast_dirty = frozenset()
        # What the priority shells may probe without their lock for a dedup (see PriorityAdds.add): the entry map
        # itself, or None for a core that must see every add (CountingPriorityCore).
        self.fast_items: dict[T, tuple[int, int, T] | tuple[int, int, int, T]] | None = self._items

    # -- adds ---------------------------------------------------------------------------------------------

    def add(self, item: T, at_ns: int | None = None, *, priority: int = 0) -> AddResult:
        """Add ``item`` now at ``priority``. Returns what happened:

        * ``QUEUED`` — the key joined the back of its priority's ready line (new key, a waiting key made ready,
          or a ready key whose priority was raised);
        * ``MARKED`` — the key is being processed; it is now ready (or its priority was raised) and ``done``
          puts it back in line;
        * ``DEDUP`` — already ready at this priority or higher: nothing changed; ``DROPPED`` — shut down.

        ``at_ns`` is when it happened (for metrics; default now). Raises ``TypeError`` for an unhashable item or
        a non-int priority, changing nothing.
        """
        check_hashable(item)
        check_priority(priority)
        if self.shutting_down:
            return DROPPED
        return self._add_ready(item, priority, at_ns)

    def add_after(self, item: T, delay: object, *, priority: int = 0) -> AddResult:
        """Add ``item`` at ``priority`` once ``delay`` seconds have passed on the clock (``<= 0``: now, as
        :meth:`add`; ``math.inf``: never, in practice).

        A ready key stays ready (``DEDUP``, or ``QUEUED``/``MARKED`` if the priority was raised). A waiting key
        keeps the earlier ready time and the higher priority: ``DELAYED`` if either changed, else ``DELAY_KEPT``.
        A new key: ``DELAYED``. After ``DELAYED`` a shell whose getters sleep until :meth:`next_ready_ns` must
        let one of them re-compute its timeout. Raises ``TypeError``/``ValueError`` for bad input, changing
        nothing.
        """
        return self.add_with_opts(item, priority=priority, after=delay)

    def add_with_opts(
        self,
        item: T,
        *,
        priority: int = 0,
        after: object = 0.0,  # validated here
        rate_limiter: RateLimiter[T] | None = None,
    ) -> AddResult:
        """controller-runtime's ``AddWithOpts``: the one add every other add goes through.

        With ``rate_limiter`` the delay is :func:`effective_delay` (the limiter records a failure); the limiter is
        not consulted once the queue is shut down. An effective delay > 0 counts a retry in the metrics. Returns
        what :meth:`add` or :meth:`add_after` return. Raises ``TypeError``/``ValueError`` for bad input before
        anything (limiter included) changes.
        """
        check_hashable(item)
        check_priority(priority)
        return self.add_checked(item, priority, check_delay(after, "after"), rate_limiter)

    def add_checked(self, item: T, priority: int, delay: float, rate_limiter: RateLimiter[T] | None) -> AddResult:
        """:meth:`add_with_opts` for arguments already validated (the shells validate before taking their lock):
        a hashable item, an int priority, a float delay that is not NaN. An unhashable item raises the built-in
        ``TypeError`` before anything changes."""
        if self.shutting_down:
            return DROPPED
        if rate_limiter is not None:
            # Every lookup the add can make comes before the limiter records a failure, so a key whose own
            # __hash__/__eq__ raises against what the queue holds leaves the limiter untouched (all-or-nothing;
            # only a raise on a later call, after when() returned, cannot take the recorded failure back).
            [item in c for c in (self._items, self.processing)]
            delay = effective_delay(item, delay, rate_limiter)
        if delay <= 0:
            return self._add_ready(item, priority, None)
        delay_ns = _MAX_DELAY_NS if delay >= _MAX_DELAY_S else max(1, seconds_to_ns(delay))
        now = self.clock.now_ns()
        return self._add_waiting(item, priority, now, now + delay_ns)

    def _add_ready(self, item: T, priority: int, at_ns: int | None) -> AddResult:
        if self._waiting:
            # Keys that fell due before this add became ready before it: they go ahead of it in the FIFO.
            self.promote_due(self.clock.now_ns())
        items = self._items
        # Every lookup (each may call the key's own __eq__, which may raise) comes before the first change, so an
        # exception leaves the queue as if the add had not happened.
        old = items.get(item)
        if old is not None and len(old) == 3:  # already ready: only a strictly higher priority changes anything
            if priority <= -old[0]:
                return DEDUP
            return self._raise_ready(item, old, priority)
        marked = item in self.processing
        if old is not None:
            priority = max(priority, -old[1])  # a waiting key becomes ready now, at the higher of the two
        self._counter += 1
        entry = (-priority, self._counter, item)
        items[item] = entry  # the one change that calls the key's methods again: first, so a raise changes nothing
        if old is not None:
            self._stale_waiting.add(id(old))
            self._waiting_n -= 1
            if not self._waiting_n:
                self._waiting.clear()  # only superseded entries are left: let go of their keys
                self._stale_waiting.clear()
        self._ready_n += 1
        if not marked:
            self._push_ready(entry)
        if self.metrics is not None:
            # Last: a hook that raises (the key's own methods, called inside it) leaves the queue consistent, the
            # key queued, and only the metric without this add.
            self.metrics.add(item, self.clock.now_ns() if at_ns is None else at_ns, priority)
        return MARKED if marked else QUEUED

    def _raise_ready(self, item: T, old: tuple[int, int, T], priority: int) -> AddResult:
        # A ready key gets a higher priority and a fresh counter: the back of its new priority's line.
        marked = item in self.processing  # before any change (the key's __eq__ may raise)
        self._counter += 1
        entry = (-priority, self._counter, item)
        self._items[item] = entry
        if not marked:
            self._stale_ready.add(id(old))  # a key not being processed has its ready entry in the heap
        if self.metrics is not None:
            self.metrics.reprioritize(item, -old[0], priority)
        if marked:
            return MARKED
        self._push_ready(entry)
        return QUEUED

    def _add_waiting(self, item: T, priority: int, now_ns: int, ready_ns: int) -> AddResult:
        self.promote_due(now_ns)
        items = self._items
        old = items.get(item)  # before any change (the key's __eq__ may raise)
        if self.metrics is not None:
            self.metrics.retry()  # every accepted add with an effective delay > 0
        if old is None:
            self._counter += 1
            self._push_waiting((ready_ns, -priority, self._counter, item))
            self._waiting_n += 1
            return DELAYED
        if len(old) == 3:  # a ready key stays ready; the priority may still rise
            if priority <= -old[0]:
                return DEDUP
            return self._raise_ready(item, old, priority)
        old_ready, old_neg, old_counter = old[0], old[1], old[2]
        raised = priority > -old_neg
        if not raised and ready_ns >= old_ready:
            return DELAY_KEPT
        if raised:
            self._counter += 1
            old_neg, old_counter = -priority, self._counter
        self._push_waiting((min(ready_ns, old_ready), old_neg, old_counter, item))  # raises before any change
        self._stale_waiting.add(id(old))
        return DELAYED

    def _push_ready(self, entry: tuple[int, int, T]) -> None:
        heap = self._ready
        heapq.heappush(heap, entry)
        if len(heap) > _COMPACT_MIN and len(heap) > 2 * self._ready_n:
            self._ready = _compacted(heap, self._stale_ready)

    def _push_waiting(self, entry: tuple[int, int, int, T]) -> None:
        self._items[entry[3]] = entry  # first: if the key's own methods raise, nothing has changed
        heap = self._waiting
        heapq.heappush(heap, entry)
        if len(heap) > _COMPACT_MIN and len(heap) > 2 * self._waiting_n:
            self._waiting = _compacted(heap, self._stale_waiting)

    def promote_due(self, now_ns: int) -> int:
        """Make every waiting key whose time is <= ``now_ns`` ready, in (time, priority desc, counter) order;
        each gets a fresh counter (it joins its priority's FIFO now). Returns how many became ready."""
        heap = self._waiting
        items = self._items
        processing = self.processing
        metrics = self.metrics
        fired = 0
        while heap and heap[0][0] <= now_ns:
            entry = heapq.heappop(heap)
            item = entry[3]
            if id(entry) in self._stale_waiting:
                self._stale_waiting.discard(id(entry))
                continue  # superseded (known without calling the key's methods)
            self._counter += 1
            ready = (entry[1], self._counter, item)
            try:
                if items.get(item) is not entry:
                    self._promote_mutated(entry)
                    continue
                marked = item in processing
                items[item] = ready
            except BaseException:
                self._drop_due(item)
                raise
            self._waiting_n -= 1
            if not self._waiting_n:
                heap.clear()  # only superseded entries are left (ends this loop): let go of their keys
                self._stale_waiting.clear()
            self._ready_n += 1
            if marked:
                self._promoted(MARKED)
            else:
                self._push_ready(ready)
                self._promoted(QUEUED)
            fired += 1
            if metrics is not None:
                metrics.add(item, entry[0], -entry[1])  # last, as in _add_ready
        return fired

    def _drop_due(self, item: T) -> None:
        # The key's own methods raised while it fell due: it is dropped (by identity, calling none of its
        # methods), so that it cannot block the keys behind it, and the exception propagates from the call that
        # promoted it. Its waiting entry is already off the heap.
        discard_identity(self._items, item)
        self._waiting_n -= 1
        if not self._waiting_n:
            self._waiting.clear()
            self._stale_waiting.clear()

    def _promote_mutated(self, entry: tuple[int, int, int, T]) -> None:
        # A live waiting entry its key's hash cannot find: the key was mutated while delayed. Forget its entry and
        # put a ready entry that no key maps to on the ready heap (counted in len): the pop that reaches it raises
        # KeyMutatedError, naming the key.
        item = entry[3]
        purge_stale(self._items, item)
        self._waiting_n -= 1
        if not self._waiting_n:
            self._waiting.clear()
            self._stale_waiting.clear()
        self._counter += 1
        self._ready_n += 1
        heapq.heappush(self._ready, (entry[1], self._counter, item))

    def _promoted(self, outcome: AddResult) -> None:
        """Called for each waiting key that became ready (``QUEUED``, or ``MARKED`` if it is being processed)."""

    def next_ready_ns(self) -> int | None:
        """The clock time of the earliest waiting key, or ``None`` if no key is waiting."""
        heap = self._waiting
        items = self._items
        stale = self._stale_waiting
        while heap and items.get(heap[0][3]) is not heap[0] and id(heap[0]) in stale:
            stale.discard(id(heapq.heappop(heap)))  # superseded entry at the head: drop it now
        return heap[0][0] if heap else None

    @property
    def ready_count(self) -> int:
        """Ready keys as of the last promotion (no clock read, no change): what :meth:`ready_len` returns
        without first making due keys ready."""
        return self._ready_n

    @property
    def delayed_count(self) -> int:
        """How many keys are waiting for their ready time."""
        return self._waiting_n

    # -- hand-out and completion -----------------------------------------------------------------------------

    def has_ready(self) -> bool:
        """True if a key can be handed out now (without firing due keys). Keys re-added while being processed
        are ready (they count in :meth:`ready_len`) but cannot be handed out until their ``done``."""
        heap = self._ready
        items = self._items
        stale = self._stale_ready
        while heap and items.get(heap[0][2]) is not heap[0] and id(heap[0]) in stale:
            stale.discard(id(heapq.heappop(heap)))
        return bool(heap)  # a head that is neither live nor stale is a mutated key's: pop reports it

    def pop_with_priority(self) -> tuple[T, int] | _Empty:
        """Hand out the best ready key (first making due keys ready): highest priority, oldest within it.

        The key moves to ``processing``; returns ``(key, priority)``, or :data:`~keyqueue._core.EMPTY` if no key
        can be handed out. The rules for a key whose own ``__hash__``/``__eq__`` raises are
        :meth:`QueueCore.pop <keyqueue._core.QueueCore.pop>`'s: it stays ready at its priority, at the back of that
        priority's line; a waiting key that raises as it falls due is dropped; the exception propagates.
        """
        if self._waiting:
            self.promote_due(self.clock.now_ns())
        heap = self._ready
        items = self._items
        while heap:
            entry = heapq.heappop(heap)
            if id(entry) in self._stale_ready:
                self._stale_ready.discard(id(entry))  # superseded (known without calling the key's methods)
                continue
            item = entry[2]
            # The rule for a key whose own __hash__/__eq__ raises here (as in QueueCore.pop): it stays ready at its
            # priority, but at the back of that priority's line, so that it cannot block the keys behind it; the
            # exception propagates.
            priority = -entry[0]
            try:
                live = items.get(item) is entry
                if live:
                    self.processing[item] = priority
            except BaseException:
                self._requeue_after_failed_pop(entry)
                raise
            if live:
                try:
                    del items[item]
                except BaseException:
                    discard_identity(self.processing, item)
                    self._requeue_after_failed_pop(entry)
                    raise
                self._ready_n -= 1
                if not self._ready_n:
                    heap.clear()  # only superseded entries are left: let go of their keys
                    self._stale_ready.clear()
                if self.metrics is not None:
                    self.metrics.get(item, self.clock.now_ns(), priority)
                return item, priority
            raise self._mutated_ready(entry)
        return EMPTY

    def _requeue_after_failed_pop(self, entry: tuple[int, int, T]) -> None:
        # Still ready at its priority, but at the back of its line (a fresh counter), so that the keys behind it
        # keep flowing; if even that raises, back where it was.
        item = entry[2]
        self._counter += 1
        fresh = (entry[0], self._counter, item)
        try:
            self._items[item] = fresh
        except BaseException:
            heapq.heappush(self._ready, entry)
            return
        heapq.heappush(self._ready, fresh)

    def _mutated_ready(self, entry: tuple[int, int, T]) -> KeyMutatedError:
        # A ready entry that is neither live nor superseded: its key's hash changed while it was queued.
        item = entry[2]
        counted = purge_stale(self._items, item) > 0  # not for a key that was mutated while delayed
        self._ready_n -= 1
        if not self._ready_n:
            self._ready.clear()
            self._stale_ready.clear()
        if self.metrics is not None:
            self.metrics.lost(item, -entry[0] if counted else None)
        return KeyMutatedError(item, "waiting in the queue")

    def _mutated_processing(self, item: T) -> KeyMutatedError:
        # done() of a key handed out under a hash it no longer has: forget it, and a re-add of it made while it was
        # processed (stored under the old hash too), keeping any entry its current hash finds.
        items = self._items
        try:
            findable = items.get(item)
        except Exception:
            findable = None
        ready_priority = None
        for k, e in list(items.items()):
            if k is item and e is not findable:
                if len(e) == 3:
                    self._ready_n -= 1  # a re-add while processing: counted, not in the heap
                    ready_priority = -e[0]
                else:
                    self._waiting_n -= 1
                    self._stale_waiting.add(id(e))
        purge_stale(items, item)
        purge_stale(self.processing, item)
        if self.metrics is not None:
            self.metrics.lost(item, ready_priority)
        return KeyMutatedError(item, "being processed")

    def pop(self) -> T | _Empty:
        """:meth:`pop_with_priority` without the priority."""
        got = self.pop_with_priority()
        return got if got is EMPTY else got[0]  # type: ignore[index]  # not EMPTY, so a tuple

    def done(self, item: T) -> bool:
        """Finish processing ``item``. Returns True if it was re-added meanwhile and can be handed out again now
        (it takes its place by priority and FIFO position). A key re-added with a delay that is still waiting
        returns False. ``done`` of a key that is not being processed changes nothing."""
        try:
            entry = self._items.get(item)  # before any change: the key's own __eq__ may raise
            del self.processing[item]
        except KeyError:
            if holds(self.processing, item):
                try:
                    found = item in self.processing
                except Exception:
                    found = True
                if found:
                    raise  # the KeyError came from the key's own __eq__: nothing changed
                raise self._mutated_processing(item) from None  # under the hash it had: it was mutated
            return False
        except TypeError:
            check_hashable(item)  # an unhashable item: the same clear TypeError as add() (nothing changed)
            raise
        requeue = entry is not None and len(entry) == 3
        if requeue:
            self._push_ready(entry)  # type: ignore[arg-type]  # len() == 3: the ready 3-tuple
        if self.metrics is not None:
            self.metrics.done(item, self.clock.now_ns())  # last, as in QueueCore.done
        return requeue

    def ready_len(self) -> int:
        """Ready keys (after making due keys ready), including keys re-added while being processed; keys still
        waiting for their time are not counted (controller-runtime's ``Len``)."""
        if self._waiting:
            self.promote_due(self.clock.now_ns())
        return self._ready_n

    def priority_of(self, item: T) -> int | None:
        """The priority a queued key (ready or waiting) currently has, or ``None`` if it is not queued."""
        entry = self._items.get(item)
        if entry is None:
            return None
        return -entry[0] if len(entry) == 3 else -entry[1]

    # -- shutdown ------------------------------------------------------------------------------------------

    def shut_down(self, drain: bool) -> None:
        """Stop accepting adds; drop every waiting key. Ready keys stay and are still handed out (also those
        re-added while being processed, after their ``done``). ``drain=False`` also cancels a drain in progress.
        Idempotent."""
        if self.metrics is not None and not self.shutting_down:
            self.metrics.shut_down(self.clock.now_ns())  # the in-flight gauges stop moving (client-go)
        self.shutting_down = True
        self.draining = drain
        items = self._items
        stale = self._stale_waiting
        for entry in self._waiting:
            if items.get(entry[3]) is entry:
                del items[entry[3]]
            elif id(entry) not in stale:
                purge_stale(items, entry[3])  # a key mutated while delayed
        self._waiting.clear()
        stale.clear()
        self._waiting_n = 0

    def idle(self) -> bool:
        """No ready key and nothing being processed (what a drain waits for)."""
        return self._ready_n == 0 and not self.processing

    def stats(self) -> QueueStats | None:
        """Decision counters, or ``None`` for a core that does not count."""
        return None


class CountingPriorityCore(PriorityCore[T]):
    """A :class:`PriorityCore` that counts its decisions (:class:`~keyqueue.QueueStats`), for ``stats=True``.

    ``adds`` counts every add whose outcome was immediate (``QUEUED``/``MARKED``/``DEDUP``/``DROPPED``) plus each
    waiting key that became ready (also counted in ``fired``); ``delayed`` counts ``DELAYED`` and ``DELAY_KEPT``.
    """

    __slots__ = ("_counts",)

    def __init__(self, clock: Clock, metrics: PriorityMetricsRecorder | None = None) -> None:
        super().__init__(clock, metrics)
        self.fast_items = None
        self._counts = DecisionCounts()

    def add(self, item: T, at_ns: int | None = None, *, priority: int = 0) -> AddResult:
        return self._counts.add(super().add(item, at_ns, priority=priority))

    def add_checked(self, item: T, priority: int, delay: float, rate_limiter: RateLimiter[T] | None) -> AddResult:
        return self._counts.add(super().add_checked(item, priority, delay, rate_limiter))

    def _promoted(self, outcome: AddResult) -> None:
        self._counts.fired += 1
        self._counts.add(outcome)

    def pop_with_priority(self) -> tuple[T, int] | _Empty:
        got = super().pop_with_priority()
        if got is not EMPTY:
            self._counts.gets += 1
        return got

    def done(self, item: T) -> bool:
        was_processing = item in self.processing
        requeued = super().done(item)
        self._counts.done(was_processing, requeued)
        return requeued

    def stats(self) -> QueueStats:
        return self._counts.snapshot()
