"""Shell factories for the conformance suite: each builds a queue of a given kind with a *synchronous* API.

The threading shell is its own facade. Other shells (asyncio) register an adapter here that exposes the same
blocking methods, so every conformance test runs unchanged against every shell.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import keyqueue
import keyqueue.aio

ShellFactory = Callable[..., Any]
R = TypeVar("R")


def threaded(kind: str, *args: Any, **kwargs: Any) -> Any:
    cls = {
        "queue": keyqueue.Queue,
        "delaying": keyqueue.DelayingQueue,
        "ratelimiting": keyqueue.RateLimitingQueue,
    }[kind]
    return cls(*args, **kwargs)


class LoopThread:
    """An asyncio event loop running in a daemon thread, for driving coroutines from synchronous test code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(started.set)
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="aio-facade-loop", daemon=True)
        self.thread.start()
        if not started.wait(5):
            raise RuntimeError("the facade's event loop did not start")

    def run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        """Run ``coro`` in the loop and block the calling thread for its result (or its exception)."""
        fut: concurrent.futures.Future[R] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def close(self) -> None:
        """Cancel what is still running in the loop, stop it and join its thread. Idempotent."""
        if self.loop.is_closed():
            return

        async def cancel_all() -> None:
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.thread.is_alive():
            self.run(cancel_all(), timeout=5)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
        self.loop.close()


class AioFacade:
    """A keyqueue.aio queue behind the threading shell's synchronous API.

    The coroutines (``get``, ``shut_down_with_drain``, the ``lease`` and ``async for`` protocol) run in a private
    event loop thread, the caller blocking for the result. The plain methods (``add``, ``done``, ``add_after``,
    ``shut_down`` ...) are called directly in the caller's thread — the "add from any thread" path of the aio
    shell, which must wake a ``get()`` waiting in the loop.
    """

    def __init__(self, queue: keyqueue.aio.Queue[Any]) -> None:
        self.queue = queue
        self._loop = LoopThread()

    def __getattr__(self, name: str) -> Any:
        # add, done, add_after, add_rate_limited, forget, num_requeues, stats, shut_down, shutting_down, clock ...
        return getattr(self.queue, name)

    def __len__(self) -> int:
        return len(self.queue)

    def get(self, timeout: float | None = None) -> Any:
        return self._loop.run(self.queue.get(timeout))

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        return self._loop.run(self.queue.shut_down_with_drain(timeout))

    @contextmanager
    def lease(self, timeout: float | None = None) -> Iterator[Any]:
        cm = self.queue.lease(timeout)
        key = self._loop.run(cm.__aenter__())
        try:
            yield key
        except BaseException as exc:
            self._loop.run(cm.__aexit__(type(exc), exc, exc.__traceback__))
            raise
        else:
            self._loop.run(cm.__aexit__(None, None, None))

    def __iter__(self) -> Iterator[Any]:
        it = self.queue.__aiter__()
        try:
            while True:
                try:
                    key = self._loop.run(it.__anext__())
                except StopAsyncIteration:
                    return
                yield key
        finally:
            self._loop.run(it.aclose())

    def close(self) -> None:
        self._loop.close()

    def __repr__(self) -> str:
        return f"<AioFacade {self.queue!r}>"


_AIO_NAMES = {"queue": "Queue", "delaying": "DelayingQueue", "ratelimiting": "RateLimitingQueue"}


def aio(kind: str, *args: Any, **kwargs: Any) -> AioFacade:
    cls = getattr(keyqueue.aio, _AIO_NAMES[kind])
    return AioFacade(cls(*args, **kwargs))


SHELLS: dict[str, ShellFactory] = {"threaded": threaded, "asyncio": aio}


def _redis_args(kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    # The in-process constructors take (rate_limiter) positionally and name= as a keyword; the Redis ones take the
    # name first (required) and everything else as keywords. A queue built without a name gets a fresh one.
    name = kwargs.pop("name", None)
    if name is None or name == "":
        name = f"conformance-{uuid.uuid4().hex[:12]}"
    if kind == "ratelimiting" and args:
        kwargs["rate_limiter"], args = args[0], args[1:]
    return name, args


def redis_threaded(kind: str, *args: Any, **kwargs: Any) -> Any:
    import keyqueue.redis

    cls = {
        "queue": keyqueue.redis.Queue,
        "delaying": keyqueue.redis.DelayingQueue,
        "ratelimiting": keyqueue.redis.RateLimitingQueue,
    }[kind]
    name, args = _redis_args(kind, args, kwargs)
    return cls(name, *args, **kwargs)


class RedisAioFacade(AioFacade):
    """A keyqueue.redis.aio queue behind the synchronous API: every coroutine (``add``, ``done``, ``len`` ... are
    coroutines there too) runs in the private loop thread; ``get``, ``lease`` and iteration as :class:`AioFacade`."""

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.queue, name)
        if inspect.iscoroutinefunction(attr):
            return lambda *a, **kw: self._loop.run(attr(*a, **kw))
        return attr

    @property
    def _getters(self) -> int:
        return int(self.queue._getters)

    def __len__(self) -> int:
        return self._loop.run(self.queue.len())

    def close(self) -> None:
        self._loop.run(self.queue.aclose())
        self._loop.close()


