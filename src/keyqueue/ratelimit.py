"""Rate limiters: how long a failed key waits before it is added again.

The arithmetic is client-go's (``k8s.io/client-go/util/workqueue/default_rate_limiters.go``), with two deliberate
differences: :class:`BucketRateLimiter` reads the injected clock (client-go's reads the wall clock), and no limiter
ever returns a negative delay. Every limiter is thread-safe (one :class:`threading.Lock` each) and never blocks
for longer than its own bookkeeping: ``when()`` computes a delay, it does not sleep.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable
from typing import Final, Protocol, TypeVar

from keyqueue.clock import Clock, RealClock, check_clock

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "ItemFastSlowRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "WithMaxWaitRateLimiter",
    "check_limiter",
    "default_controller_rate_limiter",
    "default_item_based_rate_limiter",
]

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)


class RateLimiter(Protocol[T_contra]):
    """What a rate-limiting queue needs from a limiter.

    * ``when(item)`` — seconds to wait before ``item`` is added again (>= 0; ``math.inf`` means never). Calling it
      records a failure of ``item``.
    * ``forget(item)`` — ``item`` succeeded: clear what is remembered about it.
    * ``num_requeues(item)`` — how many failures of ``item`` are remembered.
    """

    def when(self, item: T_contra) -> float: ...

    def forget(self, item: T_contra) -> None: ...

    def num_requeues(self, item: T_contra) -> int: ...


def check_limiter(name: str, limiter: object) -> None:
    """Raise ``TypeError`` naming ``name`` and the type unless ``limiter`` has ``when``, ``forget`` and
    ``num_requeues``."""
    if not all(callable(getattr(limiter, m, None)) for m in ("when", "forget", "num_requeues")):
        raise TypeError(
            f"{name} must be a rate limiter (when, forget, num_requeues), got {type(limiter).__name__}: {limiter!r:.80}"
        )


# golang.org/x/time/rate's InfDuration (2**63 - 1 ns, ~292 years): a longer wait is capped to it, i.e. "never"; the
# reservation is still granted and its token still taken (Reserve() is ok whenever burst >= 1).
_INF_DURATION_S = (2**63 - 1) / 1e9


def _check_seconds(name: str, value: object) -> float:
    """``value`` as a float, or ``TypeError`` for a non-number (``bool`` included) / ``ValueError`` for a negative
    or NaN value, naming ``name``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}: {value!r}")
    if math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
    return float(value)


