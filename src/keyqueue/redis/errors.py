"""Errors of the Redis-backed queues (:mod:`keyqueue.redis`, :mod:`keyqueue.redis.aio`)."""

from __future__ import annotations

__all__ = ["LeaseLost", "RedisQueueError", "RedisUnavailable"]


class RedisQueueError(Exception):
    """Base of every error a Redis-backed queue raises on its own (besides ``TypeError``/``ValueError`` for bad
    arguments, ``TimeoutError`` and :class:`~keyqueue.ShutDown`, which mean what they mean in-process). Raised as
    such when Redis answers a script with an error: the script changed nothing (scripts are atomic).

    ``operation`` is the queue operation that failed (``"add"``, ``"get"``, ...), ``address`` the server it went
    to (``host:port``, or what the client was built for when no connection was made), ``code`` the server's error
    code (``"OOM"``, ``"NOPERM"``, ``"ERR"``, ...; ``None`` when the server gave none: unreachable, a timeout, or an
    error keyqueue raises itself). The message names all three.
    """

    def __init__(self, message: str, *, operation: str | None = None, address: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.operation = operation
        self.address = address
        self.code = code


class RedisUnavailable(RedisQueueError, ConnectionError):
    """Redis could not be reached, did not answer within the client's socket timeout, or answered that it cannot
    serve the call right now: a failover or restart is under way or the queue's Cluster slot is moving (``code``
    ``READONLY``, ``LOADING``, ``MASTERDOWN``, ``TRYAGAIN``, ``CLUSTERDOWN``, ``MOVED``, ``ASK``, ``NOSCRIPT``,
    ``BUSY``, ``NOREPLICAS``). Retrying later is the answer. The message names the operation and the server.

    The call may or may not have reached Redis: an ``add`` can be repeated safely (adds deduplicate); a ``get``
    whose answer was lost leaves a lease nobody renews, so the key is handed out again when that lease runs out;
    a ``done`` keeps the key held by this handle (call it again).
    """


class LeaseLost(RedisQueueError):
    """``done(key)`` found that this handle's lease on ``key`` was lost: it was not renewed in time (the process
    stalled, or was cut off from Redis), ran out, and the key was handed out again. Nothing was changed: the new
    holder's state is untouched. The work done under the lost lease may overlap with the new holder's, so side
    effects must be fenced (for Kubernetes writes: the object's resourceVersion precondition).

    ``key`` is the key, ``token`` the fencing token of the lost lease.
    """

    def __init__(self, key: str, token: int, queue: str) -> None:
        super().__init__(f"the lease on key {key!r} (token {token}) of Redis queue {queue!r} was lost: it ran out "
                         "and the key was handed out again")
        self.key = key
        self.token = token
