"""Key-value storage backends with etcd v3 semantics.

Two implementations share one interface, :class:`Backend`:

* :class:`EtcdBackend` talks to a real etcd over gRPC (the stubs shipped by
  ``python3-etcd3``); the watches under a prefix given to ``share_watches`` share
  one etcd stream (a hub with a buffer of recent events, like kube-apiserver's
  watch cache for watches).  Requests are blocking calls on the caller's thread;
  watch streams are read with ``grpc.aio`` on one loop thread per backend.
* :class:`MemoryBackend` keeps everything in a dict but reproduces what the API
  server relies on: a single store revision that every write bumps,
  ``create_revision``/``mod_revision``/``version`` per key, transactions that
  compare one of those, watches that can start at a past revision, reads at a
  past revision, and compaction (after which old revisions answer
  :class:`CompactedError`).

The backends know nothing about Kubernetes objects: keys are strings, values
are bytes.  :mod:`keyqueue.apiserver.registry` builds the object semantics on
top.
"""

from __future__ import annotations

import abc
import asyncio
import bisect
import concurrent.futures
import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "DEFAULT_WATCH_BUFFER",
    "Backend",
    "BackendUnavailableError",
    "BackendWatch",
    "CompactedError",
    "EtcdBackend",
    "FutureRevisionError",
    "KeyValue",
    "MemoryBackend",
    "StorageError",
    "TxnResult",
    "WatchBatch",
    "WatchEvent",
    "WatchOverflowError",
    "prefix_end",
]


class StorageError(Exception):
    """Base class of the errors raised by a :class:`Backend`."""


class CompactedError(StorageError):
    """The requested revision is older than the store's compaction revision."""

    def __init__(self, requested: int, compacted: int) -> None:
        super().__init__(f"revision {requested} has been compacted (compacted up to {compacted})")
        self.requested = requested
        self.compacted = compacted


class FutureRevisionError(StorageError):
    """The requested revision is newer than the store's current revision."""

    def __init__(self, requested: int, current: int) -> None:
        super().__init__(f"revision {requested} is a future revision (current {current})")
        self.requested = requested
        self.current = current


class BackendUnavailableError(StorageError):
    """The backend cannot be reached (etcd stopped, channel closed, ...)."""


class WatchOverflowError(StorageError):
    """A watch's consumer fell more than its buffer behind; the backend ended the watch (nothing was dropped
    silently: every event before the overflow was delivered, none after it)."""


