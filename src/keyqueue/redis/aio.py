"""The asyncio shell of the Redis-backed queues: :class:`Queue`, :class:`DelayingQueue`, :class:`RateLimitingQueue`.

The same scripts, semantics and per-handle bookkeeping as :mod:`keyqueue.redis` (threads), over a
``redis.asyncio.Redis`` client. Every call that talks to Redis is a coroutine (``await q.add(key)``,
``await q.done(key)``, ``await q.len()`` ...): unlike the in-process asyncio queue, an add is a network round trip.
``shut_down()`` is a plain method (callable from any thread). A handle belongs to the event loop it is first used
in (as its client does). Its heartbeat is a task on that loop (``keyqueue-redis-heartbeat-<name>``) that renews
this handle's leases every ``lease / 3`` seconds, from the first ``get`` until :meth:`Queue.aclose`: a loop blocked
longer than the lease by synchronous work lets the leases run out, exactly like a stalled process.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Iterable
from types import TracebackType
from typing import Any, Self

from redis.exceptions import NoScriptError, RedisError

from keyqueue._core import AddResult, check_timeout
from keyqueue.errors import ShutDown
from keyqueue.redis._metrics import detach
from keyqueue.redis._protocol import (
    ADD_MANY_BATCH,
    GET_MARGIN,
    UNCHECKED,
    WAITED,
    _text,
    log,
    read_budget,
    script_source,
    translate,
    translated,
)
from keyqueue.redis._wire import AsyncWire
from keyqueue.redis.threaded import RateLimitedHandle, _HandleBase

__all__ = ["DelayingQueue", "Queue", "RateLimitingQueue"]


def _bound(hard: float | None, socket_timeout: float | None) -> float | None:
    # The seconds a get's round trip may take here: read_budget's, else the socket timeout (a cancellation scope
    # caps the client's retries too).
    budget = read_budget(hard, socket_timeout)
    return socket_timeout if budget is None else budget


async def _heartbeat(ref: weakref.ReferenceType[Queue], interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        queue = ref()
        if queue is None:
            return
        try:
            await queue._renew()
        except Exception as exc:  # Redis down: log, and try again at the next beat (the lease may still hold)
            log.warning("Redis queue %r: lease renewal failed: %s", queue.name, exc)
        del queue


class Queue(_HandleBase):
    """The asyncio twin of :class:`keyqueue.redis.Queue` (same constructor, with a ``redis.asyncio.Redis`` as
    ``client``); see there for the guarantees, leases and errors. Coroutines: ``add``, ``get``, ``done``, ``len``,
    ``inspect``, ``delete``, ``shut_down_with_drain``, ``aclose``; ``async with q.lease() as key`` and
    ``async for key in q`` call ``done`` on every exit. Time bounds on a dead connection as there (a ``get``'s
    deadline, ``timeout`` plus 0.5 s, also covers opening a new connection, since each round trip is cancelled at it;
    the heartbeat's renewal is cancelled after ``lease / 3``; every other call waits at most the socket timeout per
    attempt of the client's retry policy).

    Metrics (``metrics_provider=``) as in the threaded shell. A scrape runs in the scraping thread, outside the event
    loop, so this handle reads the shared depth there through a small synchronous ``redis.Redis`` to the same server
    (same host, port, db, credentials and timeouts), built at the first scrape and closed by :meth:`aclose`."""

    _ASYNC = True

    def _init_shell(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._beat: asyncio.Task[None] | None = None  # started once, by the first get that hands out a key
        self._closed = False  # set by aclose(): no heartbeat starts after it
        self._idle: list[asyncio.Future[None]] = []  # shut_down_with_drain() callers
        self._scrape_client: Any = None  # the synchronous client of metrics scrapes (see _depth)
        self._scrape_lock = threading.Lock()
        # The lean path of every call but add_many (keyqueue.redis._wire); a cluster client's own otherwise.
        self._wire: Any = None if self._cluster else AsyncWire(self._client)

    # -- plumbing ---------------------------------------------------------------------------------------------

    async def _call(self, op: str, args: list[str], packed: bytes | None = None) -> Any:
        # As the threaded shell's _call: EVALSHA with the queue's keys as KEYS on the lean path (or the cluster
        # client's own evalsha), a script the server does not know loaded there and the call sent once more; the
        # first call of a handle checks the queue's layout first, its errors naming ``op``.
        if not self._state.layout_ok and op not in UNCHECKED:
            self._state.on_layout(await self._script(op, "layout", []))
        return await self._script(op, op, args, packed)

    async def _script(self, shown: str, op: str, args: list[str], packed: bytes | None = None) -> Any:
        try:
            if self._cluster:
                sha = self._sha[op]
                try:
                    return await self._client.evalsha(sha, *self._keyargs, *args)
                except NoScriptError:
                    await self._client.script_load(script_source(op))  # on every primary
                    return await self._client.evalsha(sha, *self._keyargs, *args)
            if packed is None:
                packed = self._packer.evalsha(self._sha[op], args)
            then = self._wait if op in WAITED else None
            reply = await self._wire.call(packed, self._loads[op], then)
        except RedisError as exc:
            raise translate(self._where(exc), shown, exc) from exc
        return reply if then is None else self._confirmed(shown, reply)

    async def _within(self, budget: float | None, op: str, call: Awaitable[Any]) -> Any:
        # ``call`` (a coroutine of this handle talking to Redis), cancelled after ``budget`` seconds (None: no bound
        # but the socket timeout): redis-py drops a connection whose command was cancelled, so no late reply is
        # read by a later command. Any retries of the client's happen inside the budget.
        if budget is None:
            return await call
        scope = asyncio.timeout(budget)
        try:
            async with scope:
                return await call
        except TimeoutError as exc:
            if not scope.expired():
                raise
            raise translate(self._where(exc), op, exc, within=budget) from exc

    async def _call_many(self, op: str, arg_lists: list[list[str]]) -> list[Any]:
        # As the threaded shell's _call_many: one pipelined round trip, replies in order, NOSCRIPT ones sent again.
        if not self._state.layout_ok:
            self._state.on_layout(await self._script(op, "layout", []))
        try:
            replies = await self._pipelined(op, arg_lists)
            again = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            if again:
                await self._client.script_load(script_source(op))
                for i, r in zip(again, await self._pipelined(op, [arg_lists[i] for i in again]), strict=True):
                    replies[i] = r
        except RedisError as exc:
            raise translate(self._where(exc), op, exc) from exc
        return replies

    async def _pipelined(self, op: str, arg_lists: list[list[str]]) -> list[Any]:
        sha, keyargs = self._sha[op], self._keyargs
        async with self._client.pipeline(transaction=False) as pipe:
            for args in arg_lists:
                pipe.execute_command("EVALSHA", sha, *keyargs, *args)  # (a cluster pipeline blocks .evalsha)
            for command in self._wait_commands:
                pipe.execute_command(*command)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        return self._confirmed_batch(op, replies)

    @property
    def _getters(self) -> int:
        return self._state.getters

    async def _wake_local(self, n: int) -> None:
        if n <= 0:
            return
        with translated(self._where(), "wake"):
            async with self._client.pipeline(transaction=not self._cluster) as pipe:  # no MULTI on a cluster
                pipe.rpush(self._state.wake_key, *(["1"] * n))
                pipe.expire(self._state.wake_key, 60)
                await pipe.execute()

    def _wake_soon(self) -> None:
        # From any thread: wake this handle's blocked getters, in their loop.
        loop = self._loop
        n = self._state.getters
        if loop is None or n <= 0 or loop.is_closed():
            return

        def start() -> None:
            task = loop.create_task(self._wake_local(n))
            task.add_done_callback(_log_failure)

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(start)

    def _on_clock_jump(self) -> None:
        self._wake_soon()

    def _ensure_heartbeat(self) -> None:
        # Called by every get that hands a key out: the first starts the one heartbeat task; none starts after
        # aclose().
        if self._beat is None and not self._closed:
            self._beat = asyncio.get_running_loop().create_task(
                _heartbeat(weakref.ref(self), self.lease_seconds / 3), name=f"keyqueue-redis-heartbeat-{self.name}"
            )

    async def _renew(self) -> None:
        state = self._state
        todo = state.renew_args()
        if todo is None:
            return
        args, pairs = todo
        # Bounded by the beat interval, as in the threaded shell: a renewal not answered by the next beat is cancelled
        # (its connection dropped) and the next beat tries again.
        state.on_renew(pairs, await self._within(self.lease_seconds / 3, "renew", self._call("renew", args)))

    # -- adding -----------------------------------------------------------------------------------------------

    async def add(self, key: str) -> AddResult:
        """As :meth:`keyqueue.redis.Queue.add` (one round trip)."""
        state = self._state
        args = state.add_args(key)
        if state.shutting_down:
            return state.dropped()
        return state.on_add(await self._call("add", args))

    async def add_many(self, keys: Iterable[str]) -> list[AddResult]:
        """As :meth:`keyqueue.redis.Queue.add_many` (pipelined, up to 1,000 adds per round trip)."""
        state = self._state
        arg_lists = state.add_many_args(keys)
        if state.shutting_down:
            return [state.dropped() for _ in arg_lists]
        results: list[AddResult] = []
        for start in range(0, len(arg_lists), ADD_MANY_BATCH):
            results += state.on_adds(await self._call_many("add", arg_lists[start:start + ADD_MANY_BATCH]))
        return results

    # -- handing out ------------------------------------------------------------------------------------------

    async def get(self, timeout: float | None = None) -> str:
        """As :meth:`keyqueue.redis.Queue.get`: waits in ``BLPOP`` (bounded by ``timeout`` and the next due time).
        Cancelled while waiting, it takes nothing; cancelled during the script's round trip, a key it may have
        been given is handed out again when its (never renewed) lease runs out. A dead connection: ``RedisUnavailable``
        at most ``timeout + GET_MARGIN`` (0.5 s) after the call (each round trip is cancelled at that deadline)."""
        if timeout is not None:
            timeout = check_timeout(timeout)
        state = self._state
        self._loop = asyncio.get_running_loop()
        deadline = None if timeout is None else time.monotonic() + timeout
        hard = None if deadline is None else deadline + GET_MARGIN  # every round trip of this call ends by then
        st = self._socket_timeout
        woken = False
        packed = self._get_packed  # None: the arguments change (a test clock), packed per call
        while True:
            if state.shutting_down:
                raise ShutDown
            args = state.get_args() if packed is None else []
            reply = state.on_get(await self._within(_bound(hard, st), "get", self._call("get", args, packed)))
            if isinstance(reply, str):  # a key handed out
                self._ensure_heartbeat()
                return reply
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                if woken:  # pass on a wake-up that may have announced an earlier delayed key
                    await self._within(_bound(hard, st), "wake", self._call("wake", [state.now_arg()]))
                raise TimeoutError(f"get() timed out after {timeout} s with no key ready")
            wait = state.block_slice(remaining, reply.wake_in, self._socket_timeout)
            if wait <= 0:
                continue
            with state.lock:
                if state.shutting_down:
                    raise ShutDown
                state.getters += 1
            try:
                with translated(self._where(), "get (waiting)"):
                    popped = await self._within(wait + GET_MARGIN, "get (waiting)", self._client.blpop(
                        [state.notify_key, state.wake_key], timeout=wait) if self._cluster else self._wire.call(
                        self._packer.command("BLPOP", state.notify_key, state.wake_key, wait)))
            finally:
                with state.lock:
                    state.getters -= 1
            woken = woken or (popped is not None and _text(popped[0]) == state.notify_key)

    async def done(self, key: str) -> bool:
        """As :meth:`keyqueue.redis.Queue.done` (raises :class:`~keyqueue.redis.LeaseLost` for a lost lease)."""
        state = self._state
        begun = state.begin_done(key)
        if begun is None:
            return False
        lease, lost = begun
        if lost:
            reply: Any = -1
        else:
            try:
                reply = await self._call("done", [key, lease])
            except BaseException:
                state.abort_done(key, lease)
                raise
        return state.end_done(key, lease, reply, self._release_drainers)  # wakes a drain once nothing is held

    def fencing_token(self, key: str) -> int:
        """As :meth:`keyqueue.redis.Queue.fencing_token`."""
        return self._state.token(key)

    @contextlib.asynccontextmanager
    async def lease(self, timeout: float | None = None) -> AsyncIterator[str]:
        """``async with q.lease() as key:`` — ``get`` on entry, ``done`` on every exit (also cancellation)."""
        key = await self.get(timeout)
        try:
            yield key
        finally:
            await self.done(key)

    def __aiter__(self) -> KeyIterator:
        """``async for key in q:`` — keys until :class:`~keyqueue.ShutDown`; each key is ``done`` when the loop
        asks for the next one, and when the loop is left (``break``, exception, cancellation: the iterator then
        schedules the ``done`` as a task on the loop as it is let go of; :meth:`KeyIterator.aclose` awaits it)."""
        return KeyIterator(self)

    # -- inspection -------------------------------------------------------------------------------------------

    async def len(self) -> int:
        """As ``len()`` of :class:`keyqueue.redis.Queue` (a coroutine: it is a round trip)."""
        return self._state.on_len(await self._call("len", [self._state.now_arg()]))[0]

    def _depth(self) -> int:
        # The metrics scrape's read of the shared depth, from the scraping thread: one round trip on a synchronous
        # client to the same server (an asyncio client cannot be used outside its loop).
        with self._scrape_lock:
            if self._scrape_client is None:
                client = scrape_client(self._client)
                self._scrape_client = (client, client.register_script(script_source("len")))
            client, script = self._scrape_client
        with translated(self.url, "len (metrics scrape)"):
            reply = script(keys=self._state.keys, args=[self._state.now_arg()], client=client)
        return self._state.on_len(reply)[1]

    async def inspect(self) -> dict[str, int]:
        """As :meth:`keyqueue.redis.Queue.inspect`."""
        r = await self._call("inspect", [""])
        return dict(zip(("dirty", "queued", "processing", "delayed", "expired", "redelivered"),
                        (int(x) for x in r), strict=True))

    # -- shutdown ---------------------------------------------------------------------------------------------

    def shut_down(self) -> None:
        """As :meth:`keyqueue.redis.Queue.shut_down` (per handle; a plain method, callable from any thread)."""
        state = self._state
        with state.lock:
            state.shutting_down = True
            state.draining = False
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._release_drainers)
        self._wake_soon()

    def _release_drainers(self) -> None:
        for fut in self._idle:
            if not fut.done():
                fut.set_result(None)

    async def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        """As :meth:`keyqueue.redis.Queue.shut_down_with_drain`: waits until this handle holds no key."""
        timeout = check_timeout(timeout)
        state = self._state
        self._loop = loop = asyncio.get_running_loop()
        with state.lock:
            state.shutting_down = True
            state.draining = True
        self._wake_soon()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            with state.lock:
                if not state.held:
                    return True
                if not state.draining:
                    return False
            wait = None if deadline is None else deadline - loop.time()
            if wait is not None and wait <= 0:
                return False
            fut: asyncio.Future[None] = loop.create_future()
            self._idle.append(fut)
            try:
                await asyncio.wait_for(fut, wait)
            except TimeoutError:
                pass
            finally:
                self._idle.remove(fut)

    async def delete(self) -> int:
        """As :meth:`keyqueue.redis.Queue.delete`."""
        return int(await self._call("delete", [""]))

    async def aclose(self) -> None:
        """Shut this handle down, stop its heartbeat, close the client it built from ``url``. Idempotent."""
        self.shut_down()
        self._closed = True
        beat = self._beat
        if beat is not None and not beat.done():
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        detach(self._state.metrics)
        with self._scrape_lock:
            scrape, self._scrape_client = self._scrape_client, None
        if scrape is not None:
            scrape[0].close()
        if self._wire is not None:
            await self._wire.close()
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (f"<keyqueue.redis.aio.{type(self).__name__} name={self.name!r} url={self.url} "
                f"holder={self._state.holder} held={len(self._state.held)} "
                f"shutting_down={self._state.shutting_down}>")


class KeyIterator:
    """The iterator of ``async for key in queue`` (one per loop): owns the key it returned last until it asks for
    the next one, is closed, or is let go of."""

    __slots__ = ("__weakref__", "_current", "_queue")

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self._current: str | None = None

    def __aiter__(self) -> KeyIterator:
        return self

    async def __anext__(self) -> str:
        await self.aclose()
        try:
            key = await self._queue.get()
        except ShutDown:
            raise StopAsyncIteration from None
        self._current = key
        return key

    async def aclose(self) -> None:
        """``done`` the key returned last, if any (idempotent)."""
        key, self._current = self._current, None
        if key is not None:
            await self._queue.done(key)

    def __del__(self) -> None:
        key, self._current = self._current, None
        loop = self._queue._loop
        if key is not None and loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(lambda: loop.create_task(self._queue.done(key)).add_done_callback(
                    _log_failure))


_SCRAPE_KWARGS = ("host", "port", "db", "username", "password", "socket_timeout", "socket_connect_timeout", "path")


def scrape_client(client: Any) -> Any:
    """A synchronous client to the server of an asyncio ``client`` (same address, db, credentials and timeouts; for
    a Sentinel-managed client the same Sentinels and service, for a cluster client a cluster client from one of its
    nodes), for metrics scrapes. It does not retry: the next scrape is the retry."""
    import redis
    import redis.cluster
    import redis.sentinel
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    pool = getattr(client, "connection_pool", None)
    if pool is None:  # redis.asyncio.cluster.RedisCluster
        node = client.get_default_node()
        kwargs = dict(getattr(client, "connection_kwargs", {}) or {})
        picked = {k: kwargs[k] for k in ("username", "password", "socket_timeout", "socket_connect_timeout")
                  if k in kwargs}
        return redis.cluster.RedisCluster(host=node.host, port=node.port, decode_responses=True, **picked)
    kwargs = dict(getattr(pool, "connection_kwargs", {}) or {})
    picked = {k: kwargs[k] for k in _SCRAPE_KWARGS if k in kwargs}
    manager = getattr(pool, "sentinel_manager", None)
    if manager is not None:
        sentinels = [(s.connection_pool.connection_kwargs.get("host", "localhost"),
                      s.connection_pool.connection_kwargs.get("port", 26379)) for s in manager.sentinels]
        for k in ("host", "port", "path"):
            picked.pop(k, None)
        timeout = picked.get("socket_timeout")
        sentinel: Any = redis.sentinel.Sentinel  # (redis-py leaves it untyped)
        return sentinel(sentinels, socket_timeout=timeout).master_for(
            pool.service_name, decode_responses=True, retry=Retry(NoBackoff(), 0), **picked)
    path = picked.pop("path", None)
    if path is not None:
        picked["unix_socket_path"] = path
    return redis.Redis(decode_responses=True, retry=Retry(NoBackoff(), 0), **picked)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("Redis queue: could not wake getters: %s", task.exception())


class DelayingQueue(Queue):
    """A :class:`Queue` with ``await add_after(key, delay)`` (as :meth:`keyqueue.redis.DelayingQueue.add_after`)."""

    async def add_after(self, key: str, delay: float) -> AddResult:
        state = self._state
        args = state.add_after_args(key, delay)
        if state.shutting_down:
            return state.dropped()
        return state.on_add(await self._call("add_after", args), retry=True)


class RateLimitingQueue(RateLimitedHandle, DelayingQueue):
    """A :class:`DelayingQueue` with the shared rate limiter of :class:`keyqueue.redis.RateLimitingQueue`."""

    async def add_rate_limited(self, key: str) -> AddResult:
        state = self._state
        shut = state.shutting_down
        reply = await self._call("add_rate_limited", state.rate_args(key, self._tree, record_only=shut))
        if shut:
            return state.dropped()
        return state.on_add(reply[0], retry=True)

    async def forget(self, key: str) -> None:
        state = self._state
        await self._call("forget", [state.now_arg(), *state.add_args(key)[1:], *self._tree.per_key])

    async def num_requeues(self, key: str) -> int:
        state = self._state
        return int(await self._call("num_requeues", [state.now_arg(), *state.add_args(key)[1:], *self._tree.per_key]))
