"""The threading shell of the Redis-backed queues: :class:`Queue`, :class:`DelayingQueue`, :class:`RateLimitingQueue`.

Each handle talks to Redis on connections taken from its ``redis.Redis`` client's own pool (so the client's address
or Sentinel master lookup, credentials, TLS, timeouts and retry policy apply, and ``max_connections`` counts them)
and kept until :meth:`Queue.close`, which gives them back: as many as it had calls at the same time (each blocked
``get`` holds one). The hot calls go through redis-py's connection and reply parser directly
(:mod:`keyqueue.redis._wire`); ``add_many`` and wake-ups go through the client itself. A
``redis.cluster.RedisCluster`` client is driven through its own ``evalsha``/``blpop``/pipeline instead. Every operation
is one script (:mod:`keyqueue.redis._protocol`); a blocked ``get`` waits in ``BLPOP``.
One background thread per handle (``keyqueue-redis-heartbeat-<name>``, a daemon) renews the leases of the keys
this handle holds, every ``lease / 3`` seconds, in one round trip; it exists from the first ``get`` that hands out a
key until :meth:`Queue.close` (or until the handle is garbage-collected), through a shutdown: keys still held while
draining stay leased.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self

from redis.exceptions import NoScriptError, RedisError

from keyqueue._core import AddResult, QueueSnapshot, QueueStats, check_timeout
from keyqueue.clock import Clock
from keyqueue.errors import ShutDown
from keyqueue.ratelimit import RateLimiter, default_controller_rate_limiter
from keyqueue.redis._metrics import detach, recorder_for_redis
from keyqueue.redis._protocol import (
    ADD_MANY_BATCH,
    DEFAULT_SOCKET_TIMEOUT,
    GET_MARGIN,
    OPERATIONS,
    UNCHECKED,
    WAITED,
    HandleState,
    _text,
    check_wait_replicas,
    describe_client,
    is_cluster_client,
    limiter_tree,
    log,
    read_budget,
    script_sha,
    script_source,
    server_of,
    socket_timeout_of,
    translate,
    translated,
    unconfirmed,
)
from keyqueue.redis._wire import Packer, SyncWire
from keyqueue.redis.errors import LeaseLost, RedisQueueError

__all__ = ["DelayingQueue", "Queue", "RateLimitingQueue"]

def client_for(url: str | None, *, asyncio: bool) -> tuple[Any, str]:
    """A client for ``url`` (default ``$KEYQUEUE_REDIS_URL``) with the default socket timeouts and no retries (a
    call that fails raises at once, after one socket timeout at most), and the URL."""
    url = url if url is not None else os.environ.get("KEYQUEUE_REDIS_URL")
    if url is None:
        raise ValueError("a Redis queue needs client= or url= (or $KEYQUEUE_REDIS_URL)")
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, got {type(url).__name__}: {url!r:.80}")
    from redis.backoff import NoBackoff

    if asyncio:
        import redis.asyncio as module
        from redis.asyncio.retry import Retry as AsyncRetry

        retry: Any = AsyncRetry(NoBackoff(), 0)
    else:
        import redis as module  # type: ignore[no-redef]
        from redis.retry import Retry

        retry = Retry(NoBackoff(), 0)
    try:
        client = module.Redis.from_url(
            url, socket_timeout=DEFAULT_SOCKET_TIMEOUT, socket_connect_timeout=DEFAULT_SOCKET_TIMEOUT,
            decode_responses=True, retry=retry,
        )
    except ValueError as exc:
        raise ValueError(f"not a Redis URL: {url!r} ({exc})") from None
    return client, url.split("@")[-1] if "@" in url else url


def _heartbeat(ref: weakref.ReferenceType[Queue], stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        queue = ref()
        if queue is None:
            return
        try:
            queue._renew()
        except Exception as exc:  # Redis down: log, and try again at the next beat (the lease may still hold)
            log.warning("Redis queue %r: lease renewal failed: %s", queue.name, exc)
        del queue


class _HandleBase:
    """What both Redis shells' handles share: the constructor (its arguments are each shell's ``Queue``'s, see
    there) and the bookkeeping it sets up. A shell sets ``_ASYNC`` and adds its own waiting state in
    :meth:`_init_shell`."""

    _ASYNC: bool
    _state: HandleState

    def __init__(
        self,
        name: str,
        *,
        client: Any = None,
        url: str | None = None,
        lease: float = 30.0,
        metrics_provider: Any = None,
        stats: bool = False,
        clock: Clock | None = None,
        wait_replicas: tuple[int, float] | None = None,
    ) -> None:
        wanted = check_wait_replicas(wait_replicas)
        if client is not None and url is not None:
            raise ValueError("give client= or url=, not both")
        if client is None:
            client, shown = client_for(url, asyncio=self._ASYNC)
            self._owns_client = True
        else:
            shown = describe_client(client)
            self._owns_client = False
        self._client = client
        self._state = state = HandleState(name, lease=lease, clock=clock, stats=stats, url=shown)
        self.name = state.name
        self.url = shown
        self.clock = clock
        self.lease_seconds = state.lease
        self._sha = {op: script_sha(op) for op in OPERATIONS}
        self._keyargs = (len(state.keys), *state.keys)  # EVALSHA's numkeys and KEYS: every key of the queue
        self._cluster = is_cluster_client(client, asyncio=self._ASYNC)
        if self._cluster:
            kwargs: dict[str, Any] = {}
        else:
            pool = getattr(client, "connection_pool", None)
            if pool is None or not hasattr(pool, "connection_kwargs") or not hasattr(pool, "get_connection"):
                mod = "redis.asyncio" if self._ASYNC else "redis"
                raise TypeError(f"client must be a {mod}.Redis (a Sentinel's master_for(...) too) or a "
                                f"{mod}.cluster.RedisCluster, got {type(client).__name__}")
            kwargs = pool.connection_kwargs
        self._packer = Packer(state.keys, encoding=kwargs.get("encoding", "utf-8"),
                              errors=kwargs.get("encoding_errors", "strict"))
        if wanted is not None and self._cluster:
            raise ValueError("wait_replicas is not available with a cluster client (WAIT must reach the queue's node)")
        self.wait_replicas = wanted
        # Sent behind every state-changing script (WAITED), in the same round trip: a write, then WAIT. WAIT waits
        # for the last write of its own connection; a script that wrote nothing (a DEDUP add, an add repeated after
        # an unconfirmed one) would leave WAIT nothing to wait for, or only an older write, while what the script
        # saw may still be on its way to the replicas (written by another connection, or by this handle's first
        # try). The write brings the connection's offset up to everything the server has.
        self._wait_commands: tuple[tuple[Any, ...], ...] = () if wanted is None else (
            ("HINCRBY", state.prefix + "counters", "waits", 1), ("WAIT", wanted[0], max(1, round(wanted[1] * 1000))))
        self._wait = tuple(self._packer.command(*c) for c in self._wait_commands) or None
        # SCRIPT LOAD of each operation, packed, sent on the connection that answered NOSCRIPT (see _wire).
        self._loads = {op: self._packer.command("SCRIPT", "LOAD", script_source(op)) for op in OPERATIONS}
        self._socket_timeout = socket_timeout_of(client)
        self._init_shell()
        state.metrics = recorder_for_redis(metrics_provider, name=state.name, url=shown, clock=state.metrics_clock,
                                           lock=state.lock, read_depth=self._depth)
        # On Redis's clock a get's arguments never change (no queue time, and metrics are decided by now): packed once.
        self._get_packed = None if clock is not None or self._cluster else self._packer.evalsha(
            self._sha["get"], state.get_args())
        if clock is not None:
            clock.subscribe(self._on_clock_jump)

    def stats(self) -> QueueStats:
        """This handle's own decisions (``stats=True``); ``fired`` counts delayed keys this handle's scripts fired.
        Raises ``RuntimeError`` unless built with ``stats=True``."""
        return self._state.stats()

    @property
    def shutting_down(self) -> bool:
        """True once this handle's ``shut_down()`` or ``shut_down_with_drain()`` was called."""
        return self._state.shutting_down

    @property
    def held(self) -> list[str]:
        """The keys this handle holds right now."""
        with self._state.lock:
            return list(self._state.held)

    def _confirmed(self, shown: str, replies: list[Any]) -> Any:
        # A script's reply and its WAIT's: the reply, if enough replicas confirmed it.
        reply, acks = replies
        assert self.wait_replicas is not None
        if int(acks) < self.wait_replicas[0]:
            raise unconfirmed(self._where(), shown, int(acks), self.wait_replicas)
        return reply

    def _confirmed_batch(self, op: str, replies: list[Any]) -> list[Any]:
        # A pipelined batch's replies ending in those of _wait_commands: the batch's own, if enough replicas
        # confirmed it. The write before WAIT refused (OOM, NOPERM) raises its error: nothing is confirmed.
        wanted = self.wait_replicas
        if wanted is None:
            return replies
        acks, wrote = replies.pop(), replies.pop()
        if isinstance(wrote, Exception):
            raise wrote
        if isinstance(acks, Exception) or int(acks) < wanted[0]:
            raise unconfirmed(self._where(), op, 0 if isinstance(acks, Exception) else int(acks), wanted)
        return replies

    def _where(self, exc: BaseException | None = None) -> str:
        # The server a failed call talked to, for its error: the connection's address, else the client's.
        noted = getattr(exc, "keyqueue_address", None)
        if noted is not None:
            return str(noted)
        return server_of(self._client, self._state.prefix, self.url)

    def _init_shell(self) -> None:
        raise NotImplementedError

    def _depth(self) -> int:
        raise NotImplementedError

    def _on_clock_jump(self) -> None:
        raise NotImplementedError


