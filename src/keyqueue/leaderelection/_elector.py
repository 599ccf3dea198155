"""What the threading and the asyncio elector share: arguments, one attempt, release, callbacks, queries."""

from __future__ import annotations

import functools
import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from keyqueue.clock import Clock, RealClock
from keyqueue.leaderelection._client import LeaseAPIError, LeaseClient, LeaseConflict
from keyqueue.leaderelection._core import NEW_LEADER, STARTED, STOPPED, ElectionConfig, ElectorCore, Event

__all__ = ["ElectorBase"]

log = logging.getLogger("keyqueue.leaderelection")


def _check_callback(arg: str, fn: object) -> Any:
    if fn is not None and not callable(fn):
        raise TypeError(f"{arg} must be callable or None, got {type(fn).__name__}: {fn!r:.80}")
    return fn


class ElectorBase:
    """Construction (the public signature of both electors, with client-go's controller defaults), :meth:`is_leader`,
    :meth:`leader` and the blocking attempt/release steps. Not public."""

    def __init__(
        self,
        api_client: Any,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        release_on_cancel: bool = True,
        on_started_leading: Callable[[], Any] | None = None,
        on_stopped_leading: Callable[[], Any] | None = None,
        on_new_leader: Callable[[str], Any] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = ElectionConfig.check(
            name=name, namespace=namespace, identity=identity, lease_duration=lease_duration,
            renew_deadline=renew_deadline, retry_period=retry_period, release_on_cancel=release_on_cancel,
        )
        if api_client is None:
            raise TypeError("api_client must be a kubernetes.client.ApiClient, got None")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must be a keyqueue.Clock or None, got {type(clock).__name__}: {clock!r:.80}")
        self._on_started = _check_callback("on_started_leading", on_started_leading)
        self._on_stopped = _check_callback("on_stopped_leading", on_stopped_leading)
        self._on_new_leader = _check_callback("on_new_leader", on_new_leader)
        self.clock: Clock = clock if clock is not None else RealClock()
        self.name = self.config.name
        self.identity = self.config.identity
        self._client = api_client if isinstance(api_client, LeaseClient) else \
            LeaseClient(api_client, self.config.name, self.config.namespace)
        self._core = ElectorCore(self.config)
        self._lock = threading.Lock()  # guards the core: attempts may run in a worker thread (asyncio shell)
        self._listeners: list[tuple[Callable[[], Any], Callable[[], Any]]] = []
        self._random = random.Random()
        self._init_shell()

    def _init_shell(self) -> None:
        """What the threaded or asyncio elector adds to construction (called last by ``__init__``)."""

    # -- queries --------------------------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while this elector holds the Lease: its last successful acquire or renew started less than
        ``renew_deadline`` ago by its clock. Turns False at that deadline even before ``on_stopped_leading`` runs,
        so checking it right before acting never acts after another replica can have taken over."""
        with self._lock:
            return self._core.is_leader(self.clock.now_ns())

    def leader(self) -> str:
        """The identity of the current holder as of the last observation ('' if none seen or released)."""
        with self._lock:
            return self._core.leader()

    def add_listener(self, on_started_leading: Callable[[], Any], on_stopped_leading: Callable[[], Any]) -> None:
        """Also call these (after ``on_started_leading``, before ``on_stopped_leading`` of the constructor), in the
        elector's thread or task; used by :class:`keyqueue.Controller` to gate its workers. They must not block."""
        self._listeners.append((on_started_leading, on_stopped_leading))

    # -- blocking steps (the asyncio shell runs them in a worker thread) ----------------------------------------

    def _wall(self) -> float:
        """Wall-clock seconds for ``acquireTime``/``renewTime``; a fake clock's own seconds (as since the epoch)."""
        if isinstance(self.clock, RealClock):
            import time

            return time.time()
        return self.clock.now()

    def _attempt(self) -> list[Event]:
        """One ``tryAcquireOrRenew``: read, decide, write. Returns the events to dispatch. Never raises
        :class:`LeaseAPIError` (a failed request is a failed attempt)."""
        core, clock = self._core, self.clock
        started = clock.now_ns()
        with self._lock:
            events = core.check_deadline(started)
            timeout = core.request_timeout(started)
        try:
            lease = self._client.get(timeout)
            with self._lock:
                write, seen = core.plan(lease, started, self._wall())
                events += seen
                timeout = core.request_timeout(clock.now_ns())
            if write is None:
                with self._lock:
                    events += core.failed(clock.now_ns())
                return events
            written = self._client.create(write.body, timeout) if write.create else \
                self._client.update(write.body, timeout)
            with self._lock:
                events += core.wrote(written, started)
                events += core.check_deadline(clock.now_ns())  # a write that returned too late
        except LeaseConflict as exc:
            log.debug("elector %s: lost a race for the lease: %s", self.identity, exc)
            with self._lock:
                events += core.failed(clock.now_ns())
        except LeaseAPIError as exc:
            log.info("elector %s: lease request failed: %s", self.identity, exc)
            with self._lock:
                events += core.failed(clock.now_ns())
        return events

    def _next_wait(self) -> float:
        with self._lock:
            return self._core.wait_seconds(self.clock.now_ns(), self._random.random())

    def _check_deadline(self) -> list[Event]:
        with self._lock:
            return self._core.check_deadline(self.clock.now_ns())

    def _step_down(self) -> list[Event]:
        with self._lock:
            return self._core.step_down()

    def _release(self) -> bool:
        """Release the Lease if this elector holds it (as last observed). True if released."""
        with self._lock:
            write = self._core.release_write(self._wall())
        if write is None:
            return False
        try:
            written = self._client.update(write.body, self.config.renew_deadline)
        except LeaseAPIError as exc:
            log.info("elector %s: releasing the lease failed: %s", self.identity, exc)
            return False
        with self._lock:
            self._core.released(written, self.clock.now_ns())
        log.info("elector %s: released lease %s/%s", self.identity, self.config.namespace, self.config.name)
        return True

    def _callbacks(self, events: list[Event]) -> list[Callable[[], Any]]:
        """The calls for ``events``, in order (listeners before the user's stop callback, after its start)."""
        calls: list[Callable[[], Any]] = []
        for kind, identity in events:
            if kind == STARTED:
                log.info("elector %s: started leading %s/%s", self.identity, self.config.namespace, self.name)
                if self._on_started is not None:
                    calls.append(self._on_started)
                calls.extend(started for started, _ in self._listeners)
            elif kind == STOPPED:
                log.info("elector %s: stopped leading %s/%s", self.identity, self.config.namespace, self.name)
                calls.extend(stopped for _, stopped in self._listeners)
                if self._on_stopped is not None:
                    calls.append(self._on_stopped)
            elif kind == NEW_LEADER and self._on_new_leader is not None:
                calls.append(functools.partial(self._on_new_leader, identity))
        return calls
