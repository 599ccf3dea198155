"""The in-memory backend: :class:`MemoryBackend`, with etcd's revision, watch and compaction semantics."""

from __future__ import annotations

import bisect
import queue
import threading

from .base import (
    DEFAULT_WATCH_BUFFER,
    Backend,
    BackendUnavailableError,
    BackendWatch,
    CompactedError,
    FutureRevisionError,
    KeyValue,
    RangePage,
    TxnResult,
    WatchBatch,
    WatchEvent,
    WatchOverflowError,
)

__all__ = ["MemoryBackend"]


class _MemoryWatch(BackendWatch):
    def __init__(self, backend: MemoryBackend, prefix: str, start_revision: int, max_pending: int) -> None:
        self._backend = backend
        self.prefix = prefix
        self.start_revision = start_revision
        self.max_pending = max_pending
        self.queue: queue.SimpleQueue[WatchBatch | BaseException] = queue.SimpleQueue()
        self._closed = False

    def offer(self, batch: WatchBatch | BaseException) -> bool:
        """Queue ``batch`` (called with the backend lock held); False when the watch overflowed and was ended."""
        if self.queue.qsize() >= self.max_pending:
            self._overflowed = True
            self.queue.put(WatchOverflowError(f"watch consumer more than {self.max_pending} events behind"))
            self._notify()
            return False
        self.queue.put(batch)
        self._notify()
        return True

    def next(self, timeout: float | None) -> WatchBatch | None:
        if self._closed and self.queue.empty():
            raise EOFError("watch closed")
        return self._take(self.queue, timeout)

    def request_progress(self) -> None:
        self._backend._progress(self)

    def close(self) -> None:
        self._backend._unregister(self)
        self._closed = True
        self.queue.put(EOFError("watch closed"))
        self._notify()


