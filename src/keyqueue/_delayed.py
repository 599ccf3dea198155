"""The delayed and rate-limited adds both shells share: :class:`DelayedAdds` (``add_after``) and
:class:`RateLimitedAdds` (``add_rate_limited``, ``forget``, ``num_requeues``).

Each shell combines them with its own ``Queue`` by multiple inheritance (``DelayingQueue(Queue, DelayedAdds)``),
which compiled (native) classes do not support, so this module stays interpreted in every build. The methods
themselves are :class:`~keyqueue._shell.ShellBase`'s (``_add_after``, ``_add_rate_limited``, ...), given their
public names here, so that in the optional mypyc build (see :mod:`keyqueue._build`) they run compiled.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, TypeVar

from keyqueue._core import Ordering
from keyqueue._shell import ShellBase
from keyqueue.clock import Clock
from keyqueue.ratelimit import RateLimiter, check_limiter, default_controller_rate_limiter

__all__ = ["DelayedAdds", "RateLimitedAdds"]

T = TypeVar("T", bound=Hashable)


class DelayedAdds(ShellBase[T]):
    """``add_after``, for both shells' ``DelayingQueue``."""

    # The shells' own method (see ShellBase._add_after), under its public name: compiled, a call of it then runs no
    # interpreted code at all.
    add_after = ShellBase._add_after


class RateLimitedAdds(DelayedAdds[T]):
    """``add_rate_limited`` / ``forget`` / ``num_requeues`` and the ``rate_limiter`` constructor argument, for
    both shells' ``RateLimitingQueue``."""

    def __init__(
        self,
        rate_limiter: RateLimiter[T] | None = None,
        *,
        name: str = "",
        clock: Clock | None = None,
        metrics_provider: Any = None,
        stats: bool = False,
        ordering: Ordering[T] | None = None,
    ) -> None:
        if rate_limiter is not None:
            check_limiter("rate_limiter", rate_limiter)  # a TypeError now, not an AttributeError at the first failure
        super().__init__(name=name, clock=clock, metrics_provider=metrics_provider, stats=stats, ordering=ordering)
        self.rate_limiter = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(clock=self.clock)
        )

    # As add_after above.
    add_rate_limited = ShellBase._add_rate_limited
    forget = ShellBase._forget
    num_requeues = ShellBase._num_requeues
