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
:class:`keyqueue.aio.Controller`) the controller starts and stops the elector with itself, and its workers
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
import weakref
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, TypeVar, cast

from keyqueue._core import check_delay, check_timeout
from keyqueue._priority_core import check_priority
from keyqueue._signals import recorded_signals
from keyqueue.clock import Clock
from keyqueue.errors import KeyMutatedError, ShutDown
from keyqueue.priority import PriorityAdds, PriorityQueue
from keyqueue.ratelimit import default_controller_rate_limiter
from keyqueue.threaded import RateLimitingQueue, os_wait

if TYPE_CHECKING:
    import logging

    from keyqueue.leaderelection import LeaderElector

__all__ = [
    "RECONCILE_TIME_BUCKETS",
    "Controller",
    "ControllerMetrics",
    "ReconcileError",
    "Result",
    "TerminalError",
    "is_terminal",
]

T = TypeVar("T", bound=Hashable)

#: ``controller_runtime_reconcile_time_seconds`` bucket bounds (controller-runtime's).
RECONCILE_TIME_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05,
    0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
    0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0,
    2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    6.0, 7.0, 8.0, 9.0, 10.0,
    15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
)  # fmt: skip

_RESULTS: Final = ("error", "requeue_after", "requeue", "success")


class ReconcileError(Exception):
    """An expected reconcile failure (Go's returned ``error``): the key is requeued with backoff and the error is
    logged without a traceback. Any other exception is treated the same way but counted as a panic and logged
    with its traceback.

    ``ReconcileError(*args, priority=p)``: on a priority queue the retry is added at priority ``p`` (an ``int``)
    instead of the priority the key was handed out at (controller-runtime's ``Result.Priority`` returned with an
    error). Raises ``TypeError`` for a non-int priority.
    """

    def __init__(self, *args: object, priority: int | None = None) -> None:
        super().__init__(*args)
        if priority is not None:
            check_priority(priority)
        #: The priority of the retry on a priority queue (``None``: the priority the key was handed out at).
        self.priority = priority


class TerminalError(ReconcileError):
    """A failure that retrying cannot fix: the key is **not** requeued and its backoff is **not** reset.

    ``raise TerminalError("bad spec")``, or wrap another error: ``raise TerminalError(...) from exc``, or raise
    any exception ``from`` a :class:`TerminalError` (see :func:`is_terminal`).
    """


