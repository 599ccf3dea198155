"""The Manager for asyncio: :class:`Manager` (also ``keyqueue.aio.Manager``)."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from keyqueue.controller.aio import Controller
from keyqueue.informer.aio import Informer, Transport
from keyqueue.leaderelection import ElectionConfig
from keyqueue.leaderelection.aio import LeaderElector
from keyqueue.manager.base import CACHE_SYNC_TIMEOUT, ManagerBase
from keyqueue.manager.resources import Resource

__all__ = ["Manager"]


class Manager(ManagerBase[Informer, "Controller[str]", LeaderElector]):
    """:class:`keyqueue.Manager` for asyncio: the same arguments and semantics, on one event loop.

    * Informers are :class:`keyqueue.informer.aio.Informer`: one task each, requests made by ``aiohttp`` with the
      ``ApiClient``'s configuration (no thread per watch).
    * Controllers are :class:`keyqueue.aio.Controller`: ``reconcile`` is a coroutine function (a plain function
      returning ``None``/``Result`` also works, but it runs on the loop); handlers run on the loop.
    * ``leader_election`` takes a :class:`keyqueue.leaderelection.aio.LeaderElector` (or a Lease name or an
      :class:`~keyqueue.leaderelection.ElectionConfig`); its requests run in the loop's default executor.
    * :meth:`start`, :meth:`stop` and :meth:`run` are coroutines; ``async with mgr:``. The metrics and health
      endpoints are served from one small thread each, as for threads.

    Resolving a resource (:meth:`resolve`, :meth:`informer`, :meth:`cache`, :meth:`add_controller`) asks the
    server's discovery with the blocking official client, once per group-version: do it while setting up,
    before the loop is busy (later calls for a resolved resource do no I/O).
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
        self._transport = Transport(api_client)
        self._wake: asyncio.Event | None = None

    # -- shell hooks --------------------------------------------------------------------------------------------------

    def _new_informer(self, resource: Resource, namespace: str | None) -> Informer:
        name = resource.name if namespace is None else f"{resource.name}/{namespace}"
        return Informer(self._transport, resource.path(namespace), name=name)

    def _start_informer(self, informer: Informer) -> None:
        informer.start()

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

    async def start(self) -> None:
        """Start everything in the running loop and return once the controllers run: the probe and metrics
        servers, every informer (waiting until their caches have synced, at most 120 s), the elector, then the
        controllers. Raises ``RuntimeError`` if started before, ``TimeoutError`` if a cache did not sync in time,
        ``OSError`` if a port cannot be bound; the manager is stopped again in those cases."""
        with self._lock:
            if self._started:
                raise RuntimeError("the manager was already started (a manager runs once)")
            self._started = True
        if self._wake is None:
            self._wake = asyncio.Event()
        try:
            self._start_servers()
            informers = self._informer_list()
            for informer in informers:
                informer.start()
            for informer in informers:
                if not await informer.wait_for_cache_sync(CACHE_SYNC_TIMEOUT):
                    raise TimeoutError(f"the cache of {informer.name} did not sync within {CACHE_SYNC_TIMEOUT} s")
            if self.elector is not None and not self.elector.started:
                self.elector.start()
            for controller in self.controllers().values():
                controller.start()
        except BaseException:
            await self.stop(0)
            raise
        self.log.info("manager: started (%d informers, %d controllers)", len(self._informer_list()),
                      len(self.controllers()))

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop everything: the controllers (no new key; reconciles in flight finish, at most ``timeout``
        seconds, default ``stop_timeout``, then they are cancelled; the backlog is dropped), then the elector
        (releasing the Lease it holds), the informers, the HTTP session and the servers. Returns ``True`` if every
        controller's workers ended in time. Idempotent."""
        loop = asyncio.get_running_loop()
        t = self.stop_timeout if timeout is None else timeout
        deadline = loop.time() + t
        with self._lock:
            if self._stopped:
                return True
            self._stopped = True
        if self._wake is not None:
            self._wake.set()
        results = await asyncio.gather(*(c.stop(max(0.0, deadline - loop.time()))
                                         for c in self.controllers().values()))
        if self.elector is not None:
            # Released only now: no reconcile of this replica runs any more (they ended or were cancelled).
            await self.elector.stop(max(1.0, deadline - loop.time()))
        await asyncio.gather(*(inf.stop() for inf in self._informer_list()))
        await self._transport.close()
        self._stop_servers()
        self.log.info("manager: stopped")
        return all(results)

    async def run(self) -> None:
        """Start (unless started), wait until SIGINT or SIGTERM (``loop.add_signal_handler``, in the main thread)
        or :meth:`stop`, then stop. For ``asyncio.run(mgr.run())``."""
        loop = asyncio.get_running_loop()
        if self._wake is None:
            self._wake = asyncio.Event()
        installed: list[signal.Signals] = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                except (NotImplementedError, RuntimeError):
                    continue
                installed.append(sig)
        try:
            with self._lock:
                started = self._started
            if not started:
                await self.start()  # a signal while the caches sync is seen once start() returns
            await self._wake.wait()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
        await self.stop()

    def _on_signal(self, sig: signal.Signals) -> None:
        self.log.info("manager: %s received, stopping", sig.name)
        if self._wake is not None:
            self._wake.set()

    async def __aenter__(self) -> Manager:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