def _check_count(name: str, value: object) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) >= 0, else ``TypeError``/``ValueError`` naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}: {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


class ItemExponentialFailureRateLimiter(RateLimiter[T]):
    """Per-key exponential backoff: the n-th consecutive failure of a key waits ``base_delay * 2**(n-1)``,
    capped at ``max_delay``.

    With (0.005, 1000): 5 ms, 10 ms, 20 ms, ... 655.36 s at the 18th failure, 1000 s from the 19th on.
    ``forget(item)`` starts the key over at ``base_delay``. Both delays are seconds, an ``int`` or a ``float``.
    Raises ``ValueError`` if ``base_delay > max_delay`` or either is negative or NaN, ``TypeError`` for a
    non-number (``bool`` included).
    """

    def __init__(self, base_delay: float, max_delay: float) -> None:
        base = _check_seconds("base_delay", base_delay)
        cap = _check_seconds("max_delay", max_delay)
        if base > cap:
            raise ValueError(f"base_delay ({base_delay!r}) must not exceed max_delay ({max_delay!r})")
        self.base_delay: float = base
        self.max_delay: float = cap
        self._lock = threading.Lock()
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        # acquire/try/finally rather than `with`: the same guarantee, cheaper (this runs on every failure).
        lock = self._lock
        lock.acquire()
        try:
            failures = self._failures
            exp = failures.get(item, 0)
            failures[item] = exp + 1
        finally:
            lock.release()
        if exp >= 1024:  # 2.0**1024 overflows a float; any base > 0 is far past any cap by then
            return self.max_delay if self.base_delay > 0 else 0.0
        delay = self.base_delay * 2.0**exp
        return delay if delay < self.max_delay else self.max_delay

    def forget(self, item: T) -> None:
        lock = self._lock
        lock.acquire()
        try:
            self._failures.pop(item, None)
        finally:
            lock.release()

    def num_requeues(self, item: T) -> int:
        with self._lock:
            return self._failures.get(item, 0)


class ItemFastSlowRateLimiter(RateLimiter[T]):
    """``fast_delay`` for a key's first ``max_fast_attempts`` failures, ``slow_delay`` after that.

    ``forget(item)`` starts the key over with fast attempts. Raises ``ValueError`` for a negative or NaN delay or a
    negative ``max_fast_attempts``, ``TypeError`` for a non-number delay or a non-int ``max_fast_attempts``
    (``bool`` included)."""

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        self.fast_delay: float = _check_seconds("fast_delay", fast_delay)
        self.slow_delay: float = _check_seconds("slow_delay", slow_delay)
        self.max_fast_attempts: int = _check_count("max_fast_attempts", max_fast_attempts)
        self._lock = threading.Lock()
        self._attempts: dict[T, int] = {}

    def when(self, item: T) -> float:
        with self._lock:
            n = self._attempts.get(item, 0) + 1
            self._attempts[item] = n
        return self.fast_delay if n <= self.max_fast_attempts else self.slow_delay

    def forget(self, item: T) -> None:
        with self._lock:
            self._attempts.pop(item, None)

    def num_requeues(self, item: T) -> int:
        with self._lock:
            return self._attempts.get(item, 0)


_INF: Final = math.inf


class BucketRateLimiter(RateLimiter[T]):
    """One token bucket shared by every key: ``qps`` tokens per second, holding at most ``burst``.

    Arithmetic of ``golang.org/x/time/rate`` ``Reserve().Delay()``: the bucket starts full; each ``when()`` takes
    a token whether or not one is there, so tokens go negative and the delay is the time until the debt is paid.
    With (10, 100) the first 100 calls return 0, then about 0.1 s, 0.2 s, 0.3 s ... ``burst=0`` means never
    (``math.inf``, no token taken) unless ``qps`` is infinite. A wait longer than Go's ``InfDuration`` (~292
    years) is reported as ``math.inf`` but, as in Go, its token is taken. Time comes from ``clock`` (default
    :class:`RealClock`). Raises ``ValueError`` for a negative or NaN ``qps`` or a negative ``burst``,
    ``TypeError`` for a non-number ``qps``, a non-int ``burst`` (``bool`` included for both) or a ``clock`` that is
    not a :class:`~keyqueue.Clock`.
    ``num_requeues`` is always 0 and ``forget`` does nothing: the bucket does not track keys.
    """

    def __init__(self, qps: float, burst: int, *, clock: Clock | None = None) -> None:
        if not isinstance(qps, (int, float)) or isinstance(qps, bool):
            raise TypeError(f"qps must be a number, got {type(qps).__name__}: {qps!r}")
        if math.isnan(qps) or qps < 0:
            raise ValueError(f"qps must be >= 0, got {qps!r}")
        self.burst: int = _check_count("burst", burst)
        self.qps: float = float(qps)
        self._clock: Clock = check_clock(clock) if clock is not None else RealClock()
        self._lock = threading.Lock()
        self._burst_f = self._tokens = float(self.burst)
        self._last_ns: int | None = None

    def when(self, item: T) -> float:
        qps = self.qps
        if qps == _INF:
            return 0.0
        lock = self._lock
        lock.acquire()  # acquire/try/finally rather than `with`: the same guarantee, cheaper on CPython 3.11
        try:
            now = self._clock.now_ns()
            tokens = self._tokens
            last = self._last_ns
            if last is not None and now > last:
                tokens += (now - last) / 1e9 * qps
            burst = self._burst_f
            tokens = (burst if burst < tokens else tokens) - 1.0
            if tokens >= 0:
                wait = 0.0
            elif qps > 0:
                wait = -tokens / qps
            else:
                wait = _INF
            if self.burst < 1 or wait == _INF:
                return _INF  # not granted: nothing is consumed
            self._tokens = tokens
            self._last_ns = now
            return wait if wait <= _INF_DURATION_S else _INF
        finally:
            lock.release()

    def forget(self, item: T) -> None:
        return None

    def num_requeues(self, item: T) -> int:
        return 0


class MaxOfRateLimiter(RateLimiter[T]):
    """The largest delay of several limiters. ``when`` calls every child (each records the failure), so a
    bucket child spends a token even when another child's delay wins. ``num_requeues`` is the children's maximum;
    ``forget`` forgets in all of them. No children: always 0. Raises ``TypeError`` for a child that is not a rate
    limiter."""

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        for i, limiter in enumerate(limiters):
            check_limiter(f"limiter #{i + 1}", limiter)
        self.limiters: tuple[RateLimiter[T], ...] = limiters

    def when(self, item: T) -> float:
        delay = 0.0
        for limiter in self.limiters:  # every child records the failure
            d = limiter.when(item)
            if d > delay:
                delay = d
        return delay

    def forget(self, item: T) -> None:
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return max((limiter.num_requeues(item) for limiter in self.limiters), default=0)


class WithMaxWaitRateLimiter(RateLimiter[T]):
    """Another limiter's delay, but never more than ``max_delay`` seconds. Raises ``TypeError`` if ``limiter`` is
    not a rate limiter, ``ValueError`` for a negative or NaN ``max_delay``."""

    def __init__(self, limiter: RateLimiter[T], max_delay: float) -> None:
        check_limiter("limiter", limiter)
        self.max_delay: float = _check_seconds("max_delay", max_delay)
        self.limiter = limiter

    def when(self, item: T) -> float:
        return min(self.limiter.when(item), self.max_delay)

    def forget(self, item: T) -> None:
        self.limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self.limiter.num_requeues(item)


def default_controller_rate_limiter(*, clock: Clock | None = None) -> MaxOfRateLimiter[Hashable]:
    """client-go's ``DefaultControllerRateLimiter``: the max of per-key exponential backoff (5 ms .. 1000 s) and
    one global bucket of 10 qps with a burst of 100 (on ``clock``, default :class:`RealClock`; ``TypeError`` if
    it is not a :class:`~keyqueue.Clock`)."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0),
        BucketRateLimiter(10, 100, clock=clock),
    )


def default_item_based_rate_limiter() -> ItemExponentialFailureRateLimiter[Hashable]:
    """client-go's ``DefaultItemBasedRateLimiter``: per-key exponential backoff, 1 ms .. 1000 s."""
    return ItemExponentialFailureRateLimiter(0.001, 1000.0)