def is_terminal(exc: BaseException) -> bool:
    """True if ``exc`` or an exception in its explicit ``__cause__`` chain (``raise X from Y``) is a
    :class:`TerminalError` (Go's ``errors.Is(err, TerminalError(nil))``)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, TerminalError):
            return True
        seen.add(id(cur))
        cur = cur.__cause__
    return False


@dataclass(frozen=True, slots=True)
class Result:
    """What a reconcile asks for. ``Result()`` (or returning ``None``) is a success.

    ``requeue_after``: seconds (> 0) after which the key is reconciled again (its backoff is reset first);
    0 means no requeue. ``requeue=True`` (controller-runtime's deprecated ``Requeue``, still widely used): when
    ``requeue_after`` is 0, requeue the key with the rate limiter's backoff, like an error but without logging one
    and without resetting the backoff (``reconcile_total{result="requeue"}``). ``priority``: on a priority queue,
    the priority of that requeue (default: the priority the key was handed out at). Raises
    ``TypeError``/``ValueError`` for a non-number, negative, NaN or too large delay, a non-bool ``requeue`` or a
    non-int priority.
    """

    requeue_after: float = 0.0
    priority: int | None = None
    requeue: bool = False

    def __post_init__(self) -> None:
        d = check_delay(self.requeue_after, "requeue_after")
        if not d >= 0:
            raise ValueError(f"requeue_after must be >= 0 seconds, got {self.requeue_after!r}")
        if not isinstance(self.requeue, bool):
            raise TypeError(f"requeue must be a bool, got {type(self.requeue).__name__}: {self.requeue!r:.80}")
        if self.priority is not None:
            check_priority(self.priority)


# -- metrics ------------------------------------------------------------------------------------------------------


class ControllerMetrics:
    """controller-runtime's controller metrics for one controller name, counted in plain ints under a lock and
    exported by a collector registered once per ``prometheus_client`` registry. Thread-safe."""

    __slots__ = (
        "_lock",
        "active_workers",
        "errors",
        "max_concurrent",
        "name",
        "panics",
        "terminal_errors",
        "time_buckets",
        "time_count",
        "time_sum",
        "totals",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self.totals = dict.fromkeys(_RESULTS, 0)
        self.errors = 0
        self.terminal_errors = 0
        self.panics = 0
        self.time_buckets = [0] * len(RECONCILE_TIME_BUCKETS)  # per bucket, not cumulative
        self.time_count = 0
        self.time_sum = 0.0
        self.active_workers = 0
        self.max_concurrent = 0

    def started(self, workers: int) -> None:
        with self._lock:
            self.max_concurrent = workers

    def worker_active(self, delta: int) -> None:
        with self._lock:
            self.active_workers += delta

    def panicked(self) -> None:
        """An unexpected exception that is not recovered (``recover_panic=False``): only the panic counter moves."""
        with self._lock:
            self.panics += 1

    def reconciled(self, result: str, seconds: float, error: bool, terminal: bool, panic: bool) -> None:
        with self._lock:
            self.totals[result] += 1
            if error:
                self.errors += 1
            if terminal:
                self.terminal_errors += 1
            if panic:
                self.panics += 1
            self.time_count += 1
            self.time_sum += seconds
            for i, bound in enumerate(RECONCILE_TIME_BUCKETS):
                if seconds <= bound:
                    self.time_buckets[i] += 1
                    break

    def read(self) -> dict[str, Any]:
        """A consistent copy of every value (histogram buckets cumulative, as exported)."""
        with self._lock:
            cumulative: list[int] = []
            running = 0
            for n in self.time_buckets:
                running += n
                cumulative.append(running)
            return {
                "totals": dict(self.totals),
                "errors": self.errors,
                "terminal_errors": self.terminal_errors,
                "panics": self.panics,
                "time_buckets": cumulative,
                "time_count": self.time_count,
                "time_sum": self.time_sum,
                "active_workers": self.active_workers,
                "max_concurrent": self.max_concurrent,
            }


class _Collector:
    """The ``prometheus_client`` collector of every controller registered in one registry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, ControllerMetrics] = {}

    def metrics_for(self, name: str) -> ControllerMetrics:
        # Controllers with the same name in one registry share one set of series (counters add up).
        with self._lock:
            m = self._by_name.get(name)
            if m is None:
                m = self._by_name[name] = ControllerMetrics(name)
            return m

    def describe(self) -> list[Any]:
        return []  # unchecked collector: the registry does not validate names up front

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        with self._lock:
            controllers = list(self._by_name.values())
        total = CounterMetricFamily(
            "controller_runtime_reconcile", "Total number of reconciliations per controller",
            labels=["controller", "result"],
        )
        errors = CounterMetricFamily(
            "controller_runtime_reconcile_errors", "Total number of reconciliation errors per controller",
            labels=["controller"],
        )
        terminal = CounterMetricFamily(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller", labels=["controller"],
        )
        panics = CounterMetricFamily(
            "controller_runtime_reconcile_panics", "Total number of reconciliation panics per controller",
            labels=["controller"],
        )
        hist = HistogramMetricFamily(
            "controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller",
            labels=["controller"],
        )
        active = GaugeMetricFamily(
            "controller_runtime_active_workers", "Number of currently used workers per controller",
            labels=["controller"],
        )
        maxc = GaugeMetricFamily(
            "controller_runtime_max_concurrent_reconciles", "Maximum number of concurrent reconciles per controller",
            labels=["controller"],
        )
        for m in controllers:
            v = m.read()
            for result, n in v["totals"].items():
                total.add_metric([m.name, result], n)
            errors.add_metric([m.name], v["errors"])
            terminal.add_metric([m.name], v["terminal_errors"])
            panics.add_metric([m.name], v["panics"])
            # `le` as Go writes it ("1", not "1.0")
            buckets = [(f"{b:g}", c) for b, c in zip(RECONCILE_TIME_BUCKETS, v["time_buckets"], strict=True)]
            buckets.append(("+Inf", v["time_count"]))
            hist.add_metric([m.name], buckets, v["time_sum"])
            active.add_metric([m.name], v["active_workers"])
            maxc.add_metric([m.name], v["max_concurrent"])
        yield from (total, errors, terminal, panics, hist, active, maxc)


