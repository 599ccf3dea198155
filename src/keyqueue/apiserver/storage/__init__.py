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

The modules, each importing only those listed before it:

* :mod:`.base`: the interface (:class:`Backend`, :class:`BackendWatch`), the records it passes
  (:class:`KeyValue`, :class:`WatchEvent`, :class:`WatchBatch`, :class:`TxnResult`) and its errors;
* :mod:`.memory`: :class:`MemoryBackend`;
* :mod:`.etcd_watch`: how etcd watch streams are read: the loop thread, one stream per watch;
* :mod:`.watch_hub`: one etcd stream fanned out to the many watches under the shared prefix;
* :mod:`.etcd`: :class:`EtcdBackend`: its requests, and which stream serves a new watch.
"""

from .base import (
    DEFAULT_WATCH_BUFFER,
    Backend,
    BackendUnavailableError,
    BackendWatch,
    CompactedError,
    FutureRevisionError,
    KeyValue,
    RangePage,
    StorageError,
    TxnResult,
    ValueTooLargeError,
    WatchBatch,
    WatchEvent,
    WatchOverflowError,
    prefix_end,
)
from .etcd import EtcdBackend
from .memory import MemoryBackend

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
    "RangePage",
    "StorageError",
    "TxnResult",
    "ValueTooLargeError",
    "WatchBatch",
    "WatchEvent",
    "WatchOverflowError",
    "prefix_end",
]
