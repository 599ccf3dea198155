"""A list-watch informer on the official ``kubernetes`` client: a local cache plus add/update/delete callbacks.

How it runs (one daemon thread per informer, plus one for the resync period if set):

1. **List** (paged with ``limit``/``continue``) and replace the store; fire ``on_add`` for new keys,
   ``on_update(old, new)`` for keys already known, and ``on_delete`` with a :class:`DeletedFinalStateUnknown` for
   keys that vanished (only possible on a relist). After the first list :meth:`Informer.has_synced` is true.
2. **Watch** from the list's resourceVersion with ``allowWatchBookmarks`` and a server ``timeoutSeconds``
   (jittered), with a client-side read timeout a little longer than that, so a stream that silently stopped
   delivering is noticed. ADDED/MODIFIED/DELETED update the store and fire the handlers; BOOKMARK only advances
   the resourceVersion.
3. A stream that **ends normally** (the server's ``timeoutSeconds``, or the server shutting down cleanly) is
   re-opened at once from the last resourceVersion seen: no relist. A stream that **breaks** (connection reset,
   read timeout, connection refused, 5xx) is re-opened from the last resourceVersion after an exponential backoff
   with jitter. **410 Gone** (an HTTP 410 at watch start or an ERROR event with code 410) means that
   resourceVersion is compacted away: the informer relists (step 1), which is where tombstones come from.

Handlers run in the informer's thread, one event at a time, in the order the server sent the events; the resync
thread takes the same lock, so no two handler calls of one informer ever overlap. A handler should be quick (the
usual one is ``queue.add(key)``, which the threading and the asyncio queues both accept from any thread). A
handler that raises is logged (logger ``keyqueue.informer``) and counted; the other handlers and the watch go on.

Objects are the JSON dicts from the server, not ``kubernetes.client`` model classes: each watch line is decoded with
``json.loads`` only (a small ConfigMap event: ~3 µs, against ~22 µs for ``watch.Watch``'s deserialisation into
``V1ConfigMap``; ``benchmarks/bench_pipeline.py`` measures both). Do not mutate them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from keyqueue.informer.store import (
    DeletedFinalStateUnknown,
    IndexFunc,
    KeyFunc,
    Obj,
    Store,
    meta_namespace_key,
)

__all__ = [
    "Backoff",
    "HandlerRegistration",
    "Informer",
    "InformerStats",
]

log = logging.getLogger("keyqueue.informer")

AddFunc = Callable[[Obj], None]
UpdateFunc = Callable[[Obj, Obj], None]
DeleteFunc = Callable[[Any], None]  # Obj | DeletedFinalStateUnknown

_GONE: Final = 410


class _Stopped(Exception):
    """Raised inside the informer thread when stop() was called."""


class _Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410 / ERROR event code 410): relist."""


class _WatchErrorEvent(Exception):
    """The server sent an ERROR event other than 410."""


@dataclass
class InformerStats:
    """Counters of what an informer did; :meth:`Informer.stats` returns a snapshot.

    ``lists`` counts completed lists (the first one included; ``relists`` = ``lists - 1``). ``watches`` counts
    watch streams opened; ``watch_ends`` those the server ended normally; ``watch_errors`` those that broke or
    could not be opened; ``gone`` the 410 answers. ``events`` counts ADDED/MODIFIED/DELETED events applied,
    ``bookmarks`` the BOOKMARK events, ``tombstones`` the deletions synthesised by a relist, ``resyncs`` the resync
    passes, ``handler_errors`` the exceptions raised by handlers.
    """

    lists: int = 0
    watches: int = 0
    watch_ends: int = 0
    watch_errors: int = 0
    gone: int = 0
    events: int = 0
    bookmarks: int = 0
    tombstones: int = 0
    resyncs: int = 0
    handler_errors: int = 0
    last_resource_version: str = ""

    @property
    def relists(self) -> int:
        return max(0, self.lists - 1)


