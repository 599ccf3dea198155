"""What a reconcile returns or raises, and what the controllers do with it (both shells)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from keyqueue._core import check_delay, check_priority, check_timeout
from keyqueue._shell import PriorityAdds
from keyqueue.clock import Clock
from keyqueue.controller.metrics import ControllerMetrics, metrics_for
from keyqueue.ratelimit import default_controller_rate_limiter

if TYPE_CHECKING:
    import logging

__all__ = ["ControllerBase", "ReconcileError", "Result", "TerminalError", "is_terminal"]

T = TypeVar("T", bound=Hashable)


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
        """A worker's ``get`` raised something else than ``ShutDown`` (a key's own ``__eq__`` raising), for the
        ``failures``-th time in a row: log it and return how long the worker pauses
        (woken early by a stop) before it goes on with the next key. No pause after a single failure; after
        consecutive ones (a key whose hand-out keeps failing while it is the only one ready: the queue puts it
        back each time) 5 ms, doubling up to 1 s, so that the worker neither spins nor floods the log."""
        self.log.error("controller %s: taking a key from the queue failed: %s", self.name, exc, exc_info=exc)
        return 0.0 if failures < 2 else min(0.005 * 2.0 ** (failures - 2), 1.0)

    def _done(self, key: T) -> None:
        """``queue.done(key)`` for a worker, which must survive whatever the key does (its own ``__eq__`` may
        raise here)."""
        try:
            self._queue.done(key)
        except Exception as exc:
            self.log.error("controller %s: done(%r) failed: %s", self.name, key, exc, exc_info=exc)

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
