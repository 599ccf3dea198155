"""Pending delayed adds: at most one entry per key, handed back in time order once due."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable
from typing import Any, Final, Generic, TypeVar

__all__ = ["Delays", "Entry"]

T = TypeVar("T", bound=Hashable)

#: An entry: ``[ready_ns, -priority, seq, key]``. Entries compare by time, then priority (highest first), then
#: ``seq``, which the caller makes unique, so keys are never compared.
Entry = list[Any]

# Replaces the key of an entry that is no longer live, so that it holds no reference to the key.
_GONE: Final = object()

# The structures are rebuilt from the live entries once they hold more than twice as many, plus this.
_SLACK: Final = 64


class Delays(Generic[T]):
    """The delayed entries of one queue. Not thread-safe: the queue's lock guards it.

    Invariants:

    * ``live`` maps each key with a pending delay to its one live entry.
    * Every live entry is in exactly one of ``_run`` and ``_heap``. ``_run`` is a deque sorted by entry order (the
      usual case: delays arrive in time order and are appended in O(1)); ``_heap`` is a heap of the entries that
      arrived out of order. The next due entry is the smaller of their two heads.
    * An entry that was replaced or removed stays where it is (lazy deletion) with its key slot set to ``_GONE``;
      it is dropped when it reaches a head. ``len(_run) + len(_heap) <= 2 * len(live) + _SLACK`` after every change
      that leaves such an entry behind.
    """

    __slots__ = ("_heap", "_run", "live")

    def __init__(self) -> None:
        #: Each key with a pending delay -> its one live entry (read-only outside this class).
        self.live: dict[T, Entry] = {}
        self._run: deque[Entry] = deque()
        self._heap: list[Entry] = []

    def __len__(self) -> int:
        return len(self.live)

    def get(self, key: T) -> Entry | None:
        """``key``'s live entry, or ``None``."""
        return self.live.get(key)

    def put(self, key: T, ready_ns: int, priority: int, seq: int) -> None:
        """Make ``[ready_ns, -priority, seq, key]`` the live entry of ``key`` (replacing any earlier one)."""
        entry = [ready_ns, -priority, seq, key]
        live = self.live
        old = live.get(key)
        live[key] = entry
        run = self._run
        if not run or entry > run[-1]:
            run.append(entry)
        else:
            heapq.heappush(self._heap, entry)
        if old is not None:
            old[3] = _GONE
            self._compact()

    def remove(self, key: T) -> Entry | None:
        """Remove and return ``key``'s live entry (its key slot no longer holds the key), or ``None``."""
        entry = self.live.pop(key, None)
        if entry is not None:
            entry[3] = _GONE
            self._compact()
        return entry

    def next_ns(self) -> int | None:
        """When the earliest live entry is due, or ``None``."""
        run, heap = self._run, self._heap
        while run and run[0][3] is _GONE:
            run.popleft()
        while heap and heap[0][3] is _GONE:
            heapq.heappop(heap)
        if not run:
            return heap[0][0] if heap else None
        if heap and heap[0] < run[0]:
            return heap[0][0]  # type: ignore[no-any-return]
        return run[0][0]  # type: ignore[no-any-return]

    def take_due(self, now_ns: int) -> list[Entry]:
        """Remove and return every live entry due at ``now_ns``, earliest first."""
        run, heap, live = self._run, self._heap, self.live
        due: list[Entry] = []
        if not heap:  # the usual case: every delay arrived in time order
            while run and run[0][0] <= now_ns:
                entry = run.popleft()
                key = entry[3]
                if key is not _GONE:
                    del live[key]
                    due.append(entry)
            return due
        while True:
            if heap and heap[0][0] <= now_ns and (not run or heap[0] < run[0]):
                entry = heapq.heappop(heap)
            elif run and run[0][0] <= now_ns:
                entry = run.popleft()
            else:
                return due
            key = entry[3]
            if key is not _GONE:
                del live[key]
                due.append(entry)

    def restore(self, entries: list[Entry]) -> None:
        """Put back entries that :meth:`take_due` returned and the caller could not apply."""
        for entry in entries:
            self.put(entry[3], entry[0], -entry[1], entry[2])

    def clear(self) -> None:
        self.live.clear()
        self._run.clear()
        self._heap.clear()

    def _compact(self) -> None:
        if len(self._run) + len(self._heap) > 2 * len(self.live) + _SLACK:
            self._run = deque(sorted(self.live.values()))
            self._heap = []
