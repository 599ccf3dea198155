"""Handing the GIL over where a queue's threads would otherwise starve each other.

With a GIL, a thread that never blocks keeps it for a whole switch interval (5 ms). Two places in a queue produce
such threads: a producer adding keys that are already waiting (each add is a lock-free probe that never blocks),
and a worker that always finds a key ready. The first keeps a woken worker from running; the second is preempted
after a switch interval at any bytecode, most likely while it holds the queue's lock, and every other worker then
sleeps on that lock (a lock convoy). So the queue lets go of the GIL (``time.sleep(0)``) at two points where it holds
no lock:

* every :data:`YIELD_EVERY` lock-free dedup adds and contended ``get`` calls (one countdown per queue);
* after an add that woke a blocked getter, at most once per :data:`HANDOFF_GAP_NS` per queue (the woken thread
  needs the GIL to return from its wait; the gap keeps producers that wake getters at a high rate from switching
  the GIL at every add).

Where the interpreter runs without a GIL (free-threaded CPython) neither happens: threads run in parallel, and a
``sleep(0)`` only costs a system call. The countdown and the gap are plain attributes written without a lock; a lost
update moves one yield, which is harmless.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Final

__all__ = ["GIL", "HANDOFF_GAP_NS", "YIELD_EVERY", "GilHandOff"]

#: Whether this interpreter runs with a GIL (``False`` on free-threaded CPython with the GIL disabled).
GIL: Final[bool] = getattr(sys, "_is_gil_enabled", lambda: True)()

#: Lock-free dedup adds and contended ``get`` calls per queue between two yields of the GIL.
YIELD_EVERY: Final = 256 if GIL else 2**62

#: At least this long (ns) between two hand-offs after a wake-up, per queue.
HANDOFF_GAP_NS: Final = 100_000

_sleep = time.sleep  # module attributes: the tests replace them
_monotonic_ns = time.monotonic_ns
_active_count = threading.active_count


class GilHandOff:
    """One queue's countdown and hand-off gap (see the module docstring)."""

    __slots__ = ("_next_ns", "contended", "countdown")

    def __init__(self) -> None:
        #: Yields left before the next one; the shells decrement it inline on the dedup path (a method call there
        #: would cost more than the add).
        self.countdown = YIELD_EVERY
        #: Set once the queue is seen used by several threads (a getter waited, or the countdown ran out); until
        #: then ``get`` does not count, so a queue used by one thread pays one attribute test.
        self.contended = False
        self._next_ns = 0

    def tick(self) -> None:
        """Count one call; yield the GIL when the countdown runs out."""
        n = self.countdown
        if n:
            self.countdown = n - 1
        else:
            self.yield_now()

    def yield_now(self) -> None:
        """The countdown ran out: start it over and let go of the GIL once, if another thread exists."""
        self.countdown = YIELD_EVERY
        self.contended = True
        if _active_count() > 1:
            _sleep(0)

    def after_wake(self) -> None:
        """An add woke a blocked getter (called without the queue's lock): let go of the GIL once, unless this
        queue did so less than :data:`HANDOFF_GAP_NS` ago."""
        if GIL:
            now = _monotonic_ns()
            if now >= self._next_ns:
                self._next_ns = now + HANDOFF_GAP_NS
                _sleep(0)
