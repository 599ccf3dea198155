"""The controller loop for asyncio: :class:`keyqueue.aio.Controller` (import it from there).

The outcome table, metrics and logging are those of :class:`keyqueue.Controller` (see
:mod:`keyqueue.controller.threaded`); here the workers are tasks of one event loop and ``reconcile`` is usually a
coroutine function.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from keyqueue._aio import PriorityQueue, RateLimitingQueue
from keyqueue._core import check_timeout
from keyqueue.clock import Clock
from keyqueue.controller.outcomes import ControllerBase, Result
from keyqueue.errors import ShutDown

if TYPE_CHECKING:
    import logging

    from keyqueue.leaderelection.aio import LeaderElector

__all__ = ["Controller"]

T = TypeVar("T", bound=Hashable)


class Controller(ControllerBase[T]):
    """``workers`` asyncio tasks reconciling keys from a :class:`keyqueue.aio.RateLimitingQueue` or
    :class:`keyqueue.aio.PriorityQueue` (default: a priority queue named ``name``).

    ``reconcile(key)`` is a coroutine function (a plain function returning ``None``/``Result`` also works, but
    it runs on the event loop). Arguments, outcomes and metrics as :class:`keyqueue.Controller`. An ``Exception``
    from reconcile never ends a worker task unless ``recover_panic=False`` (then an unexpected one ends its task,
    stops the controller and is raised again by :meth:`run` and on leaving ``async with``; see :attr:`failure`);
    ``KeyboardInterrupt``/``SystemExit`` propagate as asyncio intends.

    :meth:`start` must be called in a running event loop; :meth:`stop`, :meth:`run` and ``async with`` are
    coroutines of that loop. Adding keys to :attr:`queue` works from any thread.

    ``leader_election``: a :class:`keyqueue.leaderelection.aio.LeaderElector`; workers reconcile only while it
    leads, with the rules of :mod:`keyqueue.controller`. A reconcile in flight when leadership is lost is finished
    (awaited), not cancelled; only :meth:`stop`'s timeout cancels, as without leader election.
    """

    _priority_queue_class = PriorityQueue
    _rate_limiting_queue_class = RateLimitingQueue

    def __init__(
        self,
        reconcile: Callable[[T], Awaitable[Result | None] | Result | None],
        queue: RateLimitingQueue[T] | None = None,
        *,
        name: str | None = None,
        workers: int = 1,
        drain: bool = False,
        stop_timeout: float | None = 30.0,
        use_priority_queue: bool = True,
        clock: Clock | None = None,
        metrics_provider: Any = None,
        registry: Any = None,
        logger: logging.Logger | None = None,
        leader_election: LeaderElector | None = None,
        recover_panic: bool = True,
    ) -> None:
        super().__init__(
            reconcile, queue, name=name, workers=workers, drain=drain, stop_timeout=stop_timeout,
            use_priority_queue=use_priority_queue, clock=clock, metrics_provider=metrics_provider,
            registry=registry, logger=logger, recover_panic=recover_panic,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._stop_requested = False
        self._dropping = False
        self._alive = 0
        self._wake: asyncio.Event | None = None
        self._elector = leader_election
        self._owns_elector = False  # started by this controller's start(): then its stop() stops it
        self._gate: asyncio.Event | None = None  # set when a term starts and when a stop is requested
        if leader_election is not None:
            from keyqueue.leaderelection import export_metrics
            from keyqueue.leaderelection.aio import LeaderElector

            if not isinstance(leader_election, LeaderElector):
                raise TypeError(f"leader_election must be a keyqueue.leaderelection.aio.LeaderElector, got "
                                f"{type(leader_election).__name__}: {leader_election!r:.80}")
            leader_election.add_listener(self._open_gate, self._open_gate)
            if registry is not None:
                export_metrics(leader_election, registry)

    @property
    def queue(self) -> RateLimitingQueue[T]:
        """The queue the workers take keys from (add keys to it, from any thread)."""
        return self._queue  # type: ignore[no-any-return]

    @property
    def stopping(self) -> bool:
        """True once a stop was requested."""
        return self._stop_requested

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker tasks in the running event loop and return. Raises ``RuntimeError`` if started before
        or if no event loop is running."""
        loop = asyncio.get_running_loop()
        if self._started:
            raise RuntimeError(f"controller {self.name!r} was already started")
        self._started = True
        self._wake = asyncio.Event()
        if self._stop_requested:
            self._wake.set()
        if self.metrics is not None:
            self.metrics.started(self.workers)
        self._alive = self.workers
        self._gate = asyncio.Event()
        self._tasks = [loop.create_task(self._worker(), name=f"{self.name}-worker-{i}") for i in range(self.workers)]
        if self._elector is not None and not self._elector.started:
            self._elector.start()
            self._owns_elector = True

    async def stop(self, timeout: float | None = 30.0) -> bool:
        """Stop: take no more keys, shut the queue down, wait for the reconciles in flight (at most ``timeout``
        seconds; ``None``/``math.inf``: forever); with ``drain=True`` the keys still queued are reconciled first,
        within the same timeout. When the timeout passes, the worker tasks still running are **cancelled** (their
        ``done(key)`` still runs) and ``False`` is returned; otherwise ``True``. Idempotent. Requeues made while
        stopping are dropped (the queue is shut down)."""
        t = check_timeout(timeout)
        self._request_stop()
        self._queue.shut_down()
        current = asyncio.current_task()
        tasks = [task for task in self._tasks if task is not current and not task.done()]
        ok = True
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=t)
            if pending:
                ok = False
                self._dropping = True
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
        if self._elector is not None and self._owns_elector:
            await self._elector.stop(t)
        for task in self._tasks:
            if task.done() and not task.cancelled():
                task.exception()  # a crashed worker's exception is in self.failure: mark it retrieved
        return ok

    async def run(self, *, handle_signals: bool = True) -> bool:
        """Start (unless started), wait until :meth:`stop` is requested, the queue is shut down and empty, or —
        with ``handle_signals`` in the main thread — SIGINT/SIGTERM arrives (``loop.add_signal_handler``); then
        stop (waiting at most ``stop_timeout``) and return what :meth:`stop` returned. For
        ``asyncio.run(controller.run())``."""
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                except (NotImplementedError, RuntimeError):  # no signal support in this loop
                    continue
                installed.append(sig)
        try:
            if not self._started:
                self.start()
            assert self._wake is not None
            await self._wake.wait()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
        ok = await self.stop(self.stop_timeout)
        if self._failure is not None:
            raise self._failure  # recover_panic=False and a worker crashed: fail fast, in the caller
        return ok

    def _on_signal(self, sig: signal.Signals) -> None:
        self.log.info("controller %s: %s received, stopping", self.name, sig.name)
        self._request_stop()

    def _request_stop(self) -> None:
        self._stop_requested = True
        if not self.drain:
            self._dropping = True
        if self._wake is not None:
            self._wake.set()
        self._open_gate()

    def _open_gate(self) -> None:
        if self._gate is not None:
            self._gate.set()

    async def _await_leading(self) -> bool:
        """Wait until the elector leads (True) or a stop is requested while it does not (False)."""
        elector, gate = self._elector, self._gate
        assert elector is not None and gate is not None
        while not elector.is_leader():
            if self._stop_requested:
                return False
            gate.clear()
            # Woken when a term starts; the timeout also covers a renewal that returned after the deadline had
            # passed (leadership continues without a new start event).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gate.wait(), elector.config.retry_period)
        return True

    async def __aenter__(self) -> Controller[T]:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop(self.stop_timeout)
        if exc is None and self._failure is not None:
            raise self._failure  # recover_panic=False and a worker crashed

    # -- workers ------------------------------------------------------------------------------------------------

    async def _get(self, timeout: float | None = None) -> tuple[T, int]:
        q = self._queue
        if self._priority:
            return await q.get_with_priority(timeout)  # type: ignore[no-any-return]
        return await q.get(timeout), 0

    async def _worker(self) -> None:
        elector = self._elector
        failures = 0  # consecutive failed gets
        try:
            while not self._dropping:
                if elector is not None and not await self._await_leading():
                    return
                try:
                    key, priority = await self._get()
                except ShutDown:
                    return
                except Exception as exc:  # a worker survives anything a key does
                    failures += 1
                    pause = self._get_failed(exc, failures)
                    await asyncio.sleep(0)  # a get() that fails at once must not starve the other tasks
                    if pause and self._wake is not None:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._wake.wait(), pause)  # woken early by a stop
                    continue
                failures = 0
                if self._dropping:
                    self._done(key)  # stopping without drain: the key is dropped
                    return
                if elector is not None and not elector.is_leader():
                    self._hand_back(key, priority)
                    continue
                await self._process(key, priority)
        finally:
            self._alive -= 1
            if self._alive == 0 and self._wake is not None:
                self._wake.set()

    async def process_next(self, timeout: float | None = None) -> bool:
        """Take one key and reconcile it in the calling task, exactly as a worker does. Returns ``False`` if the
        queue is shut down and empty; raises ``TimeoutError`` if no key is ready within ``timeout`` seconds."""
        try:
            key, priority = await self._get(timeout)
        except ShutDown:
            return False
        await self._process(key, priority)
        return True

    async def _process(self, key: T, priority: int) -> None:
        m = self.metrics
        if m is not None:
            m.worker_active(1)
        t0 = time.perf_counter_ns()
        try:
            result: object = None
            error: BaseException | None = None
            try:
                result = self._reconcile(key)
                if inspect.isawaitable(result):
                    result = await result
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc
            if error is None:
                error = self._bad_result(result)
            if error is not None and self._crash(key, error):
                raise error  # recover_panic=False: done(key) below, then the worker task ends
            self._settle(key, priority, result, error, time.perf_counter_ns() - t0)
            del error
        finally:
            self._done(key)
            if m is not None:
                m.worker_active(-1)
