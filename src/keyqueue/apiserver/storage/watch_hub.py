"""One etcd watch stream fanned out to many watches: :class:`_WatchHub` and the :class:`_HubWatch` it serves
(as kube-apiserver's watch cache serves every watch of a resource from one etcd watch)."""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Final

from .base import BackendUnavailableError, BackendWatch, WatchBatch, WatchEvent, WatchOverflowError
from .etcd_watch import _EtcdWatch, _Pending, _WatchLoop


class _HubWatch(BackendWatch):
    """One watch served by a :class:`_WatchHub`: its events (the hub's, under ``prefix``, from ``start``) are
    queued by the hub's reader (on the backend's watch loop)."""

    def __init__(self, hub: _WatchHub, prefix: str, start: int, max_pending: int) -> None:
        self._hub = hub
        self.prefix = prefix
        self.start = start
        self._pending = _Pending(max_pending)  # events queued, not yet taken by next()
        self._out: queue.SimpleQueue[WatchBatch | BaseException] = queue.SimpleQueue()
        self._replay: WatchBatch | None = None  # the buffered events it started with (not counted in _pending)
        self._closed = False

    def offer(self, batch: WatchBatch) -> bool:
        """Queue ``batch`` (the hub's reader, with the hub's lock held); False when this watch overflowed and was
        ended (the caller then drops it).  The caller calls the listener (``_notify``) once it has released the
        hub's lock: a listener may close this watch, which takes that lock."""
        count = max(1, len(batch.events))
        if not self._pending.reserve(count):
            self._overflowed = True
            self._out.put(WatchOverflowError(f"watch consumer more than {self._pending.limit} events behind"))
            return False
        self._out.put(batch)
        return True

    def fail(self, exc: BaseException) -> None:
        self._out.put(exc)
        self._notify()

    def next(self, timeout: float | None) -> WatchBatch | None:
        if self._closed and self._out.empty():
            raise EOFError("watch closed")
        item = self._take(self._out, timeout)
        if item is None:
            return None
        if item is self._replay:
            self._replay = None
        else:
            self._pending.release(item)
        return item

    def request_progress(self) -> None:
        """Answered at once by the hub (etcd's periodic notifications reach this watch too, but etcd sends them only
        while the hub's stream is idle, which a busy root seldom is)."""
        self._hub.progress(self)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._hub.unsubscribe(self)
        self.fail(EOFError("watch closed"))


class _WatchHub(_EtcdWatch):
    """One etcd watch stream on ``root`` whose events are fanned out to many :class:`_HubWatch` (as kube-apiserver's
    watch cache serves every watch of a resource from one etcd watch).

    The reader (on the backend's :class:`_WatchLoop`) decodes each etcd event once and, under the hub's lock,
    appends it to a bounded buffer of recent events and queues it on every subscribed watch whose prefix and start
    revision it matches (their listeners are called once the lock is released).  A watch
    starting at a revision the buffer still covers (and above the last compaction through this backend) gets the
    buffered events first; an older start is not served here (the backend opens a dedicated stream, which gives
    etcd's own answer: the events, or :class:`CompactedError`).  When the stream fails, every subscribed watch
    gets the error and the hub is retired; the next watch opens a new one.
    """

    MAX_EVENTS: Final = 10_000
    MAX_BYTES: Final = 32 * 1024 * 1024

    def __init__(self, loop: _WatchLoop, root: str, start_revision: int) -> None:
        self.root = root
        self._hub_lock = threading.Lock()
        self._subs: set[_HubWatch] = set()
        self._buffer: deque[WatchEvent] = deque()
        self._buffer_bytes = 0
        self.buffer_start = start_revision  # every change at >= buffer_start and <= delivered is in _buffer
        self.delivered = start_revision - 1  # every change <= delivered has been fanned out
        self.compacted = 0  # the newest compaction revision this backend made
        self.dead = False
        super().__init__(loop, root, start_revision, max_pending=2**62)

    def subscribe(self, prefix: str, start: int, max_pending: int) -> _HubWatch | None:
        """A watch under ``prefix`` (within :attr:`root`) from ``start``; ``None`` if the hub cannot serve it."""
        with self._hub_lock:
            if self.dead or start < self.buffer_start or start <= self.compacted:
                return None
            w = _HubWatch(self, prefix, start, max_pending)
            if start <= self.delivered:
                past: list[WatchEvent] = []
                for e in reversed(self._buffer):  # in revision order: the newest first, back to start
                    if e.kv.mod_revision < start:
                        break
                    if e.kv.key.startswith(prefix):
                        past.append(e)
                if past:
                    past.reverse()
                    w._replay = WatchBatch(tuple(past))  # one batch, not limited (as in the other watches)
                    w._out.put(w._replay)
            self._subs.add(w)
            return w

    def unsubscribe(self, w: _HubWatch) -> None:
        with self._hub_lock:
            self._subs.discard(w)

    def progress(self, w: _HubWatch) -> None:
        """Queue a progress notification at :attr:`delivered` on ``w``: safe, since every change up to it has
        been queued on ``w`` before (both under the hub's lock)."""
        with self._hub_lock:
            if w not in self._subs:
                return
            if not w.offer(WatchBatch((), progress=self.delivered)):
                self._subs.discard(w)
        w._notify()

    def note_compaction(self, revision: int) -> None:
        with self._hub_lock:
            self.compacted = max(self.compacted, revision)

    @staticmethod
    def _size(event: WatchEvent) -> int:
        return len(event.kv.value) + (len(event.prev.value) if event.prev is not None else 0) + 200

    def _offer(self, batch: WatchBatch, count: int) -> bool:
        with self._hub_lock:
            if batch.progress is not None:
                self.delivered = max(self.delivered, batch.progress)
                woken = list(self._subs)
                dropped = [w for w in woken if not w.offer(batch)]
            else:
                for event in batch.events:
                    self._buffer.append(event)
                    self._buffer_bytes += self._size(event)
                while self._buffer and (len(self._buffer) > self.MAX_EVENTS or self._buffer_bytes > self.MAX_BYTES):
                    gone = self._buffer.popleft()
                    self._buffer_bytes -= self._size(gone)
                    self.buffer_start = gone.kv.mod_revision + 1
                self.delivered = max(self.delivered, batch.events[-1].kv.mod_revision)
                dropped = []
                woken = []
                for w in self._subs:
                    mine = tuple(e for e in batch.events
                                 if e.kv.mod_revision >= w.start and e.kv.key.startswith(w.prefix))
                    if mine:
                        woken.append(w)
                        if not w.offer(WatchBatch(mine)):
                            dropped.append(w)
            for w in dropped:
                self._subs.discard(w)
        for w in woken:  # outside the lock: a listener may close its watch
            w._notify()
        return True

    def _put(self, item: WatchBatch | BaseException) -> None:
        if isinstance(item, WatchBatch):  # pragma: no cover - the reader queues batches through _offer
            self._offer(item, len(item.events))
            return
        with self._hub_lock:
            self.dead = True
            subs, self._subs = self._subs, set()
        if isinstance(item, EOFError) and not self._closed.is_set():
            item = BackendUnavailableError("etcd watch stream ended")
        for w in subs:
            w.fail(item)

    def close(self) -> None:
        """Stop the stream; every subscribed watch ends (its next() raises EOFError)."""
        with self._hub_lock:
            self.dead = True
            subs, self._subs = self._subs, set()
        for w in subs:
            w.fail(EOFError("watch closed"))
        super().close()