DEFAULT_WATCH_BUFFER: Final = 1000  # events a watch may hold undelivered before the backend ends it


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key at one revision, like etcd's ``mvccpb.KeyValue``."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A change to one key.

    For ``PUT``, ``kv`` is the new state.  For ``DELETE``, ``kv`` carries the key
    and ``mod_revision`` = the revision of the deletion, with an empty value.
    ``prev`` is the state before the change (``None`` for a create).
    """

    type: Literal["PUT", "DELETE"]
    kv: KeyValue
    prev: KeyValue | None


@dataclass(frozen=True, slots=True)
class WatchBatch:
    """What :meth:`BackendWatch.next` returns.

    ``events`` are in revision order.  ``progress`` is set on a progress
    notification (then ``events`` is empty): every change at or below that
    revision that matches the watch has already been delivered.
    """

    events: tuple[WatchEvent, ...]
    progress: int | None = None


@dataclass(frozen=True, slots=True)
class TxnResult:
    """Outcome of a compare-and-swap on one key.

    ``revision`` is the store revision after the transaction.  On success
    ``kv`` is the written state (for a delete: the state that was deleted); on
    failure it is the key's current state, ``None`` if the key does not exist.
    """

    succeeded: bool
    revision: int
    kv: KeyValue | None


def prefix_end(prefix: bytes) -> bytes:
    """Return the smallest key greater than every key starting with ``prefix`` (etcd's range end)."""
    raw = bytearray(prefix)
    for i in reversed(range(len(raw))):
        if raw[i] < 0xFF:
            raw[i] += 1
            return bytes(raw[: i + 1])
    return b"\x00"


class BackendWatch(abc.ABC):
    """A stream of changes under one key prefix.  Safe to close from any thread.

    At most ``max_pending`` events (given to :meth:`Backend.watch`) wait undelivered; when a consumer falls further
    behind, the backend ends the watch: :meth:`next` raises :class:`WatchOverflowError` after the events queued
    before it.  A listener set with :meth:`set_listener` is called (from whichever thread produced it) after every
    item queued, so that an event loop can wait for it without a blocked thread.
    """

    _listener: Callable[[], None] | None = None
    _overflowed = False

    @property
    def overflowed(self) -> bool:
        """True once the backend ended this watch because its consumer fell behind (any thread may ask)."""
        return self._overflowed

    def set_listener(self, listener: Callable[[], None] | None) -> None:
        """Call ``listener()`` after every batch or error queued from now on (it must not block)."""
        self._listener = listener

    def _notify(self) -> None:
        listener = self._listener
        if listener is not None:
            listener()

    @staticmethod
    def _take(out: queue.SimpleQueue[WatchBatch | BaseException], timeout: float | None) -> WatchBatch | None:
        """The next batch queued in ``out`` within ``timeout`` seconds (``None`` on timeout). An error queued there
        is raised and stays queued, so that every later call raises it again."""
        try:
            item = out.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, BaseException):
            out.put(item)
            raise item
        return item

    @abc.abstractmethod
    def next(self, timeout: float | None) -> WatchBatch | None:
        """Block up to ``timeout`` seconds (``None`` = forever) for the next batch.

        Returns ``None`` on timeout.  Raises :class:`CompactedError` when the start
        revision was compacted, :class:`BackendUnavailableError` when the backend
        went away, and :class:`EOFError` once the watch has been closed.
        """

    @abc.abstractmethod
    def request_progress(self) -> None:
        """Ask for a progress notification; if one comes, it arrives through :meth:`next`.

        :class:`MemoryBackend` answers at once.  :class:`EtcdBackend` ignores the
        request and relies on etcd's periodic progress notifications instead.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Stop the watch.  A blocked :meth:`next` returns by raising :class:`EOFError`."""


class Backend(abc.ABC):
    """The small subset of etcd's KV API the object registry uses.

    All methods are thread-safe and block until the backend answered.
    """

    @abc.abstractmethod
    def get(self, key: str) -> tuple[KeyValue | None, int]:
        """Return the key's current state (``None`` if absent) and the store revision."""

    @abc.abstractmethod
    def range(self, prefix: str, revision: int = 0) -> tuple[list[KeyValue], int]:
        """Return all keys starting with ``prefix`` sorted by key, and the revision read.

        ``revision`` 0 reads the current state; a positive revision reads the
        state as of that revision (:class:`CompactedError` if compacted,
        :class:`FutureRevisionError` if newer than the store).
        """

    @abc.abstractmethod
    def create(self, key: str, value: bytes, guard: tuple[str, int] | None = None) -> TxnResult:
        """Put ``value`` if the key does not exist (etcd txn on ``version == 0``).

        ``guard`` = ``(other_key, mod_revision)``: also require, in the same transaction, that ``other_key`` still
        has that ``mod_revision`` (a namespaced object is created only while its namespace is unchanged).  On
        failure ``kv`` is the key's current state; ``None`` there means the guard failed.
        """

    @abc.abstractmethod
    def update(self, key: str, value: bytes, mod_revision: int) -> TxnResult:
        """Put ``value`` if the key's ``mod_revision`` equals ``mod_revision``."""

    @abc.abstractmethod
    def delete(self, key: str, mod_revision: int) -> TxnResult:
        """Delete the key if its ``mod_revision`` equals ``mod_revision``."""

    blocking: bool = True  # calls may wait on I/O (an event loop must call them from an executor)

    @abc.abstractmethod
    def watch(self, prefix: str, start_revision: int, max_pending: int = DEFAULT_WATCH_BUFFER) -> BackendWatch:
        """Watch keys under ``prefix`` for changes at revisions >= ``start_revision``.

        ``start_revision`` 0 means "changes after the current revision".  ``max_pending``: see
        :class:`BackendWatch` (the replay of past revisions at the start counts as one batch and is not limited).
        """

    def check(self, timeout: float) -> None:
        """Raise :class:`BackendUnavailableError` unless the backend answers within ``timeout`` seconds."""
        self.revision()

    def share_watches(self, prefix: str) -> None:
        """A hint: from now on, many watches will be under ``prefix``; a backend may serve them from one shared
        stream (:class:`EtcdBackend` does; the semantics of :meth:`watch` are the same either way).  The default
        does nothing."""
        return

    @abc.abstractmethod
    def revision(self) -> int:
        """Return the current store revision."""

    @abc.abstractmethod
    def compact(self, revision: int) -> None:
        """Discard history below ``revision`` (already compacted revisions are ignored).

        As in etcd, ``revision`` itself stays readable, and a watch may start at it:
        it then receives the change made at ``revision`` if that was a PUT (with
        ``prev`` = ``None``: the state before it is gone), not if it was a DELETE.
        Reads and watches below ``revision`` raise :class:`CompactedError`.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release resources.  Open watches are closed."""