class RateLimitedHandle(_HandleBase):
    """Both shells' ``RateLimitingQueue`` constructor: the handle's arguments plus ``rate_limiter``, turned once into
    the description the Lua scripts evaluate (``TypeError`` for a limiter that is not :mod:`keyqueue.ratelimit`'s)."""

    def __init__(
        self,
        name: str,
        *,
        client: Any = None,
        url: str | None = None,
        lease: float = 30.0,
        rate_limiter: RateLimiter[Any] | None = None,
        metrics_provider: Any = None,
        stats: bool = False,
        clock: Clock | None = None,
        wait_replicas: tuple[int, float] | None = None,
    ) -> None:
        self.rate_limiter = rate_limiter if rate_limiter is not None else default_controller_rate_limiter()
        self._tree = limiter_tree(self.rate_limiter)
        super().__init__(name, client=client, url=url, lease=lease, metrics_provider=metrics_provider, stats=stats,
                         clock=clock, wait_replicas=wait_replicas)


class Queue(_HandleBase):
    """A work queue shared through Redis by every handle with the same ``name``, in any process on any host.

    ``Queue(name, *, client=None, url=None, lease=30.0, metrics_provider=None, stats=False, clock=None,
    wait_replicas=None)``. ``client`` is a ``redis.Redis`` (a Sentinel's ``master_for(...)`` too) or a
    ``redis.cluster.RedisCluster``, used as given (its pool, socket timeout and retry policy; ``TypeError`` for
    anything else), else ``url`` (default ``$KEYQUEUE_REDIS_URL``; the client built from it has 5 s socket timeouts
    unless the URL says otherwise, and no retries). ``wait_replicas=(n, timeout)``: every call that changes the
    queue also waits (``WAIT``, same round trip) until ``n`` replicas have it, at most ``timeout`` seconds, and
    raises :class:`~keyqueue.redis.RedisUnavailable` (code ``NOREPLICAS``) instead of acknowledging when fewer
    confirm; ``ValueError``/``TypeError`` for a malformed value, ``ValueError`` with a cluster client.

    Guarantees (client-go's, now across processes): a waiting key is not added twice; a key being processed
    anywhere is marked and handed out once more after its ``done``; keys are handed out in FIFO order, each to one
    holder at a time **while leases are honoured**. ``get`` hands out a lease of ``lease`` seconds that this
    handle's heartbeat thread renews while the key is held. If it is not renewed in time (the process died,
    stalled past the lease, or lost Redis), the key is handed out again and the old holder's ``done`` raises
    :class:`~keyqueue.redis.LeaseLost`. A stalled holder can therefore overlap with the next one: fence side effects
    (for Kubernetes writes, the resourceVersion precondition; or :meth:`fencing_token`, which only grows).

    Every call is one atomic script in one round trip. Redis unreachable, not answering in time, or answering that
    it cannot serve the call now (a failover, a restart, a slot migration: ``READONLY``, ``TRYAGAIN`` ...):
    :class:`~keyqueue.redis.RedisUnavailable`; Redis answering with another error:
    :class:`~keyqueue.redis.RedisQueueError`. Both name the operation, the server and the server's error code
    (attributes ``operation``, ``address``, ``code``). Keys are ``str`` (``TypeError`` otherwise).

    How long a call can take when the connection goes dead (the peer stops answering, nothing resets it):

    - ``get(timeout=t)`` raises ``RedisUnavailable`` at most ``t + GET_MARGIN`` (0.5 s) after it was called: every
      reply it waits for is read with that deadline, sent once whatever the client's retry policy, and opening a
      connection first (none idle, or the idle one was closed) is bounded by the same deadline: the connect runs on
      a helper thread (``keyqueue-redis-connect``) and the get stops waiting for it at the deadline (a connect that
      completes later keeps its connection for the next call). (``timeout=None``: each reply waits at most the
      socket timeout, a connect at most the connect and socket timeouts.)
    - The heartbeat's renewal waits at most ``lease / 3`` (the beat interval) for its reply, sent once: a renewal that
      did not answer by then is given up and the next beat tries again on another connection.
    - Every other call (``add``, ``add_many``, ``done``, ``len``, ``inspect``, ``add_after``, ``add_rate_limited``,
      ``forget``, ``num_requeues``, ``delete``) waits at most the client's socket timeout for its reply (and
      ``socket_connect_timeout`` plus the socket timeout to open a connection) — times ``1 + retries`` plus the
      backoff for a ``client=`` whose retry policy resends on timeouts (``redis.Redis(host=...)`` defaults to 10
      retries with up to 1 s backoff; a client built from a URL, redis-py's ``from_url`` or keyqueue's, has none).
      ``add_many`` waits so for each batch of 1,000 adds; the first batch that fails raises.
    - A script is atomic on the server: a call that timed out either ran entirely or not at all, and which one is
      not known. An ``add`` sent again changes nothing if the first one ran (``DEDUP``/``MARKED``). A ``done`` that
      raised ``RedisUnavailable`` keeps the key held: call it again; if the first one did run, the second finds the
      lease gone and raises :class:`~keyqueue.redis.LeaseLost` without changing anything (the key was finished;
      a re-add it recorded was queued). A ``get`` whose reply was lost leaves a lease nobody renews: the key is
      handed out again when it runs out.
    ``clock``: for tests, a :class:`~keyqueue.FakeClock` replaces Redis's own clock (``TIME``) for this handle's
    scripts; every handle of a queue must then use the same clock.

    ``metrics_provider``: a :class:`~keyqueue.metrics.SnapshotMetricsProvider` or
    :class:`~keyqueue.metrics.PrometheusMetricsProvider` (default: the process-wide provider if it is one of those;
    a plain push ``MetricsProvider`` passed here raises ``TypeError``). The ``workqueue_*`` series carry label
    ``name``. Counters and histograms (adds, retries, queue and work duration) count what **this handle** did —
    per process, as Prometheus expects; sum over replicas in PromQL — while ``workqueue_depth`` is the **shared**
    queue's dirty keys, read from Redis at each scrape in one round trip (firing due delayed keys first, as a
    ``get`` would; a failed read logs and reports the last value). Unfinished work and longest running come from
    the keys this handle holds. Handles of one queue on one provider report the depth once.
    """

    _ASYNC = False  # client_for(..., asyncio=_ASYNC): a redis.Redis here, a redis.asyncio.Redis in the aio shell

    def _init_shell(self) -> None:
        # After the handle's state exists (_HandleBase.__init__), before metrics and the clock can call back.
        self._idle = threading.Condition(self._state.lock)  # shut_down_with_drain() waits here for held keys to finish
        # The lean path of every call but add_many (see keyqueue.redis._wire); a cluster client's own otherwise.
        self._wire: Any = None if self._cluster else SyncWire(self._client)
        self._stop = threading.Event()  # set by close(): the heartbeat ends and none starts again
        self._beat: threading.Thread | None = None  # started once, by the first get that hands out a key
        self._beat_lock = threading.Lock()

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _call(self, op: str, args: list[str]) -> Any:
        # EVALSHA with the queue's keys as KEYS (see lib.lua), on the lean path (a connection of the client's pool
        # held by this handle, the connection's retry policy), or the cluster client's own evalsha; a script Redis
        # does not know (first use, a restart, a failover, another node) is loaded on that server and the call
        # sent once more. The handle's first call checks the queue's layout first; its errors name ``op``.
        if not self._state.layout_ok and op not in UNCHECKED:
            self._state.on_layout(self._script(op, "layout", []))
        return self._script(op, op, args)

    def _script(self, shown: str, op: str, args: list[str]) -> Any:
        try:
            if self._cluster:
                return self._cluster_script(op, args)
            then = self._wait if op in WAITED else None
            reply = self._wire.call(self._packer.evalsha(self._sha[op], args), self._loads[op], then)
        except RedisError as exc:
            raise translate(self._where(exc), shown, exc) from exc
        return reply if then is None else self._confirmed(shown, reply)

    def _cluster_script(self, op: str, args: list[str]) -> Any:
        # The cluster client routes by the queue's keys (one slot) and follows MOVED/ASK itself.
        sha = self._sha[op]
        try:
            return self._client.evalsha(sha, *self._keyargs, *args)
        except NoScriptError:
            self._client.script_load(script_source(op))  # on every primary
            return self._client.evalsha(sha, *self._keyargs, *args)

    def _call_by(self, hard: float | None, op: str, args: list[str], packed: bytes | None = None) -> Any:
        # As _call, with every reply awaited (and a connection opened, if one must be) until ``hard`` (a monotonic
        # deadline; at most the socket timeout per reply), sent without retries: get's round trips and renew's.
        # ``packed``: the call already packed (get's constant arguments, see _HandleBase). On a cluster client the
        # client's own path is taken, bounded by its socket timeout per reply.
        if not self._state.layout_ok and op not in UNCHECKED:
            self._state.on_layout(self._within(hard, op, "layout", []))
        return self._within(hard, op, op, args, packed)

    def _within(self, hard: float | None, shown: str, op: str, args: list[str], packed: bytes | None = None) -> Any:
        if self._cluster:
            return self._script(shown, op, args)
        if packed is None:
            packed = self._packer.evalsha(self._sha[op], args)
        budget = read_budget(hard, self._socket_timeout)
        then = self._wait if op in WAITED else None
        try:
            reply = self._wire.command_within(budget, packed, deadline=hard, load=self._loads[op], then=then)
        except RedisError as exc:
            raise translate(self._where(exc), shown, exc, within=budget) from exc
        return reply if then is None else self._confirmed(shown, reply)

    def _call_many(self, op: str, arg_lists: list[list[str]]) -> list[Any]:
        # One pipelined round trip of EVALSHAs (not a transaction: each script is atomic on its own); the replies
        # in order, error replies as exception objects. Calls that found the script unknown did not run: they are
        # sent once more after loading it. With wait_replicas each round trip ends with WAIT.
        if not self._state.layout_ok:
            self._state.on_layout(self._script(op, "layout", []))
        try:
            replies = self._pipelined(op, arg_lists)
            again = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            if again:
                self._client.script_load(script_source(op))
                for i, r in zip(again, self._pipelined(op, [arg_lists[i] for i in again]), strict=True):
                    replies[i] = r
        except RedisError as exc:
            raise translate(self._where(exc), op, exc) from exc
        return replies

    def _pipelined(self, op: str, arg_lists: list[list[str]]) -> list[Any]:
        sha, keyargs = self._sha[op], self._keyargs
        pipe = self._client.pipeline(transaction=False)
        for args in arg_lists:
            pipe.execute_command("EVALSHA", sha, *keyargs, *args)  # (a cluster pipeline blocks .evalsha)
        for command in self._wait_commands:
            pipe.execute_command(*command)
        return self._confirmed_batch(op, pipe.execute(raise_on_error=False))

    @property
    def _getters(self) -> int:
        return self._state.getters

    def _wake_local(self, n: int) -> None:
        # Wake n of this handle's blocked getters (their BLPOP also watches the private wake list).
        if n <= 0:
            return
        with translated(self._where(), "wake"):
            pipe = self._client.pipeline(transaction=not self._cluster)  # a cluster pipeline has no MULTI
            pipe.rpush(self._state.wake_key, *(["1"] * n))
            pipe.expire(self._state.wake_key, 60)
            pipe.execute()

    def _on_clock_jump(self) -> None:
        try:
            self._wake_local(self._state.getters)
        except RedisQueueError as exc:
            log.warning("Redis queue %r: could not wake getters after a clock jump: %s", self.name, exc)

    def _ensure_heartbeat(self) -> None:
        # Called by every get that hands a key out: the first starts the one heartbeat thread (under _beat_lock, so
        # two first gets at once start one); none starts after close().
        if self._beat is not None:
            return
        with self._beat_lock:
            if self._beat is None and not self._stop.is_set():
                beat = threading.Thread(
                    target=_heartbeat, args=(weakref.ref(self), self._stop, self.lease_seconds / 3),
                    name=f"keyqueue-redis-heartbeat-{self.name}", daemon=True,
                )
                beat.start()
                self._beat = beat

    def _renew(self) -> None:
        """One heartbeat: renew every lease this handle holds (nothing is sent when it holds none)."""
        state = self._state
        todo = state.renew_args()
        if todo is None:
            return
        args, pairs = todo
        # Bounded by the beat interval: a renewal that has not answered by the next beat is given up (its connection
        # dropped); the next beat tries again on another connection.
        state.on_renew(pairs, self._call_by(time.monotonic() + self.lease_seconds / 3, "renew", args))

    # -- adding -----------------------------------------------------------------------------------------------

    def add(self, key: str) -> AddResult:
        """Mark ``key`` as needing work: ``QUEUED``, ``DEDUP`` (already dirty), ``MARKED`` (being processed by some
        holder: it is handed out once more after its ``done``) or ``DROPPED`` (this handle is shut down; nothing
        is sent). One round trip. Raises ``TypeError`` for a non-``str`` key;
        ``RedisUnavailable`` after the socket timeout at most (see the class: the add ran entirely or not at all;
        adding again is safe)."""
        state = self._state
        args = state.add_args(key)
        if state.shutting_down:
            return state.dropped()
        return state.on_add(self._call("add", args))

    def add_many(self, keys: Iterable[str]) -> list[AddResult]:
        """:meth:`add` of each key, in order, pipelined: up to 1,000 adds per round trip instead of one each (a
        producer's burst, an informer's initial list). Each add is its own atomic script with :meth:`add`'s result;
        the batch is not one transaction: other handles' calls may run between two of its adds. Every key is
        checked first (``TypeError`` for a non-``str`` key, or for a single ``str`` passed as ``keys``; nothing is
        sent). After this handle's shutdown every result is ``DROPPED``. ``RedisUnavailable`` after one socket
        timeout per batch of 1,000 at most (times ``1 + retries`` of a ``client=``'s retry policy, see the class);
        ``RedisUnavailable`` / ``RedisQueueError`` can leave a prefix of the batch applied (each add whole or not
        at all); sending the batch again is safe, since adding a key that is already dirty changes nothing
        (``DEDUP``)."""
        state = self._state
        arg_lists = state.add_many_args(keys)
        if state.shutting_down:
            return [state.dropped() for _ in arg_lists]
        results: list[AddResult] = []
        for start in range(0, len(arg_lists), ADD_MANY_BATCH):
            results += state.on_adds(self._call_many("add", arg_lists[start:start + ADD_MANY_BATCH]))
        return results

    # -- handing out ------------------------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> str:
        """Take the next key under a lease, blocking while none is ready; the caller holds it until :meth:`done`.

        Waiting is a ``BLPOP`` on the queue's wake-up list, bounded by ``timeout`` and by the time the next delayed
        key (or run-out lease) falls due: no polling. Raises ``TimeoutError`` when ``timeout`` (seconds) passes,
        :class:`~keyqueue.ShutDown` once this handle is shut down (at once: keys still queued stay in Redis for
        the other handles), ``RedisUnavailable`` if Redis cannot be reached or stops answering: at most ``timeout +
        GET_MARGIN`` (0.5 s) after the call, whatever the client's socket timeout and retries (see the class).
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        state = self._state
        deadline = None if timeout is None else time.monotonic() + timeout
        hard = None if deadline is None else deadline + GET_MARGIN  # every reply this call reads comes by then
        woken = False  # a wait of this call took a wake-up token from the shared list
        packed = self._get_packed  # None: the arguments change (a test clock), packed per call
        while True:
            if state.shutting_down:
                raise ShutDown
            reply = state.on_get(self._call_by(hard, "get", state.get_args() if packed is None else [], packed))
            if isinstance(reply, str):  # a key handed out
                self._ensure_heartbeat()
                return reply
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                if woken:
                    # That wake-up may have been meant for a new, earlier delayed key: pass it on to another getter.
                    self._call_by(hard, "wake", [state.now_arg()])
                raise TimeoutError(f"get() timed out after {timeout} s with no key ready")
            wait = state.block_slice(remaining, reply.wake_in, self._socket_timeout)
            if wait <= 0:
                continue
            with state.lock:
                if state.shutting_down:
                    raise ShutDown
                state.getters += 1
            budget = wait + GET_MARGIN  # wait <= remaining: within the hard deadline
            try:
                try:
                    if self._cluster:
                        popped = self._client.blpop([state.notify_key, state.wake_key], timeout=wait)
                    else:
                        popped = self._wire.command_within(
                            budget, self._packer.command("BLPOP", state.notify_key, state.wake_key, wait),
                            deadline=hard)
                except RedisError as exc:
                    raise translate(self._where(exc), "get (waiting)", exc, within=budget) from exc
            finally:
                with state.lock:
                    state.getters -= 1
            woken = woken or (popped is not None and _text(popped[0]) == state.notify_key)

    def done(self, key: str) -> bool:
        """Finish ``key``: ``True`` if it was added again meanwhile and is queued once more (a redelivery), else
        ``False``. ``False`` too, with nothing sent, for a key this handle does not hold. Raises
        :class:`~keyqueue.redis.LeaseLost` if the lease ran out and the key was handed out again (nothing is
        changed), ``RedisUnavailable`` if Redis cannot be reached or does not answer within the socket timeout
        (the script ran entirely or not at all; the key stays held: call ``done`` again, which raises ``LeaseLost``,
        changing nothing, if the first one did finish it). Works after shutdown (what a drain waits for)."""
        state = self._state
        begun = state.begin_done(key)
        if begun is None:
            return False
        lease, lost = begun
        if lost:
            reply: Any = -1
        else:
            try:
                reply = self._call("done", [key, lease])
            except RedisQueueError:
                state.abort_done(key, lease)
                raise
        return state.end_done(key, lease, reply, self._idle.notify_all)  # wakes a drain once nothing is held

    def fencing_token(self, key: str) -> int:
        """The token of this handle's lease on ``key``: larger than every token handed out before it in this
        queue, so a store that remembers the largest token it saw can refuse writes from a stalled old holder.
        ``KeyError`` if this handle does not hold ``key``."""
        return self._state.token(key)

    @contextmanager
    def lease(self, timeout: float | None = None) -> Iterator[str]:
        """``with q.lease() as key:`` — :meth:`get`, and :meth:`done` when the block exits however it exits."""
        key = self.get(timeout)
        try:
            yield key
        finally:
            self.done(key)

    def __iter__(self) -> Iterator[str]:
        """``for key in q:`` — keys until :class:`~keyqueue.ShutDown`, each ``done`` when the body ends."""
        while True:
            try:
                key = self.get()
            except ShutDown:
                return
            try:
                yield key
            finally:
                self.done(key)

    # -- inspection -------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys waiting in Redis to be handed out (after firing due delayed keys and reclaiming run-out leases),
        over all handles. One round trip. Informational. ``RedisUnavailable`` after the socket timeout at most (times
        ``1 + retries`` of a ``client=``'s retry policy, see the class)."""
        return self._state.on_len(self._call("len", [self._state.now_arg()]))[0]

    def _depth(self) -> int:
        # The metrics scrape's read of the shared depth (dirty keys), one round trip.
        return self._state.on_len(self._call("len", [self._state.now_arg()]))[1]

    def inspect(self) -> dict[str, int]:
        """The queue's shared state in one read: ``dirty`` (client-go's depth), ``queued``, ``processing``,
        ``delayed``, and the counters ``expired`` (leases that ran out) and ``redelivered``. One round trip;
        ``RedisUnavailable`` after the socket timeout at most (as :meth:`__len__`)."""
        r = self._call("inspect", [""])
        return dict(zip(("dirty", "queued", "processing", "delayed", "expired", "redelivered"),
                        (int(x) for x in r), strict=True))

    def snapshot(self) -> QueueSnapshot:
        """The shared queue's structure sizes (as the in-process ``snapshot()``), from one :meth:`inspect` round
        trip; ``shutting_down`` is this handle's. Raises ``RedisUnavailable`` if Redis cannot be reached."""
        state = self.inspect()
        return QueueSnapshot(dirty=state["dirty"], fifo=state["queued"], processing=state["processing"],
                             delayed=state["delayed"], shutting_down=self._state.shutting_down)

    # -- shutdown ---------------------------------------------------------------------------------------------

    def shut_down(self) -> None:
        """Shut down **this handle**: its adds are dropped, its getters raise :class:`~keyqueue.ShutDown` (blocked
        ones are woken), its held keys can still be ``done`` (their leases are renewed until then). Other handles
        carry on; nothing queued in Redis is lost. A concurrent :meth:`shut_down_with_drain` returns ``False``.
        Idempotent; never waits."""
        self._shut(drain=False)

    def _shut(self, drain: bool) -> None:
        state = self._state
        with state.lock:
            state.shutting_down = True
            state.draining = drain
            waiting = state.getters
            self._idle.notify_all()
        try:
            self._wake_local(waiting)
        except RedisQueueError as exc:  # the getters' own BLPOP fails on the same dead connection
            log.warning("Redis queue %r: could not wake getters at shutdown: %s", self.name, exc)

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        """Shut down (as :meth:`shut_down`), then block until this handle holds no key (every key it got is
        ``done``). ``True`` when drained; ``False`` if ``timeout`` passed first or :meth:`shut_down` was called."""
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._shut(drain=True)
        state = self._state
        with state.lock:
            while state.held:
                if not state.draining:
                    return False
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return False
                self._idle.wait(wait)
            return True

    def delete(self) -> int:
        """Delete the queue's whole state in Redis (queued, processing, delayed, limiter state) for every handle,
        in one script. Returns how many Redis keys existed. Handles still open see an empty queue afterwards."""
        return int(self._call("delete", [""]))

    def close(self) -> None:
        """Shut this handle down, stop its heartbeat and close the client it built from ``url`` (a ``client=``
        passed in stays open). Held keys' leases are no longer renewed. Idempotent."""
        self.shut_down()
        self._stop.set()
        detach(self._state.metrics)
        if self._wire is not None:
            self._wire.close()
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} name={self.name!r} url={self.url} holder={self._state.holder} "
                f"held={len(self._state.held)} shutting_down={self._state.shutting_down}>")


