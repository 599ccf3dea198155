"""The etcd backend: :class:`EtcdBackend`, a :class:`~.base.Backend` on a real etcd v3 server.

Its requests are unary gRPC calls on the caller's thread; its watches are read on a :class:`~.etcd_watch._WatchLoop`,
each from a stream of its own (:class:`~.etcd_watch._EtcdWatch`) or from the shared stream of a
:class:`~.watch_hub._WatchHub`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final

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
    ValueTooLargeError,
    WatchBatch,
    prefix_end,
)
from .etcd_watch import _CHANNEL_OPTIONS, _RPC_TIMEOUT, _EtcdWatch, _kv_from_pb, _WatchLoop
from .watch_hub import _WatchHub

__all__ = ["EtcdBackend"]

#: A whole-range read (:meth:`EtcdBackend.range`) asks etcd for this many keys first, then for as many as make
#: about :data:`_CHUNK_BYTES` at the sizes seen so far (within :data:`_CHUNK_KEYS`), each chunk at the revision of
#: the first: one answer stays a few MiB whatever the range holds.
_FIRST_CHUNK: Final = 64
_CHUNK_BYTES: Final = 4 * 1024 * 1024
_CHUNK_KEYS: Final = (1, 1000)
#: Reads at the current revision that etcd compacted between two chunks start over, at most this many times.
_RANGE_ATTEMPTS: Final = 3


class EtcdBackend(Backend):
    """A :class:`Backend` on a real etcd v3 server, over one gRPC channel.

    ``endpoint`` is ``host:port`` of etcd's client URL (plain HTTP/2, no TLS).
    Every call is one etcd request (a Range or a Txn) with a 10 s deadline, except :meth:`range`, which reads a
    range in chunks of a few MiB (one request each).  Answers of any size up to 2 GiB are accepted, as
    kube-apiserver's etcd client does (gRPC's default limit is 4 MiB).
    """

    def __init__(self, endpoint: str) -> None:
        import grpc
        from etcd3 import etcdrpc

        self.endpoint = endpoint
        self._grpc = grpc
        self._rpc = etcdrpc
        self._channel = grpc.insecure_channel(endpoint, options=_CHANNEL_OPTIONS)
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
            if "request is too large" in details:
                raise ValueTooLargeError(f"etcd refused the write: {details}") from exc
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
        """All keys under ``prefix``, read in chunks at one revision (see :data:`_CHUNK_BYTES`)."""
        for attempt in range(_RANGE_ATTEMPTS):
            try:
                return self._range_chunked(prefix, revision)
            except CompactedError:
                if revision or attempt == _RANGE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _range_chunked(self, prefix: str, revision: int) -> tuple[list[KeyValue], int]:
        kvs: list[KeyValue] = []
        start, limit, rev = "", _FIRST_CHUNK, revision
        while True:
            page = self.range_page(prefix, rev, start, limit)
            rev = page.revision
            kvs.extend(page.kvs)
            if not page.more or not page.kvs:
                return kvs, rev
            size = sum(len(kv.key) + len(kv.value) for kv in page.kvs)
            limit = max(_CHUNK_KEYS[0], min(_CHUNK_KEYS[1], _CHUNK_BYTES * len(page.kvs) // max(size, 1)))
            start = page.kvs[-1].key + "\x00"

    def range_page(self, prefix: str, revision: int = 0, start: str = "", limit: int = 0) -> RangePage:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise ValueError(f"limit must be an int >= 0, got {type(limit).__name__}: {limit!r}")
        raw = prefix.encode()
        key = max(start, prefix).encode()  # str order is etcd's byte order (UTF-8 keeps code point order)
        req = self._rpc.RangeRequest(key=key, range_end=prefix_end(raw), revision=revision, limit=limit)
        resp = self._call(self._kv.Range, req)
        return RangePage(tuple(_kv_from_pb(kv) for kv in resp.kvs), revision or int(resp.header.revision),
                         bool(resp.more), int(resp.count))

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
                    hub = self._hub = _WatchHub(self._watch_loop(), root, start_revision)
                    hub.note_compaction(self._compacted)
                shared = hub.subscribe(prefix, start_revision, max_pending)
                if shared is not None:
                    served = (shared, hub)
            if served is None:
                w = _EtcdWatch(self._watch_loop(), prefix, start_revision, max_pending)
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
