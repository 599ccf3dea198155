"""A baseline: the straightforward locked work queue anyone would write first.

client-go's algorithm (dirty set, processing set, FIFO) behind one :class:`threading.Condition`, every method under
``with cond:``, ``notify()`` on every enqueue, no lock-free dedup path, no separate state machine. It is here only so
the benchmark can show what keyqueue's shell design buys over the obvious implementation; it is not exported and
has no delayed adds, metrics or drain.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class NaiveShutDown(Exception):
    """Raised by :meth:`NaiveWorkQueue.get` after shutdown once nothing is left."""


class NaiveWorkQueue(Generic[T]):
    """add/get/done with client-go's semantics, the obvious way (see the module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._fifo: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._shutting_down = False

    def add(self, item: T) -> None:
        with self._cond:
            if self._shutting_down or item in self._dirty:
                return
            self._dirty.add(item)
            if item in self._processing:
                return
            self._fifo.append(item)
            self._cond.notify()

    def get(self) -> T:
        """Blocks until a key is ready; raises :class:`NaiveShutDown` after shutdown once nothing is queued."""
        with self._cond:
            while not self._fifo and not self._shutting_down:
                self._cond.wait()
            if not self._fifo:
                raise NaiveShutDown
            item = self._fifo.popleft()
            self._dirty.discard(item)
            self._processing.add(item)
            return item

    def done(self, item: T) -> None:
        with self._cond:
            self._processing.discard(item)
            if item in self._dirty:
                self._fifo.append(item)
                self._cond.notify()

    def shut_down(self) -> None:
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()
