"""A controller loop: a reconcile function plus a queue becomes a correct worker pool (controller-runtime's loop).

:class:`Controller` (threads; :class:`keyqueue.aio.Controller` for asyncio) takes keys from a rate-limiting queue
(by default a :class:`~keyqueue.PriorityQueue` named after the controller) with ``workers`` threads and calls
``reconcile(key)`` for each. The queue's processing set guarantees that one key is never reconciled by two workers
at once. What the reconcile function does decides what happens to the key next:

=====================================================  ==========================================================
reconcile ...                                          queue action
=====================================================  ==========================================================
returns ``None`` or ``Result()``                       ``forget(key)`` (its backoff starts over)
returns ``Result(requeue_after=d)`` with ``d > 0``     ``forget(key)``, then ``add_after(key, d)`` (at the key's
                                                       priority, or ``Result.priority``, on a priority queue)
returns ``Result(requeue=True)`` (and no               ``add_rate_limited(key)``, **no** ``forget`` (at the key's
``requeue_after``)                                     priority, or ``Result.priority``); counted as ``requeue``
raises :class:`TerminalError` (or an exception whose   nothing: no requeue, **no** ``forget`` (the failure count
``__cause__`` chain holds one)                         stays)
raises anything else                                   ``add_rate_limited(key)`` (at the key's priority, or the
                                                       raised ``ReconcileError(priority=p)``'s, on a priority
                                                       queue); the error is logged with key and attempt
=====================================================  ==========================================================

``done(key)`` always follows. By default no exception ends a worker: an exception that is not a
:class:`ReconcileError` is "unexpected" (a bug, Go's panic): it is logged with its traceback, counted in
``controller_runtime_reconcile_panics_total`` and retried like any error. With ``recover_panic=False`` (fail fast)
such an exception is counted, the key is ``done`` and not requeued, the controller stops and the exception
propagates: it ends the worker (a thread reports it through :func:`threading.excepthook`) and is raised again by
:meth:`Controller.run` and on leaving the ``with`` block (see :attr:`Controller.failure`). The backoff of a key is
reset only by a success or a ``requeue_after``.

Stopping: :meth:`Controller.stop` (or leaving the ``with`` block, or SIGINT/SIGTERM during :meth:`Controller.run`)
stops handing keys to reconcile, lets the reconciles in flight finish (bounded by a timeout) and then either drops
the backlog (default, as controller-runtime does with its priority queue) or, with ``drain=True``, reconciles every
key still queued first (as controller-runtime does with the client-go queue). The queue is shut down by ``stop``.

Leader election: with ``leader_election=LeaderElector(...)`` (:mod:`keyqueue.leaderelection`; its asyncio twin for
:class:`keyqueue.aio.Controller`) the controller starts and stops the elector with itself (unless the elector was
started already, as a :class:`keyqueue.Manager` does for the controllers that share it), and its workers
reconcile only while the elector leads, as controller-runtime's manager runs leader-elected runnables. The queue and
whatever feeds it (informers) keep running in every replica, so a standby has a warm backlog. When leadership is
lost (``is_leader()`` turns False at the renew deadline, before any other replica can take the Lease) no new
reconcile starts: a worker that takes a key while not leading hands it back to the queue (``add`` then ``done``, at
its priority) and waits for the next term. Reconciles already in flight are **finished**, not interrupted, as
:meth:`Controller.stop` without drain treats them; nothing queued is dropped. When the elector leads again the
workers resume. At stop the workers stop first, then the elector stops (and releases the Lease if it was built with
``release_on_cancel``); ``drain=True`` drains only while leading.

Metrics: give ``registry=`` (a ``prometheus_client.CollectorRegistry``) to export controller-runtime's controller
metrics under its names, labelled ``controller``: ``controller_runtime_reconcile_total{result}``,
``controller_runtime_reconcile_errors_total``, ``controller_runtime_terminal_reconcile_errors_total``,
``controller_runtime_reconcile_panics_total``, ``controller_runtime_reconcile_time_seconds`` (its buckets),
``controller_runtime_active_workers`` and ``controller_runtime_max_concurrent_reconciles``; all start at 0 when the
controller starts; with ``leader_election`` also ``leader_election_master_status{name}`` (1 while leading). Without
a registry nothing is recorded. The queue's own metrics are the queue's business (``metrics_provider=``).
"""

