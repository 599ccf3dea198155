"""keyqueue: Kubernetes client-go's workqueue for Python threads and asyncio.

Each key is handed to one worker at a time; adds of a waiting key collapse; adds of a key being processed collapse
into exactly one redelivery; nothing is lost. This namespace holds the queues and the controller for threads
(:mod:`keyqueue.threaded`, :mod:`keyqueue.controller`); :mod:`keyqueue.aio` holds their asyncio twins. Both are thin
shells around one state machine (:mod:`keyqueue._core`).
"""

from typing import TYPE_CHECKING

from keyqueue._core import AddResult, Ordering, QueueSnapshot, QueueStats
from keyqueue.clock import Clock, FakeClock, RealClock
from keyqueue.controller import Controller, ReconcileError, Result, TerminalError
from keyqueue.errors import ShutDown
from keyqueue.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    WithMaxWaitRateLimiter,
    default_controller_rate_limiter,
    default_item_based_rate_limiter,
)
from keyqueue.threaded import DelayingQueue, PriorityQueue, Queue, RateLimitingQueue

if TYPE_CHECKING:
    from keyqueue.manager import Manager as Manager

__all__ = [
    "AddResult",
    "BucketRateLimiter",
    "Clock",
    "Controller",
    "DelayingQueue",
    "FakeClock",
    "ItemExponentialFailureRateLimiter",
    "ItemFastSlowRateLimiter",
    "Manager",
    "MaxOfRateLimiter",
    "Ordering",
    "PriorityQueue",
    "Queue",
    "QueueSnapshot",
    "QueueStats",
    "RateLimiter",
    "RateLimitingQueue",
    "RealClock",
    "ReconcileError",
    "Result",
    "ShutDown",
    "TerminalError",
    "WithMaxWaitRateLimiter",
    "default_controller_rate_limiter",
    "default_item_based_rate_limiter",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # `keyqueue.aio` after a bare `import keyqueue`, without importing asyncio for programs that use threads only.
    if name == "aio":
        import importlib

        return importlib.import_module("keyqueue.aio")
    if name == "Manager":  # imported on first use: programs without a manager do not load informers and HTTP servers
        from keyqueue.manager import Manager

        return Manager
    raise AttributeError(f"module 'keyqueue' has no attribute {name!r}")