_collectors_lock = threading.Lock()
_collectors: weakref.WeakKeyDictionary[Any, _Collector] = weakref.WeakKeyDictionary()


def metrics_for(registry: Any, name: str) -> ControllerMetrics:
    """The :class:`ControllerMetrics` of controller ``name`` in ``registry`` (registering the collector on first
    use of that registry). Needs ``prometheus_client`` (the ``metrics`` extra)."""
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = _collectors[registry] = _Collector()
            registry.register(collector)
    return collector.metrics_for(name)


# -- the loop shared by both shells -------------------------------------------------------------------------------


class ControllerBase(Generic[T]):
    """What the threading and asyncio controllers share: the outcome table and the metrics. Not public."""

    _queue: Any
    # Each shell's queue classes: the default queue is built from these, and a given queue must be one.
    _priority_queue_class: ClassVar[type[Any]]
    _rate_limiting_queue_class: ClassVar[type[Any]]

    def __init__(
        self,
        reconcile: Callable[..., Any],
        queue: Any,
        *,
        name: str | None,
        workers: int,
        drain: bool,
        stop_timeout: float | None,
        use_priority_queue: bool,
        clock: Clock | None,
        metrics_provider: Any,
        registry: Any,
        logger: logging.Logger | None,
        recover_panic: bool = True,
    ) -> None:
        if not callable(reconcile):
            raise TypeError(f"reconcile must be callable, got {type(reconcile).__name__}: {reconcile!r:.80}")
        if name is None:
            name = getattr(reconcile, "__name__", "") or "controller"
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {type(name).__name__}: {name!r:.80}")
        if not isinstance(workers, int) or isinstance(workers, bool):
            raise TypeError(f"workers must be an int, got {type(workers).__name__}: {workers!r:.80}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers!r}")
        stop_timeout = check_timeout(stop_timeout, "stop_timeout")
        if not isinstance(recover_panic, bool):
            raise TypeError(f"recover_panic must be a bool, got {type(recover_panic).__name__}: {recover_panic!r:.80}")
        rlq = self._rate_limiting_queue_class
        if queue is None:
            if use_priority_queue:
                queue = self._priority_queue_class(name=name, clock=clock, metrics_provider=metrics_provider)
            else:
                queue = rlq(
                    default_controller_rate_limiter(clock=clock),
                    name=name, clock=clock, metrics_provider=metrics_provider,
                )
        elif not isinstance(queue, rlq):
            raise TypeError(
                f"queue must be a {rlq.__module__}.RateLimitingQueue or {rlq.__module__}.PriorityQueue, got "
                f"{type(queue).__name__}: {queue!r:.80}"
            )
        self._queue = queue
        self._reconcile = reconcile
        self.name = name
        self.workers = workers
        self.drain = bool(drain)
        self.stop_timeout = stop_timeout
        if logger is None:
            import logging

            logger = logging.getLogger("keyqueue.controller")
        self.log = logger
        self.metrics: ControllerMetrics | None = metrics_for(registry, name) if registry is not None else None
        self._priority = isinstance(self._queue, PriorityAdds)
        self.recover_panic = recover_panic
        self._failure: BaseException | None = None

    @property
    def failure(self) -> BaseException | None:
        """With ``recover_panic=False``: the first unexpected exception that ended a worker (and stopped the
        controller), else ``None``."""
        return self._failure

    def _crash(self, key: T, exc: BaseException) -> bool:
        """Decide whether ``exc`` from reconcile (or its bad return value) ends the worker instead of being settled:
        only with ``recover_panic=False``, for an exception that is not a :class:`ReconcileError`. Then it is
        counted as a panic, the controller is asked to stop, and True is returned (the caller re-raises it)."""
        if self.recover_panic or isinstance(exc, ReconcileError) or is_terminal(exc):
            return False
        if self.metrics is not None:
            self.metrics.panicked()
        if self._failure is None:
            self._failure = exc
        self.log.critical("controller %s: reconcile of %r raised %r; recover_panic=False: stopping the controller",
                          self.name, key, exc)
        self._request_stop()
        return True

    def _request_stop(self) -> None:
        raise NotImplementedError

    def _get_failed(self, exc: Exception, failures: int) -> float:
        """A worker's ``get`` raised something else than ``ShutDown`` (a key mutated in the queue, a key's own
        ``__eq__`` raising), for the ``failures``-th time in a row: log it and return how long the worker pauses
        (woken early by a stop) before it goes on with the next key. No pause after a single failure; after
        consecutive ones (a key whose hand-out keeps failing while it is the only one ready: the queue puts it
        back each time) 5 ms, doubling up to 1 s, so that the worker neither spins nor floods the log."""
        self.log.error("controller %s: taking a key from the queue failed: %s", self.name, exc,
                       exc_info=None if isinstance(exc, KeyMutatedError) else exc)
        return 0.0 if failures < 2 else min(0.005 * 2.0 ** (failures - 2), 1.0)

    def _done(self, key: T) -> None:
        """``queue.done(key)`` for a worker, which must survive whatever the key does (a mutated key raises
        :class:`~keyqueue.KeyMutatedError` here)."""
        try:
            self._queue.done(key)
        except Exception as exc:
            self.log.error("controller %s: done(%r) failed: %s", self.name, key, exc,
                           exc_info=None if isinstance(exc, KeyMutatedError) else exc)

    @staticmethod
    def _bad_result(result: object) -> TypeError | None:
        if result is None or isinstance(result, Result):
            return None
        return TypeError(f"reconcile must return None or a Result, got {type(result).__name__}: {result!r:.80}")

    def _hand_back(self, key: T, priority: int) -> None:
        """A key taken while not leading goes back to the queue (at its priority) for the next term."""
        if self._priority:
            self._queue.add(key, priority=priority)
        else:
            self._queue.add(key)
        self._done(key)

    def _settle(self, key: T, priority: int, result: object, exc: BaseException | None, elapsed_ns: int) -> None:
        """Apply one reconcile's outcome to the queue (everything but ``done``) and record it. Never raises."""
        q = self._queue
        m = self.metrics
        try:
            if exc is None:
                exc = self._bad_result(result)
            if exc is not None:
                terminal = is_terminal(exc)
                panic = not terminal and not isinstance(exc, ReconcileError)
                if m is not None:
                    m.reconciled("error", elapsed_ns / 1e9, True, terminal, panic)
                if terminal:
                    self.log.error(
                        "controller %s: reconcile of %r failed with a terminal error (not requeued): %s",
                        self.name, key, exc,
                    )
                    return
                if self._priority:
                    chosen = exc.priority if isinstance(exc, ReconcileError) else None
                    q.add_rate_limited(key, priority=priority if chosen is None else chosen)
                else:
                    q.add_rate_limited(key)
                self.log.error(
                    "controller %s: reconcile of %r failed (attempt %d), requeued with backoff: %s",
                    self.name, key, q.num_requeues(key), exc, exc_info=exc if panic else None,
                )
                return
            res = cast(Result | None, result)  # checked above
            p = res.priority if res is not None and res.priority is not None else priority
            if res is not None and res.requeue_after > 0:
                q.forget(key)
                if self._priority:
                    q.add_after(key, res.requeue_after, priority=p)
                else:
                    q.add_after(key, res.requeue_after)
                outcome = "requeue_after"
            elif res is not None and res.requeue:
                # controller-runtime's Requeue: a rate-limited requeue that keeps the backoff (no forget).
                if self._priority:
                    q.add_rate_limited(key, priority=p)
                else:
                    q.add_rate_limited(key)
                outcome = "requeue"
            else:
                q.forget(key)
                outcome = "success"
            if m is not None:
                m.reconciled(outcome, elapsed_ns / 1e9, False, False, False)
        except Exception:
            # A failing limiter or logging handler must not end the worker either.
            self.log.exception("controller %s: handling the outcome of %r failed", self.name, key)


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
      the module docstring); :meth:`start` starts it unless it was started already, :meth:`stop` stops it.
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
        if self._elector is not None:
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