class DelayingQueue(Queue):
    """A :class:`Queue` with ``add_after``."""

    def add_after(self, key: str, delay: float) -> AddResult:
        """Add ``key`` after ``delay`` seconds of Redis time (``<= 0``: now; ``math.inf``: never). Of several
        delayed adds of one key the earliest wins; a plain add does not cancel it. Returns ``DELAYED`` /
        ``DELAY_KEPT`` (or what ``add`` returns for ``delay <= 0``); ``DROPPED`` after this handle's shutdown.
        Due keys are moved to the FIFO by the scripts themselves (any handle's ``get``/``len``): no scheduler.
        ``TypeError`` for a non-``str`` key or a non-number delay, ``ValueError`` for NaN; nothing changes."""
        state = self._state
        args = state.add_after_args(key, delay)
        if state.shutting_down:
            return state.dropped()
        return state.on_add(self._call("add_after", args), retry=True)


class RateLimitingQueue(RateLimitedHandle, DelayingQueue):
    """A :class:`DelayingQueue` whose failed keys come back after a delay from a shared rate limiter.

    ``rate_limiter`` (default :func:`~keyqueue.default_controller_rate_limiter`) describes the limiter; its state —
    per-key failure counts and the one token bucket — lives in Redis and is shared by every handle, with the
    same arithmetic as :mod:`keyqueue.ratelimit` on Redis's clock. Only :mod:`keyqueue.ratelimit`'s limiters can be
    used (``TypeError`` otherwise).
    """

    def add_rate_limited(self, key: str) -> AddResult:
        """Record a failure of ``key`` in the shared limiter and ``add_after`` it by the limiter's delay, in one
        script. As in client-go the failure is recorded even after this handle's shutdown (the add is dropped)."""
        state = self._state
        shut = state.shutting_down
        reply = self._call("add_rate_limited", state.rate_args(key, self._tree, record_only=shut))
        if shut:
            return state.dropped()
        return state.on_add(reply[0], retry=True)

    def forget(self, key: str) -> None:
        """Clear the shared failure counts of ``key`` (its backoff starts over); the queue is untouched."""
        state = self._state
        self._call("forget", [state.now_arg(), *state.add_args(key)[1:], *self._tree.per_key])

    def num_requeues(self, key: str) -> int:
        """The failures of ``key`` the shared limiter remembers (the largest over its per-key limiters)."""
        state = self._state
        return int(self._call("num_requeues", [state.now_arg(), *state.add_args(key)[1:], *self._tree.per_key]))


_ = LeaseLost  # re-exported by keyqueue.redis