# --------------------------------------------------------------------------- memory


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
            self._check_open()
            if revision > self._rev:
                raise FutureRevisionError(revision, self._rev)
            if 0 < revision < self._compacted:
                raise CompactedError(revision, self._compacted)
            if revision in (0, self._rev):
                state, read_rev = self._data, self._rev
            else:
                state, read_rev = self._state_at(revision), revision
            items = [kv for k, kv in state.items() if k.startswith(prefix)]
        items.sort(key=lambda kv: kv.key)
        return items, read_rev

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


# --------------------------------------------------------------------------- etcd

_RPC_TIMEOUT: Final = 10.0
_ETCD_EVENT_DELETE: Final = 1  # mvccpb.Event.EventType: PUT = 0, DELETE = 1


def _kv_from_pb(pb: Any) -> KeyValue:
    return KeyValue(
        pb.key.decode(), bytes(pb.value), int(pb.create_revision), int(pb.mod_revision), int(pb.version)
    )


class _Pending:
    """How many events a watch has queued that its consumer has not taken yet, against its ``max_pending``.
    Thread-safe: the producing thread reserves, the consuming thread releases."""

    __slots__ = ("_count", "_lock", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._count = 0
        self._lock = threading.Lock()

    def reserve(self, count: int) -> bool:
        """Count ``count`` more events queued; False (nothing counted) if that would pass the limit while some are
        still waiting (a batch larger than the limit is still taken by an empty watch)."""
        with self._lock:
            if self._count + count > self.limit and self._count > 0:
                return False
            self._count += count
            return True

    def release(self, batch: WatchBatch) -> None:
        """The consumer took ``batch``."""
        with self._lock:
            self._count -= max(1, len(batch.events))


class _WatchLoop:
    """Where an :class:`EtcdBackend` reads its watch streams: an asyncio loop in one daemon thread
    (``etcd-watch-loop``) with a ``grpc.aio`` channel of its own to etcd.

    Why not grpc's blocking stream iterator in a thread per watch: it takes one message per ``next()``, and each
    message passes from grpc's polling thread to the reading thread, two GIL hand-offs per event. In an API server
    whose request threads keep the GIL busy, every hand-off can wait up to a switch interval, so under a steady
    stream of writes the watch fell behind etcd by tens to hundreds of milliseconds and then delivered its backlog
    in bursts. On this loop, grpc's own poller (which holds no GIL) wakes the loop's thread, and every message that
    has arrived is handled in that one wake-up.
    """

    def __init__(self, endpoint: str) -> None:
        self.loop = asyncio.SelectorEventLoop()  # not the policy's: an application's loop policy is not ours to use
        self.thread = threading.Thread(target=self._run, name="etcd-watch-loop", daemon=True)
        self.thread.start()
        self.stub: Any = None
        self._channel: Any = None
        self._close_lock = threading.Lock()
        self._closed = False
        self._closing: asyncio.Task[None] | None = None  # close() from the loop's own thread
        self.run(self._open(endpoint)).result(timeout=_RPC_TIMEOUT)

    def _run(self) -> None:
        self.loop.run_forever()
        # Stopped by close(), the channel closed: let what is still running finish (a reader handling its
        # cancellation, grpc's own tasks of the cancelled calls, which end with grpc's last completions: cancelling
        # them would leave those to arrive at a closed loop) rather than destroy it pending; cancel what is left
        # after 5 s. Then close the loop here, whichever thread stopped it (a loop closes only once stopped).
        tasks = asyncio.all_tasks(self.loop)
        if tasks:
            _, left = self.loop.run_until_complete(asyncio.wait(tasks, timeout=5))
            for task in left:
                task.cancel()
            if left:
                self.loop.run_until_complete(asyncio.wait(left, timeout=1))
        self.loop.close()

    async def _open(self, endpoint: str) -> None:
        import grpc.aio
        from etcd3 import etcdrpc

        self._channel = grpc.aio.insecure_channel(endpoint)  # connects lazily, with the first stream
        self.stub = etcdrpc.WatchStub(self._channel)

    def run(self, coro: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        """Schedule ``coro`` on the loop (any thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def on_loop(self) -> bool:
        return threading.current_thread() is self.thread

    def close(self) -> None:
        """Close the channel (ending any stream still open) and stop the loop's thread (waits up to 10 s).

        Called on the loop's own thread (from a watch listener), it cannot wait for the loop: it schedules the
        channel's close and the loop's stop, which happen once the running callback has returned.  Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        async def close_channel() -> None:
            await self._channel.close()

        async def close_channel_and_stop() -> None:
            try:
                await close_channel()
            finally:
                self.loop.stop()
        if self.on_loop():
            self._closing = self.loop.create_task(close_channel_and_stop())
            return
        with contextlib.suppress(Exception):  # the loop stops either way
            self.run(close_channel()).result(timeout=5)
        with contextlib.suppress(RuntimeError):  # already closed (it stopped)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


class _EtcdWatch(BackendWatch):
    """One gRPC Watch stream, read on the backend's :class:`_WatchLoop` into a queue."""

    def __init__(self, backend: EtcdBackend, prefix: str, start_revision: int, max_pending: int) -> None:
        from etcd3 import etcdrpc

        self._pending = _Pending(max_pending)  # events queued, not yet taken by next()
        self._out: queue.SimpleQueue[WatchBatch | BaseException] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._close_lock = threading.Lock()
        self._start_revision = start_revision
        create = etcdrpc.WatchCreateRequest(
            key=prefix.encode(),
            range_end=prefix_end(prefix.encode()),
            start_revision=start_revision,
            prev_kv=True,
            progress_notify=True,
        )
        self._loop = backend._watch_loop()
        self._started = threading.Event()  # etcd created the watch, or the stream ended first
        self._call: Any = None  # the grpc.aio stream, once open (touch it only on the loop)
        self._task = self._loop.run(self._read(etcdrpc.WatchRequest(create_request=create)))

    def wait_created(self) -> None:
        """Block until etcd has created the watch, the stream ended or :meth:`close` was called, at most
        ``_RPC_TIMEOUT`` seconds (at once on the watch loop's thread, which cannot wait for itself), so that a change
        made after this returns arrives as a change of its own, as with a watch opened synchronously.  A frozen etcd
        that never answers is not detected here nor by :meth:`next` (which then just times out).  Call it without
        the backend's lock held: other watches and ``close()`` must not wait behind it."""
        if not self._loop.on_loop():
            self._started.wait(_RPC_TIMEOUT)

    async def _read(self, create: Any) -> None:
        """The stream's life, on the watch loop: open it, queue what each response carries, and queue
        :class:`EOFError` last, however it ends (after :class:`BackendUnavailableError` if it ended by other means
        than :meth:`close`)."""
        import grpc
        import grpc.aio

        call: Any = None
        try:
            call = self._call = self._loop.stub.Watch()
            await call.write(create)
            while not self._closed.is_set():
                resp = await call.read()
                if resp is grpc.aio.EOF:  # status OK (etcd ends so only a stream its client stopped writing to)
                    if not self._closed.is_set():
                        self._put(BackendUnavailableError("etcd ended the watch stream"))
                    return
                if not self._handle(resp):
                    return
        except asyncio.CancelledError:  # close(), or the call was cancelled under it
            if not self._closed.is_set():
                self._put(BackendUnavailableError("etcd watch stream cancelled"))
        except grpc.RpcError as exc:
            if not self._closed.is_set():
                self._put(BackendUnavailableError(f"etcd watch failed: {exc}"))
        except Exception as exc:  # pragma: no cover - defensive: never die silently
            self._put(BackendUnavailableError(f"etcd watch failed: {exc!r}"))
        finally:
            if call is not None:
                call.cancel()
            self._put(EOFError("watch closed"))
            self._started.set()

    def _handle(self, resp: Any) -> bool:
        """Queue what one WatchResponse carries; False when the stream is to end."""
        if resp.compact_revision:
            self._put(CompactedError(self._start_revision, int(resp.compact_revision)))
            return False
        if resp.canceled:
            self._put(BackendUnavailableError(f"etcd canceled the watch: {resp.cancel_reason}"))
            return False
        if resp.created:
            self._started.set()
            if not resp.events:
                return True
        if not resp.events:
            return self._offer(WatchBatch((), progress=int(resp.header.revision)), 1)
        events = []
        for ev in resp.events:
            prev = _kv_from_pb(ev.prev_kv) if ev.HasField("prev_kv") else None
            kv = _kv_from_pb(ev.kv)
            if ev.type == _ETCD_EVENT_DELETE:
                events.append(WatchEvent("DELETE", kv, prev))
            else:
                events.append(WatchEvent("PUT", kv, prev))
        return self._offer(WatchBatch(tuple(events)), len(events))

    def _put(self, item: WatchBatch | BaseException) -> None:
        self._out.put(item)
        self._notify()

    def _offer(self, batch: WatchBatch, count: int) -> bool:
        """Queue a batch of ``count`` events; on overflow queue the error, cancel the stream and return False.
        Once closed, nothing: a batch never follows the EOFError that :meth:`close` queues."""
        with self._close_lock:  # with close()'s: a batch is queued before the watch is closed, or not at all
            if self._closed.is_set():
                return False
            queued = self._pending.reserve(count)
            if queued:
                self._out.put(batch)
            else:
                self._overflowed = True
                self._out.put(WatchOverflowError(f"watch consumer more than {self._pending.limit} events behind"))
                self._closed.set()  # the reader ends the stream
        self._notify()  # outside the lock: a listener may close the watch
        return queued

    def next(self, timeout: float | None) -> WatchBatch | None:
        item = self._take(self._out, timeout)
        if item is not None:
            self._pending.release(item)
        return item

    def request_progress(self) -> None:
        # etcd 3.5.1 answers an explicit WatchProgressRequest out of band, possibly
        # before events still queued for this watch (fixed only in 3.5.8), so a
        # revision from it is unsafe.  The periodic notifications requested with
        # progress_notify=True travel through the watch's own channel and are safe;
        # their period is etcd's --experimental-watch-progress-notify-interval.
        return

    def close(self) -> None:
        with self._close_lock:
            if self._closed.is_set():
                return
            self._closed.set()
        self._task.cancel()
        # The reader queues EOFError as it ends, but a task cancelled before its first step never runs, and the
        # future cannot tell (it is cancelled at once either way, without waiting for the reader): queue it here
        # too (a second EOFError changes nothing).
        self._put(EOFError("watch closed"))
        self._started.set()


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

    def __init__(self, backend: EtcdBackend, root: str, start_revision: int) -> None:
        self.root = root
        self._hub_lock = threading.Lock()
        self._subs: set[_HubWatch] = set()
        self._buffer: deque[WatchEvent] = deque()
        self._buffer_bytes = 0
        self.buffer_start = start_revision  # every change at >= buffer_start and <= delivered is in _buffer
        self.delivered = start_revision - 1  # every change <= delivered has been fanned out
        self.compacted = 0  # the newest compaction revision this backend made
        self.dead = False
        super().__init__(backend, root, start_revision, max_pending=2**62)

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


class EtcdBackend(Backend):
    """A :class:`Backend` on a real etcd v3 server, over one gRPC channel.

    ``endpoint`` is ``host:port`` of etcd's client URL (plain HTTP/2, no TLS).
    Every call is one etcd request (a Range or a Txn) with a 10 s deadline.
    """

    def __init__(self, endpoint: str) -> None:
        import grpc
        from etcd3 import etcdrpc

        self.endpoint = endpoint
        self._grpc = grpc
        self._rpc = etcdrpc
        self._channel = grpc.insecure_channel(endpoint)
        self._kv = etcdrpc.KVStub(self._channel)
        self._lock = threading.Lock()
        self._watches: set[_EtcdWatch] = set()
        self._hub_root: str | None = None
        self._hub: _WatchHub | None = None
        self._compacted = 0  # the newest compaction revision made through this backend
        self._closed = False
        self._wloop: _WatchLoop | None = None

    def share_watches(self, prefix: str) -> None:
        """Serve every later watch under ``prefix`` that starts at a revision > 0 from one etcd stream (a
        :class:`_WatchHub`, opened with the first such watch), instead of a stream per watch;
        a watch whose start the hub's buffer of recent events does not cover gets its own stream as before."""
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"prefix must be a non-empty str, got {type(prefix).__name__}: {prefix!r}")
        with self._lock:
            self._hub_root = prefix

    def _call(self, method: Any, request: Any) -> Any:
        """Run one unary RPC; gRPC failures become :class:`StorageError` subclasses."""
        try:
            return method(request, timeout=_RPC_TIMEOUT)
        except self._grpc.RpcError as exc:
            details = str(exc.details()) if hasattr(exc, "details") else str(exc)
            if "required revision has been compacted" in details:
                raise CompactedError(getattr(request, "revision", 0), 0) from exc
            if "required revision is a future revision" in details:
                raise FutureRevisionError(getattr(request, "revision", 0), 0) from exc
            raise BackendUnavailableError(f"etcd request failed: {details}") from exc

    def _cas(self, key: bytes, compare: Any, success: Any) -> tuple[bool, int, Any]:
        """One Txn: ``success`` if ``compare`` (one Compare or a list: all must hold) holds, else read the key.

        Returns (succeeded, header revision, the success op's response or the current kv or None).
        """
        rpc = self._rpc
        failure = rpc.RequestOp(request_range=rpc.RangeRequest(key=key))
        compares = compare if isinstance(compare, list) else [compare]
        resp = self._call(self._kv.Txn, rpc.TxnRequest(compare=compares, success=[success], failure=[failure]))
        rev = int(resp.header.revision)
        if not resp.succeeded:
            kvs = resp.responses[0].response_range.kvs
            return False, rev, (kvs[0] if kvs else None)
        return True, rev, resp.responses[0]

    def get(self, key: str) -> tuple[KeyValue | None, int]:
        resp = self._call(self._kv.Range, self._rpc.RangeRequest(key=key.encode()))
        return (_kv_from_pb(resp.kvs[0]) if resp.kvs else None), int(resp.header.revision)

    def range(self, prefix: str, revision: int = 0) -> tuple[list[KeyValue], int]:
        raw = prefix.encode()
        req = self._rpc.RangeRequest(key=raw, range_end=prefix_end(raw), revision=revision)
        resp = self._call(self._kv.Range, req)
        return [_kv_from_pb(kv) for kv in resp.kvs], (revision or int(resp.header.revision))

    def create(self, key: str, value: bytes, guard: tuple[str, int] | None = None) -> TxnResult:
        rpc = self._rpc
        raw = key.encode()
        cmp = [rpc.Compare(key=raw, result=rpc.Compare.EQUAL, target=rpc.Compare.VERSION, version=0)]
        if guard is not None:
            cmp.append(rpc.Compare(key=guard[0].encode(), result=rpc.Compare.EQUAL, target=rpc.Compare.MOD,
                                   mod_revision=guard[1]))
        put = rpc.RequestOp(request_put=rpc.PutRequest(key=raw, value=value))
        ok, rev, found = self._cas(raw, cmp, put)
        if ok:
            return TxnResult(True, rev, KeyValue(key, value, rev, rev, 1))
        return TxnResult(False, rev, _kv_from_pb(found) if found is not None else None)

    def update(self, key: str, value: bytes, mod_revision: int) -> TxnResult:
        rpc = self._rpc
        raw = key.encode()
        cmp = rpc.Compare(key=raw, result=rpc.Compare.EQUAL, target=rpc.Compare.MOD, mod_revision=mod_revision)
        put = rpc.RequestOp(request_put=rpc.PutRequest(key=raw, value=value, prev_kv=True))
        ok, rev, found = self._cas(raw, cmp, put)
        if not ok:
            return TxnResult(False, rev, _kv_from_pb(found) if found is not None else None)
        prev = found.response_put.prev_kv
        if not prev.key:  # mod_revision 0 matched a missing key: this was a create
            return TxnResult(True, rev, KeyValue(key, value, rev, rev, 1))
        return TxnResult(True, rev, KeyValue(key, value, int(prev.create_revision), rev, int(prev.version) + 1))

    def delete(self, key: str, mod_revision: int) -> TxnResult:
        rpc = self._rpc
        raw = key.encode()
        cmp = rpc.Compare(key=raw, result=rpc.Compare.EQUAL, target=rpc.Compare.MOD, mod_revision=mod_revision)
        op = rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=raw, prev_kv=True))
        ok, rev, found = self._cas(raw, cmp, op)
        if not ok:
            return TxnResult(False, rev, _kv_from_pb(found) if found is not None else None)
        prev_kvs = found.response_delete_range.prev_kvs
        return TxnResult(True, rev, _kv_from_pb(prev_kvs[0]) if prev_kvs else None)

    def watch(self, prefix: str, start_revision: int, max_pending: int = DEFAULT_WATCH_BUFFER) -> BackendWatch:
        with self._lock:
            if self._closed:
                raise BackendUnavailableError("etcd backend closed")
            root = self._hub_root
            served: tuple[BackendWatch, _EtcdWatch] | None = None  # the watch, and the etcd stream serving it
            if root is not None and prefix.startswith(root) and start_revision > 0:
                hub = self._hub
                if hub is None or hub.dead:
                    hub = self._hub = _WatchHub(self, root, start_revision)
                    hub.note_compaction(self._compacted)
                shared = hub.subscribe(prefix, start_revision, max_pending)
                if shared is not None:
                    served = (shared, hub)
            if served is None:
                w = _EtcdWatch(self, prefix, start_revision, max_pending)
                self._watches.add(w)
                served = (_TrackedEtcdWatch(self, w), w)
        watch, stream = served
        stream.wait_created()  # outside the lock: a silent etcd holds up this call only, not others nor close()
        return watch

    def _watch_loop(self) -> _WatchLoop:
        """The loop the watch streams are read on, started with the first watch (called with ``_lock`` held)."""
        if self._wloop is None:
            self._wloop = _WatchLoop(self.endpoint)
        return self._wloop

    def _forget(self, w: _EtcdWatch) -> None:
        with self._lock:
            self._watches.discard(w)

    def revision(self) -> int:
        resp = self._call(self._kv.Range, self._rpc.RangeRequest(key=b"\x00", keys_only=True, limit=1))
        return int(resp.header.revision)

    def check(self, timeout: float) -> None:
        try:
            self._kv.Range(self._rpc.RangeRequest(key=b"\x00", keys_only=True, limit=1), timeout=timeout)
        except self._grpc.RpcError as exc:
            raise BackendUnavailableError(f"etcd unreachable: {exc.code()}") from exc

    def compact(self, revision: int) -> None:
        try:
            self._call(self._kv.Compact, self._rpc.CompactionRequest(revision=revision, physical=True))
        except CompactedError:
            return
        with self._lock:  # watches from here on that start at or below it get etcd's answer, not the hub's buffer
            self._compacted = max(self._compacted, revision)
            hub = self._hub
        if hub is not None:
            hub.note_compaction(revision)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            watches = list(self._watches)
            self._watches.clear()
            hub, self._hub = self._hub, None
        for w in watches:
            w.close()
        if hub is not None:
            hub.close()
        if self._wloop is not None:
            self._wloop.close()
        self._channel.close()


class _TrackedEtcdWatch(BackendWatch):
    """Forwards to an :class:`_EtcdWatch` and unregisters it from the backend on close."""

    def __init__(self, backend: EtcdBackend, inner: _EtcdWatch) -> None:
        self._backend = backend
        self._inner = inner

    def next(self, timeout: float | None) -> WatchBatch | None:
        return self._inner.next(timeout)

    def set_listener(self, listener: Callable[[], None] | None) -> None:
        self._inner.set_listener(listener)

    @property
    def overflowed(self) -> bool:
        return self._inner.overflowed

    def request_progress(self) -> None:
        self._inner.request_progress()

    def close(self) -> None:
        self._inner.close()
        self._backend._forget(self._inner)
