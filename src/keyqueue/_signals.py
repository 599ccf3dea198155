"""Signal handling that cannot deadlock.

A Python-level signal handler runs in the main thread between two bytecodes — possibly while that thread is inside
``threading.Event.wait()`` and holds the event's internal lock, or inside ``logging`` holding a handler's lock. A
handler that calls ``Event.set()`` (or logs) then waits for a lock its own thread holds: the process hangs with the
signal consumed. So handlers installed here only record the signal number; the main thread polls for it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["recorded_signals"]


@contextmanager
def recorded_signals(*signums: signal.Signals) -> Iterator[list[int]]:
    """While the block runs, each of ``signums`` is only appended to the yielded list (a lock-free, atomic
    operation); the previous handlers are restored on exit. Must be used in the main thread."""
    received: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {s: signal.signal(s, record) for s in signums}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