from __future__ import annotations

import contextlib
import inspect
import signal
import threading
import time
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from keyqueue._core import check_timeout
from keyqueue._signals import recorded_signals
from keyqueue.clock import Clock
from keyqueue.controller.outcomes import ControllerBase, Result
from keyqueue.errors import ShutDown
from keyqueue.threaded import PriorityQueue, RateLimitingQueue, os_wait

if TYPE_CHECKING:
    import logging

    from keyqueue.leaderelection import LeaderElector

__all__ = ["Controller"]

T = TypeVar("T", bound=Hashable)


class Controller(ControllerBase[T]):
    """``workers`` threads reconciling keys from a rate-limiting queue (see the module docstring).

    * ``reconcile(key) -> None | Result`` — called for one key at a time per key; raise to fail.
    * ``queue`` — a :class:`~keyqueue.RateLimitingQueue` or :class:`~keyqueue.PriorityQueue`; default: a
      :class:`~keyqueue.PriorityQueue` (``use_priority_queue=True``, controller-runtime's default) or a
      :class:`~keyqueue.RateLimitingQueue` with client-go's default limiter, named ``name`` and built with
      ``clock`` and ``metrics_provider``. The controller shuts the queue down when it stops.
    * ``name`` — the controller's name (metrics label, queue name); default: ``reconcile.__name__``.
    * ``drain`` — at stop, reconcile the keys still queued (True) or drop them (False, default).
    * ``stop_timeout`` — how long :meth:`run` and leaving the ``with`` block wait for the reconciles in flight
      when stopping (seconds, default 30 as controller-runtime's manager; ``None``: forever).
    * ``registry`` — a ``prometheus_client.CollectorRegistry`` for the controller metrics; ``logger`` — a
      :class:`logging.Logger` (default ``keyqueue.controller``).
    * ``leader_election`` — a :class:`keyqueue.leaderelection.LeaderElector`: reconcile only while it leads (see
      the module docstring); :meth:`start` starts it unless it was started already, and then :meth:`stop` stops
      it (an elector started by its owner, e.g. a :class:`keyqueue.Manager` sharing it, is left to that owner).
    * ``recover_panic`` — ``True`` (default, controller-runtime's): an unexpected exception from reconcile is
      logged, counted as a panic and retried with backoff; ``False``: it ends its worker thread (reported by
      :func:`threading.excepthook`), stops the controller, and is raised again by :meth:`run` and on leaving the
      ``with`` block (:attr:`failure`); :class:`ReconcileError` and :class:`TerminalError` are never "unexpected".

    Use ``with Controller(fn) as c:`` (start, then stop on exit), ``c.start()`` ... ``c.stop()``, or ``c.run()``.
    Raises ``TypeError``/``ValueError`` for bad arguments (checked before any queue is built), including a coroutine
    function as ``reconcile`` (a worker thread cannot await it: use :class:`keyqueue.aio.Controller`).
    """

    _priority_queue_class = PriorityQueue
    _rate_limiting_queue_class = RateLimitingQueue

    def __init__(
        self,
        reconcile: Callable[[T], Result | None],
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
        if callable(reconcile) and (
            inspect.iscoroutinefunction(reconcile) or inspect.iscoroutinefunction(type(reconcile).__call__)
        ):
            raise TypeError(
                f"reconcile is a coroutine function ({reconcile!r:.80}); a thread cannot await it: use "
                "keyqueue.aio.Controller"
            )
        super().__init__(
            reconcile, queue, name=name, workers=workers, drain=drain, stop_timeout=stop_timeout,
            use_priority_queue=use_priority_queue, clock=clock, metrics_provider=metrics_provider,
            registry=registry, logger=logger, recover_panic=recover_panic,
        )
        self._state = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._started = False
        self._stop_requested = False
        self._dropping = False  # workers take no more keys (drop mode, or a drain that timed out)
        self._alive = 0
        self._wake = threading.Event()  # set when a stop is requested or the last worker has exited
        self._elector = leader_election
        self._owns_elector = False  # started by this controller's start(): then its stop() stops it
        self._gate = threading.Condition()  # notified when leadership starts and when a stop is requested
        if leader_election is not None:
            from keyqueue.leaderelection import LeaderElector, export_metrics

            if not isinstance(leader_election, LeaderElector):
                raise TypeError(f"leader_election must be a keyqueue.leaderelection.LeaderElector, got "
                                f"{type(leader_election).__name__}: {leader_election!r:.80}")
            leader_election.add_listener(self._open_gate, self._open_gate)
            if registry is not None:
                export_metrics(leader_election, registry)

    @property
    def queue(self) -> RateLimitingQueue[T]:
        """The queue the workers take keys from (add keys to it)."""
        return self._queue  # type: ignore[no-any-return]

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker threads and return. Raises ``RuntimeError`` if the controller was started before."""
        with self._state:
            if self._started:
                raise RuntimeError(f"controller {self.name!r} was already started")
            self._started = True
            if self.metrics is not None:
                self.metrics.started(self.workers)
            for i in range(self.workers):
                t = threading.Thread(target=self._worker, name=f"{self.name}-worker-{i}", daemon=True)
                self._threads.append(t)
            self._alive = self.workers
        for t in self._threads:
            t.start()
        if self._elector is not None and not self._elector.started:
            self._elector.start()
            self._owns_elector = True

    def stop(self, timeout: float | None = 30.0) -> bool:
        """Stop: take no more keys, shut the queue down, wait for the reconciles in flight (at most ``timeout``
        seconds; ``None`` or ``math.inf``: forever).

        With ``drain=True`` the workers first reconcile every key still queued (within the same timeout); otherwise
        the backlog is dropped. Requeues made while stopping are dropped (the queue is shut down). Returns ``True``
        if every worker has exited, ``False`` if the timeout passed first (a worker still inside ``reconcile``
        cannot be interrupted; it exits when that call returns, and takes no further key). Idempotent; callable
        from any thread, and before :meth:`start` (it then only shuts the queue down).
        """
        t = check_timeout(timeout)
        deadline = None if t is None else time.monotonic() + t
        with self._state:
            self._stop_requested = True
            if not self.drain:
                self._dropping = True
            threads = list(self._threads)
        self._wake.set()
        self._open_gate()
        self._queue.shut_down()
        for th in threads:
            if th is threading.current_thread():
                continue  # stop() called from inside a reconcile: that worker exits when it returns
            th.join(None if deadline is None else os_wait(max(0.0, deadline - time.monotonic())))
        ok = not any(th.is_alive() and th is not threading.current_thread() for th in threads)
        if not ok:
            with self._state:
                self._dropping = True
        if self._elector is not None and self._owns_elector:
            self._elector.stop(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return ok

    def run(self, *, handle_signals: bool = True) -> bool:
        """Start (unless started), block until :meth:`stop` is called, the queue is shut down and empty, or —
        with ``handle_signals`` in the main thread — SIGINT/SIGTERM arrives; then stop (waiting at most
        ``stop_timeout``) and return what :meth:`stop` returned. The previous signal handlers are restored. With
        ``recover_panic=False``, a worker's unexpected exception stops the controller and is raised here."""
        watch = handle_signals and threading.current_thread() is threading.main_thread()
        signals: contextlib.AbstractContextManager[list[int]] = (
            recorded_signals(signal.SIGINT, signal.SIGTERM) if watch else contextlib.nullcontext([])
        )
        with signals as received:  # the handlers only record the signal (see keyqueue._signals)
            with self._state:
                started = self._started
            if not started:
                self.start()
            while not self._wake.wait(0.2 if watch else None):
                if received:
                    self.log.info("controller %s: %s received, stopping", self.name,
                                  signal.Signals(received[0]).name)
                    self._request_stop()
        ok = self.stop(self.stop_timeout)
        if self._failure is not None:
            raise self._failure  # recover_panic=False and a worker crashed: fail fast, in the caller
        return ok

    def _request_stop(self) -> None:
        # Set flags and wake run(); stop() itself runs in run().
        self._stop_requested = True
        if not self.drain:
            self._dropping = True
        self._wake.set()

    @property
    def stopping(self) -> bool:
        """True once a stop was requested."""
        return self._stop_requested

    def __enter__(self) -> Controller[T]:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(self.stop_timeout)
        if exc is None and self._failure is not None:
            raise self._failure  # recover_panic=False and a worker crashed

    # -- workers ------------------------------------------------------------------------------------------------

    def _get(self) -> tuple[T, int]:
        q = self._queue
        if self._priority:
            return q.get_with_priority()  # type: ignore[no-any-return]
        return q.get(), 0

    def _open_gate(self) -> None:
        with self._gate:
            self._gate.notify_all()

    def _await_leading(self) -> bool:
        """Block until the elector leads (True) or a stop is requested while it does not (False)."""
        elector = self._elector
        assert elector is not None
        with self._gate:
            while not elector.is_leader():
                if self._stop_requested:
                    return False
                # Woken when a term starts; the timeout also covers a renewal that returned after the deadline
                # had passed (leadership continues without a new start event).
                self._gate.wait(elector.config.retry_period)
        return True

    def _worker(self) -> None:
        elector = self._elector
        failures = 0  # consecutive failed gets
        try:
            while not self._dropping:
                if elector is not None and not self._await_leading():
                    return
                try:
                    key, priority = self._get()
                except ShutDown:
                    return
                except Exception as exc:  # a worker survives anything a key does
                    failures += 1
                    pause = self._get_failed(exc, failures)
                    if pause:
                        self._wake.wait(pause)
                    continue
                failures = 0
                if self._dropping:
                    self._done(key)  # stopping without drain: the key is dropped
                    return
                if elector is not None and not elector.is_leader():
                    self._hand_back(key, priority)
                    continue
                self._process(key, priority)
        finally:
            with self._state:
                self._alive -= 1
                last = self._alive == 0
            if last:
                self._wake.set()

    def process_next(self, timeout: float | None = None) -> bool:
        """Take one key from the queue and reconcile it in the calling thread, exactly as a worker does. Returns
        ``False`` if the queue is shut down and empty; raises ``TimeoutError`` if no key is ready within
        ``timeout`` seconds (``None``: wait), and, with ``recover_panic=False``, reconcile's unexpected exception.
        For tests and hand-driven loops."""
        q = self._queue
        try:
            if self._priority:
                key, priority = q.get_with_priority(timeout)
            else:
                key, priority = q.get(timeout), 0
        except ShutDown:
            return False
        self._process(key, priority)
        return True

    def _process(self, key: T, priority: int) -> None:
        m = self.metrics
        if m is not None:
            m.worker_active(1)
        t0 = time.perf_counter_ns()
        try:
            result: object = None
            error: BaseException | None = None
            try:
                result = self._reconcile(key)
            except BaseException as exc:  # a worker thread survives anything reconcile raises (recover_panic)
                error = exc
            if error is None:
                error = self._bad_result(result)
            if error is not None and self._crash(key, error):
                raise error  # recover_panic=False: done(key) below, then the worker ends
            self._settle(key, priority, result, error, time.perf_counter_ns() - t0)
            del error  # no reference cycle through the traceback
        finally:
            self._done(key)
            if m is not None:
                m.worker_active(-1)
