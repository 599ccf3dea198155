"""Leader election on ``coordination.k8s.io/v1`` Leases (client-go's ``leaderelection``), for threads.

:class:`LeaderElector` campaigns for one Lease with the official ``kubernetes`` client and calls back when it
starts or stops leading; :mod:`keyqueue.leaderelection.aio` has the same for asyncio. Both share one I/O-free
decision core (:mod:`keyqueue.leaderelection._core`, whose docstring states the algorithm).

Timing (``lease_duration > renew_deadline > retry_period`` is required):

* not leading: an attempt every ``retry_period``, shortened by up to 20 % at random (standbys do not retry in
  lockstep, and a released Lease is taken within ``retry_period``);
* leading: a renew every ``retry_period``; leadership ends ``renew_deadline`` after the start of the last
  successful attempt unless renewed: ``is_leader()`` turns False then, and ``on_stopped_leading`` runs as soon as
  the elector's loop sees it (each request's timeout is the time left, so a hung request does not delay it much);
  other replicas take the Lease only ``lease_duration`` after they last saw it change;
* a replica that lost the Lease (e.g. the API server was unreachable) goes back to campaigning: it leads again
  when it wins again. client-go's ``Run`` returns instead; a program that wants that calls :meth:`stop` in
  ``on_stopped_leading``.

Differences from client-go, on purpose: the jitter only shortens waits (client-go lengthens acquire waits by up to
120 %); a leader's deadline is anchored at the start of its last successful attempt; ``on_new_leader`` is not
called for a released Lease (holder ``""``).
"""

from __future__ import annotations

import threading

from keyqueue.leaderelection._client import LeaseAPIError, LeaseClient, LeaseConflict
from keyqueue.leaderelection._core import ElectionConfig, ElectorCore, LeaseRecord, format_micro_time
from keyqueue.leaderelection._elector import ElectorBase, log
from keyqueue.leaderelection._metrics import export_metrics
from keyqueue.leaderelection._overlap import Interval, find_overlaps

__all__ = [
    "ElectionConfig",
    "ElectorCore",
    "Interval",
    "LeaderElector",
    "LeaseAPIError",
    "LeaseClient",
    "LeaseConflict",
    "LeaseRecord",
    "export_metrics",
    "find_overlaps",
    "format_micro_time",
]


class LeaderElector(ElectorBase):
    """Campaign for the Lease ``namespace/name`` as ``identity``, in a thread (:meth:`start`) or the caller's
    (:meth:`run`).

    * ``api_client`` — a ``kubernetes.client.ApiClient`` for the cluster (requests go through
      ``CoordinationV1Api``), or a :class:`LeaseClient` (a subclass can put the Lease elsewhere, as the tests do).
    * ``lease_duration`` (15 s), ``renew_deadline`` (10 s), ``retry_period`` (2 s) — seconds, client-go's
      defaults; ``lease_duration > renew_deadline > retry_period > 0`` or ``ValueError`` naming the argument.
      ``leaseDurationSeconds`` is written rounded up to whole seconds.
    * ``release_on_cancel`` — on :meth:`stop`, release a held Lease (``holderIdentity=""``) so a standby takes
      over at its next attempt instead of waiting ``lease_duration``.
    * ``on_started_leading()``, ``on_stopped_leading()``, ``on_new_leader(identity)`` — called in the elector's
      thread, in that order of events; they must return quickly (a slow callback delays the renewals). A callback
      that raises is logged; the election goes on. ``on_stopped_leading`` runs when leadership is lost and at
      stop (before the release).
    * ``clock`` — a :class:`keyqueue.Clock` (default real). With a :class:`keyqueue.FakeClock` all waits follow
      it, and ``acquireTime``/``renewTime`` are its seconds taken as seconds since the epoch.

    Raises ``TypeError`` for arguments of the wrong type and ``ValueError`` for an empty identity/name/namespace
    or bad durations, before any request is made.
    """

    def _init_shell(self) -> None:
        self._cond = threading.Condition()
        self._stop_requested = False
        self._running = False
        self._thread: threading.Thread | None = None
        self.clock.subscribe(self._on_clock_jump)

    def _on_clock_jump(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def run(self) -> None:
        """Campaign and lead until :meth:`stop`; blocks. At the end: stop leading (``on_stopped_leading`` if it
        was leading), then release the Lease if ``release_on_cancel``. Raises ``RuntimeError`` if this elector is
        already running or was stopped."""
        with self._cond:
            if self._running or self._stop_requested:
                raise RuntimeError(f"elector {self.identity!r} is already running or was stopped")
            self._running = True
        try:
            while not self._stop_requested:
                self._dispatch(self._attempt())
                self._sleep(self._next_wait())
                self._dispatch(self._check_deadline())
        finally:
            self._dispatch(self._step_down())
            if self.config.release_on_cancel:
                self._release()
            self._client.close()
            with self._cond:
                self._running = False
                self._cond.notify_all()

    @property
    def started(self) -> bool:
        """True once :meth:`start` or :meth:`run` was called."""
        with self._cond:
            return self._thread is not None or self._running or self._stop_requested

    def start(self) -> threading.Thread:
        """Run :meth:`run` in a daemon thread and return it."""
        t = threading.Thread(target=self.run, name=f"leaderelection {self.identity}", daemon=True)
        with self._cond:
            if self._thread is not None:
                raise RuntimeError(f"elector {self.identity!r} was already started")
            self._thread = t
        t.start()
        return t

    def stop(self, timeout: float | None = None) -> bool:
        """Ask :meth:`run` to end (stop leading, release) and wait for its thread up to ``timeout`` seconds
        (``None``: until it ended; a request in flight ends within its timeout). Returns True if it ended.
        Idempotent; callable from a callback (it then does not wait)."""
        with self._cond:
            self._stop_requested = True
            self._cond.notify_all()
            t = self._thread
        if t is None or t is threading.current_thread():
            return True
        t.join(timeout)
        return not t.is_alive()

    def _sleep(self, seconds: float) -> None:
        clock = self.clock
        target = clock.now_ns() + round(seconds * 1e9)
        with self._cond:
            while not self._stop_requested and clock.now_ns() < target:
                self._cond.wait(clock.real_wait(target))

    def _dispatch(self, events: list[tuple[str, str]]) -> None:
        for call in self._callbacks(events):
            try:
                call()
            except Exception:
                log.exception("elector %s: a leader election callback raised", self.identity)
