"""The storage interface: :class:`Backend` (the small subset of etcd's KV API the registry uses) and
:class:`BackendWatch`, the records they pass and the errors they raise."""

from __future__ import annotations

import abc
import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "DEFAULT_WATCH_BUFFER",
    "Backend",
    "BackendUnavailableError",
    "BackendWatch",
    "CompactedError",
    "FutureRevisionError",
    "KeyValue",
    "RangePage",
    "StorageError",
    "TxnResult",
    "ValueTooLargeError",
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


class ValueTooLargeError(StorageError):
    """The store refused a write because the request was larger than it accepts (etcd's ``--max-request-bytes``,
    1.5 MiB by default).  Nothing was written."""


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
class RangePage:
    """What :meth:`Backend.range_page` returns: at most ``limit`` keys from its start, in key order.

    ``more`` is True if keys after the last one returned exist in the range; ``count`` is how many keys the range
    held from its start (those returned included), like etcd's ``RangeResponse.count``; ``revision`` is the
    revision read.
    """

    kvs: tuple[KeyValue, ...]
    revision: int
    more: bool
    count: int


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
    def range_page(self, prefix: str, revision: int = 0, start: str = "", limit: int = 0) -> RangePage:
        """One bounded read: the keys starting with ``prefix`` that are ``>= start`` (``""``: from the first), at
        most ``limit`` of them (0: all), sorted by key, as of ``revision`` (0: the current state).

        Raises what :meth:`range` raises.  Reading a large range page by page at the revision of the first page
        gives the same keys as one :meth:`range`, in requests of bounded size.
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