class Backoff:
    """Exponential backoff with jitter: ``min(cap, initial * factor**n) * (1 + jitter * U[0, 1))``.

    ``next()`` returns the delay in seconds and advances ``n``; ``reset()`` sets ``n`` back to 0. Not thread-safe
    (one informer thread uses it).
    """

    def __init__(
        self,
        initial: float = 0.2,
        cap: float = 30.0,
        factor: float = 2.0,
        jitter: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        for label, value in (("initial", initial), ("cap", cap), ("factor", factor), ("jitter", jitter)):
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
                raise TypeError(f"backoff {label} must be a finite number, got {type(value).__name__}: {value!r}")
        if initial <= 0 or cap < initial or factor < 1 or jitter < 0:
            raise ValueError(
                f"backoff needs 0 < initial <= cap, factor >= 1, jitter >= 0; got initial={initial!r} "
                f"cap={cap!r} factor={factor!r} jitter={jitter!r}"
            )
        self.initial, self.cap, self.factor, self.jitter = float(initial), float(cap), float(factor), float(jitter)
        self._rng = rng if rng is not None else random.Random()
        self._steps = 0

    def next(self) -> float:
        base = min(self.cap, self.initial * self.factor**self._steps)
        if base < self.cap:
            self._steps += 1
        return base * (1.0 + self.jitter * self._rng.random())

    def reset(self) -> None:
        self._steps = 0


@dataclass(frozen=True, eq=False)
class HandlerRegistration:
    """What :meth:`Informer.add_event_handler` returns; pass it to :meth:`Informer.remove_event_handler`."""

    on_add: AddFunc | None
    on_update: UpdateFunc | None
    on_delete: DeleteFunc | None


def _check_positive(label: str, value: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{label} must be a positive finite number, got {type(value).__name__}: {value!r}")
    return float(value)


class Informer:
    """List, watch and cache one kind of object, and call handlers on every change.

    ``list_func`` is a list method of the official client, e.g. ``CoreV1Api(api_client).list_namespaced_config_map``;
    ``list_kwargs`` are passed to every list and watch call (``namespace``, ``label_selector``,
    ``field_selector``). See :meth:`for_config_maps` for the common case.

    Options (seconds): ``resync_period`` (0 = never; else every period ``on_update(obj, obj)`` fires for every
    cached object, from the cache, not a relist), ``watch_timeout`` (the server's ``timeoutSeconds``; each watch
    asks for a value in ``[watch_timeout, 1.25 * watch_timeout]``, at least 1 s), ``read_timeout`` (client-side:
    a watch that received nothing for this long is treated as dead and re-opened; default ``1.25 * watch_timeout
    + 10``), ``connect_timeout``, ``list_timeout``, ``page_size`` (list ``limit``; 0 = unpaged), ``backoff`` (a
    :class:`Backoff`; default 0.2 s doubling to 30 s, full jitter), ``indexers`` (added to the store's namespace
    index), ``key_func`` (default :func:`meta_namespace_key`).

    Lifecycle: :meth:`start` (or ``with informer:``) starts the thread; :meth:`stop` ends it and joins it. An
    informer runs once: it cannot be restarted after :meth:`stop`.
    """

    def __init__(
        self,
        list_func: Callable[..., Any],
        list_kwargs: Mapping[str, Any] | None = None,
        *,
        name: str = "",
        resync_period: float = 0.0,
        watch_timeout: float = 300.0,
        read_timeout: float | None = None,
        connect_timeout: float = 5.0,
        list_timeout: float = 60.0,
        page_size: int = 500,
        backoff: Backoff | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        key_func: KeyFunc = meta_namespace_key,
    ) -> None:
        if not callable(list_func):
            raise TypeError(f"list_func must be callable, got {type(list_func).__name__}: {list_func!r}")
        if not isinstance(resync_period, int | float) or isinstance(resync_period, bool) or resync_period < 0:
            raise ValueError(f"resync_period must be a number >= 0, got {type(resync_period).__name__}: "
                             f"{resync_period!r}")
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 0:
            raise ValueError(f"page_size must be an int >= 0, got {type(page_size).__name__}: {page_size!r}")
        self._watch_timeout = _check_positive("watch_timeout", watch_timeout)
        self._read_timeout = None if read_timeout is None else _check_positive("read_timeout", read_timeout)
        self._connect_timeout = _check_positive("connect_timeout", connect_timeout)
        self._list_timeout = _check_positive("list_timeout", list_timeout)
        self._list_func = list_func
        self._list_kwargs = dict(list_kwargs or {})
        for reserved in ("watch", "resource_version", "_preload_content", "_request_timeout", "timeout_seconds",
                         "allow_watch_bookmarks", "limit", "_continue"):
            if reserved in self._list_kwargs:
                raise ValueError(f"list_kwargs must not set {reserved!r}: the informer sets it")
        self.name = name or getattr(list_func, "__name__", "informer")
        self._resync_period = float(resync_period)
        self._page_size = page_size
        self._backoff = backoff if backoff is not None else Backoff()
        self.store = Store(key_func=key_func, indexers=indexers)
        self._key_func = key_func

        self._dispatch_lock = threading.RLock()  # store change + handler calls are one step (watch vs resync)
        self._handlers: tuple[HandlerRegistration, ...] = ()
        self._resp_lock = threading.Lock()  # guards _resp against stop() (close the socket of the open request)
        self._resp: Any = None
        self._stop_event = threading.Event()
        self._synced = threading.Event()
        self._started = False
        self._threads: list[threading.Thread] = []
        self._stats = InformerStats()
        self._rv = ""
        self.event_received_ns = 0
        """``time.perf_counter_ns()`` when the watch chunk carrying the event being dispatched was read (for a
        handler that wants to split its latency into network and decode+dispatch). 0 during a list."""

    @classmethod
    def for_config_maps(cls, api_client: Any, namespace: str | None = None, **options: Any) -> Informer:
        """An informer on ConfigMaps in ``namespace`` (``None`` = all namespaces) through ``api_client``.

        ``options`` are :class:`Informer`'s keyword arguments, plus ``label_selector`` / ``field_selector``.
        """
        from kubernetes import client

        api = client.CoreV1Api(api_client)
        kwargs: dict[str, Any] = {}
        for sel in ("label_selector", "field_selector"):
            if sel in options:
                kwargs[sel] = options.pop(sel)
        if namespace is None:
            return cls(api.list_config_map_for_all_namespaces, kwargs, **options)
        kwargs["namespace"] = namespace
        options.setdefault("name", f"configmaps/{namespace}")
        return cls(api.list_namespaced_config_map, kwargs, **options)

    @classmethod
    def for_custom_objects(cls, api_client: Any, group: str, version: str, plural: str,
                           namespace: str | None = None, **options: Any) -> Informer:
        """An informer on the custom resources ``plural`` of ``group``/``version`` (a CRD's served version) in
        ``namespace`` (``None`` = all namespaces, or a cluster-scoped resource), through the official client's
        ``CustomObjectsApi``. Cached objects are the API's JSON as dicts, as for every informer.

        ``options`` are :class:`Informer`'s keyword arguments, plus ``label_selector`` / ``field_selector``.
        """
        from kubernetes import client

        for label, value in (("group", group), ("version", version), ("plural", plural)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{label} must be a non-empty str, got {type(value).__name__}: {value!r}")
        api = client.CustomObjectsApi(api_client)
        kwargs: dict[str, Any] = {"group": group, "version": version, "plural": plural}
        for sel in ("label_selector", "field_selector"):
            if sel in options:
                kwargs[sel] = options.pop(sel)
        if namespace is None:
            options.setdefault("name", f"{plural}.{group}")
            return cls(api.list_cluster_custom_object, kwargs, **options)
        kwargs["namespace"] = namespace
        options.setdefault("name", f"{plural}.{group}/{namespace}")
        return cls(api.list_namespaced_custom_object, kwargs, **options)

    # -- handlers --------------------------------------------------------------------------------------------

    def add_event_handler(
        self,
        on_add: AddFunc | None = None,
        on_update: UpdateFunc | None = None,
        on_delete: DeleteFunc | None = None,
    ) -> HandlerRegistration:
        """Register callbacks; any of them may be ``None``. Several consumers may register on one informer.

        If the informer has already synced, ``on_add`` is called at once (in the calling thread, before this
        returns) for every cached object, so a late consumer sees the same state as an early one. Callbacks then
        run in the informer's thread. Raises ``TypeError`` for a non-callable.
        """
        for label, func in (("on_add", on_add), ("on_update", on_update), ("on_delete", on_delete)):
            if func is not None and not callable(func):
                raise TypeError(f"{label} must be callable or None, got {type(func).__name__}: {func!r}")
        reg = HandlerRegistration(on_add, on_update, on_delete)
        with self._dispatch_lock:
            self._handlers = (*self._handlers, reg)
            if self._synced.is_set() and on_add is not None:
                for obj in self.store.list():
                    self._call(on_add, obj)
        return reg

    def remove_event_handler(self, registration: HandlerRegistration) -> None:
        """Unregister; after this returns, the callbacks are not called again. Unknown registrations are ignored."""
        with self._dispatch_lock:
            self._handlers = tuple(h for h in self._handlers if h is not registration)

    def _call(self, func: Callable[..., None], *args: Any) -> None:
        try:
            func(*args)
        except Exception:
            self._stats.handler_errors += 1
            log.exception("informer %s: handler %r raised", self.name, func)

    def _fire_add(self, obj: Obj) -> None:
        for h in self._handlers:
            if h.on_add is not None:
                self._call(h.on_add, obj)

    def _fire_update(self, old: Obj, new: Obj) -> None:
        for h in self._handlers:
            if h.on_update is not None:
                self._call(h.on_update, old, new)

    def _fire_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        for h in self._handlers:
            if h.on_delete is not None:
                self._call(h.on_delete, obj)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the informer thread (and the resync thread). Returns at once; see :meth:`wait_for_cache_sync`.

        Raises ``RuntimeError`` if already started (an informer runs once).
        """
        with self._resp_lock:
            if self._started:
                raise RuntimeError(f"informer {self.name!r} was already started")
            self._started = True
        main = threading.Thread(target=self._run, name=f"informer {self.name}", daemon=True)
        self._threads.append(main)
        if self._resync_period > 0:
            self._threads.append(threading.Thread(target=self._resync_loop, name=f"informer-resync {self.name}",
                                                  daemon=True))
        for t in self._threads:
            t.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop watching and join the informer's threads (up to ``timeout`` seconds). Idempotent.

        The open watch's (or list's) socket is shut down, so a blocked read returns at once; a request still
        waiting for the server's response headers ends within its timeouts. Returns ``True`` when every thread
        ended. Handlers are not called after this returns ``True``; the store keeps its last contents.
        Must not be called from a handler (it would wait for its own thread): raises ``RuntimeError`` then.
        """
        if threading.current_thread() in self._threads:
            raise RuntimeError("Informer.stop() called from the informer's own thread (a handler)")
        with self._resp_lock:
            self._stop_event.set()
            resp = self._resp
        if resp is not None:
            _shutdown_socket(resp)
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def __enter__(self) -> Informer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` has been called."""
        return self._stop_event.is_set()

    def has_synced(self) -> bool:
        """True once the first list has been applied (and its ``on_add`` calls made)."""
        return self._synced.is_set()

    def wait_for_cache_sync(self, timeout: float | None = None) -> bool:
        """Block until :meth:`has_synced` (``True``) or ``timeout`` seconds passed or the informer stopped
        (``False``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._synced.is_set():
            if self._stop_event.is_set():
                return False
            wait = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if wait <= 0:
                return False
            self._synced.wait(wait)
        return True

    def last_sync_resource_version(self) -> str:
        """The resourceVersion the cache is at (of the last list, event or bookmark); ``""`` before the first list."""
        return self._rv

    def stats(self) -> InformerStats:
        """A snapshot of the counters."""
        with self._dispatch_lock:
            snap = dataclasses.replace(self._stats)
        snap.last_resource_version = self._rv
        return snap

    # -- the informer thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        need_list = True
        gone_at = -1  # events + bookmarks applied when the last 410 came: two 410s without progress back off
        while not self._stop_event.is_set():
            try:
                if need_list:
                    self._list_and_replace()
                    need_list = False
                    self._backoff.reset()
                self._watch()
            except _Stopped:
                break
            except Exception as exc:
                if self._stop_event.is_set():
                    break
                if isinstance(exc, _Gone) or (_status(exc) == _GONE and not need_list):
                    # 410: the resourceVersion was compacted away (ERROR event, or HTTP 410 at watch start)
                    self._stats.gone += 1
                    log.info("informer %s: resourceVersion %s expired (410): relisting", self.name, self._rv)
                    need_list = True
                    progress = self._stats.events + self._stats.bookmarks
                    if progress == gone_at and self._stop_event.wait(self._backoff.next()):
                        break
                    gone_at = progress
                    continue
                if not need_list:
                    self._stats.watch_errors += 1
                delay = self._backoff.next()
                log.warning("informer %s: %s failed (%s); retrying in %.2fs", self.name,
                            "list" if need_list else "watch", _describe(exc), delay)
                if self._stop_event.wait(delay):
                    break

    def _open(self, **kwargs: Any) -> Any:
        """Call the list function for a raw (unread) response; registered so stop() can shut its socket."""
        if self._stop_event.is_set():
            raise _Stopped
        resp = self._list_func(**self._list_kwargs, **kwargs, _preload_content=False)
        with self._resp_lock:
            if self._stop_event.is_set():
                _close(resp)
                raise _Stopped
            self._resp = resp
        return resp

    def _release(self, resp: Any, reuse: bool) -> None:
        with self._resp_lock:
            self._resp = None
        if reuse:
            with contextlib.suppress(Exception):
                resp.release_conn()
        else:
            _close(resp)

    def _list_and_replace(self) -> None:
        items: list[Obj] = []
        cont = ""
        rv = ""
        while True:
            kwargs: dict[str, Any] = {"_request_timeout": (self._connect_timeout, self._list_timeout)}
            if self._page_size:
                kwargs["limit"] = self._page_size
            if cont:
                kwargs["_continue"] = cont
            try:
                resp = self._open(**kwargs)
            except Exception as exc:
                if cont and _status(exc) == _GONE:  # the continue token expired: start over
                    items, cont = [], ""
                    continue
                raise
            ok = False
            try:
                body = json.loads(resp.data)
                ok = True
            finally:
                self._release(resp, reuse=ok)
            if self._stop_event.is_set():
                raise _Stopped
            page = body.get("items") or []
            kind = body.get("kind", "")
            item_kind = kind[:-4] if kind.endswith("List") else ""
            api_version = body.get("apiVersion", "")
            for obj in page:
                if item_kind:
                    obj.setdefault("kind", item_kind)
                if api_version:
                    obj.setdefault("apiVersion", api_version)
            items.extend(page)
            meta = body.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or rv)
            cont = meta.get("continue") or ""
            if not cont:
                break
        self._replace(items, rv)

    def _replace(self, items: list[Obj], rv: str) -> None:
        self.event_received_ns = 0
        with self._dispatch_lock:
            if self._stop_event.is_set():
                raise _Stopped
            old = self.store.replace(items)
            self._rv = rv
            self._stats.lists += 1
            for obj in items:
                prev = old.get(self._key_func(obj))
                if prev is None:
                    self._fire_add(obj)
                else:
                    self._fire_update(prev, obj)
            if old:
                kept = {self._key_func(obj) for obj in items}
                for key, obj in old.items():
                    if key not in kept:
                        self._stats.tombstones += 1
                        self._fire_delete(DeletedFinalStateUnknown(key, obj))
            # Under the lock, like the adds above: add_event_handler decides between "the list will call me" and
            # "replay the cache to me" under this lock, so a handler registered now gets exactly one of them.
            self._synced.set()

    def _watch(self) -> None:
        """One watch stream from the current resourceVersion. Returns when the server ended it normally."""
        timeout_seconds = max(1, int(self._watch_timeout * random.uniform(1.0, 1.25)))
        read_timeout = self._read_timeout if self._read_timeout is not None else 1.25 * self._watch_timeout + 10
        resp = self._open(
            watch=True,
            resource_version=self._rv,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_seconds,
            _request_timeout=(self._connect_timeout, read_timeout),
        )
        self._stats.watches += 1
        opened = time.monotonic()
        lines = 0
        clean = False
        try:
            for line, received_ns in _lines(resp):
                if self._stop_event.is_set():
                    raise _Stopped
                lines += 1
                self._apply(json.loads(line), received_ns)  # an ERROR event raises: it is no sign of health
                if lines == 1:
                    self._backoff.reset()  # the stream delivers: the next failure starts the backoff afresh
            clean = True
        finally:
            self._release(resp, reuse=clean)
        if self._stop_event.is_set():
            raise _Stopped
        self._stats.watch_ends += 1
        # A stream that ended at once without a line: do not spin on a server that keeps doing that.
        if lines == 0 and time.monotonic() - opened < 1.0 and self._stop_event.wait(self._backoff.next()):
            raise _Stopped

    def _apply(self, event: dict[str, Any], received_ns: int) -> None:
        etype = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            log.warning("informer %s: watch event without an object: %r", self.name, event)
            return
        if etype == "BOOKMARK":
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self._rv = str(rv)
            self._stats.bookmarks += 1
            return
        if etype == "ERROR":
            if obj.get("code") == _GONE:
                raise _Gone(obj.get("message", ""))
            raise _WatchErrorEvent(f"watch ERROR event: {obj.get('code')} {obj.get('reason')}: {obj.get('message')}")
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("informer %s: unknown watch event type %r", self.name, etype)
            return
        key = self._key_func(obj)
        rv = str(obj["metadata"].get("resourceVersion", ""))
        with self._dispatch_lock:
            if self._stop_event.is_set():
                raise _Stopped
            self.event_received_ns = received_ns
            self._stats.events += 1
            if etype == "DELETED":
                self.store.delete_key(key)
                if rv:
                    self._rv = rv
                self._fire_delete(obj)
            else:
                old = self.store.add(obj)
                if rv:
                    self._rv = rv
                if old is None:
                    self._fire_add(obj)
                else:
                    self._fire_update(old, obj)

    def _resync_loop(self) -> None:
        while not self._stop_event.wait(self._resync_period):
            if not self._synced.is_set():
                continue
            with self._dispatch_lock:
                if self._stop_event.is_set():
                    return
                self.event_received_ns = 0
                self._stats.resyncs += 1
                for obj in self.store.list():
                    self._fire_update(obj, obj)

    def __repr__(self) -> str:
        return (f"<Informer {self.name!r} synced={self.has_synced()} rv={self._rv!r} "
                f"objects={len(self.store)} stopped={self.stopped}>")


def _lines(resp: Any) -> Iterator[tuple[bytes, int]]:
    """Split a chunked watch response into JSON lines; each with the perf_counter_ns its chunk arrived at."""
    buf = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        now = time.perf_counter_ns()
        if buf:
            chunk = buf + chunk
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                break
            if nl > start:
                yield chunk[start:nl], now
            start = nl + 1
        buf = chunk[start:]
    if buf.strip():
        yield buf, time.perf_counter_ns()


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def _describe(exc: BaseException) -> str:
    status = _status(exc)
    if status:
        return f"HTTP {status} {getattr(exc, 'reason', '')}".strip()
    return f"{type(exc).__name__}: {exc}"[:300]


def _shutdown_socket(resp: Any) -> None:
    """Unblock a thread reading ``resp`` (urllib3 response): shut its socket down; the reader then fails."""
    conn = getattr(resp, "connection", None) or getattr(resp, "_connection", None)
    sock = getattr(conn, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _close(resp: Any) -> None:
    with contextlib.suppress(Exception):
        resp.close()
    with contextlib.suppress(Exception):
        resp.release_conn()