def redis_aio(kind: str, *args: Any, **kwargs: Any) -> RedisAioFacade:
    import keyqueue.redis.aio

    cls = {
        "queue": keyqueue.redis.aio.Queue,
        "delaying": keyqueue.redis.aio.DelayingQueue,
        "ratelimiting": keyqueue.redis.aio.RateLimitingQueue,
    }[kind]
    name, args = _redis_args(kind, args, kwargs)
    return RedisAioFacade(cls(name, *args, **kwargs))


# The Redis shells run the conformance suite too (tests/conformance/conftest.py adds them); they need a server,
# whose URL make_queue passes as url=. Cases that are process-local by nature are skipped, each with its reason.
REDIS_SHELLS: dict[str, ShellFactory] = {"redis-threaded": redis_threaded, "redis-asyncio": redis_aio}

REDIS_SKIPS: dict[str, str] = {
    "test_any_hashable_key_works": "Redis queue keys are str (they cross processes); non-str keys raise TypeError",
    "test_no_reference_kept_after_done": "Redis queue keys are str: no Python object is kept, weakref-able keys "
    "cannot be used",
    "test_no_reference_kept_after_a_delayed_entry_was_moved_earlier": "Redis queue keys are str: no Python object "
    "is kept",
}
for _case in ("test_the_ordering_decides_the_order_and_every_guarantee_holds",
              "test_touch_is_called_for_an_add_of_a_waiting_key_only", "test_every_add_of_a_waiting_key_reaches_touch",
              "test_the_default_ordering_is_fifo", "test_a_bad_ordering_is_refused_at_construction",
              "test_delayed_keys_fire_through_the_ordering", "test_an_ordering_may_subclass_the_protocol"):
    REDIS_SKIPS[_case] = "the ordering is pluggable only in process: on Redis the FIFO is a Redis list"
REDIS_SKIPS["test_seed_part_a_100000_adds_one_entry"] = (
    "100,000 round trips (~10 s per Redis shell); tests/redis checks the same collapse with 2,000 adds"
)
# Shutdown is per handle on Redis: a handle's get() raises ShutDown at once (the backlog stays for the other
# handles), delayed entries stay in Redis, and a drain waits for this handle's keys in flight only.
_PER_HANDLE = "per-handle shutdown on Redis: get() raises ShutDown at once, the backlog and delayed keys stay in Redis "
for _case in (
    "test_shutdown_drops_waiting_entries",
    "test_shut_down_drops_adds_and_hands_out_the_rest",
    "test_done_after_shut_down_requeues_a_dirty_key",
    "test_iteration_calls_done_and_ends_at_shutdown",
    "test_add_after_shutdown_changes_nothing_whatever_the_key_state",
    "test_drain_waits_for_queued_keys_not_only_in_flight",
    "test_key_re_added_during_processing_is_handed_out_during_the_drain",
    "test_drain_drops_delayed_entries_and_does_not_wait_for_them",
    "test_drain_after_shut_down_returns_when_idle",
):
    REDIS_SKIPS[_case] = _PER_HANDLE + "for the other handles (tests/redis covers the per-handle semantics)"


def wait_until(predicate: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> None:
    """Block until ``predicate()`` is truthy; raise ``AssertionError`` after ``timeout`` seconds.

    For synchronising a test with a state the queue really reaches (a getter waiting, a drain started), instead of
    sleeping and hoping: it returns as soon as the state is there, and a state that never comes fails the test.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.0005)


def waiting_getters(q: Any) -> int:
    """How many ``get()`` calls are blocked inside ``q`` right now (either shell, also through the facade).

    Reads the shells' private waiter bookkeeping (``_getters``: a count in the threading shell, a deque of futures
    in the asyncio shell) so that a test can act only once a getter really waits.
    """
    getters = q._getters
    return getters if isinstance(getters, int) else len(getters)


def wait_for_getters(q: Any, n: int = 1) -> None:
    """Block until at least ``n`` ``get()`` calls wait inside ``q`` (bounded; see :func:`wait_until`)."""
    wait_until(lambda: waiting_getters(q) >= n, what=f"{n} waiting get() call(s)")


class Key:
    """A hashable key that can be weakly referenced (``str`` cannot), to prove the queue lets go of it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and other.name == self.name
