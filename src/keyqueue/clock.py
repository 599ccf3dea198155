"""Clocks: the queue's only source of time.

Every queue and :class:`~keyqueue.BucketRateLimiter` takes ``clock=``. Time is kept internally as integer
nanoseconds so that durations reported by metrics are exact (with float seconds, 7.5e-05 - 5e-05 is not 2.5e-05).

* :class:`RealClock` reads :func:`time.monotonic_ns`; waiting for a delayed item uses a real timed wait.
* :class:`FakeClock` only moves when :meth:`FakeClock.step` or :meth:`FakeClock.set` is called. A ``get()`` waiting
  for a delayed item does not time out on its own: the step wakes it, in the threading and the asyncio shell.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "FakeClock", "RealClock", "TimeListener"]

_NS_PER_S = 1_000_000_000


def seconds_to_ns(seconds: float) -> int:
    """Convert seconds to integer nanoseconds, rounding to the nearest nanosecond."""
    return round(seconds * _NS_PER_S)


def _check_time(what: str, seconds: object) -> float:
    """A finite real number of seconds, or ``TypeError``/``ValueError`` naming ``what`` (and the value; an ``int``
    too large for a float is a ``ValueError`` too)."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        raise TypeError(f"{what} must be a number of seconds, got {type(seconds).__name__}: {seconds!r:.80}")
    try:
        value = float(seconds)
    except OverflowError:  # an int too large for a float (10**400)
        raise ValueError(f"{what} is too large to be a number of seconds") from None
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number of seconds, got {seconds!r}")
    return value


def check_clock(clock: object, name: str = "clock") -> Clock:
    """``clock`` if it is a :class:`Clock` (an instance of a subclass included), else ``TypeError`` naming ``name``
    and the type."""
    if not isinstance(clock, Clock):
        raise TypeError(
            f"{name} must be a keyqueue.Clock (RealClock, FakeClock or a subclass), got {type(clock).__name__}: "
            f"{clock!r:.80}"
        )
    return clock


class TimeListener(Protocol):
    def __call__(self) -> None: ...


class Clock:
    """Base class of clocks. Subclasses implement :meth:`now_ns`; the rest has working defaults.

    A custom clock that can jump (like :class:`FakeClock`) must call :meth:`_notify` after each jump so that
    queues waiting for a delayed item re-check what is due.
    """

    def __init__(self) -> None:
        self._listeners_lock = threading.Lock()
        self._listeners: list[weakref.ReferenceType[Callable[[], None]]] = []

    def now_ns(self) -> int:
        """The current time in integer nanoseconds (arbitrary origin, never goes backwards)."""
        raise NotImplementedError

    def now(self) -> float:
        """The current time in seconds, as a float."""
        return self.now_ns() / _NS_PER_S

    def real_wait(self, deadline_ns: int) -> float | None:
        """How many real seconds a waiter should sleep to reach ``deadline_ns`` on this clock.

        ``None`` means "do not time out: a notification (see :meth:`subscribe`) will wake you".
        """
        return max(0.0, (deadline_ns - self.now_ns()) / _NS_PER_S)

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every jump of this clock.

        Only a weak reference is kept (bound methods through :class:`weakref.WeakMethod`), so a subscribed queue
        can still be garbage-collected. The callback runs in the thread that moves the clock and must not block.
        """
        ref: weakref.ReferenceType[Callable[[], None]] = (
            weakref.WeakMethod(callback) if hasattr(callback, "__self__") else weakref.ref(callback)
        )
        with self._listeners_lock:
            self._listeners = [r for r in self._listeners if r() is not None]
            self._listeners.append(ref)

    def _notify(self) -> None:
        with self._listeners_lock:
            callbacks = [r() for r in self._listeners]
        for cb in callbacks:
            if cb is not None:
                cb()


class RealClock(Clock):
    """The monotonic system clock (:func:`time.monotonic_ns`)."""

    # The C functions themselves, not Python methods wrapping them: a queue with metrics reads the clock three
    # times per add+get+done, and the extra Python frame cost ~20-40 ns per read.
    now_ns = staticmethod(time.monotonic_ns)
    now = staticmethod(time.monotonic)

    def subscribe(self, callback: Callable[[], None]) -> None:
        """A real clock never jumps, so nothing is ever called; subscribing is a no-op."""


class FakeClock(Clock):
    """A clock that moves only when told to. Thread-safe.

    ``FakeClock(start=0.0)`` starts at ``start`` seconds. :meth:`step` and :meth:`set` move it and then wake every
    queue that uses it, so a ``get()`` waiting for a delayed item that is now due returns. Waiters on a fake clock
    never time out by themselves (:meth:`real_wait` returns ``None``).
    """

    def __init__(self, start: float = 0.0) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._ns = seconds_to_ns(_check_time("FakeClock start", start))

    def now_ns(self) -> int:
        lock = self._lock
        lock.acquire()  # not `with`: read on every delayed add and metrics event, and ~80 ns cheaper
        try:
            return self._ns
        finally:
            lock.release()

    def real_wait(self, deadline_ns: int) -> float | None:
        return None

    def step(self, seconds: float) -> None:
        """Advance the clock by ``seconds`` (>= 0), then wake the queues that use it.

        Raises ``ValueError`` for a negative, NaN or infinite step (a clock never goes backwards) and ``TypeError``
        for a non-number; the clock is then unchanged.
        """
        if not _check_time("FakeClock.step() seconds", seconds) >= 0:
            raise ValueError(f"FakeClock.step() needs seconds >= 0, got {seconds!r}")
        with self._lock:
            self._ns += seconds_to_ns(seconds)
        self._notify()

    def set(self, seconds: float) -> None:
        """Move the clock to ``seconds`` (not earlier than now), then wake the queues that use it.

        Raises ``ValueError`` for a time earlier than now, NaN or infinite, ``TypeError`` for a non-number; the
        clock is then unchanged.
        """
        target = seconds_to_ns(_check_time("FakeClock.set() seconds", seconds))
        with self._lock:
            if target < self._ns:
                raise ValueError(f"FakeClock.set({seconds!r}) would move the clock backwards")
            self._ns = target
        self._notify()

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now()!r})"