class MemoryBackend(Backend):
    """An in-process :class:`Backend` with etcd's revision, watch and compaction semantics.

    Every write takes one global lock, bumps the revision by one and is
    delivered to matching watches before the write returns.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rev = 1  # an empty etcd starts at revision 1
        self._compacted = 0
        self._data: dict[str, KeyValue] = {}
        self._history: list[WatchEvent] = []  # one event per revision, ascending
        self._watches: set[_MemoryWatch] = set()
        self._closed = False

    # -- helpers (call with the lock held)
    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailableError("memory backend closed")

    def _commit(self, event: WatchEvent) -> None:
        self._history.append(event)
        batch = WatchBatch((event,))
        overflowed = [w for w in self._watches if event.kv.key.startswith(w.prefix)
                      and event.kv.mod_revision >= w.start_revision and not w.offer(batch)]
        for w in overflowed:
            self._watches.discard(w)

    def _state_at(self, revision: int) -> dict[str, KeyValue]:
        state = dict(self._data)
        for event in reversed(self._history):
            if event.kv.mod_revision <= revision:
                break
            if event.prev is None:
                state.pop(event.kv.key, None)
            else:
                state[event.kv.key] = event.prev
        return state

    # -- Backend
    def get(self, key: str) -> tuple[KeyValue | None, int]:
        with self._lock:
            self._check_open()
            return self._data.get(key), self._rev

    def range(self, prefix: str, revision: int = 0) -> tuple[list[KeyValue], int]:
        with self._lock:
            items, read_rev = self._range(prefix, revision, "")
        items.sort(key=lambda kv: kv.key)
        return items, read_rev

    def range_page(self, prefix: str, revision: int = 0, start: str = "", limit: int = 0) -> RangePage:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise ValueError(f"limit must be an int >= 0, got {type(limit).__name__}: {limit!r}")
        with self._lock:
            items, read_rev = self._range(prefix, revision, start)
        items.sort(key=lambda kv: kv.key)
        page = items[:limit] if limit else items
        return RangePage(tuple(page), read_rev, len(page) < len(items), len(items))

    def _range(self, prefix: str, revision: int, start: str) -> tuple[list[KeyValue], int]:
        """The keys under ``prefix`` and ``>= start`` as of ``revision``, unsorted (call with the lock held)."""
        self._check_open()
        if revision > self._rev:
            raise FutureRevisionError(revision, self._rev)
        if 0 < revision < self._compacted:
            raise CompactedError(revision, self._compacted)
        if revision in (0, self._rev):
            state, read_rev = self._data, self._rev
        else:
            state, read_rev = self._state_at(revision), revision
        return [kv for k, kv in state.items() if k.startswith(prefix) and k >= start], read_rev

    def create(self, key: str, value: bytes, guard: tuple[str, int] | None = None) -> TxnResult:
        with self._lock:
            self._check_open()
            current = self._data.get(key)
            if current is not None:
                return TxnResult(False, self._rev, current)
            if guard is not None:
                other = self._data.get(guard[0])
                if (other.mod_revision if other is not None else 0) != guard[1]:
                    return TxnResult(False, self._rev, None)
            self._rev += 1
            kv = KeyValue(key, value, self._rev, self._rev, 1)
            self._data[key] = kv
            self._commit(WatchEvent("PUT", kv, None))
            return TxnResult(True, self._rev, kv)

    def update(self, key: str, value: bytes, mod_revision: int) -> TxnResult:
        with self._lock:
            self._check_open()
            current = self._data.get(key)
            if current is None or current.mod_revision != mod_revision:
                return TxnResult(False, self._rev, current)
            self._rev += 1
            kv = KeyValue(key, value, current.create_revision, self._rev, current.version + 1)
            self._data[key] = kv
            self._commit(WatchEvent("PUT", kv, current))
            return TxnResult(True, self._rev, kv)

    def delete(self, key: str, mod_revision: int) -> TxnResult:
        with self._lock:
            self._check_open()
            current = self._data.get(key)
            if current is None or current.mod_revision != mod_revision:
                return TxnResult(False, self._rev, current)
            self._rev += 1
            del self._data[key]
            tombstone = KeyValue(key, b"", 0, self._rev, 0)
            self._commit(WatchEvent("DELETE", tombstone, current))
            return TxnResult(True, self._rev, current)

    blocking = False  # every call is a short critical section: an event loop may call it directly

    def watch(self, prefix: str, start_revision: int, max_pending: int = DEFAULT_WATCH_BUFFER) -> BackendWatch:
        with self._lock:
            self._check_open()
            w = _MemoryWatch(self, prefix, start_revision, max_pending)
            if 0 < start_revision < self._compacted:
                w.queue.put(CompactedError(start_revision, self._compacted))
                return w
            if 0 < start_revision <= self._rev:
                # history is sorted by revision (one event per revision)
                first = bisect.bisect_left(self._history, start_revision, key=lambda e: e.kv.mod_revision)
                past = tuple(e for e in self._history[first:] if e.kv.key.startswith(prefix))
                if past:
                    w.queue.put(WatchBatch(past))
            self._watches.add(w)
        return w

    def _progress(self, w: _MemoryWatch) -> None:
        with self._lock:
            if w in self._watches and not w.offer(WatchBatch((), progress=self._rev)):
                self._watches.discard(w)

    def _unregister(self, w: _MemoryWatch) -> None:
        with self._lock:
            self._watches.discard(w)

    def revision(self) -> int:
        with self._lock:
            self._check_open()
            return self._rev

    def compact(self, revision: int) -> None:
        with self._lock:
            self._check_open()
            if revision > self._rev:
                raise FutureRevisionError(revision, self._rev)
            if revision <= self._compacted:
                return
            # etcd keeps revision `revision` readable and watchable; older ones go.  Of the
            # change made *at* `revision`, etcd keeps a PUT (the key's newest version at or
            # below `revision` survives compaction, so a watch starting there still gets it,
            # without prev_kv: the version before it is gone) but not a DELETE (tombstones
            # at or below the compaction revision are dropped).
            first = bisect.bisect_left(self._history, revision, key=lambda e: e.kv.mod_revision)
            history = self._history[first:]
            if history and history[0].kv.mod_revision == revision:
                at = history[0]
                if at.type == "PUT":
                    history[0] = WatchEvent("PUT", at.kv, None)
                else:
                    del history[0]
            self._history = history
            self._compacted = revision

    def close(self) -> None:
        with self._lock:
            self._closed = True
            watches = list(self._watches)
            self._watches.clear()
        for w in watches:
            w.queue.put(BackendUnavailableError("memory backend closed"))
            w._notify()
