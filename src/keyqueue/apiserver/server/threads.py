"""Where the storage threads meet the event loop.

Blocking storage calls (etcd) run in :class:`_StoragePool`, whose threads hand each result back to the loop; a watch
response is woken (:class:`_WatchStream`) by the storage thread that queued an event for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from ..blocking import bind_thread
from ..registry import ObjectWatch

T = TypeVar("T")


class _StoragePool:
    """At most ``threads`` threads that run blocking storage calls for the event loop.

    :meth:`run` queues the call and returns an asyncio future, which the thread that ran it resolves with one
    ``call_soon_threadsafe`` -- two hand-offs per call and no :class:`concurrent.futures.Future` in between (what
    ``loop.run_in_executor`` adds: about half its cost per call, measured).  Threads start as calls need them.  A
    call whose awaiting task was cancelled still runs to its end; its result is dropped.  :meth:`shutdown` refuses
    new calls, cancels the queued ones that no thread has started and waits for the running ones.

    A thread that waits on something outside the server (an admission webhook: :mod:`~keyqueue.apiserver.blocking`)
    does not count against ``threads`` while it waits: another thread starts if calls are queued, and the surplus
    threads end once the waits are over.
    """

    def __init__(self, threads: int, name: str) -> None:
        self._max_threads = threads
        self._name = name
        self._queue: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[..., Any],
                                             tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._outstanding = 0  # calls queued or running (under _lock)
        self._outside = 0  # threads waiting outside the server (under _lock)
        self._closed = False

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue ``fn(*args)`` (from the loop's thread); ``RuntimeError`` after :meth:`shutdown`."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the storage pool is shut down")
            self._queue.put((loop, fut, fn, args))
            self._outstanding += 1
            self._grow()
        return fut

    def _grow(self) -> None:
        """Start a thread if a call waits for one and the bound allows (under ``_lock``)."""
        if self._outstanding > len(self._threads) and len(self._threads) - self._outside < self._max_threads \
                and not self._closed:
            thread = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _enter_outside(self) -> None:
        with self._lock:
            self._outside += 1
            self._grow()

    def _leave_outside(self) -> None:
        with self._lock:
            self._outside -= 1

    def _surplus(self) -> bool:
        """Whether the current thread should end: more threads than the bound allow (under ``_lock``)."""
        if len(self._threads) - self._outside <= self._max_threads or self._closed:
            return False
        self._threads.remove(threading.current_thread())
        return True

    def _work(self) -> None:
        bind_thread(self._enter_outside, self._leave_outside)
        while (item := self._queue.get()) is not None:
            loop, fut, fn, args = item
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the awaiting task, as an executor does
                self._deliver(loop, _fail, fut, exc)
            else:
                self._deliver(loop, _succeed, fut, result)
            finally:
                with self._lock:
                    self._outstanding -= 1
                    surplus = self._surplus()
            del item, fut, args  # hold nothing of a finished call while waiting for the next
            if surplus:
                return

    @staticmethod
    def _deliver(loop: asyncio.AbstractEventLoop, how: Callable[[asyncio.Future[Any], Any], None],
                 fut: asyncio.Future[Any], value: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(how, fut, value)

    def shutdown(self) -> None:
        """Refuse new calls, cancel the queued ones, wait for the running ones (idempotent)."""
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self._deliver(item[0], _cancel, item[1], None)
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join()


def _succeed(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _fail(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _cancel(fut: asyncio.Future[Any], _value: Any) -> None:
    fut.cancel()


class _WatchStream:
    """Loop-side state of one watch response: woken by the storage thread that queued an event."""

    def __init__(self, loop: asyncio.AbstractEventLoop, watch: ObjectWatch, request: web.BaseRequest) -> None:
        self.loop = loop
        self.watch = watch
        self.request = request
        self.wake = asyncio.Event()
        self.ended = False

    def notify(self) -> None:  # any thread
        with contextlib.suppress(RuntimeError):  # the loop is closed: the stream is over anyway
            self.loop.call_soon_threadsafe(self._on_loop)

    def _on_loop(self) -> None:
        self.wake.set()
        if self.watch.overflowed:  # the client stopped reading: its write may be stuck, so cut the connection
            transport = self.request.transport
            if transport is not None:
                transport.abort()

    def end(self) -> None:
        self.ended = True
        self.wake.set()
