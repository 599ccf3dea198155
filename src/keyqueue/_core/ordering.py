"""The order in which waiting keys are handed out: the :class:`Ordering` interface (a :class:`collections.deque` is
client-go's FIFO) and :class:`PriorityOrdering` (controller-runtime's priority order)."""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Any, Final, Generic, Protocol, TypeVar

__all__ = ["Ordering", "PriorityDepth", "PriorityOrdering", "check_ordering"]

T = TypeVar("T", bound=Hashable)

_GONE: Final = object()  # the key slot of a superseded entry (it then holds no reference to the key)
_SLACK: Final = 64  # the heap is rebuilt once it holds more than twice its live entries plus this


class Ordering(Protocol[T]):
    """The order in which waiting keys are handed out: client-go's ``Queue[T]`` (``Push``, ``Pop``, ``Len``,
    ``Touch``), spelled as :class:`collections.deque` spells the first three, so that the default FIFO is a deque.

    The queue calls every method with its lock held, so an ordering needs no locking of its own and must not call
    back into the queue. ``append(key)``: a key became waiting (a new add, or ``done()`` re-queueing a key re-added
    while it was processed); each key is appended at most once until it is popped. ``popleft()``: hand out the next
    key; called only when ``len() > 0``; it must return a key it was given and has not returned yet. ``__len__()``:
    how many keys it holds. ``touch(key)``, optional: an add of a key that is already *waiting* (not one being
    processed), e.g. to move it up. An ordering with ``touch`` turns the lock-free dedup probe off, since every add
    of a waiting key must reach it.
    """

    def append(self, item: T, /) -> None: ...

    def popleft(self) -> T: ...

    def __len__(self) -> int: ...


def check_ordering(ordering: object) -> None:
    """Raise ``TypeError`` unless ``ordering`` has the :class:`Ordering` methods, ``ValueError`` unless it is empty."""
    missing = [m for m in ("append", "popleft", "__len__") if not callable(getattr(ordering, m, None))]
    touch = getattr(ordering, "touch", None)
    if touch is not None and not callable(touch):
        missing.append("touch (not callable)")
    if missing:
        raise TypeError(f"ordering must have append(key), popleft() and __len__() (and optionally touch(key)); "
                        f"{type(ordering).__name__} lacks {', '.join(missing)}")
    if len(ordering) != 0:  # type: ignore[arg-type]
        raise ValueError(f"ordering must start empty, got one holding {len(ordering)} keys")  # type: ignore[arg-type]


class PriorityDepth(Protocol):
    """Ready keys per priority (for metrics): what a :class:`PriorityOrdering` keeps up to date when given one."""

    def inc(self, priority: int) -> None: ...

    def dec(self, priority: int) -> None: ...


class PriorityOrdering(Generic[T]):
    """Highest priority first, and within one priority the order in which keys got their rank.

    A key gets its rank (:meth:`rank`) when it becomes dirty, also while it is being processed: a key re-added then
    keeps that place for when ``done`` appends it. :meth:`rerank` gives it a new one when its priority rises. A key
    appended without a rank (given back after a failed hand-out) goes to the back of the line it was popped from.
    Ranks are ``[-priority, seq, key]`` lists with a unique ``seq``, so keys are never compared.

    ``depth``, if given, counts the ranked keys per priority.

    Invariants: ``ranks`` holds the rank of every key that was ranked and not popped since. ``_heap`` holds the rank
    of every appended key not popped since (``waiting`` of them), plus superseded ranks whose key slot is
    ``_GONE``; ``len(_heap) <= 2 * waiting + _SLACK`` after every change that leaves such a rank behind.
    """

    __slots__ = ("_heap", "_seq", "depth", "popped_priority", "ranks", "waiting")

    def __init__(self, depth: PriorityDepth | None = None) -> None:
        self.depth = depth
        #: Every ranked key -> its rank (read-only outside this class).
        self.ranks: dict[T, list[Any]] = {}
        self._heap: list[list[Any]] = []
        #: How many keys are appended and not popped (read-only outside this class).
        self.waiting = 0
        self._seq = 0
        #: The priority of the key :meth:`popleft` returned last.
        self.popped_priority = 0

    def rank(self, key: T, priority: int, append: bool) -> None:
        """Give ``key`` (not ranked yet) its place: the back of ``priority``'s line; ``append``: it is waiting now
        (else it is being processed and :meth:`append` comes at its ``done``)."""
        self._seq += 1
        rank = self.ranks[key] = [-priority, self._seq, key]
        if self.depth is not None:
            self.depth.inc(priority)
        if append:
            self.waiting += 1
            heapq.heappush(self._heap, rank)

    def rerank(self, key: T, priority: int, waiting: bool) -> bool:
        """Raise ``key``'s priority to ``priority``, at the back of that line, if that is higher than it has;
        ``waiting``: it was appended (else it is being processed). Returns whether anything changed."""
        old = self.ranks[key]
        if priority <= -old[0]:
            return False
        self._seq += 1
        new = self.ranks[key] = [-priority, self._seq, key]
        if self.depth is not None:
            self.depth.dec(-old[0])
            self.depth.inc(priority)
        if waiting:
            old[2] = _GONE
            heap = self._heap
            heapq.heappush(heap, new)
            if len(heap) > 2 * self.waiting + _SLACK:
                self._heap = [r for r in heap if r[2] is not _GONE]
                heapq.heapify(self._heap)
        return True

    def append(self, key: T) -> None:
        rank = self.ranks.get(key)
        if rank is None:
            self.rank(key, self.popped_priority, True)
            return
        self.waiting += 1
        heapq.heappush(self._heap, rank)

    def popleft(self) -> T:
        heap = self._heap
        rank = heapq.heappop(heap)
        while rank[2] is _GONE:
            rank = heapq.heappop(heap)
        key: T = rank[2]
        del self.ranks[key]
        self.waiting -= 1
        self.popped_priority = priority = -rank[0]
        if self.depth is not None:
            self.depth.dec(priority)
        return key

    def __len__(self) -> int:
        return self.waiting
