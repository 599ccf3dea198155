"""workqueue_* metrics for the Redis-backed queues (both shells): which provider, and the shared depth (no I/O of its
own; each shell passes the function that reads the depth).

What a handle exports under its queue's ``name`` (through a :class:`~keyqueue.metrics.SnapshotMetricsProvider` or
:class:`~keyqueue.metrics.PrometheusMetricsProvider`):

* counters and histograms — adds, retries, queue duration, work duration — count what **this handle** did (its
  adds that made a key dirty, including the delayed keys and run-out leases its scripts moved back; its accepted
  ``add_after``/``add_rate_limited``; its ``get``s, with the time the key waited measured by Redis; its ``done``s,
  on the handle's clock). They are per process, as Prometheus expects: sum them over the replicas in PromQL.
* ``workqueue_depth`` is the **shared** queue's: its dirty keys, read from Redis at scrape time in one round trip
  (the ``len`` script, which first fires due delayed keys as a ``get`` would). Several handles of one queue on one
  provider report it once.
* unfinished work and longest running come from the keys this handle holds now.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from keyqueue.clock import Clock
from keyqueue.metrics import NoopMetricsProvider, SnapshotMetricsProvider, _check_provider, get_provider
from keyqueue.metrics._recorders import LockLike, SharedQueueRecorder

__all__ = ["DepthShare", "recorder_for_redis"]

log = logging.getLogger("keyqueue.redis")


class DepthShare:
    """The depth of one Redis queue as seen by one provider: only one live handle (the first to be asked) reads it
    at a scrape, the others report 0, so that the shared depth is not summed over handles. When that handle is
    closed or collected, the next one asked takes over."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reporter: weakref.ReferenceType[SharedQueueRecorder] | None = None

    def claim(self, recorder: SharedQueueRecorder) -> bool:
        with self._lock:
            current = None if self._reporter is None else self._reporter()
            if current is None:
                self._reporter = weakref.ref(recorder)
                return True
            return current is recorder

    def release(self, recorder: SharedQueueRecorder) -> None:
        with self._lock:
            if self._reporter is not None and self._reporter() is recorder:
                self._reporter = None


_shares_lock = threading.Lock()
# provider -> (url, name) -> share; weak both ways: the recorders of a live handle keep their share alive.
_shares: weakref.WeakKeyDictionary[SnapshotMetricsProvider, weakref.WeakValueDictionary[tuple[str, str], DepthShare]]
_shares = weakref.WeakKeyDictionary()


def _share(provider: SnapshotMetricsProvider, url: str, name: str) -> DepthShare:
    with _shares_lock:
        per = _shares.get(provider)
        if per is None:
            per = _shares[provider] = weakref.WeakValueDictionary()
        share = per.get((url, name))
        if share is None:
            share = per[(url, name)] = DepthShare()
        return share


class _DepthReader:
    """``depth_source`` of one handle's recorder: the shared depth if this handle reports it, else 0. A failed read
    (Redis unreachable) is logged and reports the last depth read (0 before any)."""

    def __init__(self, share: DepthShare, read: Callable[[], int], name: str) -> None:
        self.share = share
        self.read = read
        self.name = name
        self.last = 0
        self.recorder: weakref.ReferenceType[SharedQueueRecorder] | None = None

    def __call__(self) -> int:
        recorder = None if self.recorder is None else self.recorder()
        if recorder is None or not self.share.claim(recorder):
            return 0
        try:
            self.last = self.read()
        except Exception as exc:  # a scrape must not fail because one queue's Redis is down
            log.warning("Redis queue %r: depth not read at scrape (reporting the last value, %d): %s",
                        self.name, self.last, exc)
        return self.last


def recorder_for_redis(
    provider: object, *, name: str, url: str, clock: Clock, lock: LockLike, read_depth: Callable[[], int]
) -> SharedQueueRecorder | None:
    """The recorder of one Redis queue handle, or ``None`` when it emits nothing.

    ``provider``: the handle's ``metrics_provider=`` (``None``: the process-wide one, see
    :func:`keyqueue.metrics.set_provider`, if it is a snapshot-style provider; otherwise nothing is emitted). A
    :class:`~keyqueue.metrics.NoopMetricsProvider` gives ``None``. Only
    snapshot-style providers (:class:`~keyqueue.metrics.SnapshotMetricsProvider`, and so
    :class:`~keyqueue.metrics.PrometheusMetricsProvider`) can export a Redis queue: a plain
    :class:`~keyqueue.metrics.MetricsProvider` moves its depth gauge by ``inc``/``dec`` per event of this process,
    which cannot follow a queue other processes change; it raises ``TypeError`` (as does any non-provider).
    ``read_depth()`` returns the shared depth (one round trip); it is called at snapshot time without ``lock``.
    """
    chosen: Any = get_provider() if provider is None else _check_provider(provider)
    if isinstance(chosen, NoopMetricsProvider) or (
        provider is None and not isinstance(chosen, SnapshotMetricsProvider)
    ):
        return None  # the process-wide provider is used only when it can export a Redis queue
    if not isinstance(chosen, SnapshotMetricsProvider):
        raise TypeError(
            "a Redis queue exports metrics through a SnapshotMetricsProvider or PrometheusMetricsProvider only "
            "(its depth is read from Redis at scrape time; a push MetricsProvider's depth gauge cannot follow a "
            f"queue shared with other processes); got {type(chosen).__name__}: {chosen!r:.80}"
        )
    recorder = chosen._recorder(name, clock, lock, SharedQueueRecorder)
    assert isinstance(recorder, SharedQueueRecorder)
    reader = _DepthReader(_share(chosen, url, name), read_depth, name)
    reader.recorder = weakref.ref(recorder)
    recorder.depth_source = reader
    return recorder


def detach(recorder: SharedQueueRecorder | None) -> None:
    """A closed handle stops reading depth (another live handle of the queue takes over at the next scrape)."""
    if recorder is None:
        return
    reader = recorder.depth_source
    recorder.depth_source = None
    if isinstance(reader, _DepthReader):
        reader.share.release(recorder)
