"""The rate limiter protocol, :class:`keyqueue.ratelimit.RateLimiter`, and its check (re-exported from
:mod:`keyqueue.ratelimit`, where it belongs to the public API).

This module is never compiled: the compiled build compiles :mod:`keyqueue.ratelimit`, and mypyc turns a protocol
defined in a compiled module into a "trait" that no Python class may inherit from (instantiating one raises
``TypeError: interpreted classes cannot inherit from compiled traits``). Users and ``keyqueue.lab`` subclass
``RateLimiter[...]``, so it is defined here, in both builds.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol, TypeVar

__all__ = ["RateLimiter", "check_limiter"]

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


RateLimiter.__module__ = "keyqueue.ratelimit"  # its public home (reprs, docs, pickling by reference)


def check_limiter(name: str, limiter: object) -> None:
    """Raise ``TypeError`` naming the type unless ``limiter`` has ``when``, ``forget`` and ``num_requeues``."""
    if not all(callable(getattr(limiter, m, None)) for m in ("when", "forget", "num_requeues")):
        raise TypeError(
            f"{name} must be a rate limiter (when, forget, num_requeues), got {type(limiter).__name__}: {limiter!r:.80}"
        )
