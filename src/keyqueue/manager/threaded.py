"""The Manager for threads: :class:`Manager` (also ``keyqueue.Manager``)."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from keyqueue._signals import recorded_signals
from keyqueue.controller import Controller
from keyqueue.informer import Informer
from keyqueue.leaderelection import ElectionConfig, LeaderElector
from keyqueue.manager.base import CACHE_SYNC_TIMEOUT, ManagerBase, is_coroutine_function
from keyqueue.manager.resources import Resource, list_func

__all__ = ["Manager"]


class Manager(ManagerBase[Informer, "Controller[str]", LeaderElector]):
    """Many controllers, one shared informer per resource, one leader election, metrics and probes: the shape of
    controller-runtime's manager, for threads (:class:`keyqueue.aio.Manager` for asyncio).

    * ``api_client`` — a ``kubernetes.client.ApiClient``; every request (discovery, lists, watches, the Lease)
      goes through it.
    * ``namespace`` — watch namespaced resources in this namespace only (``None``: all namespaces); cluster-scoped
      resources are watched cluster-wide. The Lease lives here too (``default`` when ``None``).
    * ``leader_election`` — a Lease name (``str``: an elector with client-go's timings 15/10/2 s, identity
      ``<hostname>_<uuid>``, releasing the Lease at stop), an :class:`~keyqueue.leaderelection.ElectionConfig`, or
      a :class:`~keyqueue.leaderelection.LeaderElector` of your own (its callbacks are kept). Controllers reconcile
      only while it leads; informers and queues run in every replica, so a standby's caches and backlog are warm.
      When leadership is lost the controllers take no new key (each worker hands a key it takes back to its queue)
      and finish the reconciles in flight; the manager keeps running and campaigns again. See the guide for why
      this differs from controller-runtime (which exits the process) and how to get its behaviour.
    * ``metrics_port`` — serve ``/metrics`` (all interfaces; ``0`` picks a free port, see :attr:`metrics_port`):
      controller-runtime's ``controller_runtime_*``, client-go's ``workqueue_*`` (with the ``priority`` label on
      the depth), ``leader_election_master_status`` and the process metrics, all in :attr:`registry`.
    * ``health_port`` — serve ``/healthz`` (200 while the manager runs) and ``/readyz`` (200 when every cache has
      synced and the elector campaigns or leads; 503 with the reasons otherwise).
    * ``stop_timeout`` — seconds :meth:`stop` waits for the reconciles in flight (controller-runtime's graceful
      shutdown timeout, 30 s).
    * ``logger`` — a :class:`logging.Logger` (default ``keyqueue.manager``), also given to the controllers.

    Resources are named ``"group/version/plural"`` (``"v1/configmaps"``, ``"apps/v1/deployments"``) and resolved
    through discovery; see :meth:`add_controller` for ``for_``, ``owns``, ``watches`` and ``predicates``.

    Lifecycle: :meth:`start` (probes and metrics, then informers until their caches sync, then the elector, then the
    controllers), :meth:`stop`, ``with mgr:``, or :meth:`run` (blocks until SIGINT/SIGTERM). A manager runs once.
    Raises ``TypeError``/``ValueError`` for bad arguments, before any request.
    """

    _elector_class = LeaderElector

    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str | None = None,
        leader_election: str | LeaderElector | ElectionConfig | None = None,
        metrics_port: int | None = None,
        health_port: int | None = None,
        stop_timeout: float = 30.0,
        logger: logging.Logger | None = None,
    ) -> None:
        super().__init__(api_client, namespace=namespace, leader_election=leader_election, metrics_port=metrics_port,
                         health_port=health_port, stop_timeout=stop_timeout, logger=logger)
        self._stop_event = threading.Event()

    # -- shell hooks --------------------------------------------------------------------------------------------------

    def _new_informer(self, resource: Resource, namespace: str | None) -> Informer:
        name = resource.name if namespace is None else f"{resource.name}/{namespace}"
        return Informer(list_func(self.api_client, resource, namespace), name=name)

    def _start_informer(self, informer: Informer) -> None:
        informer.start()

    def _check_reconcile(self, reconcile: Callable[..., Any]) -> None:
        if is_coroutine_function(reconcile):
            raise TypeError(f"reconcile is a coroutine function ({reconcile!r:.80}); a thread cannot await it: use "
                            "keyqueue.aio.Manager")

    def _new_controller(self, reconcile: Callable[..., Any], name: str, workers: int, queue: Any) -> Controller[str]:
        return Controller(reconcile, queue, name=name, workers=workers, stop_timeout=self.stop_timeout,
                          metrics_provider=self._queue_metrics, registry=self.registry, logger=self.log,
                          leader_election=self.elector)

    def _start_controller(self, controller: Controller[str]) -> None:
        controller.start()

    def _elector_running(self) -> bool:
        elector = self.elector
        return elector is not None and elector.started and not elector._stop_requested

    # -- lifecycle ----------------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start everything and return once the controllers run: the probe and metrics servers, every informer
        (blocking until their caches have synced, at most 120 s), the elector, then the controllers (which
        reconcile only while leading, with leader election). Raises ``RuntimeError`` if the manager was started
        before, ``TimeoutError`` if a cache did not sync in time, ``OSError`` if a port cannot be bound; the
        manager is stopped again in those cases."""
        with self._lock:
            if self._started:
                raise RuntimeError("the manager was already started (a manager runs once)")
            self._started = True
        try:
            self._start_servers()
            for informer in self._informer_list():
                informer.start()
            deadline = time.monotonic() + CACHE_SYNC_TIMEOUT
            for informer in self._informer_list():
                if not informer.wait_for_cache_sync(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"the cache of {informer.name} did not sync within {CACHE_SYNC_TIMEOUT} s")
            if self.elector is not None and not self.elector.started:
                self.elector.start()
            for controller in self.controllers().values():
                controller.start()
        except BaseException:
            self.stop(0)
            raise
        self.log.info("manager: started (%d informers, %d controllers)", len(self._informer_list()),
                      len(self.controllers()))

    def stop(self, timeout: float | None = None) -> bool:
        """Stop everything: the controllers (no new key; reconciles in flight finish, at most ``timeout`` seconds,
        default ``stop_timeout``; the backlog is dropped), then the elector (releasing the Lease it holds), the
        informers and the servers. Returns ``True`` if every controller's workers ended in time. Idempotent;
        callable from any thread but not from a reconcile or a handler of this manager."""
        t = self.stop_timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        with self._lock:
            if self._stopped:
                return True
            self._stopped = True
        self._stop_event.set()
        ok = True
        for controller in self.controllers().values():
            ok = controller.stop(max(0.0, deadline - time.monotonic())) and ok
        if self.elector is not None:
            # The Lease is released only now: no reconcile of this replica runs any more (or the timeout passed).
            self.elector.stop(max(1.0, deadline - time.monotonic()))
        for informer in self._informer_list():
            informer.stop(max(1.0, deadline - time.monotonic()))
        self._stop_servers()
        self.log.info("manager: stopped")
        return ok

    def run(self) -> None:
        """Start (unless started), block until SIGINT or SIGTERM (when called in the main thread) or :meth:`stop`
        from another thread, then stop (see :meth:`stop`). The previous signal handlers are restored."""
        watch = threading.current_thread() is threading.main_thread()
        signals: contextlib.AbstractContextManager[list[int]] = (
            recorded_signals(signal.SIGINT, signal.SIGTERM) if watch else contextlib.nullcontext([])
        )
        with signals as received:  # the handlers only record the signal (see keyqueue._signals)
            with self._lock:
                started = self._started
            if not started:
                self.start()
            while not self._stop_event.wait(0.2 if watch else None):
                if received:
                    self.log.info("manager: %s received, stopping", signal.Signals(received[0]).name)
                    break
        self.stop()

    def __enter__(self) -> Manager:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
