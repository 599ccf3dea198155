"""keyqueue: Kubernetes client-go's workqueue for Python threads and asyncio.

Each key is handed to one worker at a time; adds of a waiting key collapse; adds of a key being processed collapse
into exactly one redelivery; nothing is lost. See :mod:`keyqueue.threaded` (this namespace) and
:mod:`keyqueue.aio` for the two shells around one state machine (:mod:`keyqueue._core`).
"""

from keyqueue._build import BuildInfo, build_info
from keyqueue._core import AddResult, Ordering, QueueStats
from keyqueue.clock import Clock, FakeClock, RealClock
from keyqueue.controller import Controller, ReconcileError, Result, TerminalError
from keyqueue.errors import KeyMutatedError, ShutDown
from keyqueue.priority import PriorityQueue
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
from keyqueue.threaded import DelayingQueue, Queue, RateLimitingQueue

__all__ = [
    "COMPILED",
    "AddResult",
    "BucketRateLimiter",
    "BuildInfo",
    "Clock",
    "Controller",
    "DelayingQueue",
    "FakeClock",
    "ItemExponentialFailureRateLimiter",
    "ItemFastSlowRateLimiter",
    "KeyMutatedError",
    "MaxOfRateLimiter",
    "Ordering",
    "PriorityQueue",
    "Queue",
    "QueueStats",
    "RateLimiter",
    "RateLimitingQueue",
    "RealClock",
    "ReconcileError",
    "Result",
    "ShutDown",
    "TerminalError",
    "WithMaxWaitRateLimiter",
    "build_info",
    "default_controller_rate_limiter",
    "default_item_based_rate_limiter",
]

#: True in the optional compiled build (``KEYQUEUE_MYPYC=1 pip install .``) when every module it compiles was loaded
#: compiled; False in the default pure-Python build. :func:`build_info` names the modules.
COMPILED: bool = build_info().kind == "mypyc"

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # `keyqueue.aio` without importing asyncio at `import keyqueue` time (that import costs milliseconds).
    if name == "aio":
        import importlib

        return importlib.import_module("keyqueue.aio")
    raise AttributeError(f"module 'keyqueue' has no attribute {name!r}")
